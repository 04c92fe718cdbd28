"""Logit soft-capping (Gemma 2's ``attn_logit_softcapping``): scores s become c tanh(s / c)
after the scale and before the mask; 0: none. A kernel takes the cap as its ``softcap``
option (``as called``: every case passes the config's cap, the ``softcap`` case 2.0 where the
config sets none) or builds one in."""

from __future__ import annotations

from typing import Any

import torch

from harness.families.conventions.core import AS_CALLED, SCORES, Context, Convention, KernelOption, OptionCase, Regime
from harness.families.trait_spec import TraitSpec

ATTRS = ("attn_logit_softcapping", "logit_softcapping", "softcap")


def capped(value: Any, s: torch.Tensor, ctx: Context) -> torch.Tensor:
    cap = ctx.option("softcap", value)
    return cap * torch.tanh(s / cap) if cap else s


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
)
