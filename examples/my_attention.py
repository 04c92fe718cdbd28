"""A user's own variant, outside the package. Run it with the project's variants:

    python -m harness check --family attention --variants examples/my_attention.py
    pytest --variants examples/my_attention.py
"""

import torch
from torch import nn

from harness import Chunk, Param, register


class EinsumAttention(nn.Module):
    """Q, K, V in one (3D, D) parameter; einsum scores; mask True = may attend."""

    def __init__(self, d_model: int, heads: int):
        super().__init__()
        self.heads = heads
        self.w_qkv = nn.Parameter(torch.randn(3 * d_model, d_model) / d_model**0.5)
        self.b_qkv = nn.Parameter(torch.zeros(3 * d_model))
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask):
        B, T, D = query.shape
        d_k = D // self.heads
        w_q, w_k, w_v = self.w_qkv.chunk(3)
        b_q, b_k, b_v = self.b_qkv.chunk(3)
        q = (query @ w_q.T + b_q).view(B, T, self.heads, d_k)         # (B, T, H, d_k)
        k = (key @ w_k.T + b_k).view(B, -1, self.heads, d_k)          # (B, S, H, d_k)
        v = (value @ w_v.T + b_v).view(B, -1, self.heads, d_k)
        scores = torch.einsum("bthd,bshd->bhts", q, k) / d_k**0.5     # (B, H, T, S)
        scores = scores.masked_fill(~mask[:, None], float("-inf"))
        out = torch.einsum("bhts,bshd->bthd", scores.softmax(-1), v)  # (B, T, H, d_k)
        return self.proj(out.reshape(B, T, D))


register(
    id="my_einsum",
    family="attention",
    source="examples/my_attention.py",
    summary="einsum attention, QKV in one parameter",
    build=lambda cfg: EinsumAttention(cfg.d_model, cfg.heads),
    call=lambda m, i: m(i["query"], i["key"], i["value"], i["mask"]),
    param_map={
        "q.weight": Chunk("w_qkv", 0, 3), "q.bias": Chunk("b_qkv", 0, 3),
        "k.weight": Chunk("w_qkv", 1, 3), "k.bias": Chunk("b_qkv", 1, 3),
        "v.weight": Chunk("w_qkv", 2, 3), "v.bias": Chunk("b_qkv", 2, 3),
        "o.weight": Param("proj.weight"), "o.bias": Param("proj.bias"),
    },
    traits={"sublayer": "attention", "fill": float("-inf"), "fully_masked_row": "NaN",
            "mask_convention": "True = may attend", "qkv_layout": "one (3D, D) parameter"},
)
