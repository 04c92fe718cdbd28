"""The layer families: attention, norm, feed-forward, the three Transformer layers, positional
encoding, embedding and the masks; each with its cases (inputs designed to expose a bug) and
its oracle."""

from __future__ import annotations

import torch

from harness.base.config import Config
from harness.families import oracles
from harness.families.attention import ATTENTION, FULLY_MASKED_ROW
from harness.families.base import (
    EPS,
    Case,
    Family,
    TraitSpec,
    _attn_params,
    _ffn_params,
    _norm_params,
    activations,
    causal,
    left_pad,
    pad_pattern,
    regime_case,
    right_pad,
)

# The standard deviation of layer inputs: at 0.1, LayerNorm's eps (1e-5 vs 1e-6) then changes the output by
# ~5e-4 relative, well above float32 rounding, so an eps mismatch cannot pass as noise.
LAYER_STD = 0.1



NORM_FORMULA = TraitSpec("the normalisation formula", oracles.NORM_FORMULAS)
# Activation names a user's file may hold from another vocabulary: Hugging Face's
# ``hidden_act`` names the tanh GELU "gelu_new" / "gelu_pytorch_tanh" and SiLU "swish".
ACTIVATION_ALIASES = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "swish": "silu"}
ACTIVATION = TraitSpec("the feed-forward activation", tuple(oracles.ACTIVATIONS), aliases=ACTIVATION_ALIASES)
# the residual branches' output projections: zeroed, every correct dropout site drops zeros
BRANCHES = tuple(f"{b}.{p}" for b in ("self_attn.o", "cross_attn.o", "ffn.w2") for p in ("weight", "bias"))
LAYER_TRAITS = {
    "norm_placement": TraitSpec("norm before the sublayer (pre) or after the residual add (post)", ("pre", "post")),
    "norm_formula": NORM_FORMULA,
    "eps": EPS,
    "activation": ACTIVATION,
}


def _rows(cfg: Config, gen: torch.Generator) -> dict:
    # Per-row offsets (mean far from 0) and std 0.1: centring and eps both matter.
    offset = activations(gen, cfg.batch, cfg.tgt_len, 1, std=0.5)
    return {"x": offset + activations(gen, cfg.batch, cfg.tgt_len, cfg.d_model, std=LAYER_STD)}


def _large_rows(cfg: Config, gen: torch.Generator) -> dict:
    """``rows`` with outlier features (a few per row, |x| from 300 to 1000, as in large
    models' activations): float16 squares overflow beyond |x| = 256, so a norm that computes
    its statistics in float16 returns zeros where a careful one upcasts."""
    x = _rows(cfg, gen)["x"]
    where = torch.rand(x.shape, generator=gen) < 0.1
    where[..., 0] = True
    size = 300.0 + 700.0 * torch.rand(x.shape, generator=gen, dtype=torch.float64)
    sign = torch.where(torch.rand(x.shape, generator=gen) < 0.5, -1.0, 1.0).to(torch.float64)
    return {"x": torch.where(where, sign * size, x)}


NORM = Family(
    name="norm",
    call="(x (B,T,D)) -> (B,T,D)",
    doc="Normalisation over the last dimension, with a gain and a bias.",
    params=lambda cfg: _norm_params("", cfg.d_model),
    cases=(Case("rows", "rows with non-zero mean and std 0.1", _rows),
           Case("large", "rows with outlier features |x| 300..1000 (float16's squares overflow)", _large_rows)),
    traits={"norm_formula": NORM_FORMULA, "eps": EPS,
            "gain": TraitSpec("the gain: the weight w, or 1 + w (Gemma)", oracles.NORM_GAINS, default="w"),
            "upcast": TraitSpec("where a half-precision input is upcast and cast back", oracles.NORM_UPCASTS,
                                default="none")},
    oracle=oracles.norm,
    grad_inputs=("x",),
)


