"""Seed 000_4f2b0681cf261e4d.txt: a tensor2tensor-style encoder-decoder Transformer, pre-norm.

Rewritten in the project's names, faithful in structure, parameter layout, order of
operations and quirks. Deviations from the paper that the write-up makes (and that this
file keeps):
- attention projections have no bias (``Linear(..., bias=False)``), xavier-uniform init;
- q is scaled **in place** (``q.mul_(d_k ** -0.5)``) before QK^T;
- the mask is **True = masked** (pad or future), filled with -1e9;
- the layers are **pre-norm**, ``nn.LayerNorm(eps=1e-6)`` before each sublayer; the
  stacks end with one more LayerNorm;
- ``EncoderLayer``/``DecoderLayer`` always build 8 heads (``head_size`` is never passed);
- positional encoding is ``[sin | cos]`` concatenated (not interleaved) with timescales
  ``exp(-i * ln(1e4) / (D/2 - 1))`` (not the paper's frequencies);
- embeddings: pad rows zeroed, then scaled by sqrt(D) (shared + tied in the
  whole model at the end of this file);
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

from harness import (
    PAD,
    Param,
    Tied,
    Zero,
    dropout_sites,
    get_variant,
    layers,
    linear_entries,
    masked,
    nest,
    norm_entries,
    register,
    register_decoding,
)

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

    def __init__(self, hidden_size: int, filter_size: int, dropout_rate: float, head_size: int = 8):
        super().__init__()
        self.self_attention_norm = nn.LayerNorm(hidden_size, eps=1e-6)
        self.self_attention = MultiHeadAttention(hidden_size, dropout_rate, head_size)
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

    def __init__(self, hidden_size: int, filter_size: int, dropout_rate: float, head_size: int = 8):
        super().__init__()
        self.self_attention_norm = nn.LayerNorm(hidden_size, eps=1e-6)
        self.self_attention = MultiHeadAttention(hidden_size, dropout_rate, head_size)
        self.self_attention_dropout = nn.Dropout(dropout_rate)
        self.enc_dec_attention_norm = nn.LayerNorm(hidden_size, eps=1e-6)
        self.enc_dec_attention = MultiHeadAttention(hidden_size, dropout_rate, head_size)
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


def _embed(module, inputs):
    """The module takes its pad index at construction, the family's call per call: set it."""
    module.pad_idx = inputs["pad_idx"]
    return module(inputs["tokens"])


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
    call=lambda m, i: _embed(m, i),
    param_map={"weight": Param("vocab_embedding.weight")},
    traits={"embedding_scale": "sqrt(D)", "pad_rows": "zeroed"},
)


def canonical_masks(case: str, tokens, pad_idx):
    """This write-up's builders, converted to the canonical convention (True = may attend)."""
    batch, length = tokens.shape
    if case == "causal":
        return ~create_trg_self_mask(length, tokens.device)[0]
    if case == "pad":
        return ~create_pad_mask(tokens, pad_idx)[:, 0, :]
    return (~create_trg_self_mask(length, tokens.device)).expand(batch, length, length)  # the decoder's self mask


register(
    id="t2t", family="masks", source=SEED, summary="True = masked; self mask is future-only",
    build=lambda cfg: None,
    call=lambda m, i: canonical_masks(i["case"], i["tokens"], i["pad_idx"]),
    traits={"mask_convention": "True = masked", "causal_mask": "tril",
            "pad_mask": "tokens != pad", "target_mask": "causal only (pad embeddings zeroed)"},
)


# == The whole model =========================================================================
# The write-up's Encoder/Decoder stacks (each ending with LayerNorm(eps=1e-6)) and its
# Transformer: one embedding table shared by source and target (share_target_embedding),
# pad rows zeroed, x sqrt(D), [sin | cos] positions, the target **shifted right inside
# decode** (the first decoder input is a zero vector), logits through the transposed
# embedding weight (no output bias). Deviations: the layer count, width and head count
# come from the config (the write-up's layers always build 8 heads; here ``head_size`` is
# passed through, 8 when the config says 8); the write-up's ``utils`` pad index is PAD.
# Its decoding loop is not shown in the post; ``t2t_greedy`` is the loop the model implies
# (a pad token appended after the prefix, dropped by the shift; the k/v cache of the
# encoder-decoder attention passed to ``decode`` on every step).



