"""examples/fused_rmsnorm_linear.py: a fused op judged against the two modules it replaces,
with no family (``harness.judge``): the correct fusion agrees on every regime, the planted
eps-outside-the-sqrt mistake is caught with a one-line reason."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch
from torch import nn

from harness import judge

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "fused_rmsnorm_linear.py"


def _example():
    spec = importlib.util.spec_from_file_location("fused_rmsnorm_linear_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _judged(candidate):
    reference = nn.Sequential(nn.RMSNorm(64, eps=1e-6), nn.Linear(64, 32))

    def inputs(batch=4, tokens=10):
        return [torch.randn(batch, tokens, 64)]
    return judge(reference, candidate(64, 32), inputs)


def test_the_fused_op_agrees_and_the_planted_mistake_is_caught_in_one_line():
    example = _example()
    right, wrong = _judged(example.FusedRMSNormLinear), _judged(example.EpsOutsideTheSqrt)
    assert right.ok, right.failure
    assert "float64" in right.summary and len(right.regimes) > 5
    assert not wrong.ok and wrong.failure and "\n" not in wrong.failure
