"""A user's GPT-2-style attention: weights stored as (in, out), as GPT-2's ``Conv1D`` does.

GPT-2 (and every model ported from TensorFlow with it) keeps a projection as
``Conv1D(nf, nx)``: a weight of shape (in, out) = (D, 3D) for the fused Q, K, V and
(D, D) for the output, applied as ``x @ W + b``. The family's canonical layout is
``nn.Linear``'s (out, in), so the map says ``Transposed(...)``: Q is the transpose of
columns 0:D of ``c_attn.weight``. Written here, no third-party package needed:

    python -m harness check --family attention --variants examples/conv1d_attention.py
    python -m harness map examples/conv1d_attention.py:Conv1DAttention --family attention

Masking as GPT-2 does it: ``torch.where(mask, scores, finfo.min)``, so a query row that
sees no key gets equal scores everywhere and becomes the mean of V (not NaN).
"""

import torch
from torch import nn

from harness import Chunk, Param, Transposed, register


class Conv1D(nn.Module):
    """GPT-2's Conv1D: a Linear whose weight is stored (in, out); ``x @ W + b``."""

    def __init__(self, nf: int, nx: int):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.02)  # (in, out)
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x, columns: slice = slice(None)):
        w, b = self.weight[:, columns], self.bias[columns]
        out = torch.addmm(b, x.reshape(-1, x.shape[-1]), w)   # (B*L, out)
        return out.view(*x.shape[:-1], -1)


class Conv1DAttention(nn.Module):
    """Fused Q, K, V in one Conv1D (D -> 3D); mask (B, T, S) bool, True = may attend."""

    def __init__(self, d_model: int, heads: int):
        super().__init__()
        self.heads = heads
        self.d_model = d_model
        self.c_attn = Conv1D(3 * d_model, d_model)
        self.c_proj = Conv1D(d_model, d_model)

    def forward(self, query, key, value, mask):
        B, T, D = query.shape
        d_k = D // self.heads
        if query is key and key is value:
            q, k, v = self.c_attn(query).split(D, dim=2)              # one matmul
        else:  # cross-attention: the columns of each projection, applied apart
            q = self.c_attn(query, slice(0, D))
            k = self.c_attn(key, slice(D, 2 * D))
            v = self.c_attn(value, slice(2 * D, 3 * D))
        heads = lambda x: x.view(B, -1, self.heads, d_k).transpose(1, 2)  # noqa: E731  (B, H, L, d_k)
        q, k, v = heads(q), heads(k), heads(v)
        scores = q @ k.transpose(-1, -2) / d_k**0.5                   # (B, H, T, S)
        scores = torch.where(mask[:, None], scores, torch.finfo(scores.dtype).min)
        out = scores.softmax(-1) @ v                                  # (B, H, T, d_k)
        return self.c_proj(out.transpose(1, 2).reshape(B, T, D))


register(
    id="conv1d_gpt2",
    family="attention",
    source="examples/conv1d_attention.py",
    summary="GPT-2 Conv1D layout: (in, out) weights, fused c_attn",
    build=lambda cfg: Conv1DAttention(cfg.d_model, cfg.heads),
    call=lambda m, i: m(i["query"], i["key"], i["value"], i["mask"]),
    param_map={
        "q.weight": Transposed(Chunk("c_attn.weight", 0, 3, dim=1)), "q.bias": Chunk("c_attn.bias", 0, 3),
        "k.weight": Transposed(Chunk("c_attn.weight", 1, 3, dim=1)), "k.bias": Chunk("c_attn.bias", 1, 3),
        "v.weight": Transposed(Chunk("c_attn.weight", 2, 3, dim=1)), "v.bias": Chunk("c_attn.bias", 2, 3),
        "o.weight": Transposed(Param("c_proj.weight")), "o.bias": Param("c_proj.bias"),
    },
    traits={"sublayer": "attention", "fill": "finfo.min", "fully_masked_row": "mean of V",
            "mask_convention": "True = may attend", "qkv_layout": "Conv1D (D, 3D), stored (in, out)"},
)
