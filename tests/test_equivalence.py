"""Every registered variant meets the spec built from its own declared traits: float64
semantics (output and every gradient), float32 precision against the baseline, gradcheck,
dropout. Each family's pair matrix, derived from those checks, matches its declarations."""

from __future__ import annotations

from types import SimpleNamespace

from harness.cli import explain_failures
from harness.config import CONFIG_MATRIX
from harness.families import get_family
from harness.registry import REGISTRY
from harness.tables import differences_table, failures_table

from conftest import family_params, variant_params

import pytest


def _mine(report, variant: str):
    """The part of a family's report about one variant."""
    return SimpleNamespace(
        specs=[s for s in report.specs if s.variant == variant],
        gradchecks=[g for g in report.gradchecks if g.variant == variant],
        dropouts=[d for d in report.dropouts if d.variant == variant],
    )


@pytest.mark.parametrize("family,variant,device", variant_params())
def test_variant_meets_its_spec(family, variant, device, family_check):
    report = family_check(family, device)
    mine = _mine(report, variant)
    skipped = {why for f, v, _, why in report.skipped if (f, v) == (family, variant)}
    if not mine.specs and skipped:  # not built for any config here (a CUDA-only kernel on CPU)
        pytest.skip("; ".join(sorted(skipped)))
    assert mine.specs, f"{family}/{variant} was checked on no config and case"
    bad = [r for r in (*mine.specs, *mine.gradchecks, *mine.dropouts) if not r.ok]
    assert not bad, (f"{family}/{variant} contradicts its declaration:\n" + failures_table(mine)
                     + "\n" + explain_failures(mine, CONFIG_MATRIX))


@pytest.mark.parametrize("family,variant,device", [
    p for p in variant_params() if p.values[2] == "cpu" and get_family(p.values[0]).matrix is None])
def test_variant_precision_in_half_precision_on_cpu(family, variant, device, family_check):
    """bfloat16 and float16 on CPU (default config): no semantic contradiction; 'less
    precise' is reported, not failed (see harness.spec.LENIENT_DTYPES). Whole models are
    left out: their layers are checked here in their own families."""
    mine = _mine(family_check(family, device, half=True), variant)
    bad = [r for r in mine.specs if not r.ok]
    assert not bad, f"{family}/{variant} in half precision:\n" + failures_table(mine)


@pytest.mark.parametrize("family,device", family_params())
def test_pair_matrix_matches_declarations(family, device, family_check):
    """The project's own pairs (a user's variants are judged by their own spec tests)."""
    report = family_check(family, device)
    ours = lambda vid: REGISTRY[f"{family}/{vid}"].origin == "variants"  # noqa: E731
    wrong = [p for p in report.pairs if not p.ok and ours(p.a) and ours(p.b)]
    assert not wrong, "pairs contradict their declarations:\n" + differences_table(wrong, only_problems=True)