class Encoder(nn.Module):
    def __init__(self, hidden_size, filter_size, dropout_rate, n_layers, head_size=8):
        super().__init__()
        encoders = [EncoderLayer(hidden_size, filter_size, dropout_rate, head_size) for _ in range(n_layers)]
        self.layers = nn.ModuleList(encoders)
        self.last_norm = nn.LayerNorm(hidden_size, eps=1e-6)

    def forward(self, inputs, mask):
        encoder_output = inputs
        for enc_layer in self.layers:
            encoder_output = enc_layer(encoder_output, mask)
        return self.last_norm(encoder_output)


class Decoder(nn.Module):
    def __init__(self, hidden_size, filter_size, dropout_rate, n_layers, head_size=8):
        super().__init__()
        decoders = [DecoderLayer(hidden_size, filter_size, dropout_rate, head_size) for _ in range(n_layers)]
        self.layers = nn.ModuleList(decoders)
        self.last_norm = nn.LayerNorm(hidden_size, eps=1e-6)

    def forward(self, targets, enc_output, i_mask, t_self_mask, cache):
        decoder_output = targets
        for i, dec_layer in enumerate(self.layers):
            layer_cache = None
            if cache is not None:
                if i not in cache:
                    cache[i] = {}
                layer_cache = cache[i]
            decoder_output = dec_layer(decoder_output, enc_output, t_self_mask, i_mask, layer_cache)
        return self.last_norm(decoder_output)


class Transformer(nn.Module):
    def __init__(self, i_vocab_size, t_vocab_size, n_layers=6, hidden_size=512, filter_size=2048,
                 dropout_rate=0.1, share_target_embedding=True, has_inputs=True,
                 src_pad_idx=None, trg_pad_idx=None, head_size=8):
        super().__init__()
        self.hidden_size = hidden_size
        self.emb_scale = hidden_size ** 0.5
        self.has_inputs = has_inputs
        self.src_pad_idx = src_pad_idx
        self.trg_pad_idx = trg_pad_idx
        self.t_vocab_embedding = nn.Embedding(t_vocab_size, hidden_size)
        nn.init.normal_(self.t_vocab_embedding.weight, mean=0, std=hidden_size ** -0.5)
        self.t_emb_dropout = nn.Dropout(dropout_rate)
        self.decoder = Decoder(hidden_size, filter_size, dropout_rate, n_layers, head_size)
        if has_inputs:
            if not share_target_embedding:
                self.i_vocab_embedding = nn.Embedding(i_vocab_size, hidden_size)
                nn.init.normal_(self.i_vocab_embedding.weight, mean=0, std=hidden_size ** -0.5)
            else:
                self.i_vocab_embedding = self.t_vocab_embedding
            self.i_emb_dropout = nn.Dropout(dropout_rate)
            self.encoder = Encoder(hidden_size, filter_size, dropout_rate, n_layers, head_size)
        self.position = PositionEncoding(hidden_size)  # the write-up's inv_timescales buffer

    def forward(self, inputs, targets):
        enc_output, i_mask = None, None
        if self.has_inputs:
            i_mask = create_pad_mask(inputs, self.src_pad_idx)            # (B, 1, S) True = pad
            enc_output = self.encode(inputs, i_mask)
        t_mask = create_pad_mask(targets, self.trg_pad_idx)               # (B, 1, T) True = pad
        t_self_mask = create_trg_self_mask(targets.size()[1], device=targets.device)  # (1, T, T)
        return self.decode(targets, enc_output, i_mask, t_self_mask, t_mask)

    def encode(self, inputs, i_mask):
        input_embedded = self.i_vocab_embedding(inputs)
        input_embedded.masked_fill_(i_mask.squeeze(1).unsqueeze(-1), 0)
        input_embedded *= self.emb_scale
        input_embedded += self.get_position_encoding(inputs)
        input_embedded = self.i_emb_dropout(input_embedded)
        return self.encoder(input_embedded, i_mask)

    def decode(self, targets, enc_output, i_mask, t_self_mask, t_mask, cache=None):
        target_embedded = self.t_vocab_embedding(targets)
        target_embedded.masked_fill_(t_mask.squeeze(1).unsqueeze(-1), 0)
        target_embedded = target_embedded[:, :-1]                        # shifting
        target_embedded = F.pad(target_embedded, (0, 0, 1, 0))           # a zero vector first
        target_embedded *= self.emb_scale
        target_embedded += self.get_position_encoding(targets)
        target_embedded = self.t_emb_dropout(target_embedded)
        decoder_output = self.decoder(target_embedded, enc_output, i_mask, t_self_mask, cache)
        return torch.matmul(decoder_output, self.t_vocab_embedding.weight.transpose(0, 1))  # (B, T, V)

    def get_position_encoding(self, x):
        return self.position.get_position_encoding(x).to(self.t_vocab_embedding.weight.dtype)