def _ffn_rows(cfg: Config, gen: torch.Generator) -> dict:
    return {"x": activations(gen, cfg.batch, cfg.tgt_len, cfg.d_model)}


FFN = Family(
    name="ffn",
    call="(x (B,T,D)) -> (B,T,D)",
    doc="Position-wise feed-forward network D -> F -> D.",
    params=lambda cfg: _ffn_params("", cfg.d_model, cfg.d_ff),
    cases=(Case("rows", "standard normal rows", _ffn_rows),),
    traits={
        "sublayer": TraitSpec("what the module returns", oracles.FFN_SUBLAYERS),
        "activation": ACTIVATION,
        "eps": TraitSpec("eps of a LayerNorm inside the sublayer", EPS.values, True, default=1e-5),
    },
    oracle=oracles.ffn,
    grad_inputs=("x",),
    dropout_stats=lambda t: "mean" if t.get("sublayer") == "ffn" else ("w2.weight", "w2.bias"),
)


GATED_FFN = Family(
    name="gated_ffn",
    call="(x (B,T,D)) -> (B,T,D)",
    doc="Gated feed-forward (SwiGLU, GeGLU): down(act(gate x) * up x), no biases.",
    params=lambda cfg: {"gate.weight": ((cfg.d_ff, cfg.d_model), "weight"),
                        "up.weight": ((cfg.d_ff, cfg.d_model), "weight"),
                        "down.weight": ((cfg.d_model, cfg.d_ff), "weight")},
    cases=(Case("rows", "standard normal rows", _ffn_rows),),
    traits={"activation": TraitSpec("the gate's activation (silu: SwiGLU; gelu, gelu_tanh: GeGLU)",
                                    tuple(oracles.ACTIVATIONS), aliases=ACTIVATION_ALIASES)},
    oracle=oracles.gated_ffn,
    grad_inputs=("x",),
    dropout_stats=lambda t: "mean",
    matrix=("default", "one_head"),
    matrix_note="no heads: two widths are enough",
)


def _encoder_padded(cfg: Config, gen: torch.Generator) -> dict:
    x = activations(gen, cfg.batch, cfg.tgt_len, cfg.d_model, std=LAYER_STD)
    return {"x": x, "pad": pad_pattern(cfg.padding, gen, cfg.batch, cfg.tgt_len)}


ENCODER_PADDED = Case("padded", "random right padding", _encoder_padded)

ENCODER_LAYER = Family(
    name="encoder_layer",
    call="(x (B,T,D), pad (B,T) bool True=real token) -> (B,T,D)",
    doc="Self-attention and feed-forward sublayers with residuals and norms.",
    params=lambda cfg: {
        **_attn_params("self_attn.", cfg.d_model),
        **_ffn_params("ffn.", cfg.d_model, cfg.d_ff),
        **_norm_params("norm1.", cfg.d_model),
        **_norm_params("norm2.", cfg.d_model),
    },
    cases=(ENCODER_PADDED,  # and a fixed padding regime: a mask rebuilt from lengths cannot pass
           regime_case(ENCODER_PADDED, "per_row", "per-row padding (right, left, arbitrary) instead",
                       padding="per_row")),
    traits=LAYER_TRAITS,
    oracle=oracles.encoder_layer,
    grad_inputs=("x",),
    padding=lambda inputs: inputs["pad"],
    dropout_stats=lambda t: BRANCHES,
)


def _decoder_padded(cfg: Config, gen: torch.Generator) -> dict:
    x = activations(gen, cfg.batch, cfg.tgt_len, cfg.d_model, std=LAYER_STD)
    memory = activations(gen, cfg.batch, cfg.src_len, cfg.d_model, std=LAYER_STD)
    src_pad = pad_pattern(cfg.padding, gen, cfg.batch, cfg.src_len)
    tgt_pad = right_pad(gen, cfg.batch, cfg.tgt_len)  # right only: causal and left padding leave rows without a key
    tgt_mask = causal(cfg.tgt_len)[None] & tgt_pad[:, None, :]  # (B, T, T)
    return {"x": x, "memory": memory, "src_pad": src_pad, "tgt_mask": tgt_mask}


