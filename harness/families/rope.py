"""Rotary position embeddings as the oracles define them (``harness.families.oracles``)."""

from __future__ import annotations

import math

import torch

from harness.base.errors import SpecError
from harness.families import reach
from harness.families.rope_scaling import RopeScaling, frequencies

Tensor = torch.Tensor


def _unknown(trait: str, value, known) -> SpecError:
    return SpecError(f"no oracle for {trait}={value!r}; known: {list(known)}")


ROPE_LAYOUTS = ("none", "half-split", "interleaved")


def rope(x: Tensor, positions: Tensor, layout: str, fraction: float = 1.0, base: float = 10000.0,
         scaling: RopeScaling | None = None) -> Tensor:
    """Rotary position embedding of heads ``x`` (B, H, L, d) at ``positions`` (B, L).

    The first r = 2 * floor(d * fraction / 2) dims of each head rotate (GPT-NeoX's partial
    rotary: the rest pass through); pair i turns by position * base^(-2i / r). ``half-split``
    pairs dim i with dim i + r/2 (HF's ``rotate_half``); ``interleaved`` pairs dims 2i and
    2i + 1 (Meta's reference code, complex multiplication). ``none``: x unchanged. Below
    float64 the angles are float32's (a careful implementation's tables, not the dtype's).
    ``scaling``: the inverse frequencies and the factor on cos and sin of a RoPE scaling
    (``harness.families.rope_scaling``: linear, dynamic NTK, YaRN, llama3, LongRoPE)."""
    if layout == "none":
        if scaling is not None and not scaling.is_default and reach.active():
            reach.note(reach.Reach("rope_scaling", False, 0, math.inf, "rope is 'none': no rotation to scale"))
        return x
    if layout not in ROPE_LAYOUTS:
        raise _unknown("rope", layout, ROPE_LAYOUTS)
    r = int(x.shape[-1] * fraction) // 2 * 2
    if r == 0:
        return x
    # the angles in float64 for the spec; below it in float32 whatever the dtype, as a careful
    # implementation (HF's rotary embedding) computes its tables: the precision baseline
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    if scaling is None or scaling.is_default:
        inv, factor = base ** (-torch.arange(0, r, 2, dtype=work) / r), 1.0        # (r/2,)
    else:
        inv, factor = frequencies(scaling, base, r, positions, work)
    angle = positions.to(work)[:, None, :, None] * inv                           # (B, 1, L, r/2)
    cos, sin = (angle.cos() * factor).to(x.dtype), (angle.sin() * factor).to(x.dtype)
    turn, rest = x[..., :r], x[..., r:]
    if layout == "half-split":
        a, b = turn[..., : r // 2], turn[..., r // 2:]
        turned = torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)
    else:
        a, b = turn[..., 0::2], turn[..., 1::2]
        turned = torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)
    return torch.cat([turned, rest], dim=-1)
