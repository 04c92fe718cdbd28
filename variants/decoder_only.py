"""Seed 002_a5adfb2f6616eb1a.txt: two hand-written decoder-only blocks and a seeded comparison.

Both blocks in the write-up are the same design written twice; this file keeps both:
- ``SimpleDecoderLayer``: q/k/v/o ``Linear`` with bias; **post-norm**
  (``LayerNorm(eps=1e-5)`` after each residual add); FFN up x4, ReLU, down, dropout;
  causal by ``attention_mask.tril()`` of the passed (B, H, T, T) mask (1 = keep), or a
  tril of ones when none; masked scores filled with **-inf** (a row that sees no key
  becomes NaN).
- ``SimpleDecoder``: the same block, masked scores filled with **-1e20** (a row that sees
  no key becomes the plain mean of V).
The write-up's notebook cell that seeds both, runs them in eval mode and calls
``torch.allclose(out1, out2, atol=1e-6)`` is the seed of this project; the harness does
it for every pair (``python -m harness check --family decoder_only_block``).
Deviations: ``SimpleDecoder`` prints its attention weights on every call in the write-up;
here the print is kept behind ``verbose`` (off), so checks and benchmarks stay quiet. The
write-up's 5-layer ``Decoder`` with embedding and vocabulary head is at the end of this file
(the decoder_only_model family).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from harness import (
    Param,
    Zero,
    absent_norm,
    dropout_sites,
    get_variant,
    incremental,
    layers,
    linear_entries,
    nest,
    norm_entries,
    register,
    register_decoding,
)

SEED = "002_a5adfb2f6616eb1a.txt"


class SimpleDecoderLayer(nn.Module):
    def __init__(self, hidden_dim: int, head_num: int, attn_dropout_rate: float = 0.1):
        super().__init__()
        self.head_num = head_num
        self.head_dim = hidden_dim // head_num
        self.q_proj = nn.Linear(hidden_dim, hidden_dim)
        self.k_proj = nn.Linear(hidden_dim, hidden_dim)
        self.v_proj = nn.Linear(hidden_dim, hidden_dim)
        self.o_proj = nn.Linear(hidden_dim, hidden_dim)
        self.attn_dropout = nn.Dropout(attn_dropout_rate)
        self.attn_ln = nn.LayerNorm(hidden_dim, eps=0.00001)
        self.up_proj = nn.Linear(hidden_dim, hidden_dim * 4)
        self.ffn_act = nn.ReLU()
        self.down_proj = nn.Linear(hidden_dim * 4, hidden_dim)
        self.ffn_dropout = nn.Dropout(attn_dropout_rate)
        self.ffn_ln = nn.LayerNorm(hidden_dim, eps=0.00001)

    def attention_output(self, q, k, v, attention_mask):
        attn_score = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)  # (B, H, T, T)
        if attention_mask is not None:
            attention_mask = attention_mask.tril()
        else:
            attention_mask = torch.ones_like(attn_score).tril()
        attn_score = attn_score.masked_fill(attention_mask == 0, float("-inf"))
        attn_weight = torch.softmax(attn_score, dim=-1)
        attn_weight = self.attn_dropout(attn_weight)
        output = attn_weight @ v                               # (B, H, T, d_k)
        output = output.transpose(1, 2).contiguous()           # (B, T, H, d_k)
        batch, seq, _, _ = output.size()
        return self.o_proj(output.view(batch, seq, -1))

    def mha(self, x, attention_mask=None):
        batch, seq, _ = x.size()
        q = self.q_proj(x).view(batch, seq, self.head_num, -1).transpose(1, 2)
        k = self.k_proj(x).view(batch, seq, self.head_num, -1).transpose(1, 2)
        v = self.v_proj(x).view(batch, seq, self.head_num, -1).transpose(1, 2)
        output = self.attention_output(q, k, v, attention_mask)
        return self.attn_ln(output + x)

    def ffn(self, x):
        down = self.down_proj(self.ffn_act(self.up_proj(x)))
        down = self.ffn_dropout(down)
        return self.ffn_ln(down + x)

    def forward(self, x, attention_mask=None):
        return self.ffn(self.mha(x, attention_mask))


class SimpleDecoder(nn.Module):
    def __init__(self, hidden_dim: int, nums_head: int, dropout: float = 0.1, verbose: bool = False):
        super().__init__()
        self.nums_head = nums_head
        self.head_dim = hidden_dim // nums_head
        self.dropout = dropout
        self.verbose = verbose
        self.layernorm_att = nn.LayerNorm(hidden_dim, eps=0.00001)
        self.q_proj = nn.Linear(hidden_dim, hidden_dim)
        self.k_proj = nn.Linear(hidden_dim, hidden_dim)
        self.v_proj = nn.Linear(hidden_dim, hidden_dim)
        self.o_proj = nn.Linear(hidden_dim, hidden_dim)
        self.drop_att = nn.Dropout(self.dropout)
        self.up_proj = nn.Linear(hidden_dim, hidden_dim * 4)
        self.down_proj = nn.Linear(hidden_dim * 4, hidden_dim)
        self.layernorm_ffn = nn.LayerNorm(hidden_dim, eps=0.00001)
        self.act_fn = nn.ReLU()
        self.drop_ffn = nn.Dropout(self.dropout)

    def attention_output(self, query, key, value, attention_mask=None):
        key = key.transpose(2, 3)                                   # (B, H, d_k, T)
        att_weight = torch.matmul(query, key) / math.sqrt(self.head_dim)
        if attention_mask is not None:
            attention_mask = attention_mask.tril()
        else:
            attention_mask = torch.ones_like(att_weight).tril()
        att_weight = att_weight.masked_fill(attention_mask == 0, float("-1e20"))
        att_weight = torch.softmax(att_weight, dim=-1)
        if self.verbose:
            print(att_weight)
        att_weight = self.drop_att(att_weight)
        mid_output = torch.matmul(att_weight, value)               # (B, H, T, d_k)
        mid_output = mid_output.transpose(1, 2).contiguous()
        batch, seq, _, _ = mid_output.size()
        return self.o_proj(mid_output.view(batch, seq, -1))

    def attention_block(self, X, attention_mask=None):
        batch, seq, _ = X.size()
        query = self.q_proj(X).view(batch, seq, self.nums_head, -1).transpose(1, 2)
        key = self.k_proj(X).view(batch, seq, self.nums_head, -1).transpose(1, 2)
        value = self.v_proj(X).view(batch, seq, self.nums_head, -1).transpose(1, 2)
        output = self.attention_output(query, key, value, attention_mask=attention_mask)
        return self.layernorm_att(X + output)

    def ffn_block(self, X):
        up = self.act_fn(self.up_proj(X))
        down = self.drop_ffn(self.down_proj(up))
        return self.layernorm_ffn(X + down)

    def forward(self, X, attention_mask=None):
        return self.ffn_block(self.attention_block(X, attention_mask=attention_mask))


def block_mask(pad: torch.Tensor, heads: int) -> torch.Tensor:
    """(B, T) True = real token -> the write-up's (B, H, T, T) int mask, 1 = keep key
    (``mask.unsqueeze(1).unsqueeze(2).repeat(1, H, T, 1)``); the block applies tril."""
    t = pad.shape[-1]
    return pad.long().unsqueeze(1).unsqueeze(2).repeat(1, heads, t, 1)


# -- registry entries ------------------------------------------------------------------------

FOUR_X = lambda cfg: None if cfg.d_ff == 4 * cfg.d_model else (  # noqa: E731
    f"the FFN is fixed at 4*d_model={4 * cfg.d_model}, config has d_ff={cfg.d_ff}"
)
BLOCK_TRAITS = {
    "norm_placement": "post", "norm_formula": "layernorm", "eps": 1e-5, "activation": "relu",
    "mask_convention": "1 = keep, tril applied inside", "qkv_layout": "4 Linear", "bias": True,
    "dropout_sites": ("attention weights", "FFN output"),
}

register(
    id="simple_decoder_layer", family="decoder_only_block", source=SEED,
    summary="post-norm block, fill -inf",
    build=lambda cfg: SimpleDecoderLayer(cfg.d_model, cfg.heads, cfg.dropout),
    call=lambda m, i: m(i["x"], block_mask(i["pad"], m.head_num)),
    param_map={
        **linear_entries({"self_attn.q": "q_proj", "self_attn.k": "k_proj",
                          "self_attn.v": "v_proj", "self_attn.o": "o_proj",
                          "ffn.w1": "up_proj", "ffn.w2": "down_proj"}),
        **norm_entries("norm1", "attn_ln"), **norm_entries("norm2", "ffn_ln"),
    },
    traits={**BLOCK_TRAITS, "fill": float("-inf"), "fully_masked_row": "NaN"},
    supports=FOUR_X,
)
register(
    id="simple_decoder", family="decoder_only_block", source=SEED,
    summary="the same block, fill -1e20",
    build=lambda cfg: SimpleDecoder(cfg.d_model, cfg.heads, cfg.dropout),
    call=lambda m, i: m(i["x"], block_mask(i["pad"], m.nums_head)),
    param_map={
        **linear_entries({"self_attn.q": "q_proj", "self_attn.k": "k_proj",
                          "self_attn.v": "v_proj", "self_attn.o": "o_proj",
                          "ffn.w1": "up_proj", "ffn.w2": "down_proj"}),
        **norm_entries("norm1", "layernorm_att"), **norm_entries("norm2", "layernorm_ffn"),
    },
    traits={**BLOCK_TRAITS, "fill": -1e20, "fully_masked_row": "mean of V"},
    supports=FOUR_X,
)
register(
    id="decoder_only", family="masks", source=SEED, summary="tril of ones",
    build=lambda cfg: None,
    call=lambda m, i: torch.ones(i["tokens"].shape[1], i["tokens"].shape[1], device=i["tokens"].device).tril() != 0,
    traits={"cases": ("causal",), "mask_convention": "1 = keep", "causal_mask": "tril",
            "note": "the write-up builds only the causal mask"},
)


# == The whole model =========================================================================
# The write-up's ``Decoder``: ``nn.Embedding`` (no scale, **no positional encoding**), a
# stack of ``SimpleDecoderLayer`` blocks sharing one (B, H, T, T) mask, a ``Linear`` head
# and a **softmax** (probabilities; the adapter takes their log). Deviations: the write-up
# fixes 12 tokens, 64 dims, 8 heads and 5 layers; here vocabulary, width, heads and the
# layer count come from the config; its ``print(x.shape)`` is dropped. ``block`` builds
# the same stack from the write-up's other block, ``SimpleDecoder`` (fill -1e20). The
# write-up has no cache; ``decode_step`` adds a self-attention k/v cache around the
# blocks' own projections, norms and FFN (the attention of the new rows computed there).



class Decoder(nn.Module):
    def __init__(self, vocab: int = 12, hidden_dim: int = 64, head_num: int = 8, n_layers: int = 5,
                 dropout: float = 0.1, block=SimpleDecoderLayer):
        super().__init__()
        self.head_num = head_num
        self.layer_list = nn.ModuleList([block(hidden_dim, head_num, dropout) for _ in range(n_layers)])
        self.emb = nn.Embedding(vocab, hidden_dim)
        self.out = nn.Linear(hidden_dim, vocab)

    def forward(self, x, mask=None):
        x = self.emb(x)                                  # (B, T, D)
        for layer in self.layer_list:
            x = layer(x, mask)
        output = self.out(x)
        return torch.softmax(output, dim=-1)             # probabilities (B, T, V)

    def decode_step(self, x_new, cache):
        """This file's addition (the write-up has no cache): probabilities (B, V) after
        feeding ``x_new`` (B, n) on top of what ``cache`` (a list, one (k, v) per layer,
        empty at first) has seen. A block's keys and values depend only on its input at
        that position, which later tokens do not change (causal), so they are kept; the
        new rows attend to every kept key and, among themselves, to the past only."""
        x = self.emb(x_new)                              # (B, n, D)
        b, n, _ = x.size()
        seen = cache[0][0].size(2) if cache else 0
        allowed = torch.ones(n, seen + n, dtype=torch.bool, device=x.device).tril(seen)
        for i, layer in enumerate(self.layer_list):
            heads = lambda z: z.view(b, n, self.head_num, -1).transpose(1, 2)  # noqa: E731  (B, H, n, d_k)
            q, k, v = heads(layer.q_proj(x)), heads(layer.k_proj(x)), heads(layer.v_proj(x))
            if len(cache) > i:
                k, v = torch.cat([cache[i][0], k], 2), torch.cat([cache[i][1], v], 2)
                cache[i] = (k, v)
            else:
                cache.append((k, v))
            # the blocks' attention_output would tril() this (n, seen + n) mask as if it
            # were square, so the step computes the same attention here
            score = (q @ k.transpose(-1, -2) / math.sqrt(k.size(-1))).masked_fill(~allowed, float("-inf"))
            out = layer.o_proj((torch.softmax(score, dim=-1) @ v).transpose(1, 2).reshape(b, n, -1))
            if isinstance(layer, SimpleDecoderLayer):
                x = layer.ffn(layer.attn_ln(out + x))
            else:
                x = layer.ffn_block(layer.layernorm_att(x + out))
        return torch.softmax(self.out(x[:, -1]), dim=-1)


def _decoder_map(cfg, block_id):
    block = get_variant("decoder_only_block", block_id).map_for(cfg)
    out = {"embed.weight": Param("emb.weight"), "pos.weight": Zero(),
           **absent_norm("norm"),
           "head.weight": Param("out.weight"), "head.bias": Param("out.bias")}
    for i in range(layers(cfg)):
        out.update(nest(block, f"blocks.{i}.", f"layer_list.{i}."))
    return out


MODEL_TRAITS = {**BLOCK_TRAITS, "final_norm": False, "embedding_scale": "1", "tied_output": False,
                "positional_encoding": "none",
                "dropout_sites": dropout_sites((), blocks=BLOCK_TRAITS["dropout_sites"]),
                "note": "Linear + softmax (log by the adapter); cache: decode_step, added here"}
for vid, block_cls, block_id, fill in (("decoder_only", SimpleDecoderLayer, "simple_decoder_layer", float("-inf")),
                                       ("decoder_only_1e20", SimpleDecoder, "simple_decoder", -1e20)):
    register(
        id=vid, family="decoder_only_model", source=SEED,
        summary=f"Decoder: embedding, {block_cls.__name__} stack (fill {fill:g}), Linear, softmax",
        build=lambda cfg, b=block_cls: Decoder(cfg.vocab, cfg.d_model, cfg.heads, layers(cfg), cfg.dropout, block=b),
        call=lambda m, i: m(i["tokens"], block_mask(i["pad"], m.head_num)).log(),
        param_map=lambda cfg, b=block_id: _decoder_map(cfg, b),
        traits={**MODEL_TRAITS, "fill": fill}, supports=FOUR_X,
    )
    register_decoding(  # without a cache the prefix is re-run, no mask: each block builds its tril
        "decoder_only_model", vid, cache="self-attention k/v per layer (decode_step, this file's addition)",
        **incremental(lambda m, ys: m(ys, None)[:, -1].log(), lambda m, new, cache: m.decode_step(new, cache).log()))
