"""Families: the interface of each kind of component.

A family fixes
- the canonical call (what the adapter of every variant receives),
- the canonical parameters (names and shapes) that weights are ported through,
- the seeded cases (inputs) that every pair of its variants is compared on,
- the semantic traits and their vocabulary: declared traits whose values say *what* a
  variant computes. The family's float64 oracle (``harness.oracles``) is built from them,
  and every variant is checked against the oracle of its own traits. Two variants whose
  semantic traits are equal fall in one equivalence class. Other traits (scale
  placement, QKV layout, ...) describe *how* a variant computes; they are known by name
  (``DESCRIPTIVE_TRAITS``) and must not change the result beyond rounding.

Declarations are validated at ``register``: an unknown trait key, a semantic value the
oracle cannot build, or an unknown case name in ``traits["cases"]`` is an error listing
what is known.

Mask convention everywhere in the harness: bool, True = may attend. Pad masks are
(B, L) with True on real tokens (keys that may be attended).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch

from . import oracles
from .config import Config
from .errors import UnknownName

ParamSpec = dict[str, tuple[tuple[int, ...], str]]  # name -> (shape, init kind)

REQUIRED = object()


@dataclass(frozen=True)
class TraitSpec:
    """A semantic trait's vocabulary: the values its oracle can build (``values``), or any
    number when ``number`` is set; ``default`` is used when a variant does not declare it."""

    doc: str
    values: tuple[Any, ...] = ()
    number: bool = False
    default: Any = REQUIRED

    def accepts(self, value: Any) -> bool:
        if self.number and isinstance(value, (int, float)) and not isinstance(value, bool):
            return math.isfinite(value) and value >= 0
        return value in self.values

    def known(self) -> str:
        parts = [repr(v) for v in self.values] + (["a number >= 0"] if self.number else [])
        return ", ".join(parts)


# Traits every family knows besides its semantic ones: how a variant computes, not what.
DESCRIPTIVE_TRAITS = {
    "qkv_layout": "how Q, K, V projections are stored",
    "bias": "which Linear layers carry a bias",
    "scale": "where 1/sqrt(d_k) is applied",
    "mask_convention": "the variant's own mask polarity (its adapter converts)",
    "fill": "the value masked scores are filled with (a finite fill can overflow float16)",
    "std": "how the norm's spread is computed",
    "dropout_sites": "tuple of the places dropout draws a mask in training (checked: one draw each)",
    "internal_dtype": "a dtype some of the work is done in whatever the input dtype ('float32'):"
                      " in float64 the variant is then expected 'less precise', not 'different'",
    "cases": "tuple of the family cases the variant applies to (default: all)",
    "note": "free text",
}
EPS = TraitSpec("the norm's epsilon", values=oracles.EPS_NAMES, number=True)


@dataclass(frozen=True)
class Case:
    name: str
    note: str  # what the case exercises
    make: Callable[[Config, torch.Generator], dict[str, Any]]


@dataclass(frozen=True)
class Family:
    name: str
    call: str
    doc: str
    params: Callable[[Config], ParamSpec]
    cases: tuple[Case, ...]
    traits: Mapping[str, TraitSpec]       # the semantic traits and their vocabulary
    oracle: oracles.Oracle | None = None  # float64, built from a variant's semantic traits
    grad_inputs: tuple[str, ...] = ()
    differentiable: bool = True
    dtypes: tuple[str, ...] = ()  # fixed dtypes (the masks family: bool); else the device's
    case_semantic: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # Which configs of the default matrix its check runs (None: all). Whole models run on the
    # default config only: their layers are checked over the whole matrix in their own families.
    matrix: tuple[str, ...] | None = None
    matrix_note: str = "its layers run the whole matrix in their families"  # why (shown by check)

    def configs_of(self, configs: Mapping[str, Config]) -> dict[str, Config]:
        """``configs`` narrowed to this family's matrix (a --set config always applies)."""
        from .config import CONFIG_MATRIX

        return {n: c for n, c in configs.items()
                if self.matrix is None or n in self.matrix or n not in CONFIG_MATRIX}

    @property
    def semantic(self) -> tuple[str, ...]:
        """Semantic traits that matter on every case."""
        per_case = {t for names in self.case_semantic.values() for t in names}
        return tuple(t for t in self.traits if t not in per_case)

    def case(self, name: str) -> Case:
        for case in self.cases:
            if case.name == name:
                return case
        raise UnknownName(
            f"family '{self.name}' has no case '{name}'; cases: {[c.name for c in self.cases]}"
        )

    def semantic_for(self, case: str) -> tuple[str, ...]:
        return self.semantic + tuple(self.case_semantic.get(case, ()))

    def semantic_traits(self, traits: Mapping[str, Any]) -> dict[str, Any]:
        """A variant's semantic traits with the family's defaults filled in."""
        return {name: traits.get(name, spec.default) for name, spec in self.traits.items()
                if name in traits or spec.default is not REQUIRED}

    def validate_traits(self, variant_id: str, traits: Mapping[str, Any]) -> list[str]:
        """Problems with a variant's declared traits (empty when they are executable)."""
        problems = []
        for key in traits:
            if key not in self.traits and key not in DESCRIPTIVE_TRAITS:
                problems.append(
                    f"unknown trait {key!r}; semantic traits of {self.name}: {list(self.traits)}; "
                    f"descriptive: {list(DESCRIPTIVE_TRAITS)}")
        cases = traits.get("cases")
        if cases is not None:
            if isinstance(cases, str) or not all(isinstance(c, str) for c in cases):
                problems.append(f"traits['cases'] must be a tuple of case names, got {cases!r}")
            else:
                unknown = [c for c in cases if c not in {k.name for k in self.cases}]
                if unknown:
                    problems.append(f"traits['cases'] names unknown case(s) {unknown}; "
                                    f"cases of {self.name}: {[c.name for c in self.cases]}")
        applicable = [c.name for c in self.cases if cases is None or c.name in cases]
        needed = {t for c in applicable for t in self.semantic_for(c)}
        for name, spec in self.traits.items():
            if name in traits:
                if not spec.accepts(traits[name]):
                    problems.append(f"trait {name}={traits[name]!r} has no oracle; known: {spec.known()}")
            elif spec.default is REQUIRED and name in needed:
                problems.append(f"semantic trait {name!r} is not declared ({spec.doc}; known: {spec.known()})")
        sites = traits.get("dropout_sites")
        if sites is not None and (isinstance(sites, str) or not all(isinstance(x, str) for x in sites)):
            problems.append(f"traits['dropout_sites'] must be a tuple of site names, got {sites!r}")
        internal = traits.get("internal_dtype")
        if internal is not None and internal not in ("float32", "bfloat16", "float16"):
            problems.append(f"traits['internal_dtype'] must be 'float32', 'bfloat16' or 'float16', got {internal!r}")
        return problems

    def canonical_shapes(self, cfg: Config) -> dict[str, tuple[int, ...]]:
        return {name: shape for name, (shape, _) in self.params(cfg).items()}

    def canonical_weights(self, cfg: Config, seed: int | None = None) -> dict[str, torch.Tensor]:
        """Seeded float64 canonical parameters: weights ~ N(0, 1/fan_in), biases
        ~ N(0, 0.1^2), norm gains ~ 1 + N(0, 0.1^2). Non-trivial biases and gains on
        purpose: a variant that ignores one cannot hide."""
        gen = torch.Generator().manual_seed(cfg.seed if seed is None else seed)
        out = {}
        for name, (shape, kind) in self.params(cfg).items():
            noise = torch.randn(shape, generator=gen, dtype=torch.float64)
            if kind == "weight":
                out[name] = noise / math.sqrt(shape[-1])
            elif kind == "norm_weight":
                out[name] = 1.0 + 0.1 * noise
            else:  # bias, norm_bias
                out[name] = 0.1 * noise
        return out

    def inputs(self, case: str, cfg: Config) -> dict[str, Any]:
        """Seeded float64 (or bool / int) inputs of one case; same seed, same tensors."""
        gen = torch.Generator().manual_seed(cfg.seed + 1)
        return {**self.case(case).make(cfg, gen), "case": case}


