"""Plain-text and Markdown tables of registry entries and verdicts (pandas + tabulate)."""

from __future__ import annotations

import math
import textwrap
from typing import Iterable

import pandas as pd
from tabulate import tabulate

from harness.base.numbers import fmt
from harness.base.verdicts import Verdict
from harness.check.results import Cell, PairResult, PathResult
from harness.families.catalog import get_family
from harness.registry import Variant, variants_of

LEGEND = ("≡ identical (bitwise)  ≈ equivalent  ≲ less precise than the reference  ≠ different  E error\n"
          "○ declared difference not exercised by the case  ◌ below the dtype's resolution  "
          "! contradicts the declaration  · not applicable  - config not supported")


def _fit(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, an ellipsis marking the cut."""
    return text if len(text) <= width else text[:max(width - 1, 0)] + "…"


def variants_listing(variants: Iterable[Variant], width: int = 80) -> str:
    """Every variant in one line of at most ``width`` characters, grouped by family: its
    id, its source, what it is (its summary, cut to fit); the family's reference marked
    '*' (``list``). Traits: ``list --family F``, or ``--json``."""
    by_family: dict[str, list[Variant]] = {}
    for v in variants:
        by_family.setdefault(v.family, []).append(v)
    lines = []
    for family, members in by_family.items():
        id_w = max(len(v.id) for v in members) + 2
        src_w = min(max(len(v.source) for v in members), 26)
        lines.append(f"{family} ({len(members)}; * the reference)")
        for v in members:
            head = f"{'*' if v.reference else ' '} {v.id:{id_w}s}{_fit(v.source, src_w):{src_w}s}  "
            lines.append(_fit(head + v.summary, width).rstrip())
    return "\n".join(lines)


def traits_listing(family: str, width: int = 80) -> str:
    """One family's variants, each with its traits in lines of at most ``width`` characters:
    the semantic ones (what it computes, checked against the oracle) first, then how it
    computes them; the reference marked '*'."""
    fam = get_family(family)
    lines = [_fit(f"{family} (* the reference): semantic traits, then how each computes", width)]
    for v in variants_of(family):
        lines.append(_fit(f"{'*' if v.reference else ' '} {v.id}  ({v.source})", width))
        traits = {k: val for k, val in v.traits.items() if k != "cases"}
        semantic = "; ".join(f"{k}={val}" for k, val in traits.items() if k in fam.traits)
        how = "; ".join(f"{k}={val}" for k, val in traits.items() if k not in fam.traits)
        for text in (semantic, how):
            if text:
                lines += textwrap.wrap(text, width, initial_indent="    ", subsequent_indent="      ",
                                       break_on_hyphens=False)
    return "\n".join(lines)


def params_listing(family: str, config_name: str, cfg, width: int = 80) -> str:
    """One family's canonical parameters at one config: the names a variant's parameter map
    targets and the shapes the harness draws them in, then those a declared trait adds (QK-norm's
    gains), each with a registered variant that declares it."""
    fam = get_family(family)
    base = fam.canonical_shapes(cfg)
    lines = [_fit(f"{family}: canonical parameters at config '{config_name}' ({len(base)})", width)]
    lines += [f"  {name}  {tuple(shape)}" for name, shape in base.items()]
    brought: dict[str, tuple[tuple[int, ...], str]] = {}
    for v in variants_of(family):
        for name, shape in fam.canonical_shapes(cfg, v.traits).items():
            if name not in base and name not in brought:
                brought[name] = (shape, v.id)
    if brought:
        lines.append("  brought by a declared trait (declared, e.g., by the variant named):")
        lines += [f"  {name}  {tuple(shape)}  ({vid})" for name, (shape, vid) in brought.items()]
    return "\n".join(lines)


def traits_table(family: str, tablefmt: str = "simple") -> str:
    """One family's traits side by side for REPORT.md: a row per variant, a column per trait
    (``list`` prints ``traits_listing``, which fits a terminal)."""
    members = variants_of(family)
    df = pd.DataFrame(
        [{"id": v.id, "source": v.source, **{k: val for k, val in v.traits.items() if k != "cases"}}
         for v in members]
    ).astype(object).fillna("")  # a trait some variants leave out: blank, whatever its dtype
    return tabulate(df, headers="keys", tablefmt=tablefmt, showindex=False)


def _pair_cell(rows: list[PairResult]) -> str:
    """One symbol for a pair on one case over the config matrix: the strongest verdict
    (a difference shown by any config counts), '!' when any config contradicts."""
    verdict = Verdict.worst(r.verdict for r in rows)
    if verdict == Verdict.EQUIVALENT and all(r.verdict == Verdict.IDENTICAL for r in rows):
        verdict = Verdict.IDENTICAL
    return verdict.symbol + ("" if all(r.ok for r in rows) else "!")


def verdict_matrix(results: list[PairResult], family: str, dtype: str, tablefmt: str = "simple") -> str:
    """Cell (a, b): one symbol per case, in the family's case order (over every config)."""
    cases = [c.name for c in get_family(family).cases]
    ids = [v.id for v in variants_of(family)]
    grouped: dict[tuple[str, str, str], list[PairResult]] = {}
    for r in results:
        if r.family == family and r.dtype == dtype:
            grouped.setdefault((r.a, r.b, r.case), []).append(r)
    cell: dict[tuple[str, str, str], str] = {}
    for (a, b, case), rows in grouped.items():
        cell[(a, b, case)] = cell[(b, a, case)] = _pair_cell(rows)
    present = [i for i in ids if any(k[0] == i for k in cell)]
    rows = []
    for a in present:
        row = {"": a}
        for b in present:
            row[b] = "" if a == b else "".join(cell.get((a, b, c), "·") for c in cases)
        rows.append(row)
    return tabulate(pd.DataFrame(rows), headers="keys", tablefmt=tablefmt, showindex=False)


def differences_table(results: list[PairResult], tablefmt: str = "simple", only_problems: bool = False) -> str:
    """One row per declared difference (the traits that differ) and case, over every pair
    and config that shows it: the verdicts seen and the largest effect."""
    groups: dict[tuple, list[PairResult]] = {}
    for r in results:
        if r.verdict.agrees and r.ok:
            continue
        if only_problems and r.ok:
            continue
        groups.setdefault((r.family, r.reason or r.note, r.case, r.dtype), []).append(r)
    rows = []
    for (family, why, case, dtype), rs in groups.items():
        verdicts = sorted({r.verdict for r in rs}, key=lambda v: v.rank, reverse=True)
        pairs = sorted({f"{r.a} ~ {r.b}" for r in rs})
        first_configs = {r.config for r in rs if r.verdict == verdicts[0]}
        rows.append({
            "family": family, "case": case, "dtype": dtype,
            "verdict": " / ".join(verdicts) + (" (configs: " + ", ".join(sorted(first_configs)) + ")"
                                               if len(verdicts) > 1 else ""),
            "ok": "yes" if all(r.ok for r in rs) else "NO",
            "max_abs": fmt(max((r.max_abs for r in rs if r.max_abs == r.max_abs), default=math.nan)),
            "grad_max_abs": fmt(max((r.grad_max_abs for r in rs if r.grad_max_abs == r.grad_max_abs),
                                    default=math.nan)),
            "pairs": f"{len(pairs)}: {pairs[0]}" + (", ..." if len(pairs) > 1 else ""),
            "why": why,
        })
    if not rows:
        return "(none)"
    return tabulate(pd.DataFrame(rows), headers="keys", tablefmt=tablefmt, showindex=False)


def spec_matrix(specs, family: str, dtype: str, configs: dict, tablefmt: str = "simple") -> str:
    """Each variant against its oracle: a row per variant, a column per case, one symbol per
    config (in matrix order) in each cell; '-' where the variant cannot take the config."""
    cases = [c.name for c in get_family(family).cases]
    by_key = {s.cell: s for s in specs if s.family == family and s.dtype == dtype}
    rows = []
    for v in variants_of(family):
        if not any(k.variant == v.id for k in by_key):
            continue
        row = {"variant": v.id}
        for case in cases:
            cell = ""
            for config in configs:
                s = by_key.get(Cell(family, v.id, config, case, dtype))
                if s is None:
                    cell += "-" if v.supports(configs[config]) else "·"
                else:
                    cell += s.verdict.symbol + ("" if s.ok else "!")
            row[case] = cell
        worst = max((s.ratio for k, s in by_key.items() if k.variant == v.id and s.ratio == s.ratio),
                    default=math.nan)
        row["worst ratio"] = fmt(worst) if dtype != "float64" else "-"
        rows.append(row)
    if not rows:
        return "(no variant)"
    return tabulate(pd.DataFrame(rows), headers="keys", tablefmt=tablefmt, showindex=False)


def classes_table(family: str, variants=None, tablefmt: str = "simple") -> str:
    """The equivalence classes: variants whose declared semantic traits are equal."""
    fam = get_family(family)
    classes: dict[tuple, list[str]] = {}
    for v in variants if variants is not None else variants_of(family):
        sem = fam.semantic_traits(v.traits)
        classes.setdefault(tuple(sorted(sem.items(), key=lambda kv: kv[0])), []).append(v.id)
    rows = [{"class": chr(ord("A") + i), "variants": ", ".join(ids),
             "semantic traits": "; ".join(f"{k}={val}" for k, val in key)}
            for i, (key, ids) in enumerate(classes.items())]
    return tabulate(pd.DataFrame(rows), headers="keys", tablefmt=tablefmt, showindex=False)


def failures_table(report, tablefmt: str = "simple") -> str:
    """Every contradiction: a spec that failed, a gradcheck, a dropout check."""
    rows = []
    for s in report.specs:
        if not s.ok:
            rows.append({"what": f"{s.family}/{s.variant}", "where": f"{s.config} {s.case} {s.dtype}",
                         "found": s.verdict + (f" ({s.ratio:.3g}x)" if s.verdict == Verdict.LESS_PRECISE else ""),
                         "expected": s.expected, "worst": s.worst, "max_abs": fmt(s.err), "note": s.note[:160]})
    for g in report.gradchecks:
        if not g.ok:
            rows.append({"what": f"{g.family}/{g.variant}", "where": f"gradcheck {g.config} {g.case}",
                         "found": "failed", "expected": "passes", "worst": "", "max_abs": "-", "note": g.note})
    for c in getattr(report, "compiled", []):
        if not c.ok:
            rows.append({"what": f"{c.family}/{c.variant}", "where": f"torch.compile({c.backend}) {c.config} {c.case}",
                         "found": c.verdict, "expected": "equivalent to eager, compiled", "worst": "",
                         "max_abs": fmt(c.err), "note": c.note})
    for c in getattr(report, "caches", []):
        if not c.ok:
            where, verdict, max_abs = c.worst()
            rows.append({"what": f"{c.family}/{c.variant}", "where": f"k/v cache ({c.cache}), {where}",
                         "found": verdict, "expected": "the full forward's log-probabilities", "worst": "",
                         "max_abs": fmt(max_abs), "note": c.error[:160]})
    for d in report.dropouts:
        if not d.ok:
            rows.append({"what": f"{d.family}/{d.variant}", "where": d.check, "found": d.measured,
                         "expected": d.expected, "worst": "", "max_abs": "-",
                         "note": ("declared dropout_sites" if d.check.startswith("train")
                                  else "dropout acts in eval mode")})
    for p in getattr(report, "failures", ()):  # the pytest plugin passes a namespace of specs only
        if isinstance(p, PairResult):  # measured (--pairs all) against each other, both specs holding
            rows.append({"what": f"{p.family}/{p.a} ~ {p.b}", "where": f"{p.config} {p.case} {p.dtype}",
                         "found": p.verdict, "expected": p.expected, "worst": p.worst_grad,
                         "max_abs": fmt(max(p.max_abs, p.grad_max_abs)), "note": (p.note or p.reason)[:160]})
    if not rows:
        return "(none)"
    return tabulate(pd.DataFrame(rows), headers="keys", tablefmt=tablefmt, showindex=False)


def paths_table(paths: list[PathResult], tablefmt: str = "simple") -> str:
    """Only the variants whose kernel path is worth naming (a torch fused path, SDPA)."""
    rows = [
        {"variant": p.variant, "case": p.case, "dtype": p.dtype, "autograd path": p.path_autograd,
         "no_grad path": p.path_inference, "no_grad vs autograd": p.verdict, "max_abs": fmt(p.max_abs)}
        for p in paths
        if p.path_autograd != p.path_inference or not p.verdict.agrees
    ]
    if not rows:
        return "(every variant runs the same ops with and without autograd)"
    return tabulate(pd.DataFrame(rows), headers="keys", tablefmt=tablefmt, showindex=False)


def compiled_table(results, tablefmt: str = "simple") -> str:
    rows = [{"variant": f"{c.family}/{c.variant}", "backend": c.backend, "case": f"{c.config} {c.case} {c.dtype}",
             "graphs": c.graphs, "graph breaks": c.graph_breaks, "compiled vs eager": c.verdict,
             "compiled err": fmt(c.err), "eager err": fmt(c.eager_err), "note": c.note}
            for c in results]
    if not rows:
        return "(none)"
    return tabulate(pd.DataFrame(rows), headers="keys", tablefmt=tablefmt, showindex=False)


# -- width ------------------------------------------------------------------------------------------

WIDTH = 160  # a wide terminal: no line of REPORT.md is wider


def fit_width(text: str, width: int = WIDTH) -> str:
    """Markdown no wider than ``width``: a prose line is wrapped (a list item's continuation
    indented), and a table with a line wider than that becomes a list, one item per row
    ("- first cell: header value; ..."), wrapped the same way. Narrow tables stay tables."""
    out: list[str] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        if lines[i].startswith("|"):
            j = i
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            block = lines[i:j]
            out += block if max(map(len, block)) <= width else _table_as_list(block, width)
            i = j
            continue
        out += _wrap(lines[i], width)
        i += 1
    return "\n".join(out)


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split(" | ")]


def _wrap(line: str, width: int) -> list[str]:
    if len(line) <= width or line.startswith(("#", "![", "    ", "```")):
        return [line]
    indent = "  " if line.startswith(("- ", "* ")) else ""
    return textwrap.wrap(line, width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)


def _table_as_list(block: list[str], width: int) -> list[str]:
    header = _cells(block[0])
    items = []
    for line in block[2:]:
        cells = _cells(line)
        rest = "; ".join(f"{h or '-'} {c}" for h, c in zip(header[1:], cells[1:]) if c not in ("", "-"))
        items += _wrap(f"- **{cells[0] or '-'}**: {rest}", width)
    return items + [""]
