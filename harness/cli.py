"""``python -m harness {list,check,bench,report}``.

User mistakes (unknown names, impossible configs, unreadable files) print one line and
exit 2; a check whose verdicts contradict their declarations exits 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .config import Config
from .errors import HarnessError, UnknownName

VARIANTS_ENV = "HARNESS_VARIANTS"


def _variant_files(args) -> list[str]:
    files = list(getattr(args, "variants", None) or [])
    env = os.environ.get(VARIANTS_ENV, "")
    files += [p for p in env.split(os.pathsep) if p]
    return files


def _load(args) -> None:
    from .registry import load_all

    load_all(_variant_files(args))


def _families(args) -> list[str]:
    from .families import FAMILIES, get_family

    names = args.family or list(FAMILIES)
    for name in names:
        get_family(name)
    return names


def resolve_device(name: str) -> str:
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name not in ("cpu", "cuda"):
        raise UnknownName(f"unknown device '{name}'; devices: cpu, cuda, auto")
    if name == "cuda" and not torch.cuda.is_available():
        raise UnknownName("device 'cuda' asked for, but torch sees no CUDA device")
    return name


def strict_json(value):
    """NaN becomes null and infinities the strings "inf"/"-inf": valid JSON for any parser."""
    import math

    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    return value


def ensure_writable(path: str | None, what: str = "--json") -> None:
    """Refuse an output path before a long run, not after it: create it (then remove it
    again if it was not there), so a folder, a missing permission or /proc is found now."""
    if not path:
        return
    target = Path(path)
    if target.is_dir():
        raise HarnessError(f"cannot write {what} '{path}': it is a directory")
    existed = target.exists()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "a"):
            pass
    except OSError as exc:
        raise HarnessError(f"cannot write {what} '{path}': {exc.strerror}") from None
    if not existed:
        target.unlink(missing_ok=True)


def write_json(path: str, payload) -> None:
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(strict_json(payload), indent=2, default=str, allow_nan=False) + "\n")
    except OSError as exc:
        raise HarnessError(f"cannot write '{path}': {exc.strerror}") from None


def cmd_list(args) -> int:
    from .registry import PACK_NOTES, REGISTRY
    from .tables import traits_table, variants_table

    _load(args)
    families = _families(args)
    ensure_writable(args.json)
    variants = [v for v in REGISTRY.values() if v.family in set(families)]
    if len(families) == 1:  # one family: its traits side by side, a column per trait
        print(traits_table(families[0]))
    else:
        print(variants_table(variants))
    for pack, note in sorted(PACK_NOTES.items()):
        print(f"\nsource ({pack}): {note}")
    if args.json:
        write_json(args.json, [
            {"id": v.id, "family": v.family, "source": v.source, "reference": v.reference,
             "summary": v.summary, "traits": dict(v.traits), "origin": v.origin}
            for v in variants
        ])
    return 0


def run_check(families: list[str], cfg: Config | None, device: str, dtypes: list[str] | None = None,
              progress=None):
    """Every variant of ``families`` against its spec and the pairwise matrix derived from it,
    on ``cfg`` (or the default config matrix when None); returns (pair results, path results)."""
    from .config import CONFIG_MATRIX
    from .spec import check_all

    configs = {"default": cfg} if cfg is not None else CONFIG_MATRIX
    report = check_all(families, configs, device, dtypes or default_dtypes(device))
    return report.pairs, report.paths


def default_dtypes(device: str) -> list[str]:
    """Lower dtypes checked for precision by default (float64, for semantics, always runs)."""
    return ["float32", "bfloat16", "float16"] if device == "cuda" else ["float32"]


def _check_dtypes(names: list[str] | None, families: list[str], device: str) -> list[str]:
    from .compare import dtype_of
    from .families import get_family

    dtypes = names or default_dtypes(device)
    for name in dtypes:
        if not dtype_of(name).is_floating_point:
            fixed = [f for f in families if get_family(f).dtypes]
            raise UnknownName(f"dtype '{name}' is not a floating dtype; families are checked in float64, "
                              f"float32, bfloat16 or float16" + (f" ({fixed} run in their own dtype)" if fixed else ""))
    return dtypes


MAX_EXPLAINED = 8  # a trace costs seconds: the first contradictions only


def explain_failures(report, configs, limit: int = MAX_EXPLAINED) -> str:
    """For each (variant, case) whose spec fails: the first divergence against a peer that
    declares the same traits, or the worst tensor when it has no peer."""
    from .diff import explain_variant
    from .kernel_explain import explain_mistake

    lines, seen, named = [], set(), set()
    for s in report.specs:
        key = (s.family, s.variant, s.case)
        if s.ok or key in seen or s.verdict == "error":
            continue
        seen.add(key)
        if len(seen) > limit:
            lines.append(f"  ... and more: python -m harness diff {s.family} A B --case C traces any pair")
            break
        if (s.family, s.variant) not in named:  # an attention kernel: its mistake named in one line
            named.add((s.family, s.variant))
            mistake = explain_mistake(s.family, s.variant, report, configs)
            if mistake:
                lines.append(f"  {s.family}/{s.variant}: {mistake}")
        head = f"  {s.family}/{s.variant} on {s.case} ({s.config}, {s.dtype}): worst tensor {s.worst}"
        if s.verdict != "different":  # less precise: same function, more rounding; nothing to trace
            lines.append(head + f" ({s.verdict}, {s.ratio:.3g}x the baseline's error)")
            continue
        d = explain_variant(s.family, s.variant, s.case, configs[s.config], s.dtype if s.dtype != "bool" else "float32")
        lines.append(head + ("" if d is None else "\n" + "\n".join("    " + x for x in d.text.splitlines())))
    return "\n".join(lines)


def explain_differences(report, configs) -> str:
    """One first divergence per declared difference (reason and case), on its first pair
    and config that shows it."""
    from .diff import first_divergence

    lines, seen = [], set()
    for p in report.pairs:
        key = (p.family, p.reason, p.case)
        if p.verdict != "different" or key in seen or p.dtype == "bool":
            continue
        seen.add(key)
        d = first_divergence(p.family, p.a, p.b, p.case, configs[p.config], p.dtype, p.device, hints=False)
        lines.append(f"  {p.family}: {p.a} ~ {p.b} on {p.case} ({p.config}, {p.dtype}; {p.reason})\n"
                     + "\n".join("    " + x for x in d.text.splitlines()))
    return "\n".join(lines) or "(none)"


def cmd_check(args) -> int:
    from .config import config_matrix
    from .families import get_family
    from .registry import variants_of
    from .spec import check_all
    from .tables import (LEGEND, classes_table, compiled_table, differences_table, failures_table,
                         paths_table, spec_matrix, verdict_matrix)

    _load(args)
    families = _families(args)
    configs = config_matrix(args.set)
    device = resolve_device(args.device)
    dtypes = _check_dtypes(args.dtype, families, device)
    if args.precision_factor <= 0:
        raise HarnessError(f"--precision-factor {args.precision_factor} must be positive")
    ensure_writable(args.json)
    wanted = None
    if args.variant:
        wanted = []
        for vid in args.variant:
            matches = [v.key for f in families for v in variants_of(f) if v.id == vid]
            if not matches:
                known = sorted({v.id for f in families for v in variants_of(f)})
                raise UnknownName(f"no variant '{vid}' in {families if args.family else 'any family'}; known: {known}")
            wanted += matches
    report = check_all(families, configs, device, dtypes, factor=args.precision_factor, variants=wanted,
                       strict=args.strict_precision, pairs=args.pairs,
                       compile_backend=args.compile_backend if args.compiled else None)
    print(LEGEND)
    print("\nconfigs (one symbol per config in each spec cell, in this order):")
    for name, cfg in configs.items():
        print(f"  {name:9s} {cfg.describe()}")
    for family in families:
        fam = get_family(family)
        print(f"\n== {family}: {fam.call}")
        if fam.matrix is not None and not args.set:
            print(f"   configs: {', '.join(fam.configs_of(configs))} ({fam.matrix_note})")
        for case in fam.cases:
            print(f"   case {case.name}: {case.note}")
        for fam_name, vid, config, why in report.skipped:
            if fam_name == family:
                print(f"   {vid} skips config {config}: {why}")
        for v in variants_of(family):
            limited = v.traits.get("cases")
            if limited is not None:
                left_out = [c.name for c in fam.cases if c.name not in limited]
                if left_out:
                    print(f"   {v.id} does not apply to {', '.join(left_out)} (declared traits['cases']"
                          + (f": {v.traits['note']}" if v.traits.get("note") else "") + ")")
        for dtype in fam.dtypes or report.dtypes:
            what = ("semantics: each variant against the float64 oracle of its declared traits"
                    if dtype == "float64" else
                    f"precision: error against the oracle, as a multiple of the baseline's (at most {args.precision_factor:g}x)")
            print(f"\n-- {dtype} on {device}: {what}")
            print(spec_matrix(report.specs, family, dtype, fam.configs_of(configs)))
        print("\n-- equivalence classes (equal semantic traits)")
        print(classes_table(family))
        for dtype in fam.dtypes or report.dtypes:
            print(f"\n-- pairs in {dtype} ({'measured' if args.pairs == 'all' else 'derived from the classes'})")
            print(verdict_matrix(report.pairs, family, dtype))
    print("\n== Differences (declared, with their effect)")
    print(differences_table(report.pairs))
    print("\n== Kernel paths: autograd vs torch.no_grad() (eval mode)")
    print(paths_table(report.paths))
    if args.compiled:
        print(f"\n== torch.compile (backend {args.compile_backend}) against eager, first config")
        print(compiled_table(report.compiled))
    if args.explain:
        print("\n== Where each declared difference first shows (harness.diff)")
        print(explain_differences(report, configs))
    print("\n== Contradictions")
    print(failures_table(report))
    explained = explain_failures(report, configs)
    if explained:
        print("\nwhere they first diverge from a variant declaring the same traits (harness.diff):")
        print(explained)
    if args.json:
        write_json(args.json, report.as_dict())
    n_var = len({(s.family, s.variant) for s in report.specs})
    grads = sum(g.ok for g in report.gradchecks)
    drops = sum(d.ok for d in report.dropouts)
    print(f"\n{n_var} variants x {len(configs)} config(s): {len(report.specs)} spec checks, "
          f"{len(report.pairs)} pairs, gradcheck {grads}/{len(report.gradchecks)}, "
          f"dropout {drops}/{len(report.dropouts)}; {len(report.failures)} contradict")
    return 1 if report.failures else 0


def cmd_diff(args) -> int:
    from .compare import dtype_of
    from .diff import diff_pair, pick_case, render
    from .families import get_family
    from .registry import get_variant

    _load(args)
    cfg = Config.parse(args.set)
    device = resolve_device(args.device)
    dtype_of(args.dtype)
    ensure_writable(args.json)
    family = get_family(args.family)
    a, b = get_variant(family.name, args.a), get_variant(family.name, args.b)
    if args.case:
        family.case(args.case)
        case = args.case
    else:
        case, verdicts = pick_case(family.name, a, b, cfg, args.dtype)
        print("cases: " + ", ".join(f"{c} {v}" for c, v in verdicts) + f"; tracing '{case}'")
    result = diff_pair(family.name, a, b, case, cfg, args.dtype, device=device)
    print(render(result))
    if args.json:
        write_json(args.json, result)
    return 0


def cmd_map(args) -> int:
    from .mapping import propose_map

    _load(args)
    ensure_writable(args.json)
    proposal = propose_map(args.target, args.family, init=args.init, call=args.call,
                           cfg=Config.parse(args.set), variant_id=args.id)
    print(proposal.text)
    if args.json:
        write_json(args.json, proposal.as_dict())
    return 0 if proposal.found else 1


def cmd_differences(args) -> int:
    from .differences import write_differences

    _load(args)
    ensure_writable(args.out, "--out")
    path = write_differences(args.out, families=args.family, cfg=Config.parse(args.set))
    print(f"wrote {path}")
    return 0


def add_review_commands(sub, common) -> None:
    """``diff``, ``map`` and ``differences``: reviewing where and why variants differ."""
    p = sub.add_parser("diff", help="where two variants first diverge, why, and what it costs")
    common(p, families=False)
    p.add_argument("family", help="the family of both variants")
    p.add_argument("a", help="variant A")
    p.add_argument("b", help="variant B")
    p.add_argument("--case", help="the case to trace (default: the first case where they differ)")
    p.add_argument("--dtype", default="float32", help="float32 (default), float64, ...")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda or auto")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="config override, e.g. heads=8")
    p.add_argument("--json", metavar="PATH", help="also write everything as JSON")
    p.set_defaults(func=cmd_diff)

    p = sub.add_parser("map", help="propose a parameter map for a module, by search")
    common(p, families=False)
    p.add_argument("target", help="FILE.py:CLASS or a module path such as torch.nn:MultiheadAttention")
    p.add_argument("--family", required=True, help="the family the module belongs to")
    p.add_argument("--init", help="constructor keyword arguments, e.g. 'embed_dim=cfg.d_model, "
                                  "num_heads=cfg.heads' (default: guessed from the signature)")
    p.add_argument("--call", help="how to call it: a call form name (see harness.mapping.CALL_FORMS) "
                                  "or an expression of m, query, key, value, mask (default: try the forms)")
    p.add_argument("--id", help="the id to register it under (default: the class name, lower case)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="config override")
    p.add_argument("--json", metavar="PATH", help="also write the proposal as JSON")
    p.set_defaults(func=cmd_map)

    p = sub.add_parser("differences", help="write reports/DIFFERENCES.md (classes, reasons, costs)")
    common(p)
    p.add_argument("--out", default="reports/DIFFERENCES.md", help="where to write it")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="config override")
    p.set_defaults(func=cmd_differences)


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line on stderr and exit 2 (no usage block)."""

    def error(self, message: str):
        self.exit(2, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m harness", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)

    def common(p, families=True):
        p.add_argument("--variants", action="append", metavar="FILE",
                       help=f"also load variants from this file (repeatable; or ${VARIANTS_ENV})")
        if families:
            p.add_argument("--family", action="append", metavar="F", help="only this family (repeatable)")

    p = sub.add_parser("list", help="print every registered variant and its traits")
    common(p)
    p.add_argument("--json", metavar="PATH", help="also write the list as JSON")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("check", help="every variant against its spec, and the verdict matrix; exit 1 on a contradiction")
    common(p)
    p.add_argument("--device", default="cpu", help="cpu (default), cuda or auto")
    p.add_argument("--dtype", action="append",
                   help="precision dtype (repeatable; default float32 on CPU; float64 always runs, for semantics)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="config override, e.g. d_model=128 (replaces the default config matrix by one config)")
    p.add_argument("--variant", action="append", metavar="ID",
                   help="check only this variant (repeatable; its family's reference still runs, as the baseline)")
    p.add_argument("--pairs", choices=("derived", "all"), default="derived",
                   help="derive the pair matrix from the equivalence classes (default), or measure every pair")
    p.add_argument("--precision-factor", type=float, default=2.0,
                   help="a variant may have this many times the baseline's error (default 2)")
    p.add_argument("--strict-precision", action="store_true",
                   help="'less precise' in bfloat16/float16 is a contradiction too")
    p.add_argument("--explain", action="store_true",
                   help="also trace where each declared difference first shows (seconds per difference)")
    p.add_argument("--compiled", action="store_true",
                   help="also check each attention/layer variant under torch.compile against itself eager (slow)")
    p.add_argument("--compile-backend", default="inductor", metavar="NAME",
                   help="torch.compile backend for --compiled (default inductor; aot_eager skips code generation)")
    p.add_argument("--json", metavar="PATH", help="also write every spec, pair, path, gradcheck and dropout result")
    p.set_defaults(func=cmd_check)

    add_review_commands(sub, common)

    from . import bench_cli  # noqa: F401  (adds bench and report)

    bench_cli.add_commands(sub, common)
    from . import models_cli  # noqa: F401  (decode, train-step, copy-task, cache-bench)

    models_cli.add_commands(sub, common)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
