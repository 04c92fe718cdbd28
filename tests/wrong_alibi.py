"""Deliberately wrong ALiBi (``harness.families.conventions.alibi``): each makes one mistake
and declares the traits of a correct one, so the check must catch it and name it; the
controls compute the same ALiBi another way and must stay equivalent. Registered inside
``harness.registry.scratch()`` by tests/test_alibi.py (``register_all``).

``WRONG_MODULES`` / ``WRONG_KERNELS``: id -> (class or function, the mistake ``check``
names). ``CONTROLS``: id -> family.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from harness import register, register_kernel
from variants.alibi_kernels import mpt_slopes
from variants.bloom_alibi import BLOOM, BloomAlibiAttention, bloom_slopes
from variants.kernels import attend_mask
from variants.llama import attention_map, call


def next_power_slopes(heads: int) -> torch.Tensor:
    """Wrong for H not a power of two: the recipe of the next power of two, cut to H."""
    n = 2 ** math.ceil(math.log2(heads))
    return torch.tensor([2.0 ** (-8 * k / n) for k in range(1, heads + 1)])


class NextPowerSlopes(BloomAlibiAttention):
    def alibi(self, attention_mask, dtype):
        real = attention_mask.long()
        arange = ((real.cumsum(-1) - 1) * real)[:, None, None, :]
        return (next_power_slopes(self.h).view(1, -1, 1, 1) * arange).to(dtype)


class SignFlipped(BloomAlibiAttention):
    def alibi(self, attention_mask, dtype):
        return -super().alibi(attention_mask, dtype)


class OverIndices(BloomAlibiAttention):
    """Wrong where real keys are declared: every key index counted, padded or not."""

    def alibi(self, attention_mask, dtype):
        S = attention_mask.shape[-1]
        return (bloom_slopes(self.h).view(1, -1, 1, 1) * torch.arange(S).view(1, 1, 1, S)).to(dtype)


class RelativeToQuery(BloomAlibiAttention):
    """Control: -m * (i - j) over the real keys, the query's own position kept (a constant
    per row, which the softmax is blind to)."""

    def forward(self, query, key, value, mask, positions=None, key_positions=None):
        B, T, _ = query.shape
        S = key.shape[1]
        q = self.q_proj(query).view(B, T, self.h, self.d).transpose(1, 2)
        k = self.k_proj(key).view(B, S, self.h, self.d).transpose(1, 2)
        v = self.v_proj(value).view(B, S, self.h, self.d).transpose(1, 2)
        real = mask.any(1).long()
        pos = real.cumsum(-1) - 1                                                 # (B, S) real keys before j
        query_pos = torch.arange(T)[None, :, None] + 100                          # any per-row constant
        distance = query_pos[:, None] - pos[:, None, None, :]                     # (B, 1, T, S)
        s = q @ k.transpose(-2, -1) / math.sqrt(self.d) - bloom_slopes(self.h).view(1, -1, 1, 1) * distance
        p = s.masked_fill(~mask[:, None], torch.finfo(s.dtype).min).softmax(-1)
        return self.o_proj((p @ v).transpose(1, 2).reshape(B, T, self.h * self.d))


def _with_slopes(slopes_of, sign: float = 1.0):
    def fn(q, k, v, mask, causal=False, window=None):
        H, S = q.shape[1], k.shape[2]
        j = torch.arange(S, dtype=torch.float64).view(1, 1, 1, S)
        bias = (sign * slopes_of(H).double().view(1, H, 1, 1) * (j - (S - 1))).to(q.dtype)
        attn_mask = torch.where(attend_mask(mask, causal, window, "top_left"), bias, float("-inf"))
        with sdpa_kernel([SDPBackend.MATH]):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, enable_gqa=True)
    return fn


def relative_kernel(q, k, v, mask, causal=False, window=None):
    """Control: slopes * (j - i) (the query's index kept), not slopes * (j - (S - 1))."""
    H, T, S = q.shape[1], q.shape[2], k.shape[2]
    rel = (torch.arange(S)[None, :] - torch.arange(T)[:, None]).to(torch.float64)   # (T, S)
    bias = (mpt_slopes(H).view(1, H, 1, 1) * rel).to(q.dtype)
    attn_mask = torch.where(attend_mask(mask, causal, window, "top_left"), bias, float("-inf"))
    with sdpa_kernel([SDPBackend.MATH]):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, enable_gqa=True)


WRONG_MODULES = {
    "wrong_alibi_next_power": (NextPowerSlopes, "ALiBi slopes of the next power of two's head count, cut to H"),
    "wrong_alibi_sign": (SignFlipped, "ALiBi's sign flipped: far keys favoured"),
    "wrong_alibi_indices": (OverIndices, "ALiBi positions over key indices, not real keys"),
}
WRONG_KERNELS = {
    "wrong_alibi_kernel_next_power": (_with_slopes(next_power_slopes),
                                      "ALiBi slopes of the next power of two's head count, cut to H"),
    "wrong_alibi_kernel_sign": (_with_slopes(mpt_slopes, -1.0), "ALiBi's sign flipped: far keys favoured"),
}
CONTROLS = {"control_alibi_relative": "attention", "control_alibi_kernel_relative": "attention_kernel"}
KERNEL_TRAITS = {"causal": "top_left", "alibi": "key indices", "mask_method": "additive_bias",
                 "fully_masked_row": "zeros", "fully_masked_grad": "none"}


def register_all() -> dict:
    """Register the wrong variants and the controls (inside ``scratch()``): id -> Variant."""
    made = {}
    for vid, (cls, _) in {**WRONG_MODULES, "control_alibi_relative": (RelativeToQuery, "")}.items():
        made[vid] = register(id=vid, family="attention", source="tests", call=call, param_map=attention_map(bias=True),
                             build=lambda cfg, cls=cls: cls(cfg), traits=BLOOM)
    for vid, (fn, _) in {**WRONG_KERNELS, "control_alibi_kernel_relative": (relative_kernel, "")}.items():
        made[vid] = register_kernel(id=vid, source="tests", fn=fn, traits=KERNEL_TRAITS)
    return made
