"""Whole checks: every variant of some families against its spec and the pair matrix
(``check_all``, its settings one ``CheckSettings``), one variant (``check_one_variant``), and
the (pairs, paths) of ``run_check``."""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

from harness.base.boundary import FailedReason
from harness.base.config import CONFIG_MATRIX, Config
from harness.base.dtypes import default_dtypes
from harness.check.check_cache import cached_part, part_key
from harness.check.extras import COMPILED_FAMILIES, compiled_check, dropout_checks, gradcheck_variant
from harness.check.pairs import derive_pairs
from harness.check.reach import reach_checks
from harness.check.results import CheckReport, PairResult
from harness.check.settings import CheckSettings, PairMode
from harness.check.spec import SpecChecker, one_thread
from harness.families.base import Family
from harness.families.catalog import get_family
from harness.registry import Variant, applicable, variants_of


def check_all(families: Iterable[str], configs: Mapping[str, Config], device: str | None = None,
              dtypes: Iterable[str] | None = None, *, settings: CheckSettings | None = None,
              progress: Callable[[str], None] | None = None, **fields: Any) -> CheckReport:
    """Every variant of ``families`` against its spec on every config, case and dtype (float64
    always, for semantics), then the pairwise matrix, the kernel paths, gradcheck and the
    dropout checks; with ``compile_backend``, each variant of the attention and layer
    families under ``torch.compile`` against itself eager. What is checked and how is
    ``settings``, or its fields as keywords (``device`` and ``dtypes`` also by position):
    ``check_all(["attention"], configs, "cpu", ["float32"], extras=False)``."""
    s = CheckSettings.of(settings, device=device, dtypes=dtypes, **fields)
    report = CheckReport(dict(configs), s.report_dtypes)
    engine = SpecChecker(configs, s.device, s.factor, s.strict)
    with one_thread():
        for family in map(get_family, families):
            members = [v for v in variants_of(family.name) if s.wants(v.key)]
            family_configs = family.configs_of(configs)
            if not family_configs:
                continue
            key = part_key(family.name, {**dict(configs), **family_configs}, s, variants_of(family.name))
            part = cached_part(key, lambda: _family_part(engine, family, members, family_configs, configs, s,
                                                         progress))
            report.merge(part)
    # a kernel judged in its own dtypes (float16, bfloat16) adds them to the report's dtypes
    report.dtypes += [d for d in dict.fromkeys(r.dtype for r in report.specs) if d not in report.dtypes]
    report.sessions = list(engine.checkers.values())
    return report


def _family_part(engine: SpecChecker, family: Family, members: list[Variant], family_configs: Mapping[str, Config],
                 configs: Mapping[str, Config], s: CheckSettings,
                 progress: Callable[[str], None] | None) -> CheckReport:
    """One family's part of the check: its specs, refusals, pairs, extras and compiled checks."""
    part = CheckReport(dict(configs), s.report_dtypes)
    for v in members:
        if progress:
            progress(v.key)
        _refusals(part, engine, v, family_configs, s)
        own = [r for cell in engine.cells(v, s.dtypes) if (r := engine.check(v, *cell)) is not None]
        added, left = reach_checks(engine, v, own, family_configs[next(iter(family_configs))])
        part.specs += own + added
        part.not_exercised += left
        part.added_configs.update({s.config: engine.checkers[s.config].cfg for s in added})
    part.pairs += _pairs(part, engine, family, family_configs, s)
    if s.extras:
        _extras(part, engine, members, next(iter(family_configs)), s)
    if s.compile_backend and family.name in COMPILED_FAMILIES:
        first = next(iter(configs))
        part.compiled += [c for v in members if (c := compiled_check(
            v, engine.checkers[first], first, "float32", s.compile_backend, factor=s.factor)) is not None]
    return part


