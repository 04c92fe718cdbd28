"""Deliberately wrong variants. Each declares the traits of a correct one, so the check
must catch the contradiction: proof that the harness sees what it claims to see.
Loaded inside ``harness.registry.scratch()`` by tests/test_harness_sees.py."""

import math

import torch
import torch.nn.functional as F
from torch import nn

from harness import Param, register
from harness.porting import linear_entries

HONEST = {"sublayer": "attention", "fully_masked_row": "mean of V", "fill": -1e9}
QKVO = linear_entries({"q": "q", "k": "k", "v": "v", "o": "o"})


class Attention(nn.Module):
    """Textbook attention with switchable mistakes."""

    def __init__(self, d, h, scale=True, flip_mask=False, swap_kv=False, drop_mask=False):
        super().__init__()
        self.h, self.scale, self.flip_mask, self.swap_kv, self.drop_mask = h, scale, flip_mask, swap_kv, drop_mask
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))

    def forward(self, query, key, value, mask):
        B, T, D = query.shape
        split = lambda x: x.view(B, -1, self.h, D // self.h).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.q(query)), split(self.k(key)), split(self.v(value))
        if self.swap_kv:
            k, v = v, k
        scores = q @ k.transpose(-2, -1)
        if self.scale:
            scores = scores / math.sqrt(D // self.h)
        keep = ~mask if self.flip_mask else mask
        if not self.drop_mask:
            scores = scores.masked_fill(~keep[:, None], -1e9)
        y = F.softmax(scores, dim=-1) @ v
        return self.o(y.transpose(1, 2).reshape(B, T, D))


for vid, kwargs in {
    "wrong_no_scale": {"scale": False},
    "wrong_mask_polarity": {"flip_mask": True},
    "wrong_swapped_kv": {"swap_kv": True},
    "wrong_ignores_mask": {"drop_mask": True},
}.items():
    register(
        id=vid, family="attention", source="tests", summary=f"deliberately wrong: {kwargs}",
        build=lambda cfg, kw=kwargs: Attention(cfg.d_model, cfg.heads, **kw),
        call=lambda m, i: m(i["query"], i["key"], i["value"], i["mask"]),
        param_map=QKVO, traits=HONEST,
    )

# A correct implementation in yet another layout: the harness must call it equivalent.
register(
    id="honest_textbook", family="attention", source="tests", summary="correct, for contrast",
    build=lambda cfg: Attention(cfg.d_model, cfg.heads),
    call=lambda m, i: m(i["query"], i["key"], i["value"], i["mask"]),
    param_map=QKVO, traits=HONEST,
)


class SqrtThenEps(nn.Module):
    """Claims to be nn.LayerNorm (eps 1e-5) but adds eps after the square root."""

    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / (var.sqrt() + 1e-5) + self.bias


register(
    id="wrong_eps_placement", family="norm", source="tests", summary="eps outside the sqrt",
    build=lambda cfg: SqrtThenEps(cfg.d_model), call=lambda m, i: m(i["x"]),
    param_map={"weight": Param("weight"), "bias": Param("bias")},
    traits={"norm_formula": "layernorm", "eps": 1e-5},
)