# -- parameter specs ---------------------------------------------------------------------

def _attn_params(prefix: str, d: int) -> ParamSpec:
    spec: ParamSpec = {}
    for proj in "qkvo":
        spec[f"{prefix}{proj}.weight"] = ((d, d), "weight")
        spec[f"{prefix}{proj}.bias"] = ((d,), "bias")
    return spec


def _ffn_params(prefix: str, d: int, f: int) -> ParamSpec:
    return {
        f"{prefix}w1.weight": ((f, d), "weight"),
        f"{prefix}w1.bias": ((f,), "bias"),
        f"{prefix}w2.weight": ((d, f), "weight"),
        f"{prefix}w2.bias": ((d,), "bias"),
    }


def _norm_params(prefix: str, d: int) -> ParamSpec:
    return {f"{prefix}weight": ((d,), "norm_weight"), f"{prefix}bias": ((d,), "norm_bias")}


# -- seeded inputs ---------------------------------------------------------------------------

def lengths(gen: torch.Generator, batch: int, length: int) -> torch.Tensor:
    """Random valid lengths in [1, length]: row 0 full, at least one row padded."""
    lens = torch.randint(1, length + 1, (batch,), generator=gen)
    lens[0] = length
    if batch > 1 and bool((lens == length).all()):
        lens[-1] = max(1, length - 2)
    return lens


