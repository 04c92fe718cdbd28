"""ALiBi attention as BLOOM designs it, written in this project's own code.

Design followed: BigScience's BLOOM (Hugging Face's ``BloomAttention`` with
``build_alibi_tensor``; Press et al., "Train Short, Test Long", for ALiBi itself): q/k/v/o
projections with biases, no positional embedding; each head h adds ``m_h * pos(j)`` to its
scores ``q k^T / sqrt(d)``, pos(j) the number of real keys before key j
(``(attention_mask.cumsum(-1) - 1) * attention_mask``), the slopes m_h those of the
paper's reference code for any head count (the closest power of two n <= H: 2^(-8k/n),
then the odd-indexed slopes of 2n). Deviations, on purpose: q, k and v are three Linears
where BLOOM fuses them into one laid out per head; BLOOM's 2-D attention mask is read off the
call's (B, T, S) mask (a key is real when some query may attend it); masked scores are filled
with the dtype's finfo.min (BLOOM adds it: the same forward), so a row without keys is the
mean of V, declared.

Variants:
- ``attention/bloom_alibi``: the design above, declared ``alibi: "real keys"``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from harness import register
from variants.llama import attention_map, call

SOURCE = "torch"


def bloom_slopes(heads: int) -> torch.Tensor:
    """(H,) float32: BLOOM's ``_get_alibi_slopes`` (the paper's reference code)."""
    closest = 2 ** math.floor(math.log2(heads))
    base = 2 ** (-(2 ** -(math.log2(closest) - 3)))
    slopes = torch.pow(torch.tensor(base), torch.arange(1, closest + 1, dtype=torch.float32))
    if closest != heads:
        extra_base = 2 ** (-(2 ** -(math.log2(2 * closest) - 3)))
        remaining = min(closest, heads - closest)
        extra = torch.pow(torch.tensor(extra_base), torch.arange(1, 1 + 2 * remaining, 2, dtype=torch.float32))
        slopes = torch.cat([slopes, extra])
    return slopes


class BloomAlibiAttention(nn.Module):
    """q/k/v/o Linears with biases, the ALiBi bias over the real keys (``alibi``), softmax."""

    def __init__(self, cfg):
        super().__init__()
        self.h, self.d = cfg.heads, cfg.d_k
        self.q_proj = nn.Linear(cfg.d_model, cfg.heads * cfg.d_k)
        self.k_proj = nn.Linear(cfg.d_model, cfg.heads * cfg.d_k)
        self.v_proj = nn.Linear(cfg.d_model, cfg.heads * cfg.d_k)
        self.o_proj = nn.Linear(cfg.heads * cfg.d_k, cfg.d_model)

    def forward(self, query, key, value, mask, positions=None, key_positions=None):
        B, T, _ = query.shape
        S = key.shape[1]
        q = self.q_proj(query).view(B, T, self.h, self.d).transpose(1, 2)          # (B, H, T, d)
        k = self.k_proj(key).view(B, S, self.h, self.d).transpose(1, 2)            # (B, H, S, d)
        v = self.v_proj(value).view(B, S, self.h, self.d).transpose(1, 2)
        s = q @ k.transpose(-2, -1) / math.sqrt(self.d) + self.alibi(mask.any(1), q.dtype)  # (B, H, T, S)
        s = s.masked_fill(~mask[:, None], torch.finfo(s.dtype).min)
        p = s.softmax(-1)
        return self.o_proj((p @ v).transpose(1, 2).reshape(B, T, self.h * self.d))

    def alibi(self, attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """(B, H, 1, S): BLOOM's ``build_alibi_tensor`` on the (B, S) mask of real keys."""
        real = attention_mask.long()
        arange = ((real.cumsum(-1) - 1) * real)[:, None, None, :]                 # (B, 1, 1, S)
        return (bloom_slopes(self.h).to(attention_mask.device).view(1, -1, 1, 1) * arange).to(dtype)


BLOOM = {"sublayer": "attention", "alibi": "real keys", "fully_masked_row": "mean of V",
         "qkv_layout": "4 Linear", "bias": True, "scale": "divides the scores",
         "mask_convention": "bool True = may attend", "fill": "finfo.min"}

register(
    id="bloom_alibi", family="attention", source=SOURCE,
    summary="BLOOM: ALiBi over the real keys (slopes for any head count), biases, no positional embedding",
    build=lambda cfg: BloomAlibiAttention(cfg), call=call, param_map=attention_map(bias=True), traits=BLOOM,
)