DECODER_PADDED = Case("padded", "causal target mask with target and source padding, T != S", _decoder_padded)

DECODER_LAYER = Family(
    name="decoder_layer",
    call="(x (B,T,D), memory (B,S,D), src_pad (B,S) True=real, tgt_mask (B,T,T) True=may attend) -> (B,T,D)",
    doc="Encoder-decoder layer: causal self-attention, cross-attention, feed-forward.",
    params=lambda cfg: {
        **_attn_params("self_attn.", cfg.d_model),
        **_attn_params("cross_attn.", cfg.d_model),
        **_ffn_params("ffn.", cfg.d_model, cfg.d_ff),
        **_norm_params("norm1.", cfg.d_model),
        **_norm_params("norm2.", cfg.d_model),
        **_norm_params("norm3.", cfg.d_model),
    },
    cases=(DECODER_PADDED, regime_case(DECODER_PADDED, "per_row", "per-row source padding (right, left, arbitrary)",
                                       padding="per_row")),
    traits=LAYER_TRAITS,
    oracle=oracles.decoder_layer,
    grad_inputs=("x", "memory"),
    padding=lambda inputs: inputs["tgt_mask"].any(1),  # a target position no query attends: padding
    dropout_stats=lambda t: BRANCHES,
)


def _block_right(cfg: Config, gen: torch.Generator) -> dict:
    x = activations(gen, cfg.batch, cfg.tgt_len, cfg.d_model, std=LAYER_STD)
    return {"x": x, "pad": right_pad(gen, cfg.batch, cfg.tgt_len)}


def _block_left(cfg: Config, gen: torch.Generator) -> dict:
    x = activations(gen, cfg.batch, cfg.tgt_len, cfg.d_model, std=LAYER_STD)
    return {"x": x, "pad": left_pad(gen, cfg.batch, cfg.tgt_len)}


DECODER_ONLY_BLOCK = Family(
    name="decoder_only_block",
    call="(x (B,T,D), pad (B,T) bool True=real token) -> (B,T,D); causal inside",
    doc="GPT-style block: causal self-attention and feed-forward.",
    params=lambda cfg: {
        **_attn_params("self_attn.", cfg.d_model),
        **_ffn_params("ffn.", cfg.d_model, cfg.d_ff),
        **_norm_params("norm1.", cfg.d_model),
        **_norm_params("norm2.", cfg.d_model),
    },
    cases=(
        Case("right_pad", "right padding: every query row sees a key", _block_right),
        Case("left_pad", "left padding: early rows see no key at all", _block_left),
    ),
    traits={**LAYER_TRAITS, "fully_masked_row": FULLY_MASKED_ROW},
    oracle=oracles.decoder_only_block,
    dropout_stats=lambda t: BRANCHES,
    case_semantic={"left_pad": ("fully_masked_row",)},
    grad_inputs=("x",),
    padding=lambda inputs: inputs["pad"],
)


def _pe_rows(cfg: Config, gen: torch.Generator) -> dict:
    return {"x": activations(gen, cfg.batch, cfg.tgt_len, cfg.d_model)}


POSITIONAL_ENCODING = Family(
    name="positional_encoding",
    call="(x (B,T,D)) -> x + PE[:T]",
    doc="Sinusoidal positional encodings added to embeddings.",
    params=lambda cfg: {},
    cases=(Case("rows", "standard normal embeddings", _pe_rows),),
    traits={
        "pe_layout": TraitSpec("how sines and cosines are laid out", oracles.PE_LAYOUTS),
        "pe_frequencies": TraitSpec("the frequency of pair i", tuple(oracles.PE_FREQUENCIES)),
    },
    oracle=oracles.positional_encoding,
    grad_inputs=("x",),
    dropout_stats=lambda t: "mean",
)