def right_pad(gen: torch.Generator, batch: int, length: int) -> torch.Tensor:
    """(B, L) bool, True on real tokens, padding at the end of each row."""
    return torch.arange(length)[None, :] < lengths(gen, batch, length)[:, None]


def left_pad(gen: torch.Generator, batch: int, length: int) -> torch.Tensor:
    """(B, L) bool, True on real tokens, padding at the start of each row."""
    return right_pad(gen, batch, length).flip(-1)


def causal(length: int) -> torch.Tensor:
    """(L, L) bool, True = may attend (key position <= query position)."""
    return torch.ones(length, length, dtype=torch.bool).tril()


def activations(gen: torch.Generator, *shape: int, std: float = 1.0) -> torch.Tensor:
    return std * torch.randn(shape, generator=gen, dtype=torch.float64)


# Layer inputs have std 0.1: LayerNorm's eps (1e-5 vs 1e-6) then changes the output by
# ~5e-4 relative, well above float32 rounding, so an eps mismatch cannot pass as noise.
LAYER_STD = 0.1


def _attn_self(cfg: Config, gen: torch.Generator) -> dict:
    x = activations(gen, cfg.batch, cfg.tgt_len, cfg.d_model)
    pad = right_pad(gen, cfg.batch, cfg.tgt_len)
    mask = pad[:, None, :].expand(cfg.batch, cfg.tgt_len, cfg.tgt_len)  # (B, T, T)
    return {"query": x, "key": x, "value": x, "mask": mask.clone(), "causal": False}


def _attn_self_kv(cfg: Config, gen: torch.Generator) -> dict:
    """Self-shaped (S = T) but query, key and value are three different tensors."""
    q, k, v = (activations(gen, cfg.batch, cfg.tgt_len, cfg.d_model) for _ in range(3))
    pad = right_pad(gen, cfg.batch, cfg.tgt_len)
    mask = pad[:, None, :].expand(cfg.batch, cfg.tgt_len, cfg.tgt_len)
    return {"query": q, "key": k, "value": v, "mask": mask.clone(), "causal": False}


def _attn_cross(cfg: Config, gen: torch.Generator) -> dict:
    """T != S, and key and value are different tensors."""
    x = activations(gen, cfg.batch, cfg.tgt_len, cfg.d_model)
    key = activations(gen, cfg.batch, cfg.src_len, cfg.d_model)
    value = activations(gen, cfg.batch, cfg.src_len, cfg.d_model)
    pad = right_pad(gen, cfg.batch, cfg.src_len)
    mask = pad[:, None, :].expand(cfg.batch, cfg.tgt_len, cfg.src_len)  # (B, T, S)
    return {"query": x, "key": key, "value": value, "mask": mask.clone(), "causal": False}


def _attn_cross_memory(cfg: Config, gen: torch.Generator) -> dict:
    """Encoder-decoder attention: T != S, key and value are the same encoder memory."""
    x = activations(gen, cfg.batch, cfg.tgt_len, cfg.d_model)
    memory = activations(gen, cfg.batch, cfg.src_len, cfg.d_model)
    pad = right_pad(gen, cfg.batch, cfg.src_len)
    mask = pad[:, None, :].expand(cfg.batch, cfg.tgt_len, cfg.src_len)
    return {"query": x, "key": memory, "value": memory, "mask": mask.clone(), "causal": False}


