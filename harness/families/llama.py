"""LLaMA-style decoder block and decoder-only model families, composed from the attention,
norm and gated_ffn families: their canonical parameters nest those families' own, and their
oracles call those families' oracles (one set of conventions for RoPE, GQA, windows, RMSNorm
gains and upcasts, gated activations; nothing is written twice).

- ``llama_block``: (x (B,T,D), mask (B,T,T) bool True = may attend, positions (B,T)) -> (B,T,D):
  x + attention(norm(x)) then x + gated_ffn(norm(x)) (pre-norm, LLaMA), or the post-norm
  order (a declared trait, so a block that normalises after the residual add is caught).
  Canonical: ``attn_norm.*`` (norm family), ``self_attn.*`` (attention family, K/V of
  kv_heads * d_k rows), ``ffn_norm.*`` (norm), ``mlp.{gate,up,down}.weight`` (gated_ffn).
- ``llama_model``: (tokens (B,T), pad (B,T) True = real token, positions (B,T), segments (B,T))
  -> log-probabilities (B,T,V): embedding (times the declared scale), N causal blocks, final
  norm, output head (the embedding table when ``tied_output``). Positions are the call's (HF's
  ``position_ids``); the cases count them from each row's first real token,
  ``cumsum(pad) - 1`` clamped at 0, so left padding and decoding offsets are expressible.
  ``segments`` numbers the sequences a row packs (0 everywhere but in the ``packed`` case):
  a token attends only to its own sequence's, and its positions restart with it. A model that
  takes no segments refuses ``packed`` in its ``supports`` (``supports(cfg, case)``).
"""

from __future__ import annotations

import torch

from harness.base.config import Config
from harness.base.errors import ConfigError
from harness.families import oracles
from harness.families.attention import ATTENTION, packed_positions, packed_segments
from harness.families.base import Case, Family, ParamSpec, TraitSpec, activations, causal, left_pad, right_pad
from harness.families.layers import GATED_FFN, LAYER_STD, NORM
from harness.families.models import BOOL, ModelFamily, content_tokens, layers

# The GQA config both families run besides the default one (two K/V heads for four query heads).
# The llama families run the default config and this one: it moves what the default keeps
# (widths, heads, length, vocabulary, RoPE base), so a block that hard-codes one is caught.
GQA_CONFIG = Config(d_model=80, heads=8, kv_heads=2, d_ff=224, batch=2, tgt_len=6, src_len=5, vocab=13,
                    rope_base=500000.0)
_ATTN_TRAITS = ("rope", "rope_scaling", "rope_fraction", "gqa_grouping", "window", "window_diagonal", "qk_norm",
                "softcap", "score_scale", "fully_masked_row", "mask_style")
BLOCK_TRAITS = {
    "norm_placement": TraitSpec("norm before the sublayer (pre, LLaMA) or after the residual add (post)",
                                ("pre", "post")),
    **{name: NORM.traits[name] for name in ("norm_formula", "eps", "gain", "upcast")},
    **{name: ATTENTION.traits[name] for name in _ATTN_TRAITS},
    "activation": GATED_FFN.traits["activation"],
}


def _nested(family: Family, prefix: str, cfg: Config) -> ParamSpec:
    return {prefix + name: spec for name, spec in family.params(cfg).items()}


# Groups of parameters a model of this family may hold beyond a plain LLaMA's, named by
# ``ModelConfig.extensions`` when a checkpoint holds them: the checkpoint comparison
# (``harness.systems.checkpoint_parity``) ports them like every other canonical tensor, so both
# sides must map them. The oracle reads the QK-norm gains where ``qk_norm`` is declared (they
# are then the attention family's trait parameters, ``block_trait_params``), never the others.
EXTENSIONS = {
    "qk_norm": "RMSNorm gains of each head's q and k before RoPE (Qwen 3): "
               "self_attn.q_norm.weight and self_attn.k_norm.weight, (d_k,)",
    "sandwich_norms": "norms on each sublayer's output before its residual add (Gemma 2): "
                      "post_attn_norm.weight and post_ffn_norm.weight, (D,)",
}


