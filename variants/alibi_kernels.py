"""An attention kernel with ALiBi built in, as MPT writes it, written in this project's own code.

Design followed: MosaicML's MPT (``llm-foundry``'s ``gen_slopes`` / ``build_alibi_bias``,
restated by Hugging Face's ``build_mpt_alibi_tensor``; Press et al., "Train Short, Test
Long", for ALiBi itself): the bias ``slopes * (j - (S - 1))`` per key index j, the slopes
drawn for the power of two >= H, ``1 / 2^(k * 8 / n)``, and, when H is not a power of two,
re-ordered odd-indexed first and cut to H (the same slopes as the paper's recipe); added to
``F.scaled_dot_product_attention`` as a float mask (the bias where a key may be attended,
-inf elsewhere), math backend, K/V heads through ``enable_gqa``. Deviations, on purpose: the
call's causal flag and window enter the float mask on the top-left diagonal
(``variants.kernels.attend_mask``); MPT's ``alibi_bias_max`` is its default, 8.

Variants:
- ``attention_kernel/mpt_alibi_sdpa``: the design above, declared ``alibi: "key indices"``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from harness import register_kernel
from variants.kernels import attend_mask

SOURCE = "torch"


def mpt_slopes(heads: int, alibi_bias_max: int = 8) -> torch.Tensor:
    """(H,) float64: MPT's ``gen_slopes``."""
    n = 2 ** math.ceil(math.log2(heads))
    m = torch.arange(1, n + 1, dtype=torch.float64) * (alibi_bias_max / n)
    slopes = 1.0 / torch.pow(2, m)
    if n != heads:
        slopes = torch.cat([slopes[1::2], slopes[::2]])[:heads]
    return slopes


def mpt_alibi_bias(heads: int, S: int, dtype: torch.dtype, device) -> torch.Tensor:
    """(1, H, 1, S): ``slopes * (j - (S - 1))``, MPT's ``build_alibi_bias`` (not causal: the
    softmax is blind to the constant per query row)."""
    distance = torch.arange(1 - S, 1, dtype=torch.float64).view(1, 1, 1, S)
    return (mpt_slopes(heads).view(1, heads, 1, 1) * distance).to(dtype=dtype, device=device)


def mpt_alibi_sdpa(q, k, v, mask, causal=False, window=None):
    """SDPA (math backend) with the ALiBi bias and the mask in one float ``attn_mask``."""
    bias = mpt_alibi_bias(q.shape[1], k.shape[2], q.dtype, q.device)              # (1, H, 1, S)
    keep = attend_mask(mask, causal, window, "top_left")                          # (B, 1, T, S)
    attn_mask = torch.where(keep, bias, float("-inf"))                            # (B, H, T, S)
    with sdpa_kernel([SDPBackend.MATH]):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, enable_gqa=True)


register_kernel(
    id="mpt_alibi_sdpa", source=SOURCE, fn=mpt_alibi_sdpa,
    summary="MPT: ALiBi over key indices (slopes * (j - (S-1))) in SDPA's float mask, math backend",
    traits={"causal": "top_left", "alibi": "key indices", "mask_method": "additive_bias",
            "fully_masked_row": "zeros", "fully_masked_grad": "none"},
)