def _attn_causal(cfg: Config, gen: torch.Generator) -> dict:
    inputs = _attn_self(cfg, gen)
    inputs["mask"] = inputs["mask"] & causal(cfg.tgt_len)
    return inputs


def _attn_causal_only(cfg: Config, gen: torch.Generator) -> dict:
    x = activations(gen, cfg.batch, cfg.tgt_len, cfg.d_model)
    mask = causal(cfg.tgt_len).expand(cfg.batch, cfg.tgt_len, cfg.tgt_len).clone()
    return {"query": x, "key": x, "value": x, "mask": mask, "causal": True}


def random_mask(gen: torch.Generator, batch: int, rows: int, cols: int) -> torch.Tensor:
    """(B, rows, cols) bool, each entry kept with probability 1/2, every row keeping at
    least one key: neither causal nor padding, so a mask applied along the wrong axis,
    transposed or broadcast from one row cannot pass."""
    mask = torch.rand(batch, rows, cols, generator=gen) < 0.5
    keep = torch.randint(0, cols, (batch, rows), generator=gen)
    mask.scatter_(-1, keep[..., None], True)
    return mask


def _attn_random_mask(cfg: Config, gen: torch.Generator) -> dict:
    x = activations(gen, cfg.batch, cfg.tgt_len, cfg.d_model)
    mask = random_mask(gen, cfg.batch, cfg.tgt_len, cfg.tgt_len)
    return {"query": x, "key": x, "value": x, "mask": mask, "causal": False}


def _attn_fully_masked(cfg: Config, gen: torch.Generator) -> dict:
    inputs = _attn_self(cfg, gen)
    mask = inputs["mask"]
    mask[-1, 0, :] = False          # one query row sees no key at all
    if cfg.batch > 1 and cfg.tgt_len > 1:
        mask[0, -1, :] = False
    return inputs


FULLY_MASKED_ROW = TraitSpec("what a query row that sees no key becomes", oracles.FULLY_MASKED_ROWS)

ATTENTION = Family(
    name="attention",
    call="(query (B,T,D), key (B,S,D), value (B,S,D), mask (B,T,S) bool True=may attend) -> (B,T,D)",
    doc="Multi-head attention with its Q, K, V and output projections.",
    params=lambda cfg: _attn_params("", cfg.d_model),
    cases=(
        Case("self", "query = key = value, random key padding", _attn_self),
        Case("self_kv", "S = T but query, key and value all different (K/V roles apart)", _attn_self_kv),
        Case("cross", "T != S, key != value, random source padding", _attn_cross),
        Case("cross_memory", "T != S, key = value = encoder memory, source padding", _attn_cross_memory),
        Case("causal", "causal self-attention with key padding", _attn_causal),
        Case("causal_only", "causal mask only (is_causal hint allowed)", _attn_causal_only),
        Case("random_mask", "an arbitrary mask, every row keeps a key (axes and polarity)", _attn_random_mask),
        Case("fully_masked", "rows whose keys are all masked", _attn_fully_masked),
    ),
    traits={
        "sublayer": TraitSpec("what the module returns", oracles.ATTENTION_SUBLAYERS),
        "fully_masked_row": FULLY_MASKED_ROW,
        "mask_style": TraitSpec("masked scores replaced (fill) or added to (additive)",
                                oracles.MASK_STYLES, default="fill"),
        "eps": TraitSpec("eps of a LayerNorm inside the sublayer", EPS.values, True, default=1e-5),
    },
    oracle=oracles.attention,
    case_semantic={"fully_masked": ("fully_masked_row", "mask_style")},
    grad_inputs=("query", "key", "value"),
)


NORM_FORMULA = TraitSpec("the normalisation formula", oracles.NORM_FORMULAS)
ACTIVATION = TraitSpec("the feed-forward activation", tuple(oracles.ACTIVATIONS))
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


