"""Seed 003_5751987c9fd6921d.txt: a post-norm encoder-decoder Transformer, blog with notes.

Faithful to the blog's code, in the project's names:
- ``MultiHeadAttention``: ``W_Q/W_K/W_V/W_O`` with bias, and **residual + dropout +
  LayerNorm inside the attention module** (post-norm): it returns
  ``LayerNorm(x + dropout(W_O(attn)))`` and the weights; cross-attention when
  ``enc_output`` is given (K and V both from it);
- ``ScaledDotProductAttention``: scores / sqrt(d_k), ``mask == 0`` filled with -1e9;
- ``PositionWiseFFN``: Linear -> ReLU -> dropout -> Linear, **dropout again**, residual,
  LayerNorm (post-norm inside the module);
- ``PositionalEncoding``: the interleaved table, **no dropout** inside (the model drops
  out after it);
- embeddings are plain ``nn.Embedding``, **not** scaled by sqrt(D);
- ``generate_mask``: source (B,1,1,S) = tokens != pad; target = pad mask on the **query**
  axis (B,1,T,1) AND tril: padded query rows are masked whole, padded keys are not.
The blog argues that one ``Linear(D, D)`` equals H ``Linear(D, d_k)`` concatenated;
``variants/per_head.py`` builds that formulation and the harness checks it numerically.
Deviations: ``generate_mask`` is a method of the blog's ``Transformer``; here it is a
function with the same body. The full ``Transformer`` is at the end of this file
(the encoder_decoder family).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from harness import (
    Param,
    absent_norm,
    dropout_sites,
    get_variant,
    layers,
    linear_entries,
    nest,
    norm_entries,
    register,
    register_decoding,
)

SEED = "003_5751987c9fd6921d.txt"


class ScaledDotProductAttention(nn.Module):
    def __init__(self, dropout: float = 0.1):
        super().__init__()
        self.dropout = nn.Dropout(dropout)

    def forward(self, Q, K, V, mask=None):
        attn_scores = torch.matmul(Q, K.transpose(-2, -1)) / math.sqrt(Q.size(-1))  # (B, H, T, S)
        if mask is not None:
            attn_scores = attn_scores.masked_fill(mask == 0, -1e9)
        attn_weights = F.softmax(attn_scores, dim=-1)
        attn_weights = self.dropout(attn_weights)
        return torch.matmul(attn_weights, V), attn_weights


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model: int = 512, n_heads: int = 8, dropout: float = 0.1):
        super().__init__()
        assert d_model % n_heads == 0, "d_model must be divisible by n_heads"
        self.d_k = d_model // n_heads
        self.n_heads = n_heads
        self.W_Q = nn.Linear(d_model, d_model)
        self.W_K = nn.Linear(d_model, d_model)
        self.W_V = nn.Linear(d_model, d_model)
        self.W_O = nn.Linear(d_model, d_model)
        self.attention = ScaledDotProductAttention(dropout)
        self.dropout = nn.Dropout(dropout)
        self.layer_norm = nn.LayerNorm(d_model)

    def forward(self, x, enc_output=None, mask=None):
        residual = x
        batch, seq_len, _ = x.size()
        source = x if enc_output is None else enc_output
        Q = self.W_Q(x).view(batch, -1, self.n_heads, self.d_k).transpose(1, 2)       # (B, H, T, d_k)
        K = self.W_K(source).view(batch, -1, self.n_heads, self.d_k).transpose(1, 2)  # (B, H, S, d_k)
        V = self.W_V(source).view(batch, -1, self.n_heads, self.d_k).transpose(1, 2)
        attn_output, attn_weights = self.attention(Q, K, V, mask)
        attn_output = attn_output.transpose(1, 2).contiguous().view(batch, seq_len, -1)  # (B, T, D)
        output = self.W_O(attn_output)
        return self.layer_norm(residual + self.dropout(output)), attn_weights


class PositionWiseFFN(nn.Module):
    def __init__(self, d_model: int = 512, d_ff: int = 2048, dropout: float = 0.1):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)
        self.layer_norm = nn.LayerNorm(d_model)

    def forward(self, x):
        residual = x
        x = self.dropout(F.relu(self.linear1(x)))
        x = self.linear2(x)
        return self.layer_norm(residual + self.dropout(x))


class PositionalEncoding(nn.Module):
    def __init__(self, d_model: int = 512, max_len: int = 5000):
        super().__init__()
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0))  # (1, max_len, D)

    def forward(self, x):
        return x + self.pe[:, : x.size(1)]


class EncoderLayer(nn.Module):
    def __init__(self, d_model=512, n_heads=8, d_ff=2048, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.ffn = PositionWiseFFN(d_model, d_ff, dropout)

    def forward(self, x, mask=None):
        x, _ = self.self_attn(x, mask=mask)
        return self.ffn(x)


class DecoderLayer(nn.Module):
    def __init__(self, d_model=512, n_heads=8, d_ff=2048, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.ffn = PositionWiseFFN(d_model, d_ff, dropout)

    def forward(self, x, enc_output, src_mask=None, tgt_mask=None):
        x, _ = self.self_attn(x, mask=tgt_mask)
        x, _ = self.cross_attn(x, enc_output, mask=src_mask)
        return self.ffn(x)


def generate_mask(src, tgt, pad_idx=0):
    """src (B,1,1,S) True = real; tgt (B,1,T,T) = (query is real) AND tril."""
    src_mask = (src != pad_idx).unsqueeze(1).unsqueeze(2)
    tgt_pad_mask = (tgt != pad_idx).unsqueeze(1).unsqueeze(3)  # (B, 1, T, 1): the query axis
    tgt_len = tgt.size(1)
    tgt_sub_mask = torch.tril(torch.ones(tgt_len, tgt_len)).bool().to(tgt.device)
    return src_mask, tgt_pad_mask & tgt_sub_mask


# -- registry entries ------------------------------------------------------------------------

ATTN_MAP = linear_entries({"q": "W_Q", "k": "W_K", "v": "W_V", "o": "W_O"})
FFN_MAP = linear_entries({"w1": "linear1", "w2": "linear2"})
LAYER_NORM_FIXED = {
    "layer_norm.weight": "the module's own post-LayerNorm gain, outside the family; held at its init (ones)",
    "layer_norm.bias": "the module's own post-LayerNorm bias, outside the family; held at its init (zeros)",
}
LAYER_TRAITS = {
    "norm_placement": "post", "norm_formula": "layernorm", "eps": 1e-5, "activation": "relu",
    "mask_convention": "1 = keep", "fill": -1e9, "bias": True,
}
ATTN_DROPOUT = ("attention weights", "attention output")
FFN_DROPOUT = ("hidden", "output")


def _attend(module, inputs):
    """Self-attention when key is query; otherwise cross-attention from ``key`` (= value)."""
    if inputs["key"] is not inputs["value"]:
        raise ValueError("this MultiHeadAttention takes K and V from one enc_output")
    enc_output = None if inputs["key"] is inputs["query"] else inputs["key"]
    return module(inputs["query"], enc_output, mask=inputs["mask"][:, None])[0]


register(
    id="postnorm_blog", family="attention", source=SEED,
    summary="residual + dropout + LayerNorm inside the attention module",
    build=lambda cfg: MultiHeadAttention(cfg.d_model, cfg.heads, cfg.dropout),
    call=_attend, param_map=ATTN_MAP, fixed=LAYER_NORM_FIXED,
    traits={
        "sublayer": "attention + residual + post-LayerNorm", "qkv_layout": "4 Linear",
        "bias": True, "scale": "scores / sqrt(d_k)", "mask_convention": "1 = keep",
        "fill": -1e9, "fully_masked_row": "mean of V", "eps": 1e-5, "dropout_sites": ATTN_DROPOUT,
        "cases": ("self", "cross_memory", "causal", "causal_only", "random_mask", "fully_masked"),
        "note": "K and V both come from one enc_output",
    },
)
register(
    id="postnorm_blog", family="ffn", source=SEED,
    summary="residual + LayerNorm inside, dropout twice",
    build=lambda cfg: PositionWiseFFN(cfg.d_model, cfg.d_ff, cfg.dropout),
    call=lambda m, i: m(i["x"]), param_map=FFN_MAP, fixed=LAYER_NORM_FIXED,
    traits={"sublayer": "ffn + residual + post-LayerNorm", "activation": "relu", "eps": 1e-5,
            "dropout_sites": FFN_DROPOUT},
)
register(
    id="postnorm_blog", family="encoder_layer", source=SEED, summary="post-norm inside each sublayer",
    build=lambda cfg: EncoderLayer(cfg.d_model, cfg.heads, cfg.d_ff, cfg.dropout),
    call=lambda m, i: m(i["x"], i["pad"][:, None, None, :]),  # (B, 1, 1, S) True = keep
    param_map={
        **nest(ATTN_MAP, "self_attn.", "self_attn."), **nest(FFN_MAP, "ffn.", "ffn."),
        **norm_entries("norm1", "self_attn.layer_norm"), **norm_entries("norm2", "ffn.layer_norm"),
    },
    traits={**LAYER_TRAITS, "dropout_sites": ATTN_DROPOUT + FFN_DROPOUT},
)
register(
    id="postnorm_blog", family="decoder_layer", source=SEED, summary="post-norm inside each sublayer",
    build=lambda cfg: DecoderLayer(cfg.d_model, cfg.heads, cfg.d_ff, cfg.dropout),
    call=lambda m, i: m(i["x"], i["memory"], i["src_pad"][:, None, None, :], i["tgt_mask"][:, None]),
    param_map={
        **nest(ATTN_MAP, "self_attn.", "self_attn."), **nest(ATTN_MAP, "cross_attn.", "cross_attn."),
        **nest(FFN_MAP, "ffn.", "ffn."),
        **norm_entries("norm1", "self_attn.layer_norm"),
        **norm_entries("norm2", "cross_attn.layer_norm"),
        **norm_entries("norm3", "ffn.layer_norm"),
    },
    traits={**LAYER_TRAITS, "dropout_sites": ATTN_DROPOUT + ATTN_DROPOUT + FFN_DROPOUT},
)
register(
    id="postnorm_blog", family="positional_encoding", source=SEED, summary="interleaved, no dropout",
    build=lambda cfg: PositionalEncoding(cfg.d_model), call=lambda m, i: m(i["x"]),
    traits={"pe_layout": "interleaved sin/cos", "pe_frequencies": "10000^(-2i/D)",
            "internal_dtype": "float32", "note": "no dropout inside"},  # the table is built in float32
)
register(
    id="postnorm_blog", family="embedding", source=SEED, summary="plain nn.Embedding, not scaled",
    build=lambda cfg: nn.Embedding(cfg.vocab, cfg.d_model), call=lambda m, i: m(i["tokens"]),
    param_map={"weight": Param("weight")},
    traits={"embedding_scale": "1", "pad_rows": "kept"},
)
register(
    id="postnorm_blog", family="masks", source=SEED, summary="generate_mask: pads the query axis",
    build=lambda cfg: None,
    call=lambda m, i: (
        generate_mask(i["tokens"], i["tokens"], i["pad_idx"])[0][:, 0, 0, :] if i["case"] == "pad"
        else generate_mask(i["tokens"], i["tokens"], i["pad_idx"])[1][:, 0]
    ),
    traits={"cases": ("pad", "target"), "note": "generate_mask builds source and target masks only",
            "mask_convention": "True = keep",
            "pad_mask": "tokens != pad", "target_mask": "causal & query not pad"},
)


# == The whole model =========================================================================
# The blog's ``Transformer``: separate source/target ``nn.Embedding`` (not scaled), one
# interleaved ``PositionalEncoding`` then dropout, ModuleLists of post-norm layers with
# **no final norm**, a final ``Linear`` to the vocabulary returning logits (log_softmax
# is the adapter's), xavier init of every matrix; ``generate_mask`` masks padded target
# *query rows* (not keys). The blog shows no decoding loop: the harness's greedy loop
# over ``decode`` runs it.



class Transformer(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, n_heads=8, num_layers=6,
                 d_ff=2048, dropout=0.1, max_len=5000):
        super().__init__()
        self.src_embed = nn.Embedding(src_vocab_size, d_model)
        self.tgt_embed = nn.Embedding(tgt_vocab_size, d_model)
        self.pos_encoder = PositionalEncoding(d_model, max_len)
        self.encoder = nn.ModuleList([EncoderLayer(d_model, n_heads, d_ff, dropout) for _ in range(num_layers)])
        self.decoder = nn.ModuleList([DecoderLayer(d_model, n_heads, d_ff, dropout) for _ in range(num_layers)])
        self.linear = nn.Linear(d_model, tgt_vocab_size)
        self.dropout = nn.Dropout(dropout)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def encode(self, src, src_mask=None):
        src = self.dropout(self.pos_encoder(self.src_embed(src)))
        for layer in self.encoder:
            src = layer(src, src_mask)
        return src

    def decode(self, tgt, enc_output, src_mask=None, tgt_mask=None):
        tgt = self.dropout(self.pos_encoder(self.tgt_embed(tgt)))
        for layer in self.decoder:
            tgt = layer(tgt, enc_output, src_mask, tgt_mask)
        return tgt

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        enc_output = self.encode(src, src_mask)
        dec_output = self.decode(tgt, enc_output, src_mask, tgt_mask)
        return self.linear(dec_output)

    def generate_mask(self, src, tgt, pad_idx=0):
        return generate_mask(src, tgt, pad_idx)


def _blog_model_map(cfg):
    enc = get_variant("encoder_layer", "postnorm_blog").map_for(cfg)
    dec = get_variant("decoder_layer", "postnorm_blog").map_for(cfg)
    out = {"src_embed.weight": Param("src_embed.weight"), "tgt_embed.weight": Param("tgt_embed.weight"),
           **linear_entries({"generator": "linear"}),
           **absent_norm("encoder.norm"), **absent_norm("decoder.norm")}
    for i in range(layers(cfg)):
        out.update(nest(enc, f"encoder.{i}.", f"encoder.{i}."))
        out.update(nest(dec, f"decoder.{i}.", f"decoder.{i}."))
    return out


def _blog_call(model, inputs):
    src_mask, tgt_mask = model.generate_mask(inputs["src"], inputs["tgt"], inputs["pad_idx"])
    return F.log_softmax(model(inputs["src"], inputs["tgt"], src_mask, tgt_mask), dim=-1)


def _blog_prepare(model, inputs, cached):
    src_mask, _ = model.generate_mask(inputs["src"], inputs["src"][:, :1], inputs["pad_idx"])
    return {"enc_output": model.encode(inputs["src"], src_mask), "src_mask": src_mask,
            "src": inputs["src"], "pad_idx": inputs["pad_idx"]}


def _blog_step(model, state, ys):
    _, tgt_mask = model.generate_mask(state["src"], ys, state["pad_idx"])
    dec = model.decode(ys, state["enc_output"], state["src_mask"], tgt_mask)
    return F.log_softmax(model.linear(dec[:, -1]), dim=-1)


register(
    id="postnorm_blog", family="encoder_decoder", source=SEED,
    summary="post-norm, no final norm, unscaled embeddings, Linear head",
    build=lambda cfg: Transformer(cfg.vocab, cfg.vocab, cfg.d_model, cfg.heads, layers(cfg), cfg.d_ff, cfg.dropout),
    call=_blog_call, param_map=_blog_model_map,
    traits={**LAYER_TRAITS, "final_norm": False, "embedding_scale": "1", "pad_rows": "kept",
            "shared_embeddings": False, "tied_output": False, "pe_layout": "interleaved sin/cos",
            "pe_frequencies": "10000^(-2i/D)", "target_shift": "by the caller",
            "internal_dtype": "float32",  # the position table is built in float32
            "dropout_sites": dropout_sites(("after source positions", "after target positions"),
                                           encoder=ATTN_DROPOUT + FFN_DROPOUT,
                                           decoder=ATTN_DROPOUT + ATTN_DROPOUT + FFN_DROPOUT),
            "note": "Linear head (logits; log_softmax by the adapter); generate_mask masks pad query rows; no cache"},
)
register_decoding("encoder_decoder", "postnorm_blog", prepare=_blog_prepare, step=_blog_step)
