"""Whole checks: every variant of some families against its spec and the pair matrix
(``check_all``), one variant (``check_one_variant``), and the (pairs, paths) of ``run_check``."""

from __future__ import annotations

from typing import Callable, Iterable, Mapping

from harness.base.boundary import FailedReason
from harness.base.config import CONFIG_MATRIX, Config
from harness.base.dtypes import default_dtypes
from harness.check import precision as P
from harness.check.extras import COMPILED_FAMILIES, compiled_check, dropout_checks, gradcheck_variant
from harness.check.pairs import derive_pairs
from harness.check.results import CheckReport
from harness.check.runs import applicable
from harness.check.spec import SpecChecker, one_thread
from harness.families.catalog import get_family
from harness.registry import Variant, variants_of


def check_all(families: Iterable[str], configs: Mapping[str, Config], device: str = "cpu",
              dtypes: Iterable[str] | None = None, *, factor: float = P.PRECISION_FACTOR,
              strict: bool = False, pairs: str = "derived", extras: bool = True,
              variants: Iterable[str] | None = None, progress: Callable[[str], None] | None = None,
              compile_backend: str | None = None) -> CheckReport:
    """Every variant of ``families`` against its spec on every config, case and dtype (float64
    always, for semantics), then the pairwise matrix, the kernel paths, gradcheck and the
    dropout checks; with ``compile_backend``, each variant of the attention and layer
    families under ``torch.compile`` against itself eager. ``variants`` (keys
    ``family/id``) limits which variants are checked; the family references are run
    anyway, as the precision baseline."""
    dtypes = list(dtypes or ["float32"])
    report = CheckReport(dict(configs), ["float64", *[d for d in dtypes if d != "float64"]])
    engine = SpecChecker(configs, device, factor=factor, strict=strict)
    wanted = set(variants) if variants is not None else None
    with one_thread():
        for family_name in families:
            _check_family(report, engine, family_name, configs, dtypes, wanted=wanted, pairs=pairs,
                          extras=extras, progress=progress)
            if compile_backend and family_name in COMPILED_FAMILIES:
                first = next(iter(configs))
                for v in variants_of(family_name):
                    if wanted is None or v.key in wanted:
                        c = compiled_check(v, engine.checkers[first], first, "float32", compile_backend, factor=factor)
                        if c is not None:
                            report.compiled.append(c)
    # a kernel judged in its own dtypes (float16, bfloat16) adds them to the report's dtypes
    report.dtypes += [d for d in dict.fromkeys(s.dtype for s in report.specs) if d not in report.dtypes]
    report.sessions = list(engine.checkers.values())
    return report


def _check_family(report: CheckReport, engine: SpecChecker, family_name: str, configs, dtypes,
                  *, wanted, pairs: str, extras: bool, progress) -> None:
    family = get_family(family_name)
    configs = family.configs_of(configs)
    if not configs:
        return
    first = next(iter(configs))
    members = [v for v in variants_of(family_name) if wanted is None or v.key in wanted]
    for v in members:
        if progress:
            progress(v.key)
        for config, cfg in configs.items():
            why = v.refuses(cfg, engine.device)
            if isinstance(why, FailedReason):  # its own supports failed: an error row, not a skip
                report.specs.append(engine._failed(v, config, family.cases[0].name, dtypes[0], why.error))
            elif why:
                report.skipped.append((family_name, v.id, config, why))
            else:  # a case its supports refuses (a model that takes no segment ids: packed)
                for name in (c.name for c in family.cases if not c.base and applicable(v, c.name)):
                    why = v.refuses(cfg, engine.device, name)
                    if isinstance(why, FailedReason):
                        report.specs.append(engine._failed(v, config, name, dtypes[0], why.error))
                    elif why:
                        report.skipped.append((family_name, v.id, config, f"case {name}: {why}"))
        report.specs += engine.check_specs(v, dtypes)
    index = {(s.variant, s.config, s.case, s.dtype): s for s in report.specs if s.family == family_name}
    for dtype_name in family.dtypes or report.dtypes:
        for config in configs:
            for case in family.cases:
                report.pairs += [p for p in derive_pairs(engine.checkers, family_name, config, case.name, dtype_name,
                                                         specs=index, device=engine.device, measured=pairs == "all")
                                 if wanted is None or f"{family_name}/{p.a}" in wanted
                                 or f"{family_name}/{p.b}" in wanted]
    if not extras:
        return
    checker = engine.checkers[first]
    for v in members:
        for case in family.cases:
            for dtype_name in family.dtypes or (v.dtypes if v.own_dtype_semantics else dtypes):
                p = checker.compare_paths(v, case.name, dtype_name)
                if p is not None:
                    report.paths.append(p)
        g = gradcheck_variant(v)
        if g is not None:
            report.gradchecks.append(g)
        report.dropouts += dropout_checks(v, engine.configs[first])


def run_check(families: list[str], cfg: Config | None, device: str, dtypes: list[str] | None = None,
              progress=None):
    """Every variant of ``families`` against its spec and the pairwise matrix derived from it,
    on ``cfg`` (or the default config matrix when None); returns (pair results, path results)."""

    configs = {"default": cfg} if cfg is not None else CONFIG_MATRIX
    report = check_all(families, configs, device, dtypes or default_dtypes(device))
    return report.pairs, report.paths


def check_one_variant(variant: Variant, configs: Mapping[str, Config] | None = None,
                  dtypes: Iterable[str] = ("float32",), device: str = "cpu") -> list:
    """One variant against its spec over the config matrix (float64 for semantics, ``dtypes``
    for precision), plus gradcheck and the dropout checks. Returns every result; each has
    ``.ok``. (``harness.check.api.check_all`` does whole families and the pair matrix.)"""

    report = check_all([variant.family], configs or CONFIG_MATRIX, device, list(dtypes),
                       variants=[variant.key])
    return [*report.specs, *report.gradchecks, *report.dropouts]
