"""The mechanisms that catch regime mistakes, CPU-side and fast: the kernel-path recorder leaves flex_attention
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


def test_the_calls_before_the_checked_one_change_every_size_then_the_seed():
    from harness.base.config import Config
    from harness.check.runs import RunCache

    cfg = Config()
    shorter, reseeded = RunCache(cfg).warmups()
    assert (shorter.batch, shorter.tgt_len, shorter.src_len) < (cfg.batch, cfg.tgt_len, cfg.src_len)
    assert shorter.tgt_len < cfg.tgt_len and shorter.src_len < cfg.src_len and shorter.batch < cfg.batch
    assert reseeded.replace(seed=cfg.seed) == cfg and reseeded.seed != cfg.seed


def test_a_module_that_keeps_state_from_its_first_call_is_caught():
    """A table cached at the first call's length: a fresh build passes its spec alone; the
    call sequence (a shorter call first) contradicts it, naming the sequence."""
    import math

    from torch import nn

    from harness import register
    from harness.base.config import CONFIG_MATRIX
    from harness.check.api import check_all
    from harness.registry import scratch

    class CachedPE(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.d, self.pe = d, None

        def forward(self, x):
            if self.pe is None:
                pos = torch.arange(x.size(1), dtype=torch.float64)[:, None]
                div = torch.exp(torch.arange(0, self.d, 2, dtype=torch.float64) * (-math.log(10000.0) / self.d))
                self.pe = torch.zeros(x.size(1), self.d, dtype=torch.float64)
                self.pe[:, 0::2], self.pe[:, 1::2] = torch.sin(pos * div), torch.cos(pos * div)
            return x + self.pe[: x.size(1)].to(x.dtype)

    with scratch():
        register(id="cached_pe", family="positional_encoding", source="tests", summary="PE cached at first length",
                 build=lambda cfg: CachedPE(cfg.d_model), call=lambda m, i: m(i["x"]),
                 traits={"pe_layout": "interleaved sin/cos", "pe_frequencies": "10000^(-2i/D)"})
        report = check_all(["positional_encoding"], {"default": CONFIG_MATRIX["default"]}, "cpu", [],
                           variants=["positional_encoding/cached_pe"], extras=False)
    f64 = [s for s in report.specs if s.dtype == "float64"]
    assert f64 and all(not s.ok and "called first on B=2 T=5 S=3" in s.note for s in f64), [s.note for s in f64]
    assert all(not s.ok for s in report.specs)  # float32 inherits the float64 contradiction


def test_half_precision_can_fail_but_only_beyond_both_bounds():
    """bfloat16: "different" needs an output error beyond assert_close's tolerance at the
    tensor's scale AND 10x the baseline's; either alone stays "less precise"."""
    from harness.check.spec import _lower_check

    o = torch.ones(400, dtype=torch.float64)  # 400 elements: the RMS ratio needs no size allowance
    base = o + 0.01  # the baseline's error: 0.01 (assert_close's tolerance at scale 1: ~0.016)

    def verdict(err, name="output"):
        return _lower_check(name, o + err, o, [(base, o)], torch.bfloat16, factor=2.0, scale=0.0).verdict

    assert verdict(0.5) == "different"          # 50x the baseline, beyond the tolerance
    assert verdict(0.05) == "less precise"      # beyond the tolerance, 5x the baseline
    assert verdict(0.5, "grad:x") == "less precise"  # gradients stay lenient
