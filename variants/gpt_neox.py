"""GPT-NeoX attention (EleutherAI's gpt-neox, as HF's ``GPTNeoXAttention`` restates it),
written in this project's own code: the per-head interleaved fused QKV layout and partial
rotary embeddings.

Design followed: one ``query_key_value`` Linear(D, 3D) with bias whose output is viewed as
(B, T, H, 3 d_k): each head's q, k and v rows lie together (head h's q rows are
3 d_k h .. 3 d_k h + d_k of the weight), unlike a fused Linear whose first third is every
head's q (``fused_entries``); RoPE half-split (``rotate_half``) on the first ``rotary_ndims``
dims of each head only (``rotary_pct``), the rest passing through; scores over sqrt(d_k);
a ``dense`` output Linear with bias. Its canonical map reads q, k and v through
``PerHeadChunk``.

Deviations: ``rotary_pct`` is 0.5 here where Pythia uses 0.25 (32 of 128 dims): at this
harness's d_k = 12, 0.25 would rotate 3 dims, an odd count that RoPE cannot pair (HF's
``int(d_k * rotary_pct)`` then builds tables of 4); the attention is ``variants.llama``'s
eager path (a row without keys: zeros) where HF adds a finfo.min mask; positions come from
the call; self-attention only (one input), so the cases are the self-attention ones.
"""

from __future__ import annotations

import torch
from torch import nn

from harness import Param, PerHeadChunk, register
from variants.llama import eager, rotate_half

SOURCE = "torch"


class GPTNeoXAttention(nn.Module):
    def __init__(self, cfg, rotary_pct: float = 0.5):
        super().__init__()
        self.h, self.d, self.base = cfg.heads, cfg.d_k, cfg.rope_base
        self.rotary_ndims = int(self.d * rotary_pct)
        self.query_key_value = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.dense = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x, mask, positions):
        B, T, D = x.shape
        qkv = self.query_key_value(x).view(B, T, self.h, 3 * self.d).transpose(1, 2)   # (B, H, T, 3 d_k)
        q, k, v = qkv.split(self.d, dim=-1)                                           # (B, H, T, d_k) each
        r = self.rotary_ndims
        q = torch.cat([rotate_half(q[..., :r], positions, self.base), q[..., r:]], dim=-1)
        k = torch.cat([rotate_half(k[..., :r], positions, self.base), k[..., r:]], dim=-1)
        y = eager(q, k, v, mask[:, None])                                             # (B, H, T, d_k)
        return self.dense(y.transpose(1, 2).reshape(B, T, D))


def neox_map(cfg):
    """q, k, v: the per-head chunks of ``query_key_value`` (GPT-NeoX's layout); o: ``dense``."""
    out = {"o.weight": Param("dense.weight"), "o.bias": Param("dense.bias")}
    for i, c in enumerate("qkv"):
        out[f"{c}.weight"] = PerHeadChunk("query_key_value.weight", i, 3, heads=cfg.heads)
        out[f"{c}.bias"] = PerHeadChunk("query_key_value.bias", i, 3, heads=cfg.heads)
    return out


NEOX = {"sublayer": "attention", "rope": "half-split", "rope_fraction": 0.5, "fully_masked_row": "zeros",
        "qkv_layout": "fused per head (H, 3, d_k)", "bias": True, "scale": "divides the scores",
        "mask_convention": "bool True = may attend", "fill": float("-inf"),
        "cases": ("self", "causal", "causal_only", "random_mask", "fully_masked")}

register(
    id="gpt_neox", family="attention", source=SOURCE,
    summary="GPTNeoXAttention: query_key_value fused per head, partial rotary (half the dims), dense",
    build=lambda cfg: GPTNeoXAttention(cfg), call=lambda m, i: m(i["query"], i["mask"], i["positions"]),
    param_map=neox_map, traits=NEOX,
)
