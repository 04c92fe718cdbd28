"""REPORT.md's first screen: the machine's state, then one table with a row per variant
answering the three questions side by side: is it the same as its nearest reference (the
variant of its family whose declared traits are closest, ``harness.registry.nearest``), how
much faster or slower is it forward and forward + backward than the family's baseline, and
how much memory does it take. Rows measured in a disturbed window are marked and not
claimed."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import pandas as pd
from tabulate import tabulate

from harness.base.verdicts import Verdict
from harness.bench.measured import Status
from harness.bench.shapes import shape_text as case_shape
from harness.check.results import PairResult
from harness.registry import REGISTRY, reference_of
from harness.registry.nearest import ranked_references

REASON_WIDTH = 56
CELL_WIDTH = 48  # the summary's verdict cell, before a declared error's dtypes
MODES = ("fwd", "fwd+bwd")
NOT_CLAIMED = "(d) not claimed"


def _verdict(value) -> Verdict:
    try:
        return Verdict(value)
    except ValueError:
        return Verdict.ERROR


@dataclass(frozen=True)
class ReferenceVerdict:
    """A variant against its nearest reference (``against``) over every case, dtype and
    config the check ran: the worst verdict where both ran (with the declared difference that
    explains it), and apart from it the errors a declaration expects (a mask fill a dtype
    cannot hold: an outcome of the variant's own code, not a failure to compare), per dtype."""

    verdict: Verdict | None                          # None: no pair ran (every one a declared error)
    why: str = ""
    declared_errors: tuple[tuple[str, str], ...] = ()  # (dtype, the declaration), each once
    contradicts: bool = False
    against: str = ""                                # the id of the variant it was compared with

    def head(self) -> str:
        """'equivalent vs fused_explicit': the verdict and what it was taken against."""
        text = "-" if self.verdict is None else "equivalent" if self.verdict.agrees else str(self.verdict)
        return f"{text} vs {self.against}" if self.against else text

    def __str__(self) -> str:
        text = self.head()
        if self.verdict is not None and not self.verdict.agrees:
            if self.why:
                text += f" ({self.why[:REASON_WIDTH]}{'...' if len(self.why) > REASON_WIDTH else ''})"
        by_dtype: dict[str, list[str]] = {}
        for dtype, why in self.declared_errors:
            by_dtype.setdefault(dtype, []).append(why)
        for dtype, whys in by_dtype.items():
            text += f"; {dtype}: declared error ({'; '.join(whys)})"
        if self.contradicts:
            text += " !contradicts its declaration"
        return text


def compared_with(family: str, variant: str, results: list[PairResult]) -> tuple[str, list[PairResult]]:
    """The nearest reference of ``variant`` that the check compared it with (``ranked_references``;
    the family's reference for a variant no longer registered), and those pairs; ('', [])
    when the check ran no such pair."""
    ours = [r for r in results if r.family == family and variant in (r.a, r.b)]
    registered = REGISTRY.get(f"{family}/{variant}")
    ref = reference_of(family)
    ranked = ([n.candidate.id for n in ranked_references(registered)] if registered is not None
              else [ref.id] if ref is not None else [])
    for other in ranked:
        mine = [r for r in ours if {r.a, r.b} == {other, variant}]
        if mine:
            return other, mine
    return "", []


def reference_verdict(family: str, variant: str, results: list[PairResult] | None) -> ReferenceVerdict | str:
    """The variant's ``ReferenceVerdict`` against its nearest reference; 'reference' for the
    family's reference itself, '-' when the check did not run (--skip-check) or has no pair
    of it."""
    ref = reference_of(family)
    if ref is not None and ref.id == variant:
        return "reference"
    if not results:
        return "-"
    against, mine = compared_with(family, variant, results)
    if not mine:
        return "-"
    declared = [r for r in mine if _verdict(r.verdict) == Verdict.ERROR and r.expected == Verdict.ERROR
                and r.ok and r.declared]
    ran = [r for r in mine if r not in declared]
    worst = max(ran, key=lambda r: _verdict(r.verdict).rank) if ran else None
    why = "" if worst is None else (worst.reason or worst.expected or "").replace("\n", " ").replace("|", "/")
    return ReferenceVerdict(
        verdict=None if worst is None else _verdict(worst.verdict), why=why,
        declared_errors=tuple(dict.fromkeys((r.dtype, r.declared) for r in declared)),
        contradicts=not all(r.ok for r in mine), against=against)


def verdict_against_reference(family: str, variant: str, results: list[PairResult] | None) -> str:
    """'reference', 'equivalent vs ID', 'different vs ID (declared: ...)', '...; float16:
    declared error (...)' over every case, dtype and config the check ran; '-' when it did
    not run."""
    return str(reference_verdict(family, variant, results))


def short_verdict(outcome: ReferenceVerdict | str) -> str:
    """The summary's cell: the verdict, the variant it was taken against and the names of
    the traits that explain it ('different vs torch_layernorm: eps, norm_formula'), the
    dtypes where a declared error took the place of a comparison; '!' first where it
    contradicts the declaration."""
    if isinstance(outcome, str):  # 'reference', or '-' where no pair ran
        return outcome
    v = outcome.verdict
    text = outcome.head()
    if v is not None and not v.agrees:
        traits = list(dict.fromkeys(re.findall(r"(?:^|; )(\w+): ", outcome.why)))
        if traits:  # as many names as fit the cell, then how many more (the table stays a table)
            shown = [t for i, t in enumerate(traits) if len(text) + len(", ".join(traits[:i + 1])) <= CELL_WIDTH]
            shown = shown or traits[:1]
            text += ": " + ", ".join(shown) + (f" +{len(traits) - len(shown)}" if len(shown) < len(traits) else "")
        elif outcome.why and outcome.why != str(v):
            text += ": " + outcome.why[:30]
    dtypes = list(dict.fromkeys(dtype for dtype, _ in outcome.declared_errors))
    if dtypes:
        text += f"; {', '.join(dtypes)}: declared error"
    return ("! " if outcome.contradicts else "") + text


def _disturbed(row: pd.Series) -> bool:
    return isinstance(row.get("disturbed"), str) and bool(row.get("disturbed"))


def _ratio(row: pd.Series | None) -> str:
    if row is None:
        return "-"
    if row.get("status") != Status.OK:
        return str(row.get("status"))
    if _disturbed(row):
        return NOT_CLAIMED
    r, lo, hi = (row.get(k) for k in ("vs_baseline", "vs_baseline_lo", "vs_baseline_hi"))
    if r is None or not isinstance(r, float) or math.isnan(r):
        return "-"
    if lo is None or hi is None or any(isinstance(x, float) and math.isnan(x) for x in (lo, hi)):
        return f"{r:.2f}x"
    return f"{r:.2f}x [{min(lo, r):.2f}-{max(hi, r):.2f}]"


def _baseline_ratio(row: pd.Series | None) -> str:
    """The baseline's own cell: 1.00x by definition where it was timed (its status otherwise;
    a disturbed window marks the other rows' ratios, which are the claims)."""
    if row is None:
        return "-"
    return "1.00x" if row.get("status") == Status.OK else str(row.get("status"))


def _mib(row: pd.Series | None) -> str:
    value = None if row is None else row.get("peak_bytes")
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value / 2**20:.3g}"


