"""Logit soft-capping (Gemma 2's ``attn_logit_softcapping``): scores s become c tanh(s / c)
after the scale and before the mask; 0: none. A kernel takes the cap as its ``softcap``
option (``as called``: every case passes the config's cap, the ``softcap`` case 2.0 where the
config sets none) or builds one in."""

from __future__ import annotations

import math
from typing import Any

import torch

from harness.families import reach
from harness.families.conventions.core import AS_CALLED, SCORES, Context, Convention, KernelOption, OptionCase, Regime
from harness.families.trait_spec import TraitSpec

ATTRS = ("attn_logit_softcapping", "logit_softcapping", "softcap")


def capped(value: Any, s: torch.Tensor, ctx: Context) -> torch.Tensor:
    cap = ctx.option("softcap", value)
    return cap * torch.tanh(s / cap) if cap else s


def bent_from(cap: float) -> float:
    """The smallest |s| that c tanh(s / c) moves by more than the float64 tolerance (bisection:
    the bend s - c tanh(s / c) grows with |s|, faster than the tolerance does)."""
    lo, hi = 0.0, cap
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if reach.bends(mid, cap * math.tanh(mid / cap)) else (mid, hi)
    return hi


SLOPE_WEIGHT = 1e-6


def reached(value: Any, s: torch.Tensor, ctx: Context) -> reach.Reach | None:
    """Whether the cap changes this call's softmax or its gradient by more than the float64
    tolerance, to first order: the bend b = s - c tanh(s / c) moves row probabilities p by
    p_j (b_j - sum_k p_k b_k), so a row is reached where sum_j p_j |b_j - sum_k p_k b_k|
    passes it (over the keys the call's mask allows); the slope 1 - tanh^2(s / c) scales the
    gradient of a score that carries weight (p (1 - p) > ``SLOPE_WEIGHT``). A cap far above
    every case's scores bends neither; one that bends only the scores of a saturated softmax
    changes nothing either."""
    cap = ctx.option("softcap", value)
    if not cap:
        return None
    s = s.detach()
    mask = ctx.inputs.get("mask")
    allowed = mask[:, None].expand_as(s) if isinstance(mask, torch.Tensor) and mask.dim() == 3 else None
    live = s if allowed is None else s.masked_fill(~allowed, -math.inf)
    p = torch.softmax(live, -1).nan_to_num(0.0)                        # a row without keys: no weight
    bend = s - cap * torch.tanh(s / cap)
    effect = (p * (bend - (p * bend).sum(-1, keepdim=True)).abs()).sum(-1)
    # the slope 1 - tanh^2(s / c) on the scores' gradient, where a key's score carries some
    slope = torch.tanh(s / cap) ** 2 * (p * (1 - p) > SLOPE_WEIGHT)
    finite = s[torch.isfinite(s)]
    top = float(finite.abs().max()) if finite.numel() else 0.0
    moved = max(float(effect.max()), float(slope.max())) if effect.numel() else 0.0
    return reach.Reach("softcap", moved > reach.FLOAT64_ATOL, top, bent_from(cap),
                       f"the cap {cap:g} changes no case's softmax or its gradient by more than the float64 "
                       f"tolerance (largest score |s| = {{amount}}; it bends one by that much from |s| = {{needed}})")


# each family's case whose inputs are scaled to reach the cap (scores grow as the scale's square)
REACH_CASES = {"attention": ("self", "causal_only", "causal"), "attention_kernel": ("softcap",)}


def reach_plan(value: Any, worst: reach.Reach, family: str) -> reach.ReachPlan | None:
    """The family's plain case at B = 1, its inputs scaled until the largest score would be
    twice the one the cap bends (from the largest seen): None where no score was seen."""
    if family not in REACH_CASES or not worst.amount > 0 or not math.isfinite(worst.needed):
        return None
    return reach.ReachPlan(REACH_CASES[family], {"batch": 1}, scale=math.sqrt(2 * worst.needed / worst.amount))


def read_module(module: torch.nn.Module) -> float | None:
    """The cap a library module keeps, or its config (Gemma 2's ``attn_logit_softcapping``)."""
    config = getattr(module, "config", None)
    for name in ATTRS:
        cap = getattr(module, name, getattr(config, name, None))
        if isinstance(cap, (int, float)) and not isinstance(cap, bool) and cap > 0:
            return float(cap)
    return None


def _ignored(traits: dict, inputs: Any) -> dict | None:
    called = inputs.get("softcap") if traits["softcap"] == AS_CALLED else traits["softcap"]
    return {**traits, "softcap": 0} if called else None


SOFTCAP = Convention(
    trait="softcap",
    specs={"attention": TraitSpec("scores s -> c tanh(s / c) before masking (Gemma 2's attn_logit_softcapping; "
                                  "0: none)", number=True, default=0.0),
           "attention_kernel": TraitSpec("cap in cap * tanh(s / cap) (0: none)", (AS_CALLED,), number=True,
                                         default=AS_CALLED)},
    step=SCORES,
    oracle=capped,
    # cross with the cap passed (2.0, or the config's): a kernel without the option is not run on it
    cases={"attention_kernel": (OptionCase("softcap", "cross",
                                           "logit softcap 2.0 (or the config's), right key padding"),)},
    # the cap the config sets, off the case's own: a kernel that fixes the cap passes that one
    regimes={"attention_kernel": (Regime("softcap", "cap5", "the config's softcap 5.0", {"softcap": 5.0}),)},
    mistakes={"attention_kernel": (("the softcap ignored", _ignored),)},
    probes=(0.0,),
    read_module=read_module,
    kernel_option=KernelOption("softcap", called=lambda cfg: cfg.softcap, exercised=lambda cfg: cfg.softcap or 2.0,
                               to_call=float, off=0.0),
    reached=reached,
    reach_plan=reach_plan,
)
