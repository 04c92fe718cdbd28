"""Deliberately wrong attention kernels: each makes one mistake real kernels have made and
declares the traits of a correct one, so the attention_kernel family's check must catch it.
Loaded inside ``harness.registry.scratch()`` by tests/test_kernels.py.

``WRONG`` maps each id to (the case that shows it, the mistake); ``CONTROLS`` must stay
equivalent: the blocked kernel with another block size and taking only a mask and its
block, the eager kernel in the BSHD layout, the eager kernel fed key lengths instead of a
mask, and the eager kernel over rows packed with cumulative lengths (flash-attention's
varlen form), each row alone, which is the bottom-right diagonal aligned to the last real
key, and the eager kernel over one packed QKV tensor (qkvpacked) and over q beside a packed
KV tensor (kvpacked).
"""

import math

import torch

from harness import register_kernel
from variants.kernels import attend_mask, blocked, eager, repeat_kv

TRAITS = {"causal": "top_left", "mask_method": "bool_fill_-inf"}  # what eager declares


def window_off_by_one(q, k, v, mask, causal=False, window=None, softcap=0.0):
    """Reads (left, right) as keys diag-left-1 .. diag+right: HF's sliding_window w taken as
    left = w instead of w - 1."""
    return eager(q, k, v, mask, causal, None if window is None else (window[0] + 1, window[1]), softcap)


def causal_swapped(q, k, v, mask, causal=False, window=None, softcap=0.0):
    """Declares top-left, aligns bottom-right (flash-attention's convention under SDPA's name)."""
    return eager(q, k, v, mask, causal, window, softcap, align="bottom_right")


def softcap_dropped(q, k, v, mask, causal=False, window=None, softcap=0.0):
    """Takes the softcap and never applies it."""
    return eager(q, k, v, mask, causal, window, 0.0)


def heads_tiled(q, k, v, mask, causal=False, window=None, softcap=0.0):
    """K/V heads tiled (h % H_kv: ``repeat``) where they are grouped (h // G: ``repeat_interleave``)."""
    G = q.shape[1] // k.shape[1]
    return eager(q, k.repeat(1, G, 1, 1), v.repeat(1, G, 1, 1), mask, causal, window, softcap)


def no_rescale(q, k, v, mask, causal=False, window=None, softcap=0.0, block=64):
    """An online softmax that forgets to rescale what earlier key blocks accumulated when the
    running max grows: right while the keys fit in one block, wrong beyond."""
    k, v = repeat_kv(k, q.shape[1]), repeat_kv(v, q.shape[1])
    keep = attend_mask(mask, causal, window, "top_left")
    s_all = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if softcap:
        s_all = softcap * torch.tanh(s_all / softcap)
    s_all = s_all.masked_fill(~keep, float("-inf"))
    m = torch.full_like(s_all[..., :1], float("-inf"))
    l, acc = torch.zeros_like(m), torch.zeros_like(q[..., :1]).expand(*q.shape[:-1], v.shape[-1])  # noqa: E741
    for s0 in range(0, k.shape[2], block):
        s = s_all[..., s0:s0 + block]
        m = torch.maximum(m, s.detach().amax(-1, keepdim=True))
        shift = torch.where(torch.isinf(m), 0.0, m)
        p = torch.exp(s - shift)
        # The mistake: l and acc are not multiplied by exp(m_old - m) when the max grows.
        l = l + p.sum(-1, keepdim=True)                                # noqa: E741
        acc = acc + p @ v[:, :, s0:s0 + block]
    return acc / torch.where(l > 0, l, 1.0)


def no_max_subtraction(q, k, v, mask):
    """A softmax written as exp(s) / sum exp(s), no max subtracted first: right while the
    logits are small, inf / inf beyond exp's range (88 in float32, 11 in float16)."""
    k, v = repeat_kv(k, q.shape[1]), repeat_kv(v, q.shape[1])
    e = torch.exp(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~mask, 0.0)
    return e / e.sum(-1, keepdim=True) @ v


def block_drops_last_key(q, k, v, mask, block=64):
    """A blocked kernel taking only a mask whose key slices are k[j : j + block - 1]: the last
    key of each block is never seen; right while every key sits in the first block's first
    block - 1."""
    k, v = repeat_kv(k, q.shape[1]), repeat_kv(v, q.shape[1])
    kept = [slice(j, j + block - 1) for j in range(0, k.shape[2], block)]
    k, v = torch.cat([k[:, :, s] for s in kept], 2), torch.cat([v[:, :, s] for s in kept], 2)
    mask = torch.cat([mask[..., s] for s in kept], -1)
    return eager(q, k, v, mask)


def blocked_mask_only(q, k, v, mask, block=64):
    """The blocked kernel (online softmax across key blocks) called with a mask and its block
    alone: only the cases without a causal flag, window or softcap."""
    return blocked(q, k, v, mask, block=block)


def other_block(q, k, v, mask, causal=False, window=None, softcap=0.0):
    """The blocked kernel with 16-wide blocks whatever the config says."""
    return blocked(q, k, v, mask, causal, window, softcap, block=16)