NORM = Family(
    name="norm",
    call="(x (B,T,D)) -> (B,T,D)",
    doc="Normalisation over the last dimension, with a gain and a bias.",
    params=lambda cfg: _norm_params("", cfg.d_model),
    cases=(Case("rows", "rows with non-zero mean and std 0.1", _rows),),
    traits={"norm_formula": NORM_FORMULA, "eps": EPS},
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
)


def _encoder_padded(cfg: Config, gen: torch.Generator) -> dict:
    x = activations(gen, cfg.batch, cfg.tgt_len, cfg.d_model, std=LAYER_STD)
    return {"x": x, "pad": right_pad(gen, cfg.batch, cfg.tgt_len)}


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
    cases=(Case("padded", "random right padding", _encoder_padded),),
    traits=LAYER_TRAITS,
    oracle=oracles.encoder_layer,
    grad_inputs=("x",),
)


def _decoder_padded(cfg: Config, gen: torch.Generator) -> dict:
    x = activations(gen, cfg.batch, cfg.tgt_len, cfg.d_model, std=LAYER_STD)
    memory = activations(gen, cfg.batch, cfg.src_len, cfg.d_model, std=LAYER_STD)
    src_pad = right_pad(gen, cfg.batch, cfg.src_len)
    tgt_pad = right_pad(gen, cfg.batch, cfg.tgt_len)
    tgt_mask = causal(cfg.tgt_len)[None] & tgt_pad[:, None, :]  # (B, T, T)
    return {"x": x, "memory": memory, "src_pad": src_pad, "tgt_mask": tgt_mask}


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
    cases=(Case("padded", "causal target mask with target and source padding, T != S", _decoder_padded),),
    traits=LAYER_TRAITS,
    oracle=oracles.decoder_layer,
    grad_inputs=("x", "memory"),
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
    case_semantic={"left_pad": ("fully_masked_row",)},
    grad_inputs=("x",),
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
)


def _tokens(cfg: Config, gen: torch.Generator) -> dict:
    pad_idx = 0
    tokens = torch.randint(1, 11, (cfg.batch, cfg.tgt_len), generator=gen)
    tokens[~right_pad(gen, cfg.batch, cfg.tgt_len)] = pad_idx
    return {"tokens": tokens, "pad_idx": pad_idx}


MASKS = Family(
    name="masks",
    call="builders: causal(T) -> (T,T); pad(tokens) -> (B,T); target(tokens) -> (B,T,T); all bool True=may attend",
    doc="Every write-up's mask builders, converted to the one convention.",
    params=lambda cfg: {},
    cases=(
        Case("causal", "causal mask from a length", _tokens),
        Case("pad", "key padding mask from tokens", _tokens),
        Case("target", "decoder self-attention mask from target tokens", _tokens),
    ),
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
    tokens = torch.randint(1, cfg.vocab, (cfg.batch, cfg.tgt_len), generator=gen)
    tokens[~right_pad(gen, cfg.batch, cfg.tgt_len)] = 0
    return {"tokens": tokens, "pad_idx": 0}


EMBEDDING = Family(
    name="embedding",
    call="(tokens (B,T) int, pad_idx) -> (B,T,D)",
    doc="Token embedding lookup (and whatever scaling a write-up applies).",
    params=lambda cfg: {"weight": ((cfg.vocab, cfg.d_model), "weight")},
    cases=(Case("padded", "tokens with right padding (pad_idx 0)", _embed_tokens),),
    traits={
        "embedding_scale": TraitSpec("the factor the lookup is multiplied by", tuple(oracles.EMBEDDING_SCALES)),
        "pad_rows": TraitSpec("what the pad token's row becomes", ("kept", "zeroed")),
    },
    oracle=oracles.embedding,
)


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        ATTENTION, NORM, FFN, ENCODER_LAYER, DECODER_LAYER, DECODER_ONLY_BLOCK,
        POSITIONAL_ENCODING, EMBEDDING, MASKS,
    )
}


def get_family(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        raise UnknownName(f"unknown family '{name}'; families: {sorted(FAMILIES)}") from None


from . import model_families  # noqa: E402,F401  (registers the whole-model families)
from .kernel_family import ATTENTION_KERNEL  # noqa: E402  (attention over projected heads)
FAMILIES[ATTENTION_KERNEL.name] = ATTENTION_KERNEL
