"""Issue 15's mechanisms, CPU-side and fast: the kernel-path recorder leaves flex_attention
(a higher-order op) and later calls working, the trace compares bool tensors, and a call
that changes an input in place is told and named."""

from __future__ import annotations

import warnings

import torch

from harness.check.runs import OpRecorder, changed_inputs, snapshot
from harness.families.catalog import get_family
from harness.trace.divergence import where_differs


def test_the_recorder_leaves_flex_attention_and_later_calls_working():
    import torch.nn.attention.flex_attention as flex

    q = torch.randn(1, 2, 4, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    double = lambda s, b, h, i, j: 2 * s  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        before = flex.flex_attention(q, q, q, score_mod=double)
        recorder = OpRecorder()
        with torch.no_grad(), recorder:
            recorded = flex.flex_attention(q, q, q, score_mod=double)
        after = flex.flex_attention(q, q, q, score_mod=double)
    assert recorder.ops and torch.allclose(recorded, before) and torch.allclose(after, before)
    assert flex._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG is False  # the switch is restored


def test_where_differs_compares_bool_masks():
    a = torch.tensor([[True, False, True]])
    w = where_differs(get_family("masks"), {}, "output", a, ~a, a64=None, b64=None, dtype=torch.float64)
    assert w is not None and w.mismatches == 3


def test_a_changed_input_is_named_with_its_aliases():
    x, pad = torch.randn(2, 3), torch.ones(2, 3, dtype=torch.bool)
    inputs = {"query": x, "key": x, "value": x, "pad": pad}
    snap = snapshot(inputs)
    assert changed_inputs(snap) == []
    pad[0, 1] = False
    x.mul_(0.5)
    changed = changed_inputs(snap)
    assert any("'query = key = value'" in c and "6 of 6" in c for c in changed), changed
    assert any("'pad'" in c and "1 of 6" in c for c in changed), changed