def eager_bshd(q, k, v, mask, causal=False, window=None, softcap=0.0):
    """The eager kernel over (B, L, H, d) heads."""
    t = lambda x: x.transpose(1, 2)  # noqa: E731
    return t(eager(t(q), t(k), t(v), mask, causal, window, softcap))


def eager_lengths(q, k, v, lengths, causal=False, window=None, softcap=0.0):
    """The eager kernel fed key lengths (right padding) instead of a mask."""
    B, _, T, _ = q.shape
    keys = torch.arange(k.shape[2], device=q.device)
    mask = (keys[None, :] < lengths[:, None])[:, None, None, :].expand(B, 1, T, k.shape[2])
    return eager(q, k, v, mask, causal, window, softcap)


def eager_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=False, window=None, softcap=0.0):
    """The eager kernel per packed row (flash-attention's varlen form): each row alone, no
    padding, its causal diagonal bottom-right: the last query faces the row's last key."""
    outs = []
    for b in range(len(cu_q) - 1):
        qb, kb, vb = (x[lo:hi].transpose(0, 1)[None] for x, lo, hi in (   # (1, H, L, d)
            (q, cu_q[b], cu_q[b + 1]), (k, cu_k[b], cu_k[b + 1]), (v, cu_k[b], cu_k[b + 1])))
        mask = torch.ones(1, 1, qb.shape[2], kb.shape[2], dtype=torch.bool)
        outs.append(eager(qb, kb, vb, mask, causal, window, softcap, align="bottom_right")[0].transpose(0, 1))
    return torch.cat(outs)                                             # (B*T, H, d)


def eager_qkvpacked(qkv, mask, causal=False, window=None, softcap=0.0):
    """The eager kernel over one packed tensor (flash-attention's qkvpacked form):
    qkv (B, S, 3, H, d) -> (B, S, H, d)."""
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))       # (B, H, S, d)
    return eager(q, k, v, mask, causal, window, softcap).transpose(1, 2)


def eager_kvpacked(q, kv, mask, causal=False, window=None, softcap=0.0):
    """The eager kernel over q (B, T, H, d) and packed kv (B, S, 2, H_kv, d) (flash-attention's
    kvpacked form) -> (B, T, H, d)."""
    k, v = (kv[:, :, i].transpose(1, 2) for i in range(2))            # (B, H_kv, S, d)
    return eager(q.transpose(1, 2), k, v, mask, causal, window, softcap).transpose(1, 2)


ROWS = {"fully_masked_row": "zeros", "fully_masked_grad": "none"}
WRONG = {
    "wrong_window_off_by_one": ("window", "window left count read as w, not w - 1"),
    "wrong_causal_swapped": ("causal_cross", "bottom-right diagonal declared top-left"),
    "wrong_softcap_dropped": ("softcap", "softcap ignored"),
    "wrong_heads_tiled": ("gqa", "K/V heads tiled instead of grouped"),
    "wrong_no_rescale": ("long", "online softmax without rescaling across key blocks"),
    "wrong_no_max_subtraction": ("self@large", "softmax without its max subtracted"),
    "wrong_block_drops_last_key": ("cross@long", "a mask-only blocked kernel drops each block's last key"),
}
CONTROLS = ("control_block16", "control_blocked_mask_only", "control_bshd", "control_lengths",
            "control_varlen_bottom_right", "control_qkvpacked", "control_kvpacked")

register_kernel(id="wrong_window_off_by_one", fn=window_off_by_one, traits=TRAITS)
register_kernel(id="wrong_causal_swapped", fn=causal_swapped, traits=TRAITS)
register_kernel(id="wrong_softcap_dropped", fn=softcap_dropped, traits=TRAITS)
register_kernel(id="wrong_heads_tiled", fn=heads_tiled, traits=TRAITS)
register_kernel(id="wrong_no_rescale", fn=no_rescale, traits={**TRAITS, **ROWS})
register_kernel(id="wrong_no_max_subtraction", fn=no_max_subtraction, traits=TRAITS)
register_kernel(id="wrong_block_drops_last_key", fn=block_drops_last_key, traits=TRAITS)
register_kernel(id="control_blocked_mask_only", fn=blocked_mask_only, traits={**TRAITS, **ROWS})
register_kernel(id="control_block16", fn=other_block, traits={**TRAITS, **ROWS})
register_kernel(id="control_bshd", fn=eager_bshd, layout="BSHD", traits=TRAITS)
register_kernel(id="control_lengths", fn=eager_lengths, mask="lengths", traits=TRAITS)
register_kernel(id="control_varlen_bottom_right", fn=eager_varlen, layout="varlen",
                traits={**TRAITS, "causal": "bottom_right"})
register_kernel(id="control_qkvpacked", fn=eager_qkvpacked, layout="qkvpacked", traits=TRAITS)
register_kernel(id="control_kvpacked", fn=eager_kvpacked, layout="kvpacked", traits=TRAITS)
