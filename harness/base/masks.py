"""Mask conversions that adapters share. The canonical convention: bool, True = may attend.

Every helper names the polarity it returns, because a flipped mask is the classic
silent bug (nn.MultiheadAttention's bool attn_mask means True = NOT allowed).
"""

from __future__ import annotations

import torch


def masked(mask: torch.Tensor) -> torch.Tensor:
    """Canonical (True = may attend) -> True = masked out (000's and PyTorch's bool masks)."""
    return ~mask


def per_head(mask: torch.Tensor, heads: int) -> torch.Tensor:
    """(B, T, S) -> (B*H, T, S), the 3-D attn_mask layout nn.MultiheadAttention takes."""
    return mask.repeat_interleave(heads, dim=0)


def key_pad_to_attn(pad: torch.Tensor, tgt_len: int) -> torch.Tensor:
    """(B, S) True = real key -> (B, T, S) True = may attend."""
    return pad[:, None, :].expand(pad.shape[0], tgt_len, pad.shape[1])


def causal_and_pad(pad: torch.Tensor) -> torch.Tensor:
    """(B, T) True = real token -> (B, T, T) True = may attend: causal AND key is real."""
    t = pad.shape[-1]
    tril = torch.ones(t, t, dtype=torch.bool, device=pad.device).tril()
    return tril[None] & pad[:, None, :]


def additive_mask(mask: torch.Tensor, dtype: torch.dtype, model_dtype: torch.dtype | None = None) -> torch.Tensor:
    """Canonical (B, T, S) -> (B, 1, T, S) additive, in ``dtype``: 0 where it may attend,
    ``finfo.min`` where not (the float mask Hugging Face's attention modules add to their
    scores). The fill is ``finfo(dtype).min``, or with ``model_dtype`` (the dtype the module
    is meant to run in) the smaller of that and ``finfo(model_dtype).min``: the mask its model
    builds there. A module that softens in float32 turns float64's minimum into -inf (a row
    with no key then NaN): a float64 side effect, not the module's behaviour."""
    fill = torch.finfo(dtype).min
    if model_dtype is not None:
        fill = max(fill, torch.finfo(model_dtype).min)
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, fill)[:, None]


def one_key_at_most(mask: torch.Tensor) -> bool:
    """Whether every query row of a canonical mask (bool, True = may attend; keys on the
    last axis) keeps one key at most: its softmax weight is 1 (or the row has none) whatever
    the scores, so nothing done to the scores (a scale, a softcap) can show there."""
    return mask.dtype == torch.bool and bool((mask.sum(-1) <= 1).all())


def leave_out_padded(out: object, pad: torch.Tensor | None) -> object:
    """``out`` (B, T, ...) with the query positions ``pad`` (B, T, True = real token) marks as
    padding set to zero: what a module gives there is unspecified (real code leaves it
    anything), so it is left out of every comparison, and no gradient flows from it."""
    if pad is None or not isinstance(out, torch.Tensor) or not out.is_floating_point() or out.shape[:2] != pad.shape:
        return out
    keep = pad.to(out.device).reshape(*pad.shape, *[1] * (out.dim() - 2))
    return torch.where(keep, out, out.new_zeros(()))
