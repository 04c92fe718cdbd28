"""Deliberately wrong kernels that run only in half precision: each declares the traits of a
correct one (``half_tiled``'s) and ``dtypes=("float16", "bfloat16")``, so ``check`` judges it
in its own dtype and must catch it and name its mistake. Loaded inside
``harness.registry.scratch()`` by tests/test_half_kernels.py.

``WRONG`` maps each id to (the case that shows it, the mistake); four misread conventions
and one numerics bug a careful implementation avoids (the softmax's denominator summed key by
key in the half dtype instead of float32).
"""

import math

import torch

from harness import register_kernel
from variants.half_kernels import HALF_DTYPES, HalfTiledAttention, half_tiled, refuse_wide
from variants.kernels import attend_mask, repeat_kv

TRAITS = {"causal": "top_left", "fully_masked_row": "zeros", "fully_masked_grad": "none"}


def half_causal_swapped(q, k, v, mask, causal=False, window=None, softcap=0.0, block=64):
    """The causal diagonal bottom-right where top-left is declared."""
    refuse_wide("half_causal_swapped", q, k, v)
    return HalfTiledAttention.apply(q, k, v, attend_mask(mask, causal, window, "bottom_right"), float(softcap), block)


def half_window_off_by_one(q, k, v, mask, causal=False, window=None, softcap=0.0, block=64):
    """HF's sliding_window w read as left = w instead of w - 1: one key more on the left."""
    return half_tiled(q, k, v, mask, causal, None if window is None else (window[0] + 1, window[1]), softcap, block)


def half_heads_tiled(q, k, v, mask, causal=False, window=None, softcap=0.0, block=64):
    """K/V heads tiled (query head h reads h % H_kv) where consecutive heads share one."""
    G = q.shape[1] // k.shape[1]
    return half_tiled(q, k.repeat(1, G, 1, 1), v.repeat(1, G, 1, 1), mask, causal, window, softcap, block)


def half_softcap_missing(q, k, v, mask, causal=False, window=None, softcap=0.0, block=64):
    """Takes the softcap and never applies it."""
    return half_tiled(q, k, v, mask, causal, window, 0.0, block)


def half_sum_in_half(q, k, v, mask, causal=False, window=None, softcap=0.0):
    """Scores and numerator as a careful kernel computes them, but the softmax's denominator
    accumulated key by key in the half dtype (each partial sum rounded)."""
    refuse_wide("half_sum_in_half", q, k, v)
    dtype = q.dtype
    k, v = repeat_kv(k, q.shape[1]), repeat_kv(v, q.shape[1])
    s = q.float() @ k.float().transpose(-2, -1) / math.sqrt(q.shape[-1])
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    s = s.masked_fill(~attend_mask(mask, causal, window, "top_left"), float("-inf"))
    m = s.amax(-1, keepdim=True)
    p = torch.exp(s - torch.where(torch.isinf(m), 0.0, m))
    denominator = torch.zeros_like(m, dtype=dtype)
    for j in range(p.shape[-1]):
        denominator = denominator + p[..., j:j + 1].to(dtype)           # rounded at every key
    out = (p.to(dtype).float() @ v.float()) / torch.where(denominator > 0, denominator.float(), 1.0)
    return out.to(dtype)


WRONG = {
    "half_causal_swapped": ("causal_cross", "the causal diagonal bottom-right, declared top-left"),
    "half_window_off_by_one": ("window", "one key more on the window's left"),
    "half_heads_tiled": ("gqa", "K/V heads tiled where consecutive query heads share one"),
    "half_softcap_missing": ("softcap", "the softcap never applied"),
    "half_sum_in_half": ("long", "the softmax's denominator summed in the half dtype"),
}

for _id, _fn in (("half_causal_swapped", half_causal_swapped), ("half_window_off_by_one", half_window_off_by_one),
                 ("half_heads_tiled", half_heads_tiled), ("half_softcap_missing", half_softcap_missing),
                 ("half_sum_in_half", half_sum_in_half)):
    register_kernel(id=_id, fn=_fn, source="tests", summary=WRONG[_id][1], traits=TRAITS, dtypes=HALF_DTYPES)
