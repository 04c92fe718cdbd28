"""Every registered variant meets the spec built from its own declared traits: float64
semantics (output and every gradient), float32 precision against the baseline, gradcheck,
dropout. Each family's pair matrix, derived from those checks, matches its declarations."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from conftest import family_params, variant_params
from harness.base.config import CONFIG_MATRIX
from harness.families.catalog import get_family
from harness.families.models import ModelFamily
from harness.registry import REGISTRY
from harness.report.tables import differences_table, failures_table
from harness.trace.explain import explain_failures


def _mine(report, variant: str):
    """The part of a family's report about one variant."""
    return SimpleNamespace(
        specs=[s for s in report.specs if s.variant == variant],
        gradchecks=[g for g in report.gradchecks if g.variant == variant],
        dropouts=[d for d in report.dropouts if d.variant == variant],
    )


def _mine_or_skip(family_check, family: str, variant: str, device: str, half: bool = False):
    """The variant's part of its family's check; skipped with the reason when the variant is
    built for no config here (a CUDA-only kernel on CPU)."""
    report = family_check(family, device, half=half) if half else family_check(family, device)
    mine = _mine(report, variant)
    skipped = {why for f, v, _, why in report.skipped if (f, v) == (family, variant)}
    if not mine.specs and skipped:
        pytest.skip("; ".join(sorted(skipped)))
    return mine


def _assert_ok(family: str, variant: str, aspect: str, mine) -> None:
    results = [*mine.specs, *mine.gradchecks, *mine.dropouts]
    bad = [r for r in results if not r.ok]
    assert not bad, (f"{family}/{variant} contradicts its declaration ({aspect}):\n" + failures_table(mine)
                     + "\n" + explain_failures(mine, CONFIG_MATRIX))


# One test per aspect (HF's tester-mixin habit): `pytest -k semantics`, `-k precision`,
# `-k gradcheck`, `-k dropout` select one, and a failure names it. They share the family's
# check (``family_check`` runs it once per family and device).

@pytest.mark.parametrize("family,variant,device", variant_params())
def test_variant_semantics(family, variant, device, family_check):
    """float64: the variant's output and every gradient against the float64 oracle of its
    declared traits, on every config and case."""
    mine = _mine_or_skip(family_check, family, variant, device)
    assert mine.specs, f"{family}/{variant} was checked on no config and case"
    own = REGISTRY[f"{family}/{variant}"].semantic_dtypes()    # float64, or a half-only kernel's own dtypes
    semantics = [s for s in mine.specs if s.dtype in (*own, "bool")]
    _assert_ok(family, variant, "semantics", SimpleNamespace(specs=semantics, gradchecks=[], dropouts=[]))


@pytest.mark.parametrize("family,variant,device", variant_params())
def test_variant_precision(family, variant, device, family_check):
    """The device's precision dtypes (float32 on CPU): the error against the oracle within
    the allowed multiple of the baseline's."""
    mine = _mine_or_skip(family_check, family, variant, device)
    own = REGISTRY[f"{family}/{variant}"].semantic_dtypes()
    lower = [s for s in mine.specs if s.dtype not in (*own, "float64", "bool")]
    _assert_ok(family, variant, "precision", SimpleNamespace(specs=lower, gradchecks=[], dropouts=[]))


@pytest.mark.parametrize("family,variant,device", variant_params())
def test_variant_gradcheck(family, variant, device, family_check):
    mine = _mine_or_skip(family_check, family, variant, device)
    _assert_ok(family, variant, "gradcheck", SimpleNamespace(specs=[], gradchecks=mine.gradchecks, dropouts=[]))


@pytest.mark.parametrize("family,variant,device", variant_params())
def test_variant_dropout(family, variant, device, family_check):
    mine = _mine_or_skip(family_check, family, variant, device)
    _assert_ok(family, variant, "dropout", SimpleNamespace(specs=[], gradchecks=[], dropouts=mine.dropouts))


@pytest.mark.parametrize("family,variant,device", [
    p for p in variant_params() if p.values[2] == "cpu" and not isinstance(get_family(p.values[0]), ModelFamily)])
def test_variant_precision_in_half_precision_on_cpu(family, variant, device, family_check):
    """bfloat16 and float16 on CPU (default config): no semantic contradiction; 'less
    precise' is reported, not failed (see harness.check.spec.LENIENT_DTYPES). Whole models are
    left out: their layers are checked here in their own families."""
    mine = _mine_or_skip(family_check, family, variant, device, half=True)
    bad = [r for r in mine.specs if not r.ok]
    assert not bad, f"{family}/{variant} in half precision:\n" + failures_table(mine)


@pytest.mark.parametrize("family,device", family_params())
def test_pair_matrix_matches_declarations(family, device, family_check):
    """The project's own pairs (a user's variants are judged by their own spec tests)."""
    report = family_check(family, device)
    ours = lambda vid: REGISTRY[f"{family}/{vid}"].origin == "variants"  # noqa: E731
    wrong = [p for p in report.pairs if not p.ok and ours(p.a) and ours(p.b)]
    assert not wrong, "pairs contradict their declarations:\n" + differences_table(wrong, only_problems=True)
