"""``list`` and ``check``."""

from __future__ import annotations

import shutil
import textwrap

from harness import registry
from harness.base.config import CONFIG_MATRIX, config_matrix
from harness.base.dtypes import default_dtypes, dtype_of, resolve_device
from harness.base.errors import UnknownName
from harness.check.api import check_all
from harness.check.settings import CheckSettings
from harness.cli.common import _families, _load
from harness.families.catalog import get_family
from harness.families.models import DECODINGS
from harness.registry import REGISTRY, variants_of
from harness.report.check_text import check_text, checked_variants, summary_line
from harness.report.failures_text import verdict_lines
from harness.report.io import ensure_writable, write_json
from harness.report.tables import params_listing, traits_listing, variants_listing
from harness.systems.cache_parity import check_caches
from harness.trace.explain import Mistakes, explain_differences, explain_failures, mistake_lines, path_findings


def cmd_list(args) -> int:
    _load(args)
    families = _families(args)
    ensure_writable(args.json)
    variants = [v for v in REGISTRY.values() if v.family in set(families)]
    width = shutil.get_terminal_size((80, 24)).columns  # the terminal's, or 80 when piped
    if args.params:  # the canonical parameter names a map targets, per family
        name, cfg = next(iter(CONFIG_MATRIX.items()))
        print("\n\n".join(params_listing(f, name, cfg, width) for f in families))
    elif len(families) == 1:  # one family: each variant's traits
        print(traits_listing(families[0], width))
    else:
        print(variants_listing(variants, width))
    notes = {} if args.params else registry.PACK_NOTES  # read now: loading packs adds notes
    for pack, note in sorted(notes.items()):
        print("\n" + textwrap.fill(f"source ({pack}): {note}", width))
    if args.json:
        write_json(args.json, {"variants": [
            {"id": v.id, "family": v.family, "source": v.source, "reference": v.reference,
             "summary": v.summary, "traits": dict(v.traits), "origin": v.origin}
            for v in variants
        ]})
    return 0


def _check_dtypes(names: list[str] | None, families: list[str], device: str) -> list[str]:
    dtypes = names or default_dtypes(device)
    for name in dtypes:
        if not dtype_of(name).is_floating_point:
            fixed = [f for f in families if get_family(f).dtypes]
            raise UnknownName(f"dtype '{name}' is not a floating dtype; families are checked in float64, "
                              f"float32, bfloat16 or float16" + (f" ({fixed} run in their own dtype)" if fixed else ""))
    return dtypes


def _wanted(names: list[str] | None, families: list[str], any_family: bool) -> list[str] | None:
    """The keys of the variants ``--variant`` names (None: every variant)."""
    if not names:
        return None
    wanted = []
    for vid in names:
        matches = [v.key for f in families for v in variants_of(f) if v.id == vid]
        if not matches:
            known = sorted({v.id for f in families for v in variants_of(f)})
            raise UnknownName(f"no variant '{vid}' in {'any family' if any_family else families}; known: {known}")
        wanted += matches
    return wanted


def cached_sessions(families: list[str], configs, wanted: list[str] | None) -> list:
    """Every model with a k/v cache, on the family's first config, through the regimes
    ``decode`` runs (``check_caches``): two cached sessions against re-running the prefix, and
    each call of a cached session (prefill + steps, chunked prefill) against the full forward
    on every padding side its decoding declares. One row per model."""
    out = []
    for family in families:
        if not any(key.startswith(f"{family}/") for key in DECODINGS):
            continue
        family_configs = get_family(family).configs_of(configs)
        if family_configs:
            out += [r for r in check_caches(family, next(iter(family_configs.values())))
                    if wanted is None or f"{family}/{r.variant}" in wanted]
    return out


def cmd_check(args) -> int:
    _load(args)
    families = _families(args)
    configs = config_matrix(args.set)
    if args.explore:  # N more configs drawn by the regime strategies (Hypothesis imported only then)
        from harness.base.regimes import explore

        configs.update({name: cfg.check_fits(name) for name, cfg in explore(args.explore, args.seed).items()})
    device = resolve_device(args.device)
    dtypes = _check_dtypes(args.dtype, families, device)
    ensure_writable(args.json)
    wanted = _wanted(args.variant, families, any_family=not args.family)
    settings = CheckSettings(device, tuple(dtypes), factor=args.precision_factor, strict=args.strict_precision,
                             pairs=args.pairs, variants=None if wanted is None else frozenset(wanted),
                             compile_backend=args.compile_backend if args.compiled else None)
    report = check_all(families, configs, settings=settings)
    report.caches += cached_sessions(families, configs, wanted)
    mistakes = Mistakes(report, configs)
    print("\n".join(verdict_lines(report, checked_variants(report), mistake_lines(report, mistakes))) + "\n")
    print(check_text(report, configs, settings, families=families, matrix_note=not args.set,
                     explained_differences=explain_differences(report, configs) if args.explain else None,
                     explained_failures=explain_failures(report, configs, mistakes=mistakes, named=False)))
    found = path_findings(report, configs, mistakes)
    if found:
        print("\n== Path findings (per case: behaviour that depends on the path taken)\n" + found)
    if args.json:
        write_json(args.json, report.as_dict())
    print(summary_line(report, configs, families))
    return 1 if report.failures else 0
