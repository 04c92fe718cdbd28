"""A user's multi-query attention (Shazeer, "Fast Transformer Decoding: One Write-Head is All
You Need", 2019): every query head reads the one K/V head, no RoPE. The repository's
pyproject.toml names this file and pins the configs to one K/V head, so its own ``pytest``
checks it (docs/your-repository.md)."""

import math

import torch
from torch import nn

from harness import Chunk, Param, register


class MultiQueryAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.h, self.d = cfg.heads, cfg.d_k
        self.q = nn.Linear(cfg.d_model, cfg.heads * cfg.d_k)
        self.kv = nn.Linear(cfg.d_model, 2 * cfg.d_k)          # the one K/V head, K then V
        self.out = nn.Linear(cfg.heads * cfg.d_k, cfg.d_model)

    def forward(self, query, key, value, mask):
        """``mask`` (B, T, S) bool, True = may attend; a row with no key gives zeros."""
        B, T, _ = query.shape
        q = self.q(query).view(B, T, self.h, self.d)
        k = self.kv(key)[..., :self.d]                           # (B, S, d), shared by every head
        v = self.kv(value)[..., self.d:]
        s = torch.einsum("bthd,bsd->bhts", q, k) / math.sqrt(self.d)
        keep = mask[:, None]
        s = s.masked_fill(~keep, float("-inf"))
        dead = ~keep.any(-1, keepdim=True)
        p = s.masked_fill(dead, 0.0).softmax(-1).masked_fill(dead, 0.0)
        return self.out(torch.einsum("bhts,bsd->bthd", p, v).reshape(B, T, self.h * self.d))


register(
    id="my_mqa", family="attention", source="examples/user_repo/mqa.py",
    summary="multi-query attention: one K/V head in one fused projection, einsum scores",
    build=MultiQueryAttention,
    call=lambda m, i: m(i["query"], i["key"], i["value"], i["mask"]),
    param_map={"q.weight": Param("q.weight"), "q.bias": Param("q.bias"),
               "k.weight": Chunk("kv.weight", 0, 2), "v.weight": Chunk("kv.weight", 1, 2),
               "k.bias": Chunk("kv.bias", 0, 2), "v.bias": Chunk("kv.bias", 1, 2),
               "o.weight": Param("out.weight"), "o.bias": Param("out.bias")},
    traits={"sublayer": "attention", "gqa_grouping": "consecutive", "fully_masked_row": "zeros"},
    supports=lambda cfg: None if cfg.kv_heads == 1 else f"one K/V head, the config has {cfg.kv_heads}",
)