def extensions(cfg: Config) -> tuple[str, ...]:
    """The extension groups ``cfg`` names (none for a plain ``Config``)."""
    names = tuple(getattr(cfg, "extensions", ()))
    unknown = sorted(set(names) - set(EXTENSIONS))
    if unknown:
        raise ConfigError(f"unknown parameter group(s) {unknown} for the llama families; known: {sorted(EXTENSIONS)}")
    return names


def block_params(cfg: Config) -> ParamSpec:
    spec = {**_nested(NORM, "attn_norm.", cfg), **_nested(ATTENTION, "self_attn.", cfg),
            **_nested(NORM, "ffn_norm.", cfg), **_nested(GATED_FFN, "mlp.", cfg)}
    groups = extensions(cfg)
    if "qk_norm" in groups:
        spec.update({f"self_attn.{n}_norm.weight": ((cfg.d_k,), "norm_weight") for n in "qk"})
    if "sandwich_norms" in groups:
        spec.update({f"post_{n}_norm.weight": ((cfg.d_model,), "norm_weight") for n in ("attn", "ffn")})
    return spec


def block_trait_params(traits, cfg: Config) -> ParamSpec:
    """The attention family's parameters its traits bring (QK-norm gains), under ``self_attn.``."""
    return _nested_traits(ATTENTION, "self_attn.", traits, cfg)


def _nested_traits(family: Family, prefix: str, traits, cfg: Config) -> ParamSpec:
    extra = family.trait_params(traits, cfg) if family.trait_params else {}
    return {prefix + name: spec for name, spec in extra.items()}


def _sub(w, prefix: str) -> dict:
    return {n[len(prefix):]: t for n, t in w.items() if n.startswith(prefix)}


def llama_block_oracle(traits, cfg, w, inputs, dtype) -> torch.Tensor:
    """The attention family's oracle (sublayer "attention": RoPE at ``positions``, K/V heads
    grouped, the call's mask) and the gated_ffn family's, each around the norm family's
    oracle, residuals in the declared placement."""
    x, mask, positions = inputs["x"], inputs["mask"], inputs["positions"]
    attn_traits = {"fully_masked_row": "NaN", "mask_style": "fill", **traits, "sublayer": "attention"}

    def norm(name, h):
        return oracles.norm(traits, cfg, _sub(w, name + "."), {"x": h}, dtype)

    def attend(h):
        return oracles.attention(attn_traits, cfg, _sub(w, "self_attn."), {
            "query": h, "key": h, "value": h, "mask": mask, "positions": positions,
            "key_positions": positions, "window": inputs.get("window")}, dtype)

    def mlp(h):
        return oracles.gated_ffn(traits, cfg, _sub(w, "mlp."), {"x": h}, dtype)

    placement = traits["norm_placement"]
    if placement == "pre":
        x = x + attend(norm("attn_norm", x))
        return x + mlp(norm("ffn_norm", x))
    if placement == "post":
        x = norm("attn_norm", x + attend(x))
        return norm("ffn_norm", x + mlp(x))
    raise oracles._unknown("norm_placement", placement, ("pre", "post"))


def positions_of(pad: torch.Tensor) -> torch.Tensor:
    """(B, L) positions counted from each row's first real token (HF's
    ``attention_mask.cumsum(-1) - 1``), 0 on left padding; right padding continues at the
    last real position."""
    return (pad.long().cumsum(-1) - 1).clamp(min=0)


def _block_inputs(cfg: Config, gen: torch.Generator, pad: torch.Tensor) -> dict:
    x = activations(gen, cfg.batch, cfg.tgt_len, cfg.d_model, std=LAYER_STD)
    mask = causal(cfg.tgt_len)[None] & pad[:, None, :]                      # (B, T, T)
    return {"x": x, "mask": mask, "positions": positions_of(pad), "pad": pad}


