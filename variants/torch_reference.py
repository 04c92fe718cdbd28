"""PyTorch's own modules, the references every write-up is measured against.

- ``nn.MultiheadAttention(batch_first=True)``: its bool ``attn_mask`` means **True = NOT
  allowed** (the opposite of the project's convention); the adapter inverts it and
  repeats it per head to (B*H, T, S). In eval mode under ``torch.no_grad()`` it takes a
  fused fast path (``aten::_native_multi_head_attention``); with autograd on it runs
  ``F.multi_head_attention_forward``, which calls SDPA. The harness records which path
  ran: on a row with no visible key the two disagree (zeros vs NaN in torch 2.13).
- ``F.scaled_dot_product_attention`` behind four ``nn.Linear`` (``SDPAttention``).
- ``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer`` with ``norm_first``
  False (post-norm, the paper) and True (pre-norm), ReLU, eps 1e-5; a pre-norm copy with
  eps 1e-6 matches the 000 write-up's norms; a GELU pre-norm copy matches nanoGPT. The
  encoder layer with a causal mask is also the decoder-only reference.
- ``nn.LayerNorm``, ``nn.RMSNorm``, ``nn.Embedding``, and a Linear-ReLU-Dropout-Linear
  ``nn.Sequential`` as the feed-forward reference.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from harness import (
    SPREADS,
    STEP_COUNTS,
    Param,
    Tied,
    Zero,
    absent_norm,
    dropout_sites,
    fused_entries,
    layers,
    linear_entries,
    masked,
    nest,
    noam,
    norm_entries,
    optimizer_rates,
    per_head,
    register,
    register_decoding,
    smoothed_target,
)
from variants.pytorch_behaviour import GELU_FAST_PATH, SDPA_HALF_FULLY_MASKED

SOURCE = "torch"


class SDPAttention(nn.Module):
    """Four Linear around ``F.scaled_dot_product_attention``; mask True = may attend."""

    def __init__(self, d_model: int, heads: int, dropout: float = 0.0):
        super().__init__()
        self.heads = heads
        self.dropout = dropout
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.o = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None, is_causal=False):
        B, T, D = query.shape
        split = lambda x: x.view(B, -1, self.heads, D // self.heads).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.q(query)), split(self.k(key)), split(self.v(value))   # (B, H, L, d_k)
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=None if is_causal else mask[:, None],
            dropout_p=self.dropout if self.training else 0.0, is_causal=is_causal,
        )
        return self.o(y.transpose(1, 2).reshape(B, T, D))


MHA_MAP = {**fused_entries("in_proj_weight", "in_proj_bias", ("q", "k", "v")),
           **linear_entries({"o": "out_proj"})}
FFN_MAP = linear_entries({"w1": "linear1", "w2": "linear2"})

def _mha(m, i):
    """A pure causal mask goes in as (T, T) with the is_causal hint, as torch's docs advise;
    anything else as the per-head (B*H, T, S) mask, True = not allowed."""
    if i.get("causal"):
        future = masked(i["mask"][0])  # (T, T) True = not allowed
        return m(i["query"], i["key"], i["value"], attn_mask=future, is_causal=True, need_weights=False)[0]
    return m(i["query"], i["key"], i["value"],
             attn_mask=per_head(masked(i["mask"]), m.num_heads), need_weights=False)[0]


register(
    id="torch_mha", family="attention", source=SOURCE, reference=True,
    summary="nn.MultiheadAttention(batch_first=True)",
    build=lambda cfg: nn.MultiheadAttention(cfg.d_model, cfg.heads, dropout=cfg.dropout, batch_first=True),
    call=_mha,
    param_map=MHA_MAP,
    traits={"sublayer": "attention", "qkv_layout": "in_proj_weight (3D, D)", "bias": True,
            "scale": "inside SDPA (autograd path)", "mask_convention": "bool True = not allowed",
            "fill": "sdpa", "fully_masked_row": "zeros", "dropout_sites": ("attention weights",)},
)
register(
    id="torch_sdpa", family="attention", source=SOURCE,
    summary="F.scaled_dot_product_attention + 4 Linear",
    build=lambda cfg: SDPAttention(cfg.d_model, cfg.heads, cfg.dropout),
    call=lambda m, i: m(i["query"], i["key"], i["value"], mask=i["mask"], is_causal=i.get("causal", False)),
    param_map=linear_entries({"q": "q", "k": "k", "v": "v", "o": "o"}),
    traits={"sublayer": "attention", "qkv_layout": "4 Linear", "bias": True, "scale": "inside SDPA",
            "mask_convention": "bool True = may attend", "fill": "sdpa", "fully_masked_row": "zeros",
            "dropout_sites": ("attention weights",),
            "path_findings": {"fully_masked": SDPA_HALF_FULLY_MASKED}},
)
register(
    id="torch_layernorm", family="norm", source=SOURCE, reference=True, summary="nn.LayerNorm (eps 1e-5)",
    build=lambda cfg: nn.LayerNorm(cfg.d_model), call=lambda m, i: m(i["x"]),
    param_map={"weight": Param("weight"), "bias": Param("bias")},
    traits={"norm_formula": "layernorm", "eps": 1e-5, "std": "biased, eps inside sqrt"},
)
register(
    id="torch_rmsnorm", family="norm", source=SOURCE, summary="nn.RMSNorm (no centring, no bias)",
    build=lambda cfg: nn.RMSNorm(cfg.d_model), call=lambda m, i: m(i["x"]),
    param_map={"weight": Param("weight"), "bias": Zero()},
    # torch's docs give the default eps as finfo(x.dtype).eps; measured on CPU (torch 2.13), a
    # bfloat16/float16 input is normalised in float32 with float32's eps (the spec check
    # found it: 0.51 max error against the documented eps in bfloat16, 0.009 against this).
    traits={"norm_formula": "rms", "eps": "finfo(dtype).eps, float32's below float32",
            "std": "root mean square, no centring"},
)
register(
    id="torch_ffn", family="ffn", source=SOURCE, reference=True, summary="nn.Sequential Linear-ReLU-Dropout-Linear",
    build=lambda cfg: nn.Sequential(nn.Linear(cfg.d_model, cfg.d_ff), nn.ReLU(),
                                    nn.Dropout(cfg.dropout), nn.Linear(cfg.d_ff, cfg.d_model)),
    call=lambda m, i: m(i["x"]), param_map=linear_entries({"w1": "0", "w2": "3"}),
    traits={"sublayer": "ffn", "activation": "relu", "dropout_sites": ("hidden",)},
)


def _encoder(cfg, norm_first, eps=1e-5, activation="relu"):
    return nn.TransformerEncoderLayer(
        cfg.d_model, cfg.heads, cfg.d_ff, dropout=cfg.dropout, activation=activation,
        layer_norm_eps=eps, batch_first=True, norm_first=norm_first,
    )


def _decoder(cfg, norm_first, eps=1e-5):
    return nn.TransformerDecoderLayer(
        cfg.d_model, cfg.heads, cfg.d_ff, dropout=cfg.dropout, layer_norm_eps=eps,
        batch_first=True, norm_first=norm_first,
    )


ENCODER_MAP = {**nest(MHA_MAP, "self_attn.", "self_attn."), **nest(FFN_MAP, "ffn.", ""),
               **norm_entries("norm1", "norm1"), **norm_entries("norm2", "norm2")}
DECODER_MAP = {**nest(MHA_MAP, "self_attn.", "self_attn."),
               **nest(MHA_MAP, "cross_attn.", "multihead_attn."), **nest(FFN_MAP, "ffn.", ""),
               **norm_entries("norm1", "norm1"), **norm_entries("norm2", "norm2"),
               **norm_entries("norm3", "norm3")}
LAYER_TRAITS = {"norm_formula": "layernorm", "activation": "relu", "bias": True,
                "mask_convention": "bool True = not allowed", "fill": "sdpa",
}
ENCODER_DROPOUT = ("self-attention weights", "dropout1", "FFN hidden", "dropout2")
DECODER_DROPOUT = ("self-attention weights", "dropout1", "cross-attention weights", "dropout2",
                   "FFN hidden", "dropout3")
LAYERS = (  # id, norm_first, eps, reference
    ("torch_post", False, 1e-5, True),
    ("torch_pre", True, 1e-5, False),
    ("torch_pre_eps1e6", True, 1e-6, False),
)

for vid, norm_first, eps, ref in LAYERS:
    placement = "pre" if norm_first else "post"
    register(
        id=vid, family="encoder_layer", source=SOURCE, reference=ref,
        summary=f"nn.TransformerEncoderLayer(norm_first={norm_first}, layer_norm_eps={eps:g})",
        build=lambda cfg, nf=norm_first, e=eps: _encoder(cfg, nf, e),
        call=lambda m, i: m(i["x"], src_key_padding_mask=masked(i["pad"])),
        param_map=ENCODER_MAP, traits={**LAYER_TRAITS, "norm_placement": placement, "eps": eps,
                                       "dropout_sites": ENCODER_DROPOUT},
    )
    register(
        id=vid, family="decoder_layer", source=SOURCE, reference=ref,
        summary=f"nn.TransformerDecoderLayer(norm_first={norm_first}, layer_norm_eps={eps:g})",
        build=lambda cfg, nf=norm_first, e=eps: _decoder(cfg, nf, e),
        call=lambda m, i: m(
            i["x"], i["memory"], tgt_mask=per_head(masked(i["tgt_mask"]), m.self_attn.num_heads),
            memory_key_padding_mask=masked(i["src_pad"]),
        ),
        param_map=DECODER_MAP, traits={**LAYER_TRAITS, "norm_placement": placement, "eps": eps,
                                       "dropout_sites": DECODER_DROPOUT},
    )


def _causal_block(m, i):
    t = i["x"].shape[1]
    future = ~torch.ones(t, t, dtype=torch.bool, device=i["x"].device).tril()  # True = not allowed
    return m(i["x"], src_mask=future, src_key_padding_mask=masked(i["pad"]))


BLOCKS = (  # id, norm_first, activation, reference
    ("torch_post", False, "relu", True),
    ("torch_pre", True, "relu", False),
    ("torch_pre_gelu", True, "gelu", False),
)
for vid, norm_first, activation, ref in BLOCKS:
    register(
        id=vid, family="decoder_only_block", source=SOURCE, reference=ref,
        summary=f"nn.TransformerEncoderLayer(norm_first={norm_first}, activation={activation!r}) + causal mask",
        build=lambda cfg, nf=norm_first, a=activation: _encoder(cfg, nf, activation=a),
        call=_causal_block, param_map=ENCODER_MAP,
        traits={**LAYER_TRAITS, "norm_placement": "pre" if norm_first else "post", "eps": 1e-5,
                "activation": activation, "fully_masked_row": "zeros", "dropout_sites": ENCODER_DROPOUT,
                **({"path_findings": {"right_pad": GELU_FAST_PATH}} if activation == "gelu" else {})},
    )

register(
    id="torch", family="embedding", source=SOURCE, reference=True, summary="nn.Embedding",
    build=lambda cfg: nn.Embedding(cfg.vocab, cfg.d_model), call=lambda m, i: m(i["tokens"]),
    param_map={"weight": Param("weight")},
    traits={"embedding_scale": "1", "pad_rows": "kept"},
)


def _torch_masks(case, tokens, pad_idx):
    t = tokens.shape[1]
    causal = nn.Transformer.generate_square_subsequent_mask(t, device=tokens.device) == 0  # float -inf above diagonal
    if case == "causal":
        return causal
    if case == "pad":
        return tokens != pad_idx  # key_padding_mask is its negation (True = ignore)
    return causal[None] & (tokens != pad_idx)[:, None, :]


register(
    id="torch", family="masks", source=SOURCE, reference=True,
    summary="generate_square_subsequent_mask; key_padding_mask",
    build=lambda cfg: None, call=lambda m, i: _torch_masks(i["case"], i["tokens"], i["pad_idx"]),
    traits={"mask_convention": "float -inf / bool True = ignore", "causal_mask": "tril",
            "pad_mask": "tokens != pad", "target_mask": "causal & key not pad"},
)


# == Whole models ============================================================================
# ``nn.Transformer`` with embeddings, the paper's interleaved positional encoding and a
# generator (Linear + log_softmax): ``torch_post`` (post-norm stacks without a final
# norm, as the paper and the 003 blog; unscaled embeddings) and ``torch_pre`` (pre-norm,
# eps 1e-6, each stack ending with a LayerNorm, embeddings x sqrt(D), as 004 builds it
# except for the norm formula). Masks: bool, True = not allowed (the adapter inverts).
# Decoder-only: ``nn.TransformerEncoder`` with a causal mask between an embedding and a
# head: ``torch_post`` (post-norm, ReLU, no positions, untied head: 002's Decoder) and
# ``torch_pre_gelu`` (pre-norm, GELU, learned positions, final LayerNorm, head tied to
# the embedding: nanoGPT's GPT). Neither has a cache; the harness re-runs the prefix.




def sinusoid_table(length: int, d_model: int) -> torch.Tensor:
    """(length, D): the paper's interleaved sin/cos table, computed in float32 as the
    write-ups compute it (so that float64 runs compare tables of the same values)."""
    position = torch.arange(length, dtype=torch.float32)[:, None]
    div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    table = torch.zeros(length, d_model)
    table[:, 0::2] = torch.sin(position * div_term)
    table[:, 1::2] = torch.cos(position * div_term)
    return table


class TorchSeq2Seq(nn.Module):
    def __init__(self, cfg, *, norm_first: bool, eps: float, final_norm: bool, scale: bool, max_len: int = 512):
        super().__init__()
        d = cfg.d_model
        self.scale = math.sqrt(d) if scale else 1.0
        self.src_embed = nn.Embedding(cfg.vocab, d)
        self.tgt_embed = nn.Embedding(cfg.vocab, d)
        self.register_buffer("pe", sinusoid_table(max_len, d))
        self.dropout = nn.Dropout(cfg.dropout)
        enc_layer = nn.TransformerEncoderLayer(d, cfg.heads, cfg.d_ff, cfg.dropout, layer_norm_eps=eps,
                                               batch_first=True, norm_first=norm_first)
        dec_layer = nn.TransformerDecoderLayer(d, cfg.heads, cfg.d_ff, cfg.dropout, layer_norm_eps=eps,
                                               batch_first=True, norm_first=norm_first)
        self.transformer = nn.Transformer(
            d, cfg.heads, batch_first=True,
            custom_encoder=nn.TransformerEncoder(enc_layer, layers(cfg), nn.LayerNorm(d, eps) if final_norm else None,
                                                 enable_nested_tensor=False),
            custom_decoder=nn.TransformerDecoder(dec_layer, layers(cfg), nn.LayerNorm(d, eps) if final_norm else None),
        )
        self.generator = nn.Linear(d, cfg.vocab)

    def embed(self, table, tokens):
        return self.dropout(table(tokens) * self.scale + self.pe[: tokens.size(1)].to(table.weight.dtype))

    def encode(self, src, src_pad):
        """``src_pad`` (B, S) True = pad (ignored key)."""
        return self.transformer.encoder(self.embed(self.src_embed, src), src_key_padding_mask=src_pad)

    def decode(self, tgt, memory, src_pad, tgt_pad=None):
        t = tgt.size(1)
        future = ~torch.ones(t, t, dtype=torch.bool, device=tgt.device).tril()  # True = not allowed
        out = self.transformer.decoder(self.embed(self.tgt_embed, tgt), memory, tgt_mask=future,
                                       tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad)
        return F.log_softmax(self.generator(out), dim=-1)

    def forward(self, src, tgt, src_pad, tgt_pad):
        return self.decode(tgt, self.encode(src, src_pad), src_pad, tgt_pad)


def _seq2seq_map(cfg, final_norm):
    out = {"src_embed.weight": Param("src_embed.weight"), "tgt_embed.weight": Param("tgt_embed.weight"),
           **linear_entries({"generator": "generator"})}
    for i in range(layers(cfg)):
        out.update(nest(ENCODER_MAP, f"encoder.{i}.", f"transformer.encoder.layers.{i}."))
        out.update(nest(DECODER_MAP, f"decoder.{i}.", f"transformer.decoder.layers.{i}."))
    for stack in ("encoder", "decoder"):
        out.update(norm_entries(f"{stack}.norm", f"transformer.{stack}.norm") if final_norm
                   else absent_norm(f"{stack}.norm"))
    return out


def _seq2seq_prepare(model, inputs, cached):
    src_pad = inputs["src"] == inputs["pad_idx"]
    return {"memory": model.encode(inputs["src"], src_pad), "src_pad": src_pad}


def _seq2seq_step(model, state, ys):
    return model.decode(ys, state["memory"], state["src_pad"])[:, -1]


SEQ2SEQ = (  # id, norm_first, eps, final norm, embedding scale, reference
    ("torch_post", False, 1e-5, False, False, True),
    ("torch_pre", True, 1e-6, True, True, False),
)
for vid, norm_first, eps, final_norm, scale, ref in SEQ2SEQ:
    register(
        id=vid, family="encoder_decoder", source=SOURCE, reference=ref,
        summary=f"nn.Transformer(norm_first={norm_first}, eps={eps:g}), final norm {final_norm}, "
                f"embeddings x {'sqrt(D)' if scale else '1'}",
        build=lambda cfg, nf=norm_first, e=eps, fn=final_norm, s=scale: TorchSeq2Seq(
            cfg, norm_first=nf, eps=e, final_norm=fn, scale=s),
        call=lambda m, i: m(i["src"], i["tgt"], i["src"] == i["pad_idx"], i["tgt"] == i["pad_idx"]),
        param_map=lambda cfg, fn=final_norm: _seq2seq_map(cfg, fn),
        traits={**LAYER_TRAITS, "norm_placement": "pre" if norm_first else "post", "eps": eps,
                "final_norm": final_norm, "embedding_scale": "sqrt(D)" if scale else "1", "pad_rows": "kept",
                "shared_embeddings": False, "tied_output": False, "pe_layout": "interleaved sin/cos",
                "pe_frequencies": "10000^(-2i/D)", "target_shift": "by the caller",
                "data_dependent": "nn.TransformerDecoder compares tgt_mask with a causal mask (_detect_is_causal_mask)",
                "internal_dtype": "float32",  # the position table is built in float32
                "dropout_sites": dropout_sites(("source embedding", "target embedding"),
                                               encoder=ENCODER_DROPOUT, decoder=DECODER_DROPOUT),
                "note": "generator = Linear + log_softmax; target pad keys masked; no cache"},
    )
    register_decoding("encoder_decoder", vid, prepare=_seq2seq_prepare, step=_seq2seq_step)


class TorchLM(nn.Module):
    def __init__(self, cfg, *, norm_first: bool, activation: str, final_norm: bool, learned_pos: bool, tied: bool):
        super().__init__()
        d = cfg.d_model
        self.embed = nn.Embedding(cfg.vocab, d)
        self.pos = nn.Embedding(cfg.tgt_len, d) if learned_pos else None
        layer = nn.TransformerEncoderLayer(d, cfg.heads, cfg.d_ff, cfg.dropout, activation=activation,
                                           batch_first=True, norm_first=norm_first)
        self.blocks = nn.TransformerEncoder(layer, layers(cfg), nn.LayerNorm(d) if final_norm else None,
                                            enable_nested_tensor=False)
        self.head = nn.Linear(d, cfg.vocab, bias=not tied)
        if tied:
            self.head.weight = self.embed.weight

    def forward(self, tokens, pad=None):
        """``pad`` (B, T) True = real token, or None."""
        t = tokens.size(1)
        x = self.embed(tokens)
        if self.pos is not None:
            x = x + self.pos(torch.arange(t, device=tokens.device))
        future = ~torch.ones(t, t, dtype=torch.bool, device=tokens.device).tril()  # True = not allowed
        x = self.blocks(x, mask=future, is_causal=True,
                        src_key_padding_mask=None if pad is None or bool(pad.all()) else ~pad)
        return F.log_softmax(self.head(x), dim=-1)


def _lm_map(cfg, final_norm, learned_pos, tied):
    out = {"embed.weight": Param("embed.weight"),
           "pos.weight": Param("pos.weight") if learned_pos else Zero(),
           "head.weight": Tied("embed.weight") if tied else Param("head.weight"),
           "head.bias": Zero() if tied else Param("head.bias"),
           **(norm_entries("norm", "blocks.norm") if final_norm else absent_norm("norm"))}
    for i in range(layers(cfg)):
        out.update(nest(ENCODER_MAP, f"blocks.{i}.", f"blocks.layers.{i}."))
    return out


LMS = (  # id, norm_first, activation, final norm, learned positions, tied head, reference
    ("torch_post", False, "relu", False, False, False, True),
    ("torch_pre_gelu", True, "gelu", True, True, True, False),
)
for vid, norm_first, activation, final_norm, learned_pos, tied, ref in LMS:
    register(
        id=vid, family="decoder_only_model", source=SOURCE, reference=ref,
        summary=f"nn.TransformerEncoder(norm_first={norm_first}, {activation}) + causal mask, "
                f"{'learned positions, final norm, tied head' if tied else 'no positions, Linear head'}",
        build=lambda cfg, nf=norm_first, a=activation, fn=final_norm, lp=learned_pos, t=tied: TorchLM(
            cfg, norm_first=nf, activation=a, final_norm=fn, learned_pos=lp, tied=t),
        call=lambda m, i: m(i["tokens"], i["pad"]),
        param_map=lambda cfg, fn=final_norm, lp=learned_pos, t=tied: _lm_map(cfg, fn, lp, t),
        traits={**LAYER_TRAITS, "norm_placement": "pre" if norm_first else "post", "eps": 1e-5,
                "activation": activation, "final_norm": final_norm, "embedding_scale": "1",
                "tied_output": tied, "positional_encoding": "learned" if learned_pos else "none",
                "dropout_sites": dropout_sites((), blocks=ENCODER_DROPOUT),
                "note": "head = Linear + log_softmax; no cache",
                "data_dependent": "TorchLM passes no key padding mask when no token is padded (pad.all())",
                **({"path_findings": {"full": GELU_FAST_PATH, "right_pad": GELU_FAST_PATH}}
                   if activation == "gelu" else {})},
    )
    register_decoding("decoder_only_model", vid, prepare=lambda m, i, c: None,
                      step=lambda m, s, ys: m(ys)[:, -1])


# -- the loss and the schedule ---------------------------------------------------------------



register(
    id="torch_ce", family="loss", source=SOURCE, reference=True,
    summary="nn.CrossEntropyLoss(label_smoothing=s, ignore_index=pad)",
    build=lambda cfg: None,
    call=lambda m, i: nn.CrossEntropyLoss(label_smoothing=i["smoothing"], ignore_index=i["pad_idx"])(
        i["logits"], i["target"]),
    traits={"smoothing_spread": SPREADS[1], "loss_form": "cross-entropy", "note": "mean over non-ignored rows"},
)
register(
    id="torch_ce_soft", family="loss", source=SOURCE,
    summary="F.cross_entropy with 004's smoothed distribution as probability targets",
    build=lambda cfg: None,
    call=lambda m, i: F.cross_entropy(
        i["logits"], smoothed_target(i["target"], i["logits"].size(-1), i["pad_idx"], i["smoothing"], SPREADS[0]).to(
            i["logits"].dtype), reduction="sum") / (i["target"] != i["pad_idx"]).sum(),
    traits={"smoothing_spread": SPREADS[0], "loss_form": "cross-entropy", "note": "sum / ntokens"},
)


register(
    id="torch_lambdalr", family="lr_schedule", source=SOURCE, reference=True,
    summary="LambdaLR with the paper's rate at update = last_epoch + 1",
    build=lambda cfg: None,
    call=lambda m, i: optimizer_rates(lambda opt: LambdaLR(opt, lambda epoch: noam(
        epoch + 1, i["d_model"], i["factor"], i["warmup"])), i["steps"]),
    traits={"step_count": STEP_COUNTS[1], "note": "LambdaLR(paper formula at last_epoch + 1)"},
)
