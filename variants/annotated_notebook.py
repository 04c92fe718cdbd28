"""Seed 001_fda7eea54f03ebb8.txt: an annotated-transformer notebook (components only).

Faithful to the notebook's code, in the project's names:
- ``attention()`` divides the **key** by sqrt(d_k) inside the matmul
  (``q @ (k^T / sqrt(d_k))``), fills ``mask == 0`` with -1e9, returns (out, p_attn);
- ``MultiHeadedAttention``: four deep-copied ``nn.Linear(D, D)`` (with bias) in a
  ModuleList, the last the output projection; keeps the last ``attn`` weights;
- masks are **1 = keep**: ``subsequent_mask`` builds a numpy ``triu(k=1)`` and returns
  ``1 - mask`` as uint8;
- ``Embeddings`` scale by sqrt(D); ``PositionalEncoding`` is the paper's interleaved table
  with dropout after the add.
Deviations from the notebook: ``torch.autograd.Variable`` (a no-op since torch 0.4) is
dropped; nothing else.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from harness import Param, layers, linear_entries, register, register_decoding

SEED = "001_fda7eea54f03ebb8.txt"


class Embeddings(nn.Module):
    def __init__(self, d_model: int, vocab: int):
        super().__init__()
        self.lut = nn.Embedding(vocab, d_model)
        self.d_model = d_model

    def forward(self, x):
        return self.lut(x) * math.sqrt(self.d_model)


class PositionalEncoding(nn.Module):
    def __init__(self, d_model: int, p_dropout: float = 0.1, max_len: int = 5000):
        super().__init__()
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0))  # (1, max_len, D)
        self.dropout = nn.Dropout(p=p_dropout)

    def forward(self, x):
        x = x + self.pe[:, : x.size(1)].detach()
        return self.dropout(x)


def subsequent_mask(size: int) -> torch.Tensor:
    """(1, T, T) uint8, 1 = keep (lower triangle with the diagonal)."""
    upper = np.triu(np.ones((1, size, size)), k=1).astype("uint8")
    return torch.from_numpy(1 - upper)


def attention(query, key, value, mask=None, dropout=None):
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1) / math.sqrt(d_k))  # (B, H, T, S)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    p_attn = F.softmax(scores, dim=-1)
    if dropout is not None:
        p_attn = dropout(p_attn)
    return torch.matmul(p_attn, value), p_attn


def clones(module: nn.Module, n: int) -> nn.ModuleList:
    return nn.ModuleList([copy.deepcopy(module) for _ in range(n)])


class MultiHeadedAttention(nn.Module):
    def __init__(self, head: int, embedding_dim: int, p_dropout: float = 0.1):
        super().__init__()
        assert embedding_dim % head == 0
        self.d_k = embedding_dim // head
        self.head = head
        self.linears = clones(nn.Linear(embedding_dim, embedding_dim), 4)
        self.attn = None
        self.dropout = nn.Dropout(p=p_dropout)

    def forward(self, query, key, value, mask=None):
        if mask is not None:
            mask = mask.unsqueeze(1)  # (B, 1, T, S), broadcast over heads
        batch = query.size(0)
        query, key, value = [
            linear(x).view(batch, -1, self.head, self.d_k).transpose(1, 2)  # (B, H, L, d_k)
            for linear, x in zip(self.linears, (query, key, value))
        ]
        x, self.attn = attention(query, key, value, mask, self.dropout)
        x = x.transpose(1, 2).contiguous().view(batch, -1, self.head * self.d_k)  # (B, T, D)
        return self.linears[-1](x)


# -- registry entries ------------------------------------------------------------------------

register(
    id="annotated", family="attention", source=SEED,
    summary="4 cloned Linear, key / sqrt(d_k) inside the matmul",
    build=lambda cfg: MultiHeadedAttention(cfg.heads, cfg.d_model, cfg.dropout),
    call=lambda m, i: m(i["query"], i["key"], i["value"], i["mask"].to(torch.uint8)),
    param_map=linear_entries({"q": "linears.0", "k": "linears.1", "v": "linears.2", "o": "linears.3"}),
    traits={
        "sublayer": "attention", "qkv_layout": "ModuleList of 4 Linear", "bias": True,
        "scale": "k / sqrt(d_k) inside the matmul", "mask_convention": "1 = keep (uint8)",
        "fill": -1e9, "fully_masked_row": "mean of V", "dropout_sites": ("attention weights",),
    },
)
register(
    id="annotated", family="positional_encoding", source=SEED, reference=True,
    summary="paper's interleaved table, dropout after",
    build=lambda cfg: PositionalEncoding(cfg.d_model, cfg.dropout),
    call=lambda m, i: m(i["x"]),
    traits={"pe_layout": "interleaved sin/cos", "pe_frequencies": "10000^(-2i/D)",
            "dropout_sites": ("after the add",), "internal_dtype": "float32"},  # the table is built in float32
)
register(
    id="annotated", family="embedding", source=SEED, summary="lookup x sqrt(D)",
    build=lambda cfg: Embeddings(cfg.d_model, cfg.vocab), call=lambda m, i: m(i["tokens"]),
    param_map={"weight": Param("lut.weight")},
    traits={"embedding_scale": "sqrt(D)", "pad_rows": "kept"},
)
register(
    id="annotated", family="masks", source=SEED, summary="numpy triu, 1 = keep",
    build=lambda cfg: None,
    call=lambda m, i: subsequent_mask(i["tokens"].shape[1])[0].bool().to(i["tokens"].device),  # numpy: CPU
    traits={"cases": ("causal",), "mask_convention": "1 = keep (uint8)", "causal_mask": "tril",
            "note": "the notebook builds only subsequent_mask"},
)


# == A whole model from these components =====================================================
# The notebook stops at its components; it shows no layers, stacks or ``make_model``.
# Its model is therefore the annotated transformer's ``make_model`` structure as the 004
# write-up writes it (pre-LN layers, custom LayerNorm, Generator), built with this
# notebook's own ``MultiHeadedAttention`` (key / sqrt(d_k) inside the matmul),
# ``Embeddings`` and ``PositionalEncoding``. Expected equivalent to 004's model: the
# components differ in how they compute, not in what.

# Imported here, not at the top: the 001 variants above register before the 004 ones, and
# `list`, `check` and the reports show the registry in that order.
from variants import annotated_preln as _preln  # noqa: E402


def make_model(cfg):
    return _preln.make_model(
        cfg.vocab, cfg.vocab, layers(cfg), cfg.d_model, cfg.d_ff, cfg.heads, cfg.dropout,
        attention=MultiHeadedAttention(cfg.heads, cfg.d_model, cfg.dropout),
        embeddings=Embeddings, positional_encoding=PositionalEncoding(cfg.d_model, cfg.dropout),
    )


register(
    id="annotated", family="encoder_decoder", source=SEED,
    summary="001's attention/embeddings/PE in the annotated make_model (layers from 004)",
    build=make_model, call=_preln.annotated_model_call,
    param_map=lambda cfg: _preln.annotated_model_map(cfg, embedding_table="lut.weight"),
    traits={**_preln.MODEL_TRAITS, "scale": "k / sqrt(d_k) inside the matmul"},  # same dropout draws
)
register_decoding("encoder_decoder", "annotated", prepare=_preln._annotated_prepare,
                  step=_preln._annotated_step, greedy=_preln.annotated_greedy)
