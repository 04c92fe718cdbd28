"""A user's LLaMA-style attention (RoPE half-split, grouped-query K/V) whose registration
leaves the ``rope`` trait out: the module is right, its declaration is not. ``check`` names
the trait value that fits (docs/advice.md):

    python -m harness check --family attention --variants examples/my_llama_attention.py --variant my_llama

Declaring ``"rope": "half-split"`` makes it equivalent to the project's ``llama``.
"""

import math

import torch
from torch import nn

from harness import Param, Zero, register


def rotate_half(x, positions, base):
    """RoPE as Hugging Face's rotate_half: (B, h, L, d) at ``positions`` (B, L)."""
    d = x.shape[-1]
    angle = positions.to(x.dtype)[:, None, :, None] / base ** (torch.arange(0, d, 2, dtype=x.dtype) / d)
    cos, sin = torch.cat([angle.cos()] * 2, -1), torch.cat([angle.sin()] * 2, -1)
    return x * cos + torch.cat([-x[..., d // 2:], x[..., :d // 2]], -1) * sin


class MyLlamaAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.h, self.h_kv, self.d, self.base = cfg.heads, cfg.kv_heads, cfg.d_k, cfg.rope_base
        self.q_proj = nn.Linear(cfg.d_model, cfg.heads * cfg.d_k, bias=False)
        self.k_proj = nn.Linear(cfg.d_model, cfg.kv_heads * cfg.d_k, bias=False)
        self.v_proj = nn.Linear(cfg.d_model, cfg.kv_heads * cfg.d_k, bias=False)
        self.o_proj = nn.Linear(cfg.heads * cfg.d_k, cfg.d_model, bias=False)

    def forward(self, query, key, value, mask, positions, key_positions):
        """``mask`` (B, T, S) bool, True = may attend; a row with no key gives zeros."""
        B, T, _ = query.shape
        q = self.q_proj(query).view(B, T, self.h, self.d).transpose(1, 2)       # (B, H, T, d)
        k = self.k_proj(key).view(B, -1, self.h_kv, self.d).transpose(1, 2)     # (B, H_kv, S, d)
        v = self.v_proj(value).view(B, -1, self.h_kv, self.d).transpose(1, 2)
        q, k = rotate_half(q, positions, self.base), rotate_half(k, key_positions, self.base)
        group = self.h // self.h_kv
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)    # (B, H, S, d)
        keep = mask[:, None]
        dead = ~keep.any(-1, keepdim=True)
        s = (q @ k.transpose(-2, -1) / math.sqrt(self.d)).masked_fill(~keep, float("-inf"))
        p = s.masked_fill(dead, 0.0).softmax(-1).masked_fill(dead, 0.0)
        return self.o_proj((p @ v).transpose(1, 2).reshape(B, T, self.h * self.d))


register(
    id="my_llama", family="attention", source="examples/my_llama_attention.py",
    summary="LLaMA-style attention, RoPE half-split and GQA; its registration leaves rope out",
    build=MyLlamaAttention,
    call=lambda m, i: m(i["query"], i["key"], i["value"], i["mask"], i["positions"], i["key_positions"]),
    param_map={**{f"{c}.weight": Param(f"{c}_proj.weight") for c in "qkvo"}, **{f"{c}.bias": Zero() for c in "qkvo"}},
    traits={"sublayer": "attention", "gqa_grouping": "consecutive", "fully_masked_row": "zeros"},
)
