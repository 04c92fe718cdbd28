"""A call answers in the dtype it was called in: a norm that upcasts to float32 and forgets
to cast back returns float32 to a bfloat16 model. Its values are *more* precise than the
definition in bfloat16, so no error bound sees it; the run names the output's dtype and the
spec is "different" (found by benchmarks/mutation_score.py: Gemma's RMSNorm and 000's
positional encoding with their final ``.to(x.dtype)`` dropped survived every check)."""

from __future__ import annotations

import torch
from torch import nn

from harness import Param, Zero, register
from harness.base.config import CONFIG_MATRIX
from harness.check.api import check_all
from harness.registry import scratch


class _UpcastRMSNorm(nn.Module):
    """LLaMA's RMSNorm in float32, cast back to the input's dtype unless ``forget``."""

    def __init__(self, d: int, forget: bool):
        super().__init__()
        self.weight, self.forget = nn.Parameter(torch.ones(d)), forget

    def forward(self, x):
        h = x.to(torch.promote_types(x.dtype, torch.float32))
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.weight * (h if self.forget else h.to(x.dtype))


def _check(forget: bool):
    vid = "upcast_forgets_cast" if forget else "upcast_casts_back"
    with scratch():
        register(id=vid, family="norm", source="test", build=lambda cfg: _UpcastRMSNorm(cfg.d_model, forget),
                 call=lambda m, i: m(i["x"]), param_map={"weight": Param("weight"), "bias": Zero()},
                 traits={"norm_formula": "rms", "eps": 1e-6, "upcast": "float32, cast back before the gain"})
        report = check_all(["norm"], {"default": CONFIG_MATRIX["default"]}, "cpu", ["bfloat16"], extras=False,
                           variants=[f"norm/{vid}"])
    return [s for s in report.specs if s.variant == vid]


def test_an_output_left_in_float32_by_a_bfloat16_call_is_different_and_named():
    specs = _check(forget=True)
    bad = [s for s in specs if not s.ok]
    assert bad and all(s.dtype == "bfloat16" for s in bad), [(s.dtype, s.verdict) for s in specs]
    assert all("output returned in float32, not the call's bfloat16" in s.note for s in bad)


def test_the_same_norm_casting_back_stays_equivalent():
    specs = _check(forget=False)
    assert specs and all(s.ok for s in specs), [(s.dtype, s.verdict, s.note) for s in specs]