def _refusals(report: CheckReport, engine: SpecChecker, v: Variant, configs: Mapping[str, Config],
              s: CheckSettings) -> None:
    """Each config (or case) ``v`` refuses: a skip, said why, or its error row where its own supports failed."""
    family = v.family_spec
    for config, cfg in configs.items():
        why = v.refuses(cfg, engine.device)
        if isinstance(why, FailedReason):  # its own supports failed: an error row, not a skip
            report.specs.append(engine.failed(v, config, family.cases[0].name, s.dtypes[0], why.error))
        elif why:
            report.skipped.append((family.name, v.id, config, why))
        else:  # a case its supports refuses (a model that takes no segment ids: packed)
            for name in (c.name for c in family.cases if not c.base and applicable(v, c.name)):
                why = v.refuses(cfg, engine.device, name)
                if isinstance(why, FailedReason):
                    report.specs.append(engine.failed(v, config, name, s.dtypes[0], why.error))
                elif why:
                    report.skipped.append((family.name, v.id, config, f"case {name}: {why}"))


def _pairs(report: CheckReport, engine: SpecChecker, family: Family, configs: Mapping[str, Config],
           s: CheckSettings) -> list[PairResult]:
    """The family's pair matrix on every dtype, config and case, from the specs just checked;
    with ``variants``, the pairs that have a checked variant on a side."""
    index = {r.cell: r for r in report.specs if r.family == family.name}
    return [p for dtype_name in family.dtypes or report.dtypes for config in configs for case in family.cases
            for p in derive_pairs(engine.checkers, family.name, config, case.name, dtype_name, specs=index,
                                  device=engine.device, measured=s.pairs == PairMode.ALL)
            if s.wants(f"{family.name}/{p.a}") or s.wants(f"{family.name}/{p.b}")]


def _extras(report: CheckReport, engine: SpecChecker, members: list[Variant], first: str, s: CheckSettings) -> None:
    """On the family's first config: each variant's autograd path against its no-grad path,
    gradcheck and the dropout checks."""
    checker = engine.checkers[first]
    for v in members:
        family = v.family_spec
        for case in family.cases:
            for dtype_name in family.dtypes or (v.dtypes if v.own_dtype_semantics else s.dtypes):
                p = checker.compare_paths(v, case.name, dtype_name)
                if p is not None:
                    report.paths.append(p)
        g = gradcheck_variant(v)
        if g is not None:
            report.gradchecks.append(g)
        report.dropouts += dropout_checks(v, engine.configs[first])


def run_check(families: list[str], cfg: Config | None, device: str, dtypes: list[str] | None = None,
              progress: Callable[[str], None] | None = None) -> tuple[list, list]:
    """Every variant of ``families`` against its spec and the pairwise matrix derived from it,
    on ``cfg`` (or the default config matrix when None); returns (pair results, path results)."""

    configs = {"default": cfg} if cfg is not None else CONFIG_MATRIX
    report = check_all(families, configs, settings=CheckSettings(device, tuple(dtypes or default_dtypes(device))))
    return report.pairs, report.paths


def check_one_variant(variant: Variant, configs: Mapping[str, Config] | None = None,
                      dtypes: Iterable[str] = ("float32",), device: str = "cpu") -> list:
    """One variant against its spec over the config matrix (float64 for semantics, ``dtypes``
    for precision), plus gradcheck and the dropout checks. Returns every result; each has
    ``.ok``. (``harness.check.api.check_all`` does whole families and the pair matrix.)"""

    report = check_variant(variant, configs, dtypes, device)
    return [*report.specs, *report.gradchecks, *report.dropouts]


def check_variant(variant: Variant, configs: Mapping[str, Config] | None = None,
                  dtypes: Iterable[str] = ("float32",), device: str = "cpu") -> CheckReport:
    """``check_one_variant``'s whole report: its results, and in ``skipped`` each config (or
    case) the variant refuses, with why (what the pytest plugin says was not checked)."""
    return check_all([variant.family], configs or CONFIG_MATRIX,
                     settings=CheckSettings(device, tuple(dtypes), variants=frozenset([variant.key])))
