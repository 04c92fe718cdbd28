"""Per-head attention: H separate ``Linear(D, d_k)`` for each of Q, K and V.

This is the formulation that seed 003_5751987c9fd6921d.txt argues is the same as one
``Linear(D, D)`` split into heads (``W_Q = [W_q^1 | ... | W_q^H]``). The write-up states
it; this variant computes it, so the harness can show the claim numerically: head h's
``Linear`` is rows h*d_k:(h+1)*d_k of the canonical ``q.weight``.
Scores / sqrt(d_k), ``mask == 0`` filled with -1e9 as in that write-up.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from harness import Concat, linear_entries, register

SEED = "003_5751987c9fd6921d.txt"


class PerHeadAttention(nn.Module):
    def __init__(self, d_model: int, heads: int, dropout: float = 0.0):
        super().__init__()
        self.d_k = d_model // heads
        self.q_heads = nn.ModuleList([nn.Linear(d_model, self.d_k) for _ in range(heads)])
        self.k_heads = nn.ModuleList([nn.Linear(d_model, self.d_k) for _ in range(heads)])
        self.v_heads = nn.ModuleList([nn.Linear(d_model, self.d_k) for _ in range(heads)])
        self.out = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, query, key, value, mask=None):
        outputs = []
        for w_q, w_k, w_v in zip(self.q_heads, self.k_heads, self.v_heads):
            q, k, v = w_q(query), w_k(key), w_v(value)                    # (B, L, d_k)
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)        # (B, T, S)
            if mask is not None:
                scores = scores.masked_fill(mask == 0, -1e9)
            outputs.append(self.dropout(F.softmax(scores, dim=-1)) @ v)   # (B, T, d_k)
        return self.out(torch.cat(outputs, dim=-1))                       # (B, T, D)


def _map(cfg):
    entries = linear_entries({"o": "out"})
    for proj in "qkv":
        for part in ("weight", "bias"):
            entries[f"{proj}.{part}"] = Concat(
                [f"{proj}_heads.{h}.{part}" for h in range(cfg.heads)]
            )
    return entries


register(
    id="per_head", family="attention", source=SEED,
    summary="H separate Linear(D, d_k) per projection",
    build=lambda cfg: PerHeadAttention(cfg.d_model, cfg.heads, cfg.dropout),
    call=lambda m, i: m(i["query"], i["key"], i["value"], i["mask"]),
    param_map=_map,
    traits={"sublayer": "attention", "qkv_layout": "per-head Linear(D, d_k)", "bias": True,
            "scale": "scores / sqrt(d_k)", "mask_convention": "True = keep", "fill": -1e9,
            "fully_masked_row": "mean of V", "dropout_sites": ("attention weights (per head)",)},
)
