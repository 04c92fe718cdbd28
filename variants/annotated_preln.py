"""Seed 004_4e525cb8a3aa6a12.txt: the Harvard annotated Transformer, pre-LN, with training.

Faithful to the write-up's code, in the project's names:
- a **custom ``LayerNorm``**: ``gamma * (x - mean) / (std + eps) + beta`` with the
  **unbiased** std (``Tensor.std``) and **eps added to the std** (eps 1e-6), not what
  ``nn.LayerNorm`` computes (biased variance, eps inside the square root);
- ``SubLayer``: **pre-norm** ``x + dropout(sublayer(norm(x)))``;
- ``scaled_dot_product_attention``: scores / sqrt(d_k), ``mask == 0`` filled with -1e9;
  ``MultiHeadAttention(h, d_model)``: four ``Linear(D, D)`` in a ModuleList, mask
  unsqueezed over heads;
- ``PositionWiseFeedForward``: dropout between the two Linear;
- ``subsequent_mask``: ``triu(diagonal=1) == 0`` (True = keep); ``Batch.make_std_mask``:
  key padding AND subsequent mask;
- ``Embeddings`` x sqrt(D); ``PositionalEncoding`` interleaved, dropout after.
Not family members, so not here: the ``Encoder``/``Decoder`` stacks with their final norm,
``Transformer``, ``Generator``, the Noam schedule, label smoothing and the copy task.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from harness import Param, register
from harness.porting import linear_entries, nest, norm_entries

SEED = "004_4e525cb8a3aa6a12.txt"


class LayerNorm(nn.Module):
    def __init__(self, d_model: int, eps: float = 1e-6):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(d_model))
        self.beta = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True)  # unbiased (N - 1)
        return self.gamma * (x - mean) / (std + self.eps) + self.beta


class SubLayer(nn.Module):
    """Pre-LN: normalise, run the sublayer, drop out, add the residual."""

    def __init__(self, d_model: int, dropout_prob: float = 0.1):
        super().__init__()
        self.norm = LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout_prob)

    def forward(self, x, main_logic):
        return x + self.dropout(main_logic(self.norm(x)))


def scaled_dot_product_attention(query, key, value, mask=None, dropout=None):
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)  # (B, H, T, S)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    scores = scores.softmax(dim=-1)
    if dropout is not None:
        scores = dropout(scores)
    return torch.matmul(scores, value), scores


class MultiHeadAttention(nn.Module):
    def __init__(self, h: int, d_model: int, dropout_prob: float = 0.1):
        super().__init__()
        self.d_k = d_model // h
        self.h = h
        self.linears = nn.ModuleList([nn.Linear(d_model, d_model) for _ in range(4)])
        self.dropout = nn.Dropout(dropout_prob)

    def forward(self, query, key, value, mask=None):
        if mask is not None:
            mask = mask.unsqueeze(1)
        n_batches = query.size(0)
        query, key, value = [
            linear(x).view(n_batches, -1, self.h, self.d_k).transpose(1, 2)  # (B, H, L, d_k)
            for linear, x in zip(self.linears, (query, key, value))
        ]
        out, _ = scaled_dot_product_attention(query, key, value, mask, self.dropout)
        out = out.transpose(1, 2).contiguous().view(n_batches, -1, self.h * self.d_k)
        out = self.linears[-1](out)
        del query, key, value
        return out


class PositionWiseFeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int, dropout_prob: float = 0.1):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout_prob)

    def forward(self, x):
        return self.linear2(self.dropout(nn.functional.relu(self.linear1(x))))


class EncoderLayer(nn.Module):
    def __init__(self, d_model, attention, feed_forward, dropout_prob):
        super().__init__()
        self.d_model = d_model
        self.attention = attention
        self.feed_forward = feed_forward
        self.sub_layers = nn.ModuleList([SubLayer(d_model, dropout_prob) for _ in range(2)])

    def forward(self, x, mask):
        x = self.sub_layers[0](x, lambda x: self.attention(x, x, x, mask))
        return self.sub_layers[1](x, self.feed_forward)


class DecoderLayer(nn.Module):
    def __init__(self, d_model, self_attention, src_attention, feed_forward, dropout_prob):
        super().__init__()
        self.d_model = d_model
        self.self_attention = self_attention
        self.src_attention = src_attention
        self.feed_forward = feed_forward
        self.sub_layers = nn.ModuleList([SubLayer(d_model, dropout_prob) for _ in range(3)])

    def forward(self, x, memory, src_mask, tgt_mask):
        x = self.sub_layers[0](x, lambda x: self.self_attention(x, x, x, tgt_mask))
        x = self.sub_layers[1](x, lambda x: self.src_attention(x, memory, memory, src_mask))
        return self.sub_layers[2](x, self.feed_forward)


def subsequent_mask(size: int) -> torch.Tensor:
    """(1, T, T) bool, True = keep."""
    upper = torch.triu(torch.ones((1, size, size)), diagonal=1).type(torch.uint8)
    return upper == 0


def make_std_mask(tgt, pad_idx):
    """``Batch.make_std_mask``: (B, T, T) = key is not pad AND subsequent mask."""
    tgt_mask = (tgt != pad_idx).unsqueeze(-2)
    return tgt_mask & subsequent_mask(tgt.size(-1)).type_as(tgt_mask)


class Embeddings(nn.Module):
    def __init__(self, d_model: int, vocab_size: int):
        super().__init__()
        self.lookup_table = nn.Embedding(vocab_size, d_model)
        self.d_model = d_model

    def forward(self, x):
        return self.lookup_table(x) * math.sqrt(self.d_model)


class PositionalEncoding(nn.Module):
    def __init__(self, d_model: int, dropout_prob: float, max_len: int = 5000):
        super().__init__()
        self.dropout = nn.Dropout(dropout_prob)
        encodings = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * -(math.log(10000.0) / d_model))
        encodings[:, 0::2] = torch.sin(position * div_term)
        encodings[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("positional_encodings", encodings.unsqueeze(0))

    def forward(self, x):
        x = x + self.positional_encodings[:, : x.size(1)]
        return self.dropout(x)


# -- registry entries ------------------------------------------------------------------------

ATTN_MAP = linear_entries({"q": "linears.0", "k": "linears.1", "v": "linears.2", "o": "linears.3"})
FFN_MAP = linear_entries({"w1": "linear1", "w2": "linear2"})
NORM_FORMULA = "unbiased std, eps added to std"
LAYER_TRAITS = {
    "norm_placement": "pre", "norm_formula": NORM_FORMULA, "eps": 1e-6, "activation": "relu",
    "mask_convention": "True = keep", "fill": -1e9, "bias": True,
}
ENCODER_DROPOUT = ("self-attention weights", "attention sublayer output", "FFN hidden", "FFN sublayer output")
DECODER_DROPOUT = ("self-attention weights", "self-attention sublayer output", "cross-attention weights",
                   "cross-attention sublayer output", "FFN hidden", "FFN sublayer output")


def _sublayer_norms(count: int) -> dict:
    return {
        k: v
        for i in range(count)
        for k, v in norm_entries(f"norm{i + 1}", f"sub_layers.{i}.norm", "gamma", "beta").items()
    }


register(
    id="annotated_preln", family="attention", source=SEED, summary="4 Linear in a ModuleList",
    build=lambda cfg: MultiHeadAttention(cfg.heads, cfg.d_model, cfg.dropout),
    call=lambda m, i: m(i["query"], i["key"], i["value"], i["mask"]),
    param_map=ATTN_MAP,
    traits={
        "sublayer": "attention", "qkv_layout": "ModuleList of 4 Linear", "bias": True,
        "scale": "scores / sqrt(d_k)", "mask_convention": "True = keep", "fill": -1e9,
        "fully_masked_row": "mean of V", "dropout_sites": ("attention weights",),
    },
)
register(
    id="annotated_preln", family="norm", source=SEED, summary="custom LayerNorm",
    build=lambda cfg: LayerNorm(cfg.d_model), call=lambda m, i: m(i["x"]),
    param_map={"weight": Param("gamma"), "bias": Param("beta")},
    traits={"norm_formula": NORM_FORMULA, "eps": 1e-6, "std": "unbiased (N-1), eps added to std"},
)
register(
    id="annotated_preln", family="ffn", source=SEED, summary="dropout between the Linear",
    build=lambda cfg: PositionWiseFeedForward(cfg.d_model, cfg.d_ff, cfg.dropout),
    call=lambda m, i: m(i["x"]), param_map=FFN_MAP,
    traits={"sublayer": "ffn", "activation": "relu", "dropout_sites": ("hidden",)},
)
register(
    id="annotated_preln", family="encoder_layer", source=SEED, summary="pre-LN, custom LayerNorm",
    build=lambda cfg: EncoderLayer(
        cfg.d_model, MultiHeadAttention(cfg.heads, cfg.d_model, cfg.dropout),
        PositionWiseFeedForward(cfg.d_model, cfg.d_ff, cfg.dropout), cfg.dropout,
    ),
    call=lambda m, i: m(i["x"], i["pad"][:, None, :]),  # Batch.src_mask: (B, 1, S) True = keep
    param_map={**nest(ATTN_MAP, "self_attn.", "attention."),
               **nest(FFN_MAP, "ffn.", "feed_forward."), **_sublayer_norms(2)},
    traits={**LAYER_TRAITS, "dropout_sites": ENCODER_DROPOUT},
)
register(
    id="annotated_preln", family="decoder_layer", source=SEED, summary="pre-LN, custom LayerNorm",
    build=lambda cfg: DecoderLayer(
        cfg.d_model, MultiHeadAttention(cfg.heads, cfg.d_model, cfg.dropout),
        MultiHeadAttention(cfg.heads, cfg.d_model, cfg.dropout),
        PositionWiseFeedForward(cfg.d_model, cfg.d_ff, cfg.dropout), cfg.dropout,
    ),
    call=lambda m, i: m(i["x"], i["memory"], i["src_pad"][:, None, :], i["tgt_mask"]),
    param_map={**nest(ATTN_MAP, "self_attn.", "self_attention."),
               **nest(ATTN_MAP, "cross_attn.", "src_attention."),
               **nest(FFN_MAP, "ffn.", "feed_forward."), **_sublayer_norms(3)},
    traits={**LAYER_TRAITS, "dropout_sites": DECODER_DROPOUT},
)
register(
    id="annotated_preln", family="positional_encoding", source=SEED,
    summary="interleaved, dropout after",
    build=lambda cfg: PositionalEncoding(cfg.d_model, cfg.dropout), call=lambda m, i: m(i["x"]),
    traits={"pe_layout": "interleaved sin/cos", "pe_frequencies": "10000^(-2i/D)",
            "dropout_sites": ("after the add",), "internal_dtype": "float32"},  # the table is built in float32
)
register(
    id="annotated_preln", family="embedding", source=SEED, summary="lookup x sqrt(D)",
    build=lambda cfg: Embeddings(cfg.d_model, cfg.vocab), call=lambda m, i: m(i["tokens"]),
    param_map={"weight": Param("lookup_table.weight")},
    traits={"embedding_scale": "sqrt(D)", "pad_rows": "kept"},
)
register(
    id="annotated_preln", family="masks", source=SEED, summary="subsequent_mask, make_std_mask",
    build=lambda cfg: None,
    call=lambda m, i: {
        "causal": lambda: subsequent_mask(i["tokens"].shape[1])[0],
        "pad": lambda: i["tokens"] != i["pad_idx"],  # Batch.src_mask, squeezed
        "target": lambda: make_std_mask(i["tokens"], i["pad_idx"]),
    }[i["case"]](),
    traits={"mask_convention": "True = keep", "causal_mask": "tril", "pad_mask": "tokens != pad",
            "target_mask": "causal & key not pad"},
)