def headline_shapes(rows: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Per mode, one family's rows at its headline shape: the largest B*T (then D) timed in
    that mode, eager, in the family's first dtype."""
    out = {}
    for mode in MODES:
        m = rows[rows["mode"] == mode]
        if m.empty:
            continue
        size = m["batch"] * m["seq"] * 100_000 + m["d_model"]
        out[mode] = m[size == size.max()]
    return out


def _shape(rows: pd.DataFrame) -> str:
    r = rows.iloc[0]
    return case_shape(r["family"], r["batch"], r["seq"], r["d_model"], r["heads"])


def machine_lines(cases: pd.DataFrame, peaks: pd.DataFrame) -> list[str]:
    """The first lines: where it ran, how loaded, and whether any group was disturbed."""
    first = cases.iloc[0]
    where = (f"Machine: {first.get('device_name') or first.get('device')}, {first.get('cpu_count', '?')} cores, "
             f"threads {first.get('threads', '?')}, torch {first.get('torch', '?')}")
    if peaks.empty or "disturbed" not in peaks:
        if cases.get("interleaved", pd.Series(dtype=object)).fillna(False).astype(bool).any():
            return [where + ". The matmul peaks timed beside these rows are not in their file: whether the "
                    "machine was disturbed is not known.", ""]
        return [where + ". Not timed in interleaved groups (e.g. pytest-benchmark rows): no ratio is claimed.", ""]
    loads = [x for ls in peaks["load"] for x in ls if x is not None]
    where += f"; load average {min(loads):.1f}-{max(loads):.1f}" if loads else ""
    bad = int(peaks["disturbed"].astype(bool).sum())
    if bad:
        return [where + f". **{bad} of {len(peaks)} groups were timed while the machine was disturbed**: "
                f"their rows show `{NOT_CLAIMED}` (the reasons are below the rule).", ""]
    return [where + f". No group of {len(peaks)} was disturbed.", ""]


def summary_table(cases: pd.DataFrame, results: list[PairResult] | None,
                  peaks: pd.DataFrame | None = None) -> list[str]:
    """The first screen: the machine's state, then per variant (each family's reference first,
    marked as the baseline: the 1.00x every ratio is taken against) its verdict against its nearest reference, its
    speed against the baseline forward and forward + backward at the headline shape of each
    mode, with the 90% interval, and its peak memory."""
    peaks = pd.DataFrame() if peaks is None else peaks
    eager = cases[~cases.get("compiled", pd.Series(False, index=cases.index)).fillna(False).astype(bool)]
    table, shapes = [], {}
    for family, rows in eager.groupby("family", sort=False):
        rows = rows[rows["dtype"] == rows["dtype"].iloc[0]]
        heads = headline_shapes(rows)
        shape_text = ", ".join(f"{mode} {_shape(h)}" for mode, h in heads.items())
        shapes.setdefault(f"{shape_text} {rows['dtype'].iloc[0]}", []).append(family)
        ref = reference_of(family)
        timed = list(dict.fromkeys(rows["variant"]))
        if ref is not None and ref.id in timed:  # the baseline's own row first: its time and memory beside
            timed = [ref.id] + [v for v in timed if v != ref.id]
        for variant in timed:
            baseline = ref is not None and variant == ref.id
            pick = {}
            for mode, h in heads.items():
                mine = h[h["variant"] == variant]
                pick[mode] = mine.iloc[0] if len(mine) else None
            memory = pick.get("fwd+bwd") if pick.get("fwd+bwd") is not None else pick.get("fwd")
            table.append({"variant": f"{family}/{variant}" + (" (baseline)" if baseline else ""),
                          "verdict vs reference": short_verdict(reference_verdict(family, variant, results)),
                          "fwd vs baseline [90%]": _baseline_ratio(pick.get("fwd")) if baseline
                          else _ratio(pick.get("fwd")),
                          "fwd+bwd vs baseline [90%]": _baseline_ratio(pick.get("fwd+bwd")) if baseline
                          else _ratio(pick.get("fwd+bwd")),
                          "peak MiB": _mib(memory)})
    lines = machine_lines(cases, peaks) if not cases.empty else []
    lines += ["## Summary: the same as the reference? faster? lighter?", ""]
    if table:
        lines += [tabulate(pd.DataFrame(table), headers="keys", tablefmt="github", showindex=False), ""]
    if not any(not t["variant"].endswith(" (baseline)") for t in table):
        lines += ["Only the families' references were timed: no variant to compare with them.", ""]
    lines += [
        "Verdict: against the variant named, the one whose declared traits are nearest (docs/benchmarking.md). "
        "Speed: baseline time / variant time (> 1 is faster) with its 90% bootstrap interval; `-`: not timed at "
        "that shape. Peak MiB: tensor memory, forward + backward where timed. `!`: the verdict contradicts what "
        "the variant declares; `(baseline)`: the family's reference, the 1.00x its ratios are taken against.",
        "Shapes: " + "; ".join(f"{', '.join(fams)}: {text}" for text, fams in shapes.items()) + ".", ""]
    return lines
