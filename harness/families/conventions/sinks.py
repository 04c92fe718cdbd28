"""Attention sinks (gpt-oss): one learned logit per head joins every query row's softmax
denominator and takes no probability of its own, so a row may put less than all of its
weight on the keys. Declared ``sinks="per head"``, the module has the canonical parameter
``sinks`` (H,); ``none`` (the default): no sink.

    p_j = exp(s_j) / (sum_k exp(s_k) + exp(sink_h))     over the keys j the mask allows

The oracle also knows two readings a reviewer names (``explain``, ``diff``), never
declared: the sink's term added to every key's numerator too, and head 0's sink used by
every head."""

from __future__ import annotations

from typing import Any

import torch

from harness.base.errors import SpecError
from harness.families.conventions.core import SOFTMAX, Context, Convention
from harness.families.trait_spec import TraitSpec

PER_HEAD = "per head"
VALUES = ("none", PER_HEAD)
IN_NUMERATOR = "per head, in every numerator too"   # mistakes' readings: the oracle builds them
SHARED = "head 0's for every head"


def with_sinks(value: Any, s: torch.Tensor, ctx: Context) -> torch.Tensor | None:
    """The probabilities over the masked scores ``s`` (B, H, T, S) with the sink in the
    denominator: a softmax over the keys and the sink's logit, the sink's column dropped."""
    if value == "none":
        return None
    if value not in (PER_HEAD, IN_NUMERATOR, SHARED):
        raise SpecError(f"no oracle for sinks={value!r}; known: {list(VALUES)}")
    sinks = ctx.param("sinks", "sinks", value)                       # (H,)
    H = s.shape[1]
    sink = (sinks[:1].expand(H) if value == SHARED else sinks).to(s.dtype).view(1, H, 1, 1)
    logits = torch.cat([s, sink.expand(*s.shape[:-1], 1)], dim=-1)   # (B, H, T, S + 1)
    top = logits.max(-1, keepdim=True).values.detach()
    e = torch.exp(logits - top)
    total = e.sum(-1, keepdim=True)
    if value == IN_NUMERATOR:
        return (e[..., :-1] + e[..., -1:]) / total
    return e[..., :-1] / total


def params(value: Any, cfg: Any) -> dict:
    """``sinks`` (H,) for a sink per head (and the mistakes' readings of it)."""
    return {"sinks": ((cfg.heads,), "bias")} if value != "none" else {}


def read_module(module: torch.nn.Module) -> str | None:
    """``per head`` where a library module keeps a 1-D parameter ``sinks`` (gpt-oss)."""
    sinks = getattr(module, "sinks", None)
    return PER_HEAD if isinstance(sinks, torch.Tensor) and sinks.dim() == 1 else None


def _reads(value: str):
    return lambda traits, inputs: {**traits, "sinks": value} if traits.get("sinks") == PER_HEAD else None


SINKS = Convention(
    trait="sinks",
    specs={"attention": TraitSpec("a learned logit per head in every row's softmax denominator, taking no "
                                  "probability of its own (gpt-oss): 'per head' (the canonical parameter "
                                  "'sinks', (H,)) or 'none'", VALUES, default="none")},
    step=SOFTMAX,
    oracle=with_sinks,
    params=params,
    mistakes={"attention": (("the sink missing from the denominator", _reads("none")),
                            ("the sink added to every numerator too", _reads(IN_NUMERATOR)),
                            ("one sink for every head, not one per head", _reads(SHARED)))},
    probes=("none",),
    read_module=read_module,
)
