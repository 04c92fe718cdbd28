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

from harness import (
    Param,
    Tied,
    Zero,
    causal_and_pad,
    dropout_sites,
    fused_entries,
    get_variant,
    incremental,
    layers,
    linear_entries,
    nest,
    norm_entries,
    register,
    register_decoding,
)
from variants.pytorch_behaviour import SDPA_HALF_FULLY_MASKED

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
            "fill": "sdpa", "fully_masked_row": "zeros",
            "path_findings": {"fully_masked": SDPA_HALF_FULLY_MASKED}},
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
            "dropout_sites": ("attention weights", "attention output", "MLP output"),
            "path_findings": {"left_pad": SDPA_HALF_FULLY_MASKED},
            "data_dependent": "the adapter calls is_causal=True without a mask when no key is padded (pad.all())"},
    supports=lambda cfg: None if cfg.d_ff == 4 * cfg.d_model else (
        f"the MLP is fixed at 4*d_model={4 * cfg.d_model}, config has d_ff={cfg.d_ff}"),
)


# == The whole model =========================================================================
# nanoGPT's ``GPT``: token and **learned position** embeddings (``wte``, ``wpe``), dropout,
# the pre-norm ``Block`` stack, a final ``ln_f``, and ``lm_head`` (bias-free) **tied** to
# ``wte``; ``forward(idx, targets)`` returns logits for every position with targets and
# for the last position only without (nanoGPT's inference shortcut). Deviations:
# ``block_size`` is the config's T; ``forward`` also takes the family's pad mask (the
# ``Block`` deviation above); ``decode_step`` is a k/v cache that nanoGPT does not have
# (its ``generate`` re-runs the whole context): per block, the keys and values of the
# tokens seen so far are kept, and only the new token is projected.



class GPT(nn.Module):
    def __init__(self, vocab_size: int, block_size: int, n_layer: int, n_embd: int, n_head: int,
                 dropout: float = 0.0):
        super().__init__()
        self.block_size = block_size
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, n_embd),
            wpe=nn.Embedding(block_size, n_embd),
            drop=nn.Dropout(dropout),
            h=nn.ModuleList([Block(n_embd, n_head, dropout) for _ in range(n_layer)]),
            ln_f=nn.LayerNorm(n_embd),
        ))
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying

    def forward(self, idx, targets=None, pad=None):
        """``pad`` (B, T) True = real token, or None (causal only)."""
        b, t = idx.size()
        assert t <= self.block_size, f"Cannot forward sequence of length {t}, block size is only {self.block_size}"
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        causal = pad is None or bool(pad.all())
        mask = None if causal else causal_and_pad(pad)
        for block in self.transformer.h:
            x = block(x, mask=mask, is_causal=causal)
        x = self.transformer.ln_f(x)
        if targets is not None:
            logits = self.lm_head(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        else:
            logits = self.lm_head(x[:, [-1], :])
            loss = None
        return logits, loss

    def decode_step(self, idx_new, cache):
        """Logits (B, V) after feeding ``idx_new`` (B, n) on top of what ``cache`` (a list,
        one (k, v) per block, empty at first) has seen; the cache is extended in place."""
        seen = cache[0][0].size(2) if cache else 0
        b, n = idx_new.size()
        pos = torch.arange(seen, seen + n, dtype=torch.long, device=idx_new.device)
        x = self.transformer.drop(self.transformer.wte(idx_new) + self.transformer.wpe(pos))
        for i, block in enumerate(self.transformer.h):
            attn = block.attn
            q, k, v = attn.c_attn(block.ln_1(x)).split(attn.n_embd, dim=2)
            split = lambda z: z.view(b, n, attn.n_head, -1).transpose(1, 2)  # noqa: E731  (B, H, n, d_k)
            q, k, v = split(q), split(k), split(v)
            if len(cache) > i:
                k = torch.cat([cache[i][0], k], dim=2)
                v = torch.cat([cache[i][1], v], dim=2)
                cache[i] = (k, v)
            else:
                cache.append((k, v))
            # the new queries see every cached key and, among themselves, the past only
            allowed = torch.ones(n, seen + n, dtype=torch.bool, device=x.device).tril(seen)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
            y = y.transpose(1, 2).contiguous().view(b, n, attn.n_embd)
            x = x + attn.resid_dropout(attn.c_proj(y))
            x = x + block.mlp(block.ln_2(x))
        return self.lm_head(self.transformer.ln_f(x[:, -1]))


def _gpt_map(cfg):
    block = get_variant("decoder_only_block", "nanogpt_block").map_for(cfg)
    out = {"embed.weight": Param("transformer.wte.weight"), "pos.weight": Param("transformer.wpe.weight"),
           **norm_entries("norm", "transformer.ln_f"),
           "head.weight": Tied("embed.weight"), "head.bias": Zero()}
    for i in range(layers(cfg)):
        out.update(nest(block, f"blocks.{i}.", f"transformer.h.{i}."))
    return out


register(
    id="nanogpt", family="decoder_only_model", source=SOURCE,
    summary="GPT: wte + wpe, pre-norm fused blocks, ln_f, lm_head tied to wte",
    build=lambda cfg: GPT(cfg.vocab, cfg.tgt_len, layers(cfg), cfg.d_model, cfg.heads, cfg.dropout),
    call=lambda m, i: F.log_softmax(m(i["tokens"], targets=torch.where(i["pad"], i["tokens"], -1),
                                      pad=i["pad"])[0], dim=-1),
    param_map=_gpt_map,
    traits={"norm_placement": "pre", "norm_formula": "layernorm", "eps": 1e-5, "activation": "gelu",
            "final_norm": True, "embedding_scale": "1", "tied_output": True, "positional_encoding": "learned",
            "qkv_layout": "fused Linear(D, 3D)", "bias": True, "fill": "sdpa",
            "dropout_sites": dropout_sites(("embedding",), blocks=get_variant(
                "decoder_only_block", "nanogpt_block").traits["dropout_sites"]),
            "note": "lm_head tied to wte (logits; log_softmax by the adapter); cache: decode_step",
            "data_dependent": "GPT.forward calls is_causal=True without a mask when no token is padded (pad.all())"},
    supports=lambda cfg: None if cfg.d_ff == 4 * cfg.d_model else (
        f"the MLP is fixed at 4*d_model={4 * cfg.d_model}, config has d_ff={cfg.d_ff}"),
)
register_decoding("decoder_only_model", "nanogpt", cache="self-attention k/v per block", **incremental(
    lambda m, ys: F.log_softmax(m(ys)[0][:, -1], dim=-1),
    lambda m, new, cache: F.log_softmax(m.decode_step(new, cache), dim=-1)))
