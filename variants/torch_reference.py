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

import torch
import torch.nn.functional as F
from torch import nn

from harness import Param, Zero, register
from harness.adapt import masked, per_head
from harness.porting import fused_entries, linear_entries, nest, norm_entries

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
            "dropout_sites": ("attention weights",)},
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
                "activation": activation, "fully_masked_row": "zeros", "dropout_sites": ENCODER_DROPOUT},
    )

register(
    id="torch", family="embedding", source=SOURCE, reference=True, summary="nn.Embedding",
    build=lambda cfg: nn.Embedding(cfg.vocab, cfg.d_model), call=lambda m, i: m(i["tokens"]),
    param_map={"weight": Param("weight")},
    traits={"embedding_scale": "1", "pad_rows": "kept"},
)


def _torch_masks(case, tokens, pad_idx):
    t = tokens.shape[1]
    causal = nn.Transformer.generate_square_subsequent_mask(t) == 0  # float -inf above diagonal
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
