"""Seed 000_4f2b0681cf261e4d.txt: a tensor2tensor-style encoder-decoder Transformer, pre-norm.

Rewritten in the project's names, faithful in structure, parameter layout, order of
operations and quirks. Deviations from the paper that the write-up makes (and that this
file keeps):
- attention projections have no bias (``Linear(..., bias=False)``), xavier-uniform init;
- q is scaled **in place** (``q.mul_(d_k ** -0.5)``) before QK^T;
- the mask is **True = masked** (pad or future), filled with -1e9;
- the layers are **pre-norm**, ``nn.LayerNorm(eps=1e-6)`` before each sublayer; the
  stacks (not compared here) end with one more LayerNorm;
- ``EncoderLayer``/``DecoderLayer`` always build 8 heads (``head_size`` is never passed);
- positional encoding is ``[sin | cos]`` concatenated (not interleaved) with timescales
  ``exp(-i * ln(1e4) / (D/2 - 1))`` (not the paper's frequencies);
- embeddings: pad rows zeroed, then scaled by sqrt(D) (weight tying is outside the families);
- the decoder self-attention mask is the future mask only; target padding is handled by
  zeroing pad embeddings, not by the mask.
Deviations of this file from the write-up: ``get_position_encoding`` and the embedding
step are methods of its ``Transformer``; here they are small modules of their own with the
same arithmetic. ``create_pad_mask``/``create_trg_self_mask`` come from a ``utils`` module
the post does not show; they are written as the post uses them.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from harness import register
from harness.adapt import masked
from harness.porting import Param, linear_entries, nest, norm_entries

SEED = "000_4f2b0681cf261e4d.txt"


def initialize_weight(layer: nn.Linear) -> None:
    nn.init.xavier_uniform_(layer.weight)
    if layer.bias is not None:
        nn.init.constant_(layer.bias, 0)


class FeedForwardNetwork(nn.Module):
    """Linear -> ReLU -> Dropout -> Linear, xavier init, zero bias."""

    def __init__(self, hidden_size: int, filter_size: int, dropout_rate: float):
        super().__init__()
        self.layer1 = nn.Linear(hidden_size, filter_size)
        self.relu = nn.ReLU()
        self.dropout = nn.Dropout(dropout_rate)
        self.layer2 = nn.Linear(filter_size, hidden_size)
        initialize_weight(self.layer1)
        initialize_weight(self.layer2)

    def forward(self, x):
        return self.layer2(self.dropout(self.relu(self.layer1(x))))


class MultiHeadAttention(nn.Module):
    """Bias-free projections; q scaled in place; ``mask`` (B, T|1, S) True = masked."""

    def __init__(self, hidden_size: int, dropout_rate: float, head_size: int = 8):
        super().__init__()
        self.head_size = head_size
        self.att_size = hidden_size // head_size  # d_k
        self.scale = self.att_size ** -0.5
        self.linear_q = nn.Linear(hidden_size, head_size * self.att_size, bias=False)
        self.linear_k = nn.Linear(hidden_size, head_size * self.att_size, bias=False)
        self.linear_v = nn.Linear(hidden_size, head_size * self.att_size, bias=False)
        for layer in (self.linear_q, self.linear_k, self.linear_v):
            initialize_weight(layer)
        self.att_dropout = nn.Dropout(dropout_rate)
        self.output_layer = nn.Linear(head_size * self.att_size, hidden_size, bias=False)
        initialize_weight(self.output_layer)

    def forward(self, q, k, v, mask, cache=None):
        in_shape = q.size()
        d_k = d_v = self.att_size
        batch = q.size(0)
        q = self.linear_q(q).view(batch, -1, self.head_size, d_k)  # (B, T, H, d_k)
        if cache is not None and "encdec_k" in cache:
            k, v = cache["encdec_k"], cache["encdec_v"]
        else:
            k = self.linear_k(k).view(batch, -1, self.head_size, d_k)  # (B, S, H, d_k)
            v = self.linear_v(v).view(batch, -1, self.head_size, d_v)
            if cache is not None:
                cache["encdec_k"], cache["encdec_v"] = k, v
        q = q.transpose(1, 2)                  # (B, H, T, d_k)
        v = v.transpose(1, 2)                  # (B, H, S, d_v)
        k = k.transpose(1, 2).transpose(2, 3)  # (B, H, d_k, S)
        q.mul_(self.scale)                     # in place, before QK^T
        x = torch.matmul(q, k)                 # (B, H, T, S)
        x.masked_fill_(mask.unsqueeze(1), -1e9)
        x = torch.softmax(x, dim=3)
        x = self.att_dropout(x)
        x = x.matmul(v)                        # (B, H, T, d_v)
        x = x.transpose(1, 2).contiguous()     # (B, T, H, d_v)
        x = x.view(batch, -1, self.head_size * d_v)
        x = self.output_layer(x)
        assert x.size() == in_shape
        return x


class EncoderLayer(nn.Module):
    """Pre-norm: x + dropout(attn(norm(x))), then x + dropout(ffn(norm(x)))."""

    def __init__(self, hidden_size: int, filter_size: int, dropout_rate: float):
        super().__init__()
        self.self_attention_norm = nn.LayerNorm(hidden_size, eps=1e-6)
        self.self_attention = MultiHeadAttention(hidden_size, dropout_rate)
        self.self_attention_dropout = nn.Dropout(dropout_rate)
        self.ffn_norm = nn.LayerNorm(hidden_size, eps=1e-6)
        self.ffn = FeedForwardNetwork(hidden_size, filter_size, dropout_rate)
        self.ffn_dropout = nn.Dropout(dropout_rate)

    def forward(self, x, mask):
        y = self.self_attention_norm(x)
        y = self.self_attention(y, y, y, mask)
        x = x + self.self_attention_dropout(y)
        y = self.ffn_norm(x)
        y = self.ffn(y)
        return x + self.ffn_dropout(y)


class DecoderLayer(nn.Module):
    """Pre-norm self-attention, encoder-decoder attention (skipped without memory), FFN."""

    def __init__(self, hidden_size: int, filter_size: int, dropout_rate: float):
        super().__init__()
        self.self_attention_norm = nn.LayerNorm(hidden_size, eps=1e-6)
        self.self_attention = MultiHeadAttention(hidden_size, dropout_rate)
        self.self_attention_dropout = nn.Dropout(dropout_rate)
        self.enc_dec_attention_norm = nn.LayerNorm(hidden_size, eps=1e-6)
        self.enc_dec_attention = MultiHeadAttention(hidden_size, dropout_rate)
        self.enc_dec_attention_dropout = nn.Dropout(dropout_rate)
        self.ffn_norm = nn.LayerNorm(hidden_size, eps=1e-6)
        self.ffn = FeedForwardNetwork(hidden_size, filter_size, dropout_rate)
        self.ffn_dropout = nn.Dropout(dropout_rate)

    def forward(self, x, enc_output, self_mask, i_mask, cache):
        y = self.self_attention_norm(x)
        y = self.self_attention(y, y, y, self_mask)
        x = x + self.self_attention_dropout(y)
        if enc_output is not None:
            y = self.enc_dec_attention_norm(x)
            y = self.enc_dec_attention(y, enc_output, enc_output, i_mask, cache)
            x = x + self.enc_dec_attention_dropout(y)
        y = self.ffn_norm(x)
        y = self.ffn(y)
        return x + self.ffn_dropout(y)


class PositionEncoding(nn.Module):
    """The write-up's ``Transformer.get_position_encoding``: [sin | cos] with its timescales."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.hidden_size = hidden_size
        num_timescales = hidden_size // 2
        log_increment = math.log(10000.0 / 1.0) / max(num_timescales - 1, 1)
        inv_timescales = 1.0 * torch.exp(
            torch.arange(num_timescales, dtype=torch.float32) * -log_increment
        )
        self.register_buffer("inv_timescales", inv_timescales)

    def get_position_encoding(self, x):
        max_length = x.size()[1]
        position = torch.arange(max_length, dtype=torch.float32, device=x.device)
        scaled_time = position.unsqueeze(1) * self.inv_timescales.unsqueeze(0)
        signal = torch.cat([torch.sin(scaled_time), torch.cos(scaled_time)], dim=1)
        signal = F.pad(signal, (0, 0, 0, self.hidden_size % 2))
        return signal.view(1, max_length, self.hidden_size)

    def forward(self, x):
        return x + self.get_position_encoding(x).to(x.dtype)


