"""``harness.judge``: a candidate against a reference of the user's, with no family. Correct
rewrites (layers created in another order, a fused projection through a map, another way of
computing the same function) pass; each planted mistake is caught with its regime and tensor
named; the weights that cannot be paired are one line naming the tensor."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from harness import Chunk, Gradients, Param, Transposed, Zero, judge
from harness.base.errors import InputError
from harness.base.hacks import HackKind, put_back, snapshot_torch
from harness.base.verdicts import Verdict

B, T, D, H = 2, 5, 16, 4


def get_inputs():
    return [torch.rand(B, T, D)]


def get_init_inputs():
    return [D, H]


class Attention(nn.Module):
    """Unmasked multi-head self-attention, four Linear layers."""

    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.q, self.k, self.v, self.proj = (nn.Linear(d, d) for _ in range(4))

    def heads(self, y):
        b, t, d = y.shape
        return y.view(b, t, self.h, d // self.h).transpose(1, 2)

    def mix(self, q, k, v):
        return torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), -1) @ v

    def forward(self, x):
        b, t, d = x.shape
        a = self.mix(self.heads(self.q(x)), self.heads(self.k(x)), self.heads(self.v(x)))
        return self.proj(a.transpose(1, 2).reshape(b, t, d))


class Reordered(Attention):
    """The same layers created in another order: paired by name, not by order."""

    def __init__(self, d, h):
        nn.Module.__init__(self)
        self.h = h
        self.proj = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.q = nn.Linear(d, d)


class FusedSDPA(nn.Module):
    """One (3D, D) projection and SDPA: another computation of the same function."""

    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        return self.out(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d))


FUSED_MAP = {**{f"{n}.{p}": Chunk(f"qkv.{p}", i, 3) for i, n in enumerate("qkv") for p in ("weight", "bias")},
             "proj.weight": Param("out.weight"), "proj.bias": Param("out.bias")}


class WrongScale(Attention):
    def mix(self, q, k, v):
        return torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1] * self.h), -1) @ v


class ReluAttention(Attention):
    """A ReLU self-attention (no family describes it) as its own reference."""

    def mix(self, q, k, v):
        return torch.relu(q @ k.transpose(-1, -2)) / q.shape[-2] @ v


class ReluAttentionEinsum(ReluAttention):
    def mix(self, q, k, v):
        return torch.einsum("bhts,bhsd->bhtd", F.relu(torch.einsum("bhtd,bhsd->bhts", q, k)) / q.shape[-2], v)


def test_a_correct_candidate_passes_every_regime_with_every_gradient():
    j = judge(Attention, Reordered, get_inputs, init_inputs=get_init_inputs)
    assert j.ok, j.failure
    assert j.weights == "by name"
    assert {"given", "seed 1", "signed", "scale x100", "batch 1", "non-contiguous", "calls between",
            "other mode", "no grad"} <= set(j.regimes)
    assert any(r.startswith("size ") for r in j.regimes)  # the sizes get_inputs reads (B, T, D, H) varied
    grads = {t for t in j.tensors if t.startswith("grad:")}
    assert grads == {"grad:x", *(f"grad:{n}.{p}" for n in ("q", "k", "v", "proj") for p in ("weight", "bias"))}
    assert j.dtypes == ("float64", "float32")
    assert j.verdict("given", "float64", "grad:proj.weight") in (Verdict.EQUIVALENT, Verdict.IDENTICAL)
    assert j.summary.startswith("correct: 1 output(s) and 9 gradient(s)")
    json.dumps(j.as_dict())  # plain data


def test_a_fused_candidate_takes_the_weights_through_a_map():
    j = judge(Attention, FusedSDPA, get_inputs, init_inputs=get_init_inputs, param_map=FUSED_MAP)
    assert j.ok, j.failure
    assert j.weights == "by the map given"


def test_weights_that_do_not_pair_are_one_line_naming_the_tensor():
    j = judge(Attention, FusedSDPA, get_inputs, init_inputs=get_init_inputs)
    assert not j.ok
    line = j.failure
    assert "\n" not in line
    assert line.startswith("weights: candidate has no parameter 'q.weight' (reference shape (16, 16))")
    assert "candidate's unmatched: 'qkv.weight' (48, 16)" in line
    assert j.regimes == ("given",)  # nothing else is tried


def test_a_transposed_weight_is_named_with_the_entry_that_fits():
    class Stored(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(3, 8))

        def forward(self, x):
            return x @ self.weight

    class Canonical(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(8, 3))

        def forward(self, x):
            return x @ self.weight.t()

    j = judge(Stored, Canonical, [torch.randn(4, 3)])
    assert "parameter 'weight' has shape (8, 3) in the candidate and (3, 8) in the reference" in j.failure
    assert "Transposed(Param(\"weight\"))" in j.failure
    assert judge(Stored, Canonical, [torch.randn(4, 3)], param_map={"weight": Transposed(Param("weight"))}).ok


def test_a_wrong_scale_is_caught_in_float64_with_its_regime_and_tensor():
    j = judge(Attention, WrongScale, get_inputs, init_inputs=get_init_inputs)
    assert not j.ok
    assert j.failure.startswith("wrong at given (float64): output max |err|")
    assert "given" in j.failing and "seed 1" in j.failing


def test_a_relu_attention_no_family_describes_is_judged():
    assert judge(ReluAttention, ReluAttentionEinsum, get_inputs, init_inputs=get_init_inputs).ok
    j = judge(ReluAttention, Attention, get_inputs, init_inputs=get_init_inputs)
    assert not j.ok and j.failure.startswith("wrong at given (float64): output")


def test_functions_are_judged_too_and_a_missing_max_subtraction_overflows_at_scale_x100():
    def naive(x):
        e = x.exp()
        return e / e.sum(-1, keepdim=True)

    assert judge(lambda x: torch.softmax(x, -1), lambda x: (x - x.logsumexp(-1, keepdim=True)).exp(),
                 lambda: [torch.rand(4, 33)]).ok
    j = judge(lambda x: torch.softmax(x, -1), naive, lambda: [torch.rand(4, 33)])
    assert j.failing == ("scale x100", "offset +100", "offset +1000")  # exp(100) overflows float32 too
    assert j.failure.startswith("wrong at scale x100 (float32): output: NaN/inf pattern differs from the oracle")


def test_assuming_non_negative_inputs_is_caught_by_signed_draws():
    def relu_sq(x):
        return x.clamp_min(0) ** 2

    assert not judge(relu_sq, lambda x: x * x, lambda: [torch.rand(8, 5)]).ok
    j = judge(relu_sq, lambda x: x * x, lambda: [torch.rand(8, 5)])
    assert j.failing[0] == "signed" and "given" not in j.failing


def test_an_input_changed_in_place_is_named():
    def scaled(x):
        return x.mul_(2)

    j = judge(lambda x: x * 2, scaled, lambda: [torch.rand(3, 4)], gradients="none")
    assert not j.ok
    assert j.failure.startswith("hack: output_in_input: the candidate wrote its result into input 0")
    given = next(r for r in j.results if r.regime.name == "given")  # and the regime's own line
    assert "changed in place by the call" in given.failure and "'x'" in given.failure
    off = judge(lambda x: x * 2, scaled, lambda: [torch.rand(3, 4)], gradients="none", hacks=False)
    assert not off.hacks and "changed in place by the call" in off.failure and "'x'" in off.failure


def test_a_result_kept_by_shape_is_caught_by_calls_between():
    class Cached(nn.Module):
        memo: dict = {}

        def forward(self, x):
            key = (tuple(x.shape), x.dtype)
            if key not in self.memo:
                self.memo[key] = torch.tanh(x).detach()
            return self.memo[key]

    j = judge(lambda x: torch.tanh(x), Cached(), lambda: [torch.rand(3, 4)], gradients="none")
    assert not j.ok
    assert "calls between" in j.failing or "seed 1" in j.failing


def test_a_detached_output_fails_when_gradients_are_required_and_is_said_under_auto():
    def detached(x):
        with torch.no_grad():
            return torch.sigmoid(x)

    j = judge(torch.sigmoid, detached, lambda: [torch.randn(3, 4)])
    assert not j.ok and "carries no gradient" in j.failure
    auto = judge(torch.sigmoid, detached, lambda: [torch.randn(3, 4)], gradients=Gradients.AUTO)
    assert auto.ok, auto.failure
    assert any("forward only" in r.note for r in auto.results)


def test_a_float32_only_candidate_is_judged_in_its_own_dtype():
    def float32_only(x):
        if x.dtype != torch.float32:
            raise TypeError("float32 only")
        return torch.exp(x - x.logsumexp(-1, keepdim=True))

    j = judge(lambda x: torch.softmax(x, -1), float32_only, lambda: [torch.randn(4, 9)])
    assert j.ok, j.failure
    assert j.semantics.startswith("float32, its own dtype (it does not run in float64")
    assert "float64" not in j.dtypes


def _rms_norm(eps):
    return lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


@pytest.mark.parametrize("internal", [None, "float32"])
def test_an_eps_within_float32s_tolerance_is_another_function_not_its_rounding(internal):
    """An eps of 2e-4 for 1e-12 at activations near 10: every element within float32's
    tolerance, but its RMS error tens of times that of the reference run in float32. It is
    another function whether or not the candidate declares float32; the same definition
    computed in float32 passes where it declares it, and is advised to declare it where not."""
    inputs = lambda: [10 * torch.randn(4, 64)]  # noqa: E731
    wrong = judge(_rms_norm(1e-12), _rms_norm(2e-4), inputs, only=["given"], internal_dtype=internal)
    row = next(r for r in wrong.results if r.dtype == "float64")
    assert not wrong.ok and row.failed.verdict == Verdict.DIFFERENT
    assert "within float32's tolerance, but its RMS error" in row.failure and "another function" in row.failure

    def in_float32(x):
        return _rms_norm(1e-12)(x.float()).to(x.dtype)

    declared = judge(_rms_norm(1e-12), in_float32, inputs, only=["given"], internal_dtype="float32")
    assert declared.ok, declared.failure
    undeclared = judge(_rms_norm(1e-12), in_float32, inputs, only=["given"])
    assert not undeclared.ok and "declare internal_dtype" in undeclared.failure


def test_a_candidate_without_the_references_dropout_is_caught_in_train_mode():
    class WithDropout(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(6, 6)
            self.drop = nn.Dropout(0.5)

        def forward(self, x):
            return self.drop(self.lin(x))

    class NoDropout(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(6, 6)

        def forward(self, x):
            return self.lin(x)

    j = judge(WithDropout, NoDropout, lambda: [torch.randn(4, 6)])
    assert j.failing == ("other mode",)
    assert "random there (dropout)" in j.failure
    assert judge(WithDropout, WithDropout, lambda: [torch.randn(4, 6)]).ok


def test_a_view_that_needs_contiguous_inputs_is_caught():
    j = judge(lambda x: x.reshape(-1), lambda x: x.view(-1), lambda: [torch.randn(4, 6)])
    assert j.failing == ("non-contiguous",)
    assert "the candidate raises RuntimeError" in j.failure


def test_sizes_read_from_module_constants_are_varied():
    """A candidate keyed to the given sizes (a constant of its own) is wrong at others."""
    def hard_coded(x):
        return x.reshape(B, T * D).softmax(-1).reshape(B, T, D)

    j = judge(lambda x: x.flatten(1).softmax(-1).reshape(x.shape), hard_coded, get_inputs)
    assert not j.ok
    assert all(n.startswith(("size", "sizes", "batch")) for n in j.failing), j.failing


def test_the_reference_failing_on_the_given_inputs_is_a_usage_error():
    with pytest.raises(InputError, match="the reference raises on the given inputs"):
        judge(lambda x: x.view(7), lambda x: x, lambda: [torch.randn(4, 6)])


def test_fused_rmsnorm_linear_in_five_lines():
    class RMSNormLinear(nn.Module):
        def __init__(self, d, out):
            super().__init__()
            self.norm, self.proj = nn.RMSNorm(d, eps=1e-6), nn.Linear(d, out)

        def forward(self, x):
            return self.proj(self.norm(x))

    class FusedRMSNormLinear(nn.Module):
        def __init__(self, d, out, eps=1e-6):
            super().__init__()
            self.gain, self.eps = nn.Parameter(torch.ones(d)), eps
            self.weight, self.bias = nn.Parameter(torch.randn(out, d)), nn.Parameter(torch.zeros(out))

        def forward(self, x):
            return F.linear(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps), self.weight * self.gain,
                            self.bias)

    # the user's five lines
    from harness import Param, judge
    result = judge(RMSNormLinear, FusedRMSNormLinear, lambda: [torch.randn(4, 7, 32)], init_inputs=(32, 48),
                   param_map={"norm.weight": Param("gain"), "proj.weight": Param("weight"),
                              "proj.bias": Param("bias")})
    assert result.ok, result.failure

    class WrongEps(FusedRMSNormLinear):
        def __init__(self, d, out):
            super().__init__(d, out, eps=1e-5)

    wrong = judge(RMSNormLinear, WrongEps, lambda: [torch.randn(4, 7, 32)], init_inputs=(32, 48),
                  param_map={"norm.weight": Param("gain"), "proj.weight": Param("weight"), "proj.bias": Param("bias")})
    assert not wrong.ok and "scale x1e-3" in wrong.failing


def test_where_a_family_applies_its_own_check_runs_too():
    """An RMSNorm candidate that also fits the norm family: judged against the user's reference
    and by the norm family's cases; a wrong eps fails both."""
    class Reference(nn.Module):
        def __init__(self, d=48):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(d))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight

    class Candidate(Reference):
        eps = 1e-6

        def forward(self, x):
            return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)

    class WrongEps(Candidate):
        eps = 1e-3

    fields = dict(family="norm", build=lambda cfg: Candidate(cfg.d_model), call=lambda m, i: m(i["x"]),
                  param_map={"weight": Param("weight"), "bias": Zero()},
                  traits={"norm_formula": "rms", "eps": 1e-6, "std": "root mean square, no centring"})
    j = judge(Reference, Candidate, lambda: [torch.randn(3, 5, 48)], family=fields, only=("given",))
    assert j.ok, j.failure
    assert j.family and all(f.ok for f in j.family) and j.family_report is not None
    wrong = judge(Reference, WrongEps, lambda: [torch.randn(3, 5, 48)], only=("given",),
                  family={**fields, "build": lambda cfg: WrongEps(cfg.d_model)})
    assert not wrong.ok
    assert not any(f.ok for f in wrong.family if hasattr(f, "verdict") and f.dtype == "float64")