def _block_packed(cfg: Config, gen: torch.Generator) -> dict:
    """Several sequences per row (no padding): the mask causal within each, the positions
    restarting at each (``harness.families.attention.packed_segments``)."""
    inputs = _block_inputs(cfg, gen, torch.ones(cfg.batch, cfg.tgt_len, dtype=torch.bool))
    seg = packed_segments(gen, cfg.batch, cfg.tgt_len)
    inputs["mask"] = inputs["mask"] & (seg[:, :, None] == seg[:, None, :])
    inputs["positions"] = packed_positions(seg)
    return inputs


def gapped_positions(gen: torch.Generator, batch: int, length: int) -> torch.Tensor:
    """(B, L) position ids that jump once mid-row by 1 .. 8 (tokens dropped from the middle of a
    sequence, their ids kept: a pruned cache, a compressed prompt): under relative RoPE only ids
    that are not evenly spaced show, on real tokens, a module that counts positions itself."""
    cut = torch.randint(1, max(length, 2), (batch, 1), generator=gen)
    jump = torch.randint(1, 9, (batch, 1), generator=gen)
    idx = torch.arange(length).expand(batch, length)
    return idx + jump * (idx >= cut)


def _block_gapped(cfg: Config, gen: torch.Generator) -> dict:
    inputs = _block_inputs(cfg, gen, torch.ones(cfg.batch, cfg.tgt_len, dtype=torch.bool))
    inputs["positions"] = gapped_positions(gen, cfg.batch, cfg.tgt_len)
    return inputs


LLAMA_BLOCK = Family(
    name="llama_block",
    call="(x (B,T,D), mask (B,T,T) bool True=may attend, positions (B,T)) -> (B,T,D)",
    doc="LLaMA-style decoder block: pre-RMSNorm, RoPE attention with GQA, pre-RMSNorm, SwiGLU.",
    params=block_params,
    trait_params=block_trait_params,
    cases=(
        Case("right_pad", "causal with right padding, positions 0..", lambda c, g: _block_inputs(
            c, g, right_pad(g, c.batch, c.tgt_len))),
        Case("left_pad", "causal with left padding: early rows see no key; positions from the first real token",
             lambda c, g: _block_inputs(c, g, left_pad(g, c.batch, c.tgt_len))),
        Case("packed", "packed rows: sequences back to back, positions restarting at each, block-diagonal causal",
             _block_packed),
        Case("gapped", "causal, no padding; position ids that jump once mid-row (tokens dropped, ids kept)",
             _block_gapped),
    ),
    traits=BLOCK_TRAITS,
    oracle=llama_block_oracle,
    case_semantic={"left_pad": ("fully_masked_row", "mask_style")},
    grad_inputs=("x",),
    padding=lambda inputs: inputs["pad"],
    matrix=("default",),
    matrix_note="its attention, norm and gated_ffn run the whole matrix in their families",
    extra_configs={"gqa": GQA_CONFIG},
    requires=ATTENTION.requires,   # a block that declares no gqa_grouping is skipped on the GQA config
)


def model_params(cfg: Config) -> ParamSpec:
    spec: ParamSpec = {"embed.weight": ((cfg.vocab, cfg.d_model), "weight")}
    for i in range(layers(cfg)):
        spec.update(_nested(LLAMA_BLOCK, f"layers.{i}.", cfg))
    spec.update(_nested(NORM, "norm.", cfg))
    spec["head.weight"] = ((cfg.vocab, cfg.d_model), "weight")
    return spec


def llama_model_oracle(traits, cfg, w, inputs, dtype) -> torch.Tensor:
    """Embedding (times the scale), N ``llama_block`` oracles over causal & pad & same segment
    at the call's positions, the norm family's oracle, head (the embedding when tied), the final
    logit softcap c tanh(logits / c) when declared (Gemma 2's final_logit_softcapping),
    log-softmax."""
    tokens, pad, seg = inputs["tokens"], inputs["pad"], inputs.get("segments")
    t = tokens.shape[1]
    x = w["embed.weight"][tokens] * oracles.EMBEDDING_SCALES[traits["embedding_scale"]](cfg.d_model)
    mask = causal(t)[None] & pad[:, None, :]                                            # (B, T, T)
    if seg is not None:                                                                 # within a sequence
        mask = mask & (seg[:, :, None] == seg[:, None, :])
    block = {"x": None, "mask": mask, "positions": inputs["positions"]}
    for i in range(layers(cfg)):
        x = llama_block_oracle(traits, cfg, _sub(w, f"layers.{i}."), {**block, "x": x}, dtype)
    x = oracles.norm(traits, cfg, _sub(w, "norm."), {"x": x}, dtype)
    logits = x @ (w["embed.weight"] if traits["tied_output"] else w["head.weight"]).T
    cap = traits.get("final_softcap", 0.0)
    if cap:
        logits = cap * torch.tanh(logits / cap)
    return torch.log_softmax(logits, dim=-1)


