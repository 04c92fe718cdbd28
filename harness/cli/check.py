"""``list`` and ``check``."""

from __future__ import annotations

from harness.base.dtypes import default_dtypes, resolve_device
from harness.base.errors import HarnessError, UnknownName
from harness.cli.common import _families, _load
from harness.report.io import ensure_writable, write_json
from harness.trace.explain import explain_differences, explain_failures


def cmd_list(args) -> int:
    from harness.registry import PACK_NOTES, REGISTRY
    from harness.report.tables import traits_table, variants_table

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


def _check_dtypes(names: list[str] | None, families: list[str], device: str) -> list[str]:
    from harness.base.dtypes import dtype_of
    from harness.families.catalog import get_family

    dtypes = names or default_dtypes(device)
    for name in dtypes:
        if not dtype_of(name).is_floating_point:
            fixed = [f for f in families if get_family(f).dtypes]
            raise UnknownName(f"dtype '{name}' is not a floating dtype; families are checked in float64, "
                              f"float32, bfloat16 or float16" + (f" ({fixed} run in their own dtype)" if fixed else ""))
    return dtypes


def cmd_check(args) -> int:
    from harness.base.config import config_matrix
    from harness.check.api import check_all
    from harness.families.catalog import get_family
    from harness.registry import variants_of
    from harness.report.tables import (
        LEGEND,
        classes_table,
        compiled_table,
        differences_table,
        failures_table,
        paths_table,
        spec_matrix,
        verdict_matrix,
    )

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
            print(f"   configs: {', '.join(fam.configs_of(configs))} (its layers run the whole matrix in their families)")
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
        print("\n== Where each declared difference first shows (harness.trace)")
        print(explain_differences(report, configs))
    print("\n== Contradictions")
    print(failures_table(report))
    explained = explain_failures(report, configs)
    if explained:
        print("\nwhere they first diverge from a variant declaring the same traits (harness.trace):")
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