def test_sizes_given_as_the_factorys_arguments_are_varied():
    def draw(batch=4, width=10):
        return [torch.randn(batch, width)]

    def first_ten(x):
        return x[:, :10].sum(-1) if x.shape[-1] >= 10 else x.sum(-1) * float("nan")

    j = judge(lambda x: x.sum(-1), first_ten, draw)
    assert {"sizes halved", "size width=5"} <= set(j.failing)
    assert "given" not in j.failing


def test_a_result_kept_by_identity_is_caught_when_the_tensor_is_rewritten_in_place():
    class ByPointer(nn.Module):
        def __init__(self):
            super().__init__()
            self.memo = {}

        def forward(self, x):
            key = x.data_ptr()
            if key not in self.memo:
                self.memo[key] = torch.sigmoid(x).detach().clone()
            return self.memo[key]

    j = judge(lambda x: torch.sigmoid(x), ByPointer, lambda: [torch.rand(3, 4)], gradients="none")
    assert j.failing == ("calls between",)
    assert j.failure.startswith("hack: cached_by_identity: ")  # the probe names it
    between = next(r for r in j.results if not r.ok)
    assert "the first call's tensors rewritten in place" in between.failure


def test_the_other_mode_is_judged_where_the_reference_is_not_random():
    """BatchNorm: batch statistics in train mode, running ones in eval: a candidate that always
    uses the batch's is wrong in eval mode only."""
    class Norm(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = nn.BatchNorm1d(5)

        def forward(self, x):
            return self.bn(x)

    class BatchStats(Norm):
        def forward(self, x):
            return F.batch_norm(x, None, None, self.bn.weight, self.bn.bias, training=True, eps=self.bn.eps)

    assert judge(Norm, Norm, lambda: [torch.randn(8, 5)]).ok
    j = judge(Norm, BatchStats, lambda: [torch.randn(8, 5)])
    assert not j.ok and "other mode" in j.failing and "given" not in j.failing
    assert j.failure.startswith("wrong at other mode (float64)")


def test_a_torch_function_replaced_before_judge_is_a_hack_and_no_side_runs_the_replacement():
    calls = []

    def fake_gelu(x, approximate="none"):
        calls.append(1)
        return x  # what both sides would compute, were the reference to run it

    snap = snapshot_torch()  # before the candidate's import
    F.gelu = fake_gelu
    try:
        j = judge(lambda x: F.gelu(x), lambda x: F.gelu(x), lambda: [torch.randn(4, 8)], torch_snapshot=snap)
    finally:
        put_back(snap)
    assert F.gelu is not fake_gelu and calls == []  # every side ran torch's own gelu
    assert not j.ok and [h.kind for h in j.hacks] == [HackKind.REPLACED_FUNCTION]
    assert j.failure.startswith("hack: replaced_function: the candidate replaced torch.nn.functional.gelu by fake_gelu")
    assert all(r.ok for r in j.results)  # computed on torch's own, the function itself is right


def test_a_correct_candidate_has_no_hack_and_the_defences_can_be_turned_off():
    j = judge(nn.GELU, lambda x: 0.5 * x * (1 + torch.erf(x / math.sqrt(2))), lambda: [torch.randn(4, 8)])
    assert j.ok and j.hacks == [] and j.as_dict()["hacks"] == []
    assert judge(nn.GELU, nn.GELU, lambda: [torch.randn(4, 8)], hacks=False).ok