class Embedding(nn.Module):
    """The write-up's ``encode`` embedding step: lookup, zero pad rows, scale by sqrt(D)."""

    def __init__(self, vocab_size: int, hidden_size: int, pad_idx: int):
        super().__init__()
        self.pad_idx = pad_idx
        self.emb_scale = hidden_size ** 0.5
        self.vocab_embedding = nn.Embedding(vocab_size, hidden_size)
        nn.init.normal_(self.vocab_embedding.weight, mean=0, std=hidden_size ** -0.5)

    def forward(self, tokens):
        i_mask = create_pad_mask(tokens, self.pad_idx)  # (B, 1, S) True = pad
        embedded = self.vocab_embedding(tokens)
        embedded.masked_fill_(i_mask.squeeze(1).unsqueeze(-1), 0)
        embedded *= self.emb_scale
        return embedded


def create_pad_mask(tokens, pad):
    """(B, 1, S), True = pad (masked)."""
    return (tokens == pad).unsqueeze(-2)


def create_trg_self_mask(target_len, device=None):
    """(1, T, T), True = future position (masked): the strict upper triangle."""
    ones = torch.ones(target_len, target_len, dtype=torch.uint8, device=device)
    return torch.triu(ones, diagonal=1).unsqueeze(0).bool()


# -- registry entries ------------------------------------------------------------------------

