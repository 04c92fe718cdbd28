"""Fused single-Linear QKV attention: the GPT-2 / nanoGPT layout (the mission's design,
not one of the seeds; ``source`` says so).

- one ``Linear(D, 3D)`` (``c_attn``) projects Q, K and V at once; its rows 0:D are Q,
  D:2D are K, 2D:3D are V; ``c_proj`` is the output projection, followed by a residual
  dropout (nanoGPT's ``resid_dropout``);
- the attention itself is either an explicit softmax (nanoGPT's slow path: scores *
  1/sqrt(d_k), masked with **-inf**, softmax, dropout, @ V) or
  ``F.scaled_dot_product_attention`` (nanoGPT's flash path);
- ``Block``: nanoGPT's pre-norm block, ``x + attn(ln_1(x))``, ``x + mlp(ln_2(x))`` with an
  MLP of 4*D and exact GELU.
Deviations from nanoGPT: it is causal-only (a registered tril buffer or ``is_causal``);
here the attention takes the family's mask (bool, True = may attend) so that padding and
cross-attention can be compared, and uses ``is_causal=True`` when told the mask is exactly
causal. For cross-attention (query is not key) the fused weight is applied split: rows
0:D to the query, rows D:3D to the key/value source, as GPT-2's cross-attention does.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from harness import register
from harness.adapt import causal_and_pad
from harness.porting import fused_entries, linear_entries, nest, norm_entries

SOURCE = "nanoGPT (GPT-2 fused QKV layout)"


class FusedAttention(nn.Module):
    def __init__(self, d_model: int, heads: int, dropout: float = 0.0, use_sdpa: bool = True):
        super().__init__()
        assert d_model % heads == 0
        self.n_head = heads
        self.n_embd = d_model
        self.dropout = dropout
        self.use_sdpa = use_sdpa
        self.c_attn = nn.Linear(d_model, 3 * d_model)
        self.c_proj = nn.Linear(d_model, d_model)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)

    def _project(self, query, key, value):
        if query is key and key is value:
            return self.c_attn(query).split(self.n_embd, dim=2)  # one matmul
        w, b = self.c_attn.weight, self.c_attn.bias
        d = self.n_embd
        q = F.linear(query, w[:d], b[:d])
        if key is value:
            k, v = F.linear(key, w[d:], b[d:]).split(d, dim=2)
        else:
            k = F.linear(key, w[d:2 * d], b[d:2 * d])
            v = F.linear(value, w[2 * d:], b[2 * d:])
        return q, k, v

    def forward(self, query, key=None, value=None, mask=None, is_causal=False):
        key = query if key is None else key
        value = key if value is None else value
        B, T, C = query.size()
        q, k, v = self._project(query, key, value)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)   # (B, H, T, d_k)
        k = k.view(B, -1, self.n_head, C // self.n_head).transpose(1, 2)  # (B, H, S, d_k)
        v = v.view(B, -1, self.n_head, C // self.n_head).transpose(1, 2)
        attn_mask = None if (is_causal or mask is None) else mask[:, None]  # (B, 1, T, S)
        if self.use_sdpa:
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=attn_mask,
                dropout_p=self.dropout if self.training else 0.0, is_causal=is_causal,
            )
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))  # (B, H, T, S)
            if is_causal:
                attn_mask = torch.ones(T, k.size(2), dtype=torch.bool, device=q.device).tril()
            if attn_mask is not None:
                att = att.masked_fill(attn_mask == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            att = self.attn_dropout(att)
            y = att @ v                                                   # (B, H, T, d_k)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, d_model: int, dropout: float = 0.0):
        super().__init__()
        self.c_fc = nn.Linear(d_model, 4 * d_model)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, d_model: int, heads: int, dropout: float = 0.0):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model)
        self.attn = FusedAttention(d_model, heads, dropout, use_sdpa=True)
        self.ln_2 = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model, dropout)

    def forward(self, x, mask=None, is_causal=False):
        y = self.ln_1(x)
        x = x + self.attn(y, y, y, mask=mask, is_causal=is_causal)
        return x + self.mlp(self.ln_2(x))


# -- registry entries ------------------------------------------------------------------------

ATTN_MAP = {**fused_entries("c_attn.weight", "c_attn.bias", ("q", "k", "v")),
            **linear_entries({"o": "c_proj"})}
ATTN_TRAITS = {
    "sublayer": "attention", "qkv_layout": "fused Linear(D, 3D)", "bias": True,
    "dropout_sites": ("attention weights", "output"),
}


def _attend(module, inputs):
    causal = inputs.get("causal", False)
    return module(inputs["query"], inputs["key"], inputs["value"],
                  mask=None if causal else inputs["mask"], is_causal=causal)


register(
    id="fused_explicit", family="attention", source=SOURCE,
    summary="fused QKV, explicit softmax, fill -inf",
    build=lambda cfg: FusedAttention(cfg.d_model, cfg.heads, cfg.dropout, use_sdpa=False),
    call=_attend, param_map=ATTN_MAP,
    traits={**ATTN_TRAITS, "scale": "scores * d_k^-0.5", "mask_convention": "True = may attend",
            "fill": float("-inf"), "fully_masked_row": "NaN"},
)
register(
    id="fused_sdpa", family="attention", source=SOURCE,
    summary="fused QKV, F.scaled_dot_product_attention",
    build=lambda cfg: FusedAttention(cfg.d_model, cfg.heads, cfg.dropout, use_sdpa=True),
    call=_attend, param_map=ATTN_MAP,
    traits={**ATTN_TRAITS, "scale": "inside SDPA", "mask_convention": "True = may attend",
            "fill": "sdpa", "fully_masked_row": "zeros"},
)
register(
    id="nanogpt_block", family="decoder_only_block", source=SOURCE,
    summary="pre-norm, fused SDPA attention, GELU MLP",
    build=lambda cfg: Block(cfg.d_model, cfg.heads, cfg.dropout),
    call=lambda m, i: (m(i["x"], is_causal=True) if bool(i["pad"].all())
                       else m(i["x"], mask=causal_and_pad(i["pad"]))),
    param_map={
        **nest(ATTN_MAP, "self_attn.", "attn."),
        **linear_entries({"ffn.w1": "mlp.c_fc", "ffn.w2": "mlp.c_proj"}),
        **norm_entries("norm1", "ln_1"), **norm_entries("norm2", "ln_2"),
    },
    traits={"norm_placement": "pre", "norm_formula": "layernorm", "eps": 1e-5,
            "activation": "gelu", "qkv_layout": "fused Linear(D, 3D)", "bias": True,
            "mask_convention": "True = may attend", "fill": "sdpa", "fully_masked_row": "zeros",
            "dropout_sites": ("attention weights", "attention output", "MLP output")},
    supports=lambda cfg: None if cfg.d_ff == 4 * cfg.d_model else (
        f"the MLP is fixed at 4*d_model={4 * cfg.d_model}, config has d_ff={cfg.d_ff}"),
)
