"""Deliberately wrong variants. Each makes a one-line mistake that real code has and
declares the traits of a correct implementation, so the check must catch it: proof that
the harness sees what it claims to see. Loaded inside ``harness.registry.scratch()`` by
tests/test_harness_sees.py.

One per class of bug the verdicts must catch (``WRONG`` maps each id to its class), and two
controls that must stay equivalent: ``honest_textbook`` (another layout) and
``control_last_ulp`` (multiplies by 1/sqrt(d_k) instead of dividing: last-ulp changes only).
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

from harness import Param, register
from harness.porting.entries import linear_entries

HONEST = {"sublayer": "attention", "fully_masked_row": "mean of V", "fill": -1e9}
QKVO = linear_entries({"q": "q", "k": "k", "v": "v", "o": "o"})


class Attention(nn.Module):
    """Textbook attention (finite fill: a fully masked row is the mean of V) with switchable
    one-line mistakes."""

    def __init__(self, d, h, mistake=None):
        super().__init__()
        self.h, self.mistake = h, mistake
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))

    def forward(self, query, key, value, mask):
        B, T, D = query.shape
        h, d_k, m = self.h, D // self.h, self.mistake

        def split(x):  # (B, L, D) -> (B, H, L, d_k)
            if m == "head_split":  # the classic: heads and width swapped in the view
                return x.view(B, -1, d_k, h).transpose(1, 3).transpose(2, 3)
            return x.view(B, -1, h, d_k).transpose(1, 2)

        q = split(self.q(query))
        k = split(self.k(key))
        v = split(self.v(key if m == "v_from_key" else value))
        if m == "swapped_kv":
            k, v = v, k
        scores = q @ k.transpose(-2, -1)
        if m == "scale_by_heads":
            scores = scores / math.sqrt(h)
        elif m == "control_last_ulp":
            scores = scores * (1.0 / math.sqrt(d_k))
        elif m != "no_scale":
            scores = scores / math.sqrt(d_k)
        keep = mask
        if m == "mask_polarity":
            keep = ~mask
        elif m == "first_row_mask":  # the first query row's mask broadcast to all rows
            keep = mask[:, :1].expand_as(mask)
        if m != "ignores_mask":
            scores = scores.masked_fill(~keep[:, None], -1e9)
        p = F.softmax(scores, dim=-1)
        if m == "dropout_in_eval":  # F.dropout's training=True default: drops in eval mode too
            p = F.dropout(p, 0.1)
        y = (p @ v).transpose(1, 2).reshape(B, T, D)
        out = self.o(y)
        if m == "backward_only":
            out = HalfGradient.apply(out)
        if m == "detached":
            out = out.detach()
        return out


class HalfGradient(torch.autograd.Function):
    """Identity forward, a backward that halves the gradient: only the backward is wrong."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return 0.5 * grad


WRONG = {  # id -> the class of bug it stands for
    "wrong_no_scale": ("no_scale", "scale"),
    "wrong_scale_by_heads": ("scale_by_heads", "head/width confusion (1/sqrt(H))"),
    "wrong_head_split": ("head_split", "head/width confusion (view(B, T, d_k, H))"),
    "wrong_mask_polarity": ("mask_polarity", "mask"),
    "wrong_first_row_mask": ("first_row_mask", "mask axes (seen only by an arbitrary mask)"),
    "wrong_ignores_mask": ("ignores_mask", "mask"),
    "wrong_swapped_kv": ("swapped_kv", "role confusion"),
    "wrong_v_from_key": ("v_from_key", "role confusion (V projected from the key)"),
    "wrong_backward_only": ("backward_only", "backward-only bug"),
    "wrong_detached": ("detached", "detached output"),
    "wrong_dropout_in_eval": ("dropout_in_eval", "dropout left on in eval"),
}
for vid, (mistake, _) in WRONG.items():
    register(
        id=vid, family="attention", source="tests", summary=f"deliberately wrong: {mistake}",
        build=lambda cfg, m=mistake: Attention(cfg.d_model, cfg.heads, m),
        call=lambda m, i: m(i["query"], i["key"], i["value"], i["mask"]),
        param_map=QKVO, traits=HONEST,
    )

# Correct implementations in yet another layout: the harness must call them equivalent.
register(
    id="honest_textbook", family="attention", source="tests", summary="correct, for contrast",
    build=lambda cfg: Attention(cfg.d_model, cfg.heads),
    call=lambda m, i: m(i["query"], i["key"], i["value"], i["mask"]),
    param_map=QKVO, traits=HONEST,
)
register(
    id="control_last_ulp", family="attention", source="tests",
    summary="correct; scores * (1/sqrt(d_k)) instead of / sqrt(d_k): last-ulp changes only",
    build=lambda cfg: Attention(cfg.d_model, cfg.heads, "control_last_ulp"),
    call=lambda m, i: m(i["query"], i["key"], i["value"], i["mask"]),
    param_map=QKVO, traits=HONEST,
)


class LayerNormLike(nn.Module):
    """Claims to be nn.LayerNorm (eps 1e-5); ``mistake`` picks how it is not."""

    def __init__(self, d, mistake):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))
        self.mistake = mistake

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        if self.mistake == "one_pass_variance":  # exact in real arithmetic, cancels in floats
            var = (x * x).mean(-1, keepdim=True) - mean * mean
            return self.weight * (x - mean) / torch.sqrt(var + 1e-5) + self.bias
        var = x.var(-1, keepdim=True, unbiased=False)
        if self.mistake == "eps_outside_sqrt":
            return self.weight * (x - mean) / (var.sqrt() + 1e-5) + self.bias
        if self.mistake == "eps_drift":  # a real difference of ~5e-8: float64 must see it
            return self.weight * (x - mean) / torch.sqrt(var + 1.0001e-5) + self.bias
        raise ValueError(self.mistake)


WRONG_NORMS = {
    "wrong_eps_placement": ("eps_outside_sqrt", "formula"),
    "wrong_one_pass_variance": ("one_pass_variance", "exact but imprecise formula"),
    "wrong_eps_drift": ("eps_drift", "a difference below float32's resolution"),
}
for vid, (mistake, _) in WRONG_NORMS.items():
    register(
        id=vid, family="norm", source="tests", summary=f"deliberately wrong: {mistake}",
        build=lambda cfg, m=mistake: LayerNormLike(cfg.d_model, m), call=lambda m, i: m(i["x"]),
        param_map={"weight": Param("weight"), "bias": Param("bias")},
        traits={"norm_formula": "layernorm", "eps": 1e-5},
    )
