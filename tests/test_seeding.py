"""Determinism and input validation: the same seed gives the same numbers, every time."""

from __future__ import annotations

import pytest
import torch

from harness import InputError
from harness.base.config import Config
from harness.base.seeding import seed_everything
from harness.check.api import check_all
from harness.check.runs import RunCache, cast_inputs
from harness.families.catalog import get_family
from harness.porting.portmap import Fills
from harness.registry import build, get_variant


def test_same_seed_same_weights_inputs_and_modules():
    fam = get_family("encoder_layer")
    cfg = Config(seed=7)
    for a, b in [(fam.canonical_weights(cfg), fam.canonical_weights(cfg))]:
        assert all(torch.equal(a[n], b[n]) for n in a)
    x1, x2 = fam.inputs("padded", cfg), fam.inputs("padded", cfg)
    assert torch.equal(x1["x"], x2["x"]) and torch.equal(x1["pad"], x2["pad"])
    v = get_variant("encoder_layer", "annotated_preln")
    m1, _ = build(v, cfg)
    m2, _ = build(v, cfg)
    assert all(torch.equal(p, q) for p, q in zip(m1.parameters(), m2.parameters()))
    assert not torch.equal(fam.canonical_weights(Config(seed=8))["ffn.w1.weight"],
                           fam.canonical_weights(cfg)["ffn.w1.weight"])


def test_check_is_deterministic():
    """Two independent checks (fresh caches) give the same numbers, to the last bit."""
    configs = {"small": Config(batch=2, tgt_len=3, src_len=4)}
    first = check_all(["attention"], configs, "cpu", ["float32"], extras=False).as_dict()
    again = check_all(["attention"], configs, "cpu", ["float32"], extras=False).as_dict()
    assert first == again


def test_seed_everything_seeds_torch_and_numpy():
    import numpy as np

    seed_everything(3)
    a = (torch.rand(2), np.random.rand())
    seed_everything(3)
    b = (torch.rand(2), np.random.rand())
    assert torch.equal(a[0], b[0]) and a[1] == b[1]


def test_nan_in_inputs_is_refused():
    with pytest.raises(InputError, match="input 'x' contains NaN"):
        cast_inputs({"x": torch.tensor([1.0, float("nan")])}, torch.float32, "cpu")


def test_nan_in_a_user_input_through_the_checker():
    checker = RunCache(Config())
    fam = get_family("norm")
    checker._inputs[("norm", "rows")] = {"x": torch.full((1, 2, 64), float("nan")), "case": "rows"}
    with pytest.raises(InputError, match="contains NaN"):
        checker.run(get_variant("norm", "torch_layernorm"), "rows", Fills(), torch.float32)
    assert fam.name == "norm"