def _model_tokens(cfg: Config, gen: torch.Generator, side: str) -> dict:
    tokens = content_tokens(gen, cfg, cfg.batch, cfg.tgt_len)
    pad = {"full": lambda: torch.ones_like(tokens, dtype=torch.bool), "gapped": lambda: torch.ones_like(
        tokens, dtype=torch.bool), "right": lambda: right_pad(
        gen, cfg.batch, cfg.tgt_len), "left": lambda: left_pad(gen, cfg.batch, cfg.tgt_len)}[side]()
    tokens[~pad] = 0
    positions = gapped_positions(gen, cfg.batch, cfg.tgt_len) if side == "gapped" else positions_of(pad)
    return {"tokens": tokens, "pad": pad, "positions": positions, "segments": torch.zeros_like(tokens)}


def _model_packed(cfg: Config, gen: torch.Generator) -> dict:
    """Several sequences per row (no padding): ``segments`` numbers them along the row, the
    positions restart at each (``harness.families.attention.packed_segments``)."""
    inputs = _model_tokens(cfg, gen, "full")
    inputs["segments"] = packed_segments(gen, cfg.batch, cfg.tgt_len)
    inputs["positions"] = packed_positions(inputs["segments"])
    return inputs


LLAMA_MODEL = ModelFamily(
    name="llama_model",
    call="(tokens (B,T) int, pad (B,T) bool True=real token, positions (B,T), segments (B,T) int) -> "
         "log-probabilities (B,T,V); causal within a segment",
    doc="A LLaMA-style decoder-only model: embedding, N llama blocks, final RMSNorm, output head.",
    params=model_params,
    trait_params=lambda traits, cfg: {name: spec for i in range(layers(cfg)) for name, spec in
                                      _nested_traits(LLAMA_BLOCK, f"layers.{i}.", traits, cfg).items()},
    cases=(
        Case("full", "no padding", lambda c, g: _model_tokens(c, g, "full")),
        Case("right_pad", "right padding", lambda c, g: _model_tokens(c, g, "right")),
        Case("left_pad", "left padding: pad rows see no key; positions from the first real token",
             lambda c, g: _model_tokens(c, g, "left")),
        Case("packed", "packed rows: sequences back to back (segments), positions restarting at each, "
             "no attention across them", _model_packed),
        Case("gapped", "no padding; position ids that jump once mid-row (tokens dropped, ids kept)",
             lambda c, g: _model_tokens(c, g, "gapped")),
    ),
    traits={**BLOCK_TRAITS,
            "embedding_scale": TraitSpec("the factor token embeddings are multiplied by (Gemma: sqrt(D))",
                                         tuple(oracles.EMBEDDING_SCALES), default="1"),
            "tied_output": TraitSpec("the output head is the embedding table", BOOL),
            "final_softcap": TraitSpec("logits -> c tanh(logits / c) before the log-softmax (Gemma 2's "
                                       "final_logit_softcapping; 0: none)", number=True, default=0.0)},
    oracle=llama_model_oracle,
    padding=lambda inputs: inputs["pad"],
    case_semantic={"left_pad": ("fully_masked_row", "mask_style")},
    matrix=("default",),
    extra_configs={"gqa": GQA_CONFIG},
    requires=ATTENTION.requires,
    ties=(("head.weight", "embed.weight"),),
)

LLAMA_FAMILIES = (LLAMA_BLOCK, LLAMA_MODEL)  # listed in harness.families.catalog