def real_tokens(gen: torch.Generator, high: int, shape: tuple[int, ...], pad_idx: int) -> torch.Tensor:
    """Tokens in [0, high) other than ``pad_idx`` (with pad_idx 0: ``randint(1, high)``'s
    draws exactly; otherwise token 0 is a real token, so a pad index taken as 0 cannot pass)."""
    tokens = torch.randint(1, high, shape, generator=gen)
    return torch.where(tokens <= pad_idx, tokens - 1, tokens)


def _tokens(cfg: Config, gen: torch.Generator) -> dict:
    tokens = real_tokens(gen, max(11, cfg.pad_idx + 2), (cfg.batch, cfg.tgt_len), cfg.pad_idx)
    tokens[~pad_pattern(cfg.padding, gen, cfg.batch, cfg.tgt_len)] = cfg.pad_idx
    return {"tokens": tokens, "pad_idx": cfg.pad_idx}


MASK_CASES = (Case("causal", "causal mask from a length", _tokens),
              Case("pad", "key padding mask from tokens", _tokens),
              Case("target", "decoder self-attention mask from target tokens", _tokens))


MASKS = Family(
    name="masks",
    call="builders: causal(T) -> (T,T); pad(tokens) -> (B,T); target(tokens) -> (B,T,T); all bool True=may attend",
    doc="Every write-up's mask builders, converted to the one convention.",
    params=lambda cfg: {},
    cases=(*MASK_CASES, *(regime_case(c, "pad_idx5", "pad index 5, token 0 real; per-row padding", pad_idx=5,
                                      padding="per_row") for c in MASK_CASES[1:])),
    traits={
        "causal_mask": TraitSpec("the causal mask", ("tril",)),
        "pad_mask": TraitSpec("the key padding mask", ("tokens != pad",)),
        "target_mask": TraitSpec("the decoder self-attention mask", oracles.TARGET_MASKS),
    },
    oracle=oracles.masks,
    case_semantic={"causal": ("causal_mask",), "pad": ("pad_mask",), "target": ("target_mask",)},
    differentiable=False,
    dtypes=("bool",),
)


def _embed_tokens(cfg: Config, gen: torch.Generator) -> dict:
    tokens = real_tokens(gen, cfg.vocab, (cfg.batch, cfg.tgt_len), cfg.pad_idx)
    tokens[~pad_pattern(cfg.padding, gen, cfg.batch, cfg.tgt_len)] = cfg.pad_idx
    return {"tokens": tokens, "pad_idx": cfg.pad_idx}


EMBED_PADDED = Case("padded", "tokens with right padding (pad_idx 0)", _embed_tokens)


EMBEDDING = Family(
    name="embedding",
    call="(tokens (B,T) int, pad_idx) -> (B,T,D)",
    doc="Token embedding lookup (and whatever scaling a write-up applies).",
    params=lambda cfg: {"weight": ((cfg.vocab, cfg.d_model), "weight")},
    cases=(EMBED_PADDED, regime_case(EMBED_PADDED, "pad_idx5", "pad index 5, token 0 real; per-row padding",
                                     pad_idx=5, padding="per_row")),
    traits={
        "embedding_scale": TraitSpec("the factor the lookup is multiplied by", tuple(oracles.EMBEDDING_SCALES)),
        "pad_rows": TraitSpec("what the pad token's row becomes", ("kept", "zeroed")),
    },
    oracle=oracles.embedding,
)


LAYER_FAMILIES = (
    ATTENTION, NORM, FFN, GATED_FFN, ENCODER_LAYER, DECODER_LAYER, DECODER_ONLY_BLOCK,
    POSITIONAL_ENCODING, EMBEDDING, MASKS,
)  # listed in harness.families.catalog
