"""A library attention kernel over projected heads, checked by the attention_kernel family:
SDPA on (B, S, H, d) heads (flash-attention's layout), key padding as a bool mask
(True = may attend), K/V heads grouped (GQA). Run:

    python -m harness check --family attention_kernel --variants examples/my_kernel.py
"""

import torch.nn.functional as F

from harness import register_kernel


def my_sdpa(q, k, v, mask):  # q (B, T, H, d), k and v (B, S, H_kv, d), mask (B, 1, T, S)
    t = lambda x: x.transpose(1, 2)  # noqa: E731  (B, L, H, d) <-> (B, H, L, d)
    return t(F.scaled_dot_product_attention(t(q), t(k), t(v), attn_mask=mask, enable_gqa=True))


register_kernel(id="my_sdpa", fn=my_sdpa, layout="BSHD", mask="bool", source="my_kernel.py",
                traits={"fully_masked_row": "zeros", "fully_masked_grad": "none"})  # SDPA's safe softmax
