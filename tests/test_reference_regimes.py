"""The regimes ``harness.judge`` adds beyond the given inputs, each with a planted mistake it
must catch and a correct candidate computed another way that must pass: views into one
buffer (inputs at non-zero storage offsets, as ``qkv.unbind(0)`` gives), sizes grown x4
within a budget (capacities fixed above 1.5x the given sizes), inputs shifted by a large
mean (a one-pass variance), and a shape mismatch named as one."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from harness import judge
from harness.check.reference_inputs import GROWN_BUDGET, InputSource, regimes
from harness.check.reference_layouts import Layout
from harness.check.reference_runs import prepare


def pair_inputs():
    return [torch.randn(3, 5), torch.randn(3, 5)]


def test_views_are_slices_of_one_buffer_at_non_zero_offsets_holding_the_same_values():
    given = pair_inputs()
    views, leaves = prepare(given, torch.float32, "cpu", True, Layout.VIEWS)
    assert len({v.untyped_storage().data_ptr() for v in views}) == 1
    assert all(v.storage_offset() > 0 and v.is_contiguous() for v in views)
    assert all(torch.equal(v, g) for v, g in zip(views, given))
    (views[0] * 2 + views[1]).sum().backward()  # each view keeps its own gradient
    assert torch.equal(leaves["0"].grad, torch.full((3, 5), 2.0)) and torch.equal(leaves["1"].grad, torch.ones(3, 5))


def from_storage_start(t):
    """The tensor's strides read from its storage's first element, as a kernel given the
    storage's data_ptr does."""
    return torch.tensor([], dtype=t.dtype).set_(t.untyped_storage(), 0, t.shape, t.stride())


def test_reading_an_input_from_its_storages_start_is_caught_by_views_into_one_buffer():
    j = judge(lambda a, b: a - b, lambda a, b: a - from_storage_start(b), pair_inputs, gradients="none")
    assert j.failing == ("views into one buffer",), j.failure
    assert j.failure.startswith("wrong at views into one buffer (float64): output")
    ok = judge(lambda a, b: a - b, lambda a, b: torch.sub(a.contiguous(), b.clone()), pair_inputs)
    assert ok.ok and "views into one buffer" in ok.regimes and "grad:b" in ok.tensors, ok.failure


class Prefix(nn.Module):
    """A running sum over the rows."""

    def forward(self, x):
        return x.cumsum(0)


class PrefixTable(nn.Module):
    """The running sum through a lower-triangular table built for 20 rows (three times the given
    6): rows beyond the 20th are summed from zero."""

    def forward(self, x):
        n = min(x.shape[0], 20)
        table = torch.tril(torch.ones(n, n, dtype=x.dtype))
        head = table @ x[:n]
        return torch.cat([head, x[n:].cumsum(0)]) if x.shape[0] > n else head


def rows(tokens=6, width=4):
    return [torch.randn(tokens, width)]


def test_a_capacity_fixed_above_one_and_a_half_times_the_given_size_is_caught_at_sizes_x4():
    j = judge(Prefix, PrefixTable, rows)
    assert j.failing == ("sizes x4",), j.failure
    assert "sizes grown" in j.regimes  # x1.5 (9 rows) fits the table
    assert j.failure.startswith("wrong at sizes x4 (float64): output")


def test_sizes_are_grown_x2_or_not_at_all_where_x4_would_pass_the_budget():
    def wide(n=400):
        return [torch.randn(n, n)]

    j = judge(lambda x: x.exp(), lambda x: torch.exp(x), wide, only=["given", "size"], hacks=False)
    assert j.ok, j.failure
    assert "sizes x2" in j.regimes and "sizes x4" not in j.regimes  # 160,000 x 16 > budget >= 160,000 x 4
    why = dict(j.skipped)["sizes x4"]
    assert f"over the budget of {GROWN_BUDGET:,}" in why and why.endswith("sizes x2 tried instead")

    def wider(n=800):
        return [torch.randn(n, n)]

    j = judge(lambda x: x.exp(), lambda x: torch.exp(x), wider, only=["given", "size"], hacks=False)
    assert not {"sizes x4", "sizes x2"} & set(j.regimes) and "over the budget" in dict(j.skipped)["sizes x2"]


def one_pass(x):
    """LayerNorm's variance as the mean of squares less the squared mean, in x's dtype."""
    mean = torch.mean(x, dim=-1, keepdim=True)
    var = torch.mean(x.square(), dim=-1, keepdim=True) - mean.square()
    return (x - mean) / torch.sqrt(var + 1e-5)


def two_pass(x):
    var, mean = torch.var_mean(x, dim=-1, unbiased=False, keepdim=True)
    return (x - mean) * torch.rsqrt(var + 1e-5)


def activations():
    return [torch.randn(6, 24)]


def reference(x):
    return F.layer_norm(x, (24,))


def test_a_one_pass_variance_is_caught_at_an_offset_and_a_two_pass_one_passes():
    j = judge(reference, one_pass, activations)
    assert not j.ok and j.failure.startswith("wrong at offset +100 (float32): output: RMS error")
    assert {"offset +100", "offset +1000"} <= set(j.failing)
    assert set(j.failing) <= {"offset +100", "offset +1000"}, j.failing
    ok = judge(reference, two_pass, activations)
    assert ok.ok, ok.failure


def test_a_function_the_offset_moves_is_judged_there_as_scaled_inputs_are():
    """A linear layer and attention are not shift invariant: float32's rounding at a mean of
    1000 is amplified, the same in the reference; a softmax is, and is judged strictly."""
    class Affine(nn.Module):
        def __init__(self, n, m):
            super().__init__()
            self.weight, self.bias = nn.Parameter(torch.randn(m, n)), nn.Parameter(torch.randn(m))

        def forward(self, x):
            return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight.t()).reshape(*x.shape[:-1], -1)

    j = judge(nn.Linear, Affine, activations, init_inputs=[24, 8])
    assert j.ok, j.failure
    moved = next(r for r in j.results if r.regime.name == "offset +1000" and r.dtype == "float32")
    assert moved.note.startswith("the offset moves output (not shift invariant)"), moved.note

    def qkv():
        return [torch.randn(2, 7, 8) for _ in range(3)]

    def attention(q, k, v):
        return torch.softmax(q @ k.transpose(-1, -2) / 8 ** 0.5, -1) @ v

    j = judge(F.scaled_dot_product_attention, attention, qkv)
    assert j.ok, j.failure
    j = judge(lambda x: x.softmax(-1), lambda x: (x - x.logsumexp(-1, keepdim=True)).exp(), activations)
    assert j.ok, j.failure
    steady = next(r for r in j.results if r.regime.name == "offset +1000" and r.dtype == "float32")
    assert steady.note == ""  # shift invariant: judged strictly


def test_offsets_of_1000_are_left_out_where_a_half_dtype_is_judged():
    source = InputSource(activations)
    names = {r.name for r in regimes(source, half=True)[0]}
    assert "offset +100" in names and "offset +1000" not in names
    assert "offset +1000" in dict(regimes(source, half=True)[1])
    assert "offset +1000" in {r.name for r in regimes(source)[0]}


def test_an_output_of_another_shape_is_named_by_its_shapes():
    def tokens(batch=2, length=5):
        return [torch.randn(batch, length, 6)]

    j = judge(lambda x: x.reshape(-1, 6).softmax(-1), lambda x: x.softmax(-1), tokens)
    assert j.failure.startswith("wrong at given (float64): output: shape (2, 5, 6), the oracle's is (10, 6)")