def _t2t_prepare(model, inputs, cached):
    i_mask = create_pad_mask(inputs["src"], model.src_pad_idx)
    return {"enc_output": model.encode(inputs["src"], i_mask), "i_mask": i_mask,
            "cache": {} if cached else None}


def _t2t_step(model, state, ys):
    """Log-probabilities of the token after ``ys``: a pad token is appended, which the
    shift inside ``decode`` drops; the decoder sees [zero vector, ys]."""
    targets = F.pad(ys, (0, 1), value=model.trg_pad_idx)
    t_self_mask = create_trg_self_mask(targets.size(1), device=targets.device)
    logits = model.decode(targets, state["enc_output"], state["i_mask"], t_self_mask,
                          create_pad_mask(targets, model.trg_pad_idx), state["cache"])
    return torch.log_softmax(logits[:, -1], dim=-1)


def t2t_greedy(model, inputs, steps):
    """Greedy decoding the way the model implies: no start symbol (the zero vector is the
    start), the encoder-decoder k/v cache filled on the first step and reused."""
    state = _t2t_prepare(model, inputs, cached=True)
    ys = inputs["src"].new_zeros(inputs["src"].size(0), 0)
    for _ in range(steps):
        next_word = _t2t_step(model, state, ys).argmax(-1)
        ys = torch.cat([ys, next_word[:, None]], dim=1)
    return ys


def _t2t_model_map(cfg):
    enc, dec = get_variant("encoder_layer", "t2t").map_for(cfg), get_variant("decoder_layer", "t2t").map_for(cfg)
    out = {"src_embed.weight": Param("t_vocab_embedding.weight"),
           "tgt_embed.weight": Tied("src_embed.weight"),
           "generator.weight": Tied("src_embed.weight"), "generator.bias": Zero()}
    for i in range(layers(cfg)):
        out.update(nest(enc, f"encoder.{i}.", f"encoder.layers.{i}."))
        out.update(nest(dec, f"decoder.{i}.", f"decoder.layers.{i}."))
    out.update(norm_entries("encoder.norm", "encoder.last_norm"))
    out.update(norm_entries("decoder.norm", "decoder.last_norm"))
    return out


register(
    id="t2t", family="encoder_decoder", source=SEED,
    summary="pre-norm, shared + tied embedding, target shifted inside decode",
    build=lambda cfg: Transformer(cfg.vocab, cfg.vocab, layers(cfg), cfg.d_model, cfg.d_ff, cfg.dropout,
                                  src_pad_idx=PAD, trg_pad_idx=PAD, head_size=cfg.heads),
    call=lambda m, i: torch.log_softmax(m(i["src"], i["tgt"]), dim=-1),
    param_map=_t2t_model_map,
    traits={**LAYER_TRAITS, "final_norm": True, "embedding_scale": "sqrt(D)", "pad_rows": "zeroed",
            "shared_embeddings": True, "tied_output": True, "pe_layout": "[sin | cos] concatenated",
            "pe_frequencies": "exp(-i ln(1e4) / (D/2 - 1))", "target_shift": "inside decode (zero vector first)",
            "internal_dtype": "float32",  # the position table is built in float32
            "dropout_sites": dropout_sites(
                ("source embedding", "target embedding"),
                encoder=get_variant("encoder_layer", "t2t").traits["dropout_sites"],
                decoder=get_variant("decoder_layer", "t2t").traits["dropout_sites"]),
            "note": "logits = x @ embedding^T (log_softmax by the adapter); target pad keys not masked "
                    "(pad embeddings zeroed); cache: encoder-decoder k/v per layer"},
)
register_decoding("encoder_decoder", "t2t", prepare=_t2t_prepare, step=_t2t_step, greedy=t2t_greedy, bos=False,
                  cache="encoder-decoder k/v per layer (decoder self-attention recomputed)")
