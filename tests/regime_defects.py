"""Defects as variants: each makes the harness itself fail, not a
verdict. Kept apart from tests/regime_variants.py because each can abort the run of its
whole family (no JSON), which would hide the other variants' rows.

``REGIME_DEFECTS`` maps each id to the defect; ``benchmarks/regime_caught.py --defects``
and tests/test_regime_variants.py check that the run goes on, writes its JSON and reports
the variant as its own row.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from harness import linear_entries, register

REGIME_DEFECTS = {
    "df_kv_other_shape": "a port that fails (K/V weights of another shape, as grouped-query attention) "
                         "aborts the whole check",
    "df_mask_polarity": "a masks contradiction crashes `check --family masks` (abs of a bool tensor in diff)",
    "df_flex_attention": "flex_attention under the kernel-path recorder: no rule for the higher-order op, "
                         "and later flex calls in the process fail",
}
# where the defect shows in `check`'s output: family, and what the fixed harness must do
EXPECT = {
    "df_kv_other_shape": "the run goes on and writes its JSON; the port failure is this variant's error row",
    "df_mask_polarity": "the run writes its JSON; the contradiction is this variant's row",
    "df_flex_attention": "no row fails on the recorder (on CPU, flex's missing backward still errors the specs)",
}


class KVHalf(nn.Module):
    """Grouped-query attention with 2 K/V heads for 4 query heads: K and V are (D/2, D)."""

    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.q, self.o = nn.Linear(d, d), nn.Linear(d, d)
        self.k, self.v = nn.Linear(d, d // 2), nn.Linear(d, d // 2)

    def forward(self, query, key, value, mask):
        B, T, D = query.shape
        d_k = D // self.h
        q = self.q(query).view(B, T, self.h, d_k).transpose(1, 2)
        k = self.k(key).view(B, -1, self.h // 2, d_k).transpose(1, 2).repeat_interleave(2, 1)
        v = self.v(value).view(B, -1, self.h // 2, d_k).transpose(1, 2).repeat_interleave(2, 1)
        s = (q @ k.transpose(-2, -1) / math.sqrt(d_k)).masked_fill(~mask[:, None], -1e9)
        return self.o((F.softmax(s, -1) @ v).transpose(1, 2).reshape(B, T, D))


def _masks(case, tokens, pad_idx):
    t = tokens.shape[1]
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    pad = tokens == pad_idx                                  # the mistake: True on the pads
    return {"causal": causal, "pad": pad, "target": causal[None] & pad[:, None, :]}[case]


TEXTBOOK = {"sublayer": "attention", "fill": -1e9, "fully_masked_row": "mean of V"}
register(
    id="df_kv_other_shape", family="attention", source="tests/regime_defects.py",
    summary="harness defect: a K/V weight of another shape", build=lambda cfg: KVHalf(cfg.d_model, cfg.heads),
    call=lambda m, i: m(i["query"], i["key"], i["value"], i["mask"]),
    param_map=linear_entries({"q": "q", "k": "k", "v": "v", "o": "o"}), traits=TEXTBOOK,
)
register(
    id="df_mask_polarity", family="masks", source="tests/regime_defects.py",
    summary="harness defect: pad mask of the wrong polarity (a contradiction)", build=lambda cfg: None,
    call=lambda m, i: _masks(i["case"], i["tokens"], i["pad_idx"]),
    traits={"mask_convention": "True = keep", "causal_mask": "tril", "pad_mask": "tokens != pad",
            "target_mask": "causal & key not pad"},
)


class FlexAttention(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))

    def forward(self, query, key, value, mask):
        from torch.nn.attention.flex_attention import flex_attention

        B, T, D = query.shape
        split = lambda x: x.view(B, -1, self.h, D // self.h).transpose(1, 2)  # noqa: E731
        keep = mask
        score_mod = lambda s, b, h, qi, ki: torch.where(keep[b, qi, ki], s, -1e9)  # noqa: E731
        y = flex_attention(split(self.q(query)), split(self.k(key)), split(self.v(value)), score_mod=score_mod)
        return self.o(y.transpose(1, 2).reshape(B, T, D))


register(
    id="df_flex_attention", family="attention", source="tests/regime_defects.py",
    summary="harness defect: flex_attention (correct)", build=lambda cfg: FlexAttention(cfg.d_model, cfg.heads),
    call=lambda m, i: m(i["query"], i["key"], i["value"], i["mask"]),
    param_map=linear_entries({"q": "q", "k": "k", "v": "v", "o": "o"}), traits=TEXTBOOK,
)