ATTN_MAP = linear_entries(
    {"q": "linear_q", "k": "linear_k", "v": "linear_v", "o": "output_layer"}, bias=False
)
FFN_MAP = linear_entries({"w1": "layer1", "w2": "layer2"})
EIGHT_HEADS = lambda cfg: None if cfg.heads == 8 else f"its layers always build 8 heads, config has {cfg.heads}"  # noqa: E731
ATTN_TRAITS = {
    "sublayer": "attention", "qkv_layout": "3 Linear + output Linear", "bias": False,
    "scale": "q *= d_k^-0.5 in place, before QK^T", "mask_convention": "True = masked",
    "fill": -1e9, "fully_masked_row": "mean of V", "dropout_sites": ("attention weights",),
}
LAYER_TRAITS = {
    "norm_placement": "pre", "norm_formula": "layernorm", "eps": 1e-6, "activation": "relu",
    "mask_convention": "True = masked", "fill": -1e9, "bias": "attention bias-free",
}

register(
    id="t2t", family="attention", source=SEED, summary="bias-free MHA, q scaled in place",
    build=lambda cfg: MultiHeadAttention(cfg.d_model, cfg.dropout, head_size=cfg.heads),
    call=lambda m, i: m(i["query"], i["key"], i["value"], masked(i["mask"])),
    param_map=ATTN_MAP, traits=ATTN_TRAITS,
)
register(
    id="t2t", family="ffn", source=SEED, summary="Linear-ReLU-Dropout-Linear",
    build=lambda cfg: FeedForwardNetwork(cfg.d_model, cfg.d_ff, cfg.dropout),
    call=lambda m, i: m(i["x"]), param_map=FFN_MAP,
    traits={"sublayer": "ffn", "activation": "relu", "dropout_sites": ("hidden",)},
)
register(
    id="t2t_layernorm", family="norm", source=SEED, summary="nn.LayerNorm(eps=1e-6)",
    build=lambda cfg: nn.LayerNorm(cfg.d_model, eps=1e-6),
    call=lambda m, i: m(i["x"]), param_map={"weight": Param("weight"), "bias": Param("bias")},
    traits={"norm_formula": "layernorm", "eps": 1e-6, "std": "biased, eps inside sqrt"},
)
register(
    id="t2t", family="encoder_layer", source=SEED, summary="pre-norm, LayerNorm eps 1e-6",
    build=lambda cfg: EncoderLayer(cfg.d_model, cfg.d_ff, cfg.dropout),
    call=lambda m, i: m(i["x"], masked(i["pad"])[:, None, :]),  # (B, 1, S) True = pad
    param_map={
        **nest(ATTN_MAP, "self_attn.", "self_attention."),
        **nest(FFN_MAP, "ffn.", "ffn."),
        **norm_entries("norm1", "self_attention_norm"),
        **norm_entries("norm2", "ffn_norm"),
    },
    traits={**LAYER_TRAITS, "dropout_sites": ("self-attention weights", "self_attention_dropout",
                                              "FFN hidden", "ffn_dropout")},
    supports=EIGHT_HEADS,
)
register(
    id="t2t", family="decoder_layer", source=SEED, summary="pre-norm, LayerNorm eps 1e-6",
    build=lambda cfg: DecoderLayer(cfg.d_model, cfg.d_ff, cfg.dropout),
    call=lambda m, i: m(
        i["x"], i["memory"], masked(i["tgt_mask"]), masked(i["src_pad"])[:, None, :], None
    ),
    param_map={
        **nest(ATTN_MAP, "self_attn.", "self_attention."),
        **nest(ATTN_MAP, "cross_attn.", "enc_dec_attention."),
        **nest(FFN_MAP, "ffn.", "ffn."),
        **norm_entries("norm1", "self_attention_norm"),
        **norm_entries("norm2", "enc_dec_attention_norm"),
        **norm_entries("norm3", "ffn_norm"),
    },
    traits={**LAYER_TRAITS, "dropout_sites": (
        "self-attention weights", "self_attention_dropout", "enc-dec attention weights",
        "enc_dec_attention_dropout", "FFN hidden", "ffn_dropout")},
    supports=EIGHT_HEADS,
)
register(
    id="t2t", family="positional_encoding", source=SEED, summary="[sin | cos], t2t timescales",
    build=lambda cfg: PositionEncoding(cfg.d_model), call=lambda m, i: m(i["x"]),
    traits={"pe_layout": "[sin | cos] concatenated",
            "pe_frequencies": "exp(-i ln(1e4) / (D/2 - 1))", "internal_dtype": "float32",
            "note": "no dropout inside (the write-up drops out after it, in encode)"},
)
register(
    id="t2t", family="embedding", source=SEED, summary="pad rows zeroed, x sqrt(D)",
    build=lambda cfg: Embedding(cfg.vocab, cfg.d_model, pad_idx=0),
    call=lambda m, i: m(i["tokens"]),
    param_map={"weight": Param("vocab_embedding.weight")},
    traits={"embedding_scale": "sqrt(D)", "pad_rows": "zeroed"},
)


def canonical_masks(case: str, tokens, pad_idx):
    """This write-up's builders, converted to the canonical convention (True = may attend)."""
    batch, length = tokens.shape
    if case == "causal":
        return ~create_trg_self_mask(length)[0]
    if case == "pad":
        return ~create_pad_mask(tokens, pad_idx)[:, 0, :]
    return (~create_trg_self_mask(length)).expand(batch, length, length)  # the decoder's self mask


register(
    id="t2t", family="masks", source=SEED, summary="True = masked; self mask is future-only",
    build=lambda cfg: None,
    call=lambda m, i: canonical_masks(i["case"], i["tokens"], i["pad_idx"]),
    traits={"mask_convention": "True = masked", "causal_mask": "tril",
            "pad_mask": "tokens != pad", "target_mask": "causal only (pad embeddings zeroed)"},
)
