"""Attention sinks as gpt-oss designs them, written in this project's own code.

Design followed: OpenAI's gpt-oss (``gpt_oss/torch/model.py``, restated by Hugging Face's
``GptOssAttention`` / ``eager_attention_forward``): q/k/v/o projections with biases, RoPE
half-split on q and k, grouped-query attention (K/V heads repeated with
``repeat_interleave``), and one learned logit per head, ``sinks`` (H,), concatenated to every
query row's scores before the softmax and dropped after it: the sink joins the denominator
and takes no probability of its own, so a row may put less than all of its weight on the keys.
Deviations, on purpose: the call's bool mask is filled with -inf where HF adds finfo.min (a
row without keys: the sink takes all of it, zeros, declared); positions come from the call;
no sliding window (gpt-oss alternates windowed and full layers; this is a full one).

Variants:
- ``attention/gpt_oss_sinks``: the design above, declared ``sinks: "per head"`` (its
  parameter ``sinks`` is the family's canonical one).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from harness import Param, register
from variants.llama import LLAMA, attention_map, call, rotate_half

SOURCE = "torch"


class SinkAttention(nn.Module):
    """q/k/v/o Linears with biases, RoPE half-split, K/V heads repeated per group, the
    softmax over the scores and the head's sink (``probabilities``)."""

    def __init__(self, cfg):
        super().__init__()
        self.h, self.h_kv, self.d, self.base = cfg.heads, cfg.n_kv_heads, cfg.d_k, cfg.rope_base
        self.q_proj = nn.Linear(cfg.d_model, cfg.heads * cfg.d_k)
        self.k_proj = nn.Linear(cfg.d_model, self.h_kv * cfg.d_k)
        self.v_proj = nn.Linear(cfg.d_model, self.h_kv * cfg.d_k)
        self.o_proj = nn.Linear(cfg.heads * cfg.d_k, cfg.d_model)
        self.sinks = nn.Parameter(torch.zeros(cfg.heads))

    def forward(self, query, key, value, mask, positions, key_positions):
        B, T, _ = query.shape
        S = key.shape[1]
        q = self.q_proj(query).view(B, T, self.h, self.d).transpose(1, 2)          # (B, H, T, d)
        k = self.k_proj(key).view(B, S, self.h_kv, self.d).transpose(1, 2)         # (B, H_kv, S, d)
        v = self.v_proj(value).view(B, S, self.h_kv, self.d).transpose(1, 2)
        q, k = rotate_half(q, positions, self.base), rotate_half(k, key_positions, self.base)
        group = self.h // self.h_kv
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        s = q @ k.transpose(-2, -1) / math.sqrt(self.d)                           # (B, H, T, S)
        p = self.probabilities(s.masked_fill(~mask[:, None], float("-inf")))
        return self.o_proj((p @ v).transpose(1, 2).reshape(B, T, self.h * self.d))

    def probabilities(self, s: torch.Tensor) -> torch.Tensor:
        """gpt-oss: the sink's logit as one more column, the row's max subtracted, softmax, the column dropped."""
        sink = self.sinks.to(s.dtype).view(1, -1, 1, 1).expand(*s.shape[:-1], 1)
        combined = torch.cat([s, sink], dim=-1)
        combined = combined - combined.max(-1, keepdim=True).values
        return combined.softmax(-1)[..., :-1]


def sink_map(cfg):
    """The q/k/v/o projections with their biases, and the canonical ``sinks``."""
    return {**attention_map(bias=True)(cfg), "sinks": Param("sinks")}


GPT_OSS = {**LLAMA, "bias": True, "sinks": "per head"}

register(
    id="gpt_oss_sinks", family="attention", source=SOURCE,
    summary="gpt-oss: a learned sink logit per head in every softmax denominator; biases, RoPE half-split, GQA",
    build=lambda cfg: SinkAttention(cfg), call=call, param_map=sink_map, traits=GPT_OSS,
)
