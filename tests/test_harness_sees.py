"""The checks can fail: deliberately wrong variants are called different, and the
check reports their (false) declarations as contradicted."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from harness.compare import Checker, check_family
from harness.config import Config
from harness.families import get_family
from harness.registry import get_variant, load_file, scratch

WRONG = Path(__file__).with_name("wrong_variants.py")


@pytest.fixture(scope="module")
def checked():
    with scratch():
        load_file(WRONG)
        attention, _ = check_family("attention", Config(), ["float32"])
        norm, _ = check_family("norm", Config(), ["float32"])
    return attention + norm


def _pairs_with(results, vid, other, case):
    return [r for r in results if {r.a, r.b} == {vid, other} and r.case == case]


@pytest.mark.parametrize("vid,case", [
    ("wrong_no_scale", "self"),
    ("wrong_mask_polarity", "self"),
    ("wrong_swapped_kv", "cross"),
    ("wrong_ignores_mask", "self"),
])
def test_wrong_attention_is_different_and_flagged(checked, vid, case):
    [r] = _pairs_with(checked, vid, "torch_mha", case)
    assert r.verdict == "different"
    assert r.expected == "equivalent" and not r.ok
    assert r.max_abs > 1e-3


def test_wrong_layernorm_is_flagged(checked):
    [r] = _pairs_with(checked, "wrong_eps_placement", "torch_layernorm", "rows")
    assert r.verdict == "different" and not r.ok


def test_honest_variant_in_another_layout_is_equivalent(checked):
    for other in ("torch_mha", "annotated", "fused_sdpa", "per_head"):
        for case in ("self", "cross", "causal"):
            [r] = _pairs_with(checked, "honest_textbook", other, case)
            assert r.verdict in ("identical", "equivalent") and r.ok, r


def test_scratch_registry_is_restored():
    with scratch():
        load_file(WRONG)
        assert get_variant("attention", "wrong_no_scale")
    with pytest.raises(Exception, match="unknown variant 'wrong_no_scale'"):
        get_variant("attention", "wrong_no_scale")


def test_fully_masked_rows_match_the_write_ups():
    """-inf gives NaN, -1e9 / -1e20 the mean of V, SDPA zeros (torch 2.13)."""
    checker = Checker(Config(), "cpu")
    family = get_family("attention")
    inputs = checker.inputs(family, "fully_masked")
    row = (~inputs["mask"]).all(-1)  # (B, T) True where the row sees no key
    outs = {}
    for vid in ("fused_explicit", "annotated", "fused_sdpa"):
        run = checker.run(get_variant("attention", vid), "fully_masked", frozenset(), torch.float64)
        outs[vid] = run.tensors["output"][row]
    assert torch.isnan(outs["fused_explicit"]).all()
    o_bias = checker.weights(family, frozenset())["o.bias"]
    assert torch.allclose(outs["fused_sdpa"], o_bias.expand_as(outs["fused_sdpa"]))  # zeros, then + o.bias
    assert not torch.isnan(outs["annotated"]).any()
    assert not torch.allclose(outs["annotated"], outs["fused_sdpa"])
