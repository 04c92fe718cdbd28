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


class FusedInFloat32(nn.Module):
    """Correct, but every step in float32 whatever the inputs' dtype: less precise, not wrong."""

    def __init__(self, features: int, out: int, eps: float = 1e-6):
        super().__init__()
        self.inner = _example().FusedRMSNormLinear(features, out, eps)
        self.gain, self.weight, self.bias = self.inner.gain, self.inner.weight, self.inner.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32, g, w, b = (t.float() for t in (x, self.gain, self.weight, self.bias))
        return ((x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.inner.eps) * g) @ w.T + b).to(x.dtype)


def test_the_semantic_difference_leads_the_line_and_precision_advice_follows():
    torch.manual_seed(0)
    wrong = _judged(_example().EpsOutsideTheSqrt)
    # at unit scale eps outside the sqrt is within float32's tolerance ("less precise"); at
    # x1e-3 it is another function: that regime, its tensor and the broken bound lead
    assert wrong.failure.startswith("wrong at scale x1e-3 (float64): output max |err| "), wrong.failure
    assert wrong.summary.startswith("wrong: wrong at scale x1e-3 (float64): output max |err| ")
    assert "> bound " in wrong.failure and "internal_dtype" not in wrong.failure
    assert "less precise at: given, seed 1" in wrong.failure
    assert "scale x1e-3" in wrong.semantically_wrong and "given" not in wrong.semantically_wrong
    kinds = {(r.regime.name, r.dtype): r.kind for r in wrong.results}
    assert kinds[("given", "float64")] == "precision" and kinds[("scale x1e-3", "float64")] == "semantic"
    assert wrong.as_dict()["results"][0]["failure_kind"] == "precision"


def test_a_correct_candidate_computing_in_float32_gets_the_precision_advice_first():
    torch.manual_seed(0)
    loose = _judged(FusedInFloat32)
    assert not loose.ok and not loose.semantically_wrong, loose.failure
    assert loose.failure.startswith("wrong at given (float64): output: within float32's tolerance but not "
                                    "float64's"), loose.failure
    assert "declare internal_dtype" in loose.failure and "also wrong at" not in loose.failure
    declared = judge(nn.Sequential(nn.RMSNorm(64, eps=1e-6), nn.Linear(64, 32)), FusedInFloat32(64, 32),
                     lambda batch=4, tokens=10: [torch.randn(batch, tokens, 64)], internal_dtype="float32")
    assert declared.ok, declared.failure


def test_a_regimes_line_names_a_different_tensor_before_a_less_precise_one():
    from harness.base.verdicts import Verdict
    from harness.check.reference_result import lead_check
    from harness.check.results import TensorCheck

    loose = TensorCheck("output", Verdict.LESS_PRECISE, 1e-7, None, 1e-10, 1e3, "within float32's tolerance")
    other = TensorCheck("grad:x", Verdict.DIFFERENT, 0.5, None, 1e-10, 5e9)
    assert lead_check([loose, other]) is other and lead_check([loose]) is loose and lead_check([]) is None
