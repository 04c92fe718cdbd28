"""Families for whole models: the write-ups as systems, not only as layers.

- ``encoder_decoder``: (src tokens (B,S), tgt tokens (B,T)) -> log-probabilities (B,T,V);
  the decoder input is ``tgt`` (starting with the start symbol) and position t predicts
  the token after tgt[:, :t+1]. A write-up that shifts the target inside its own decode
  (000) declares it (trait ``target_shift``).
- ``decoder_only_model``: (tokens (B,T), pad (B,T) bool True = real) -> log-probabilities
  (B,T,V), causal inside.

Canonical parameters nest the layer families' own (``encoder.0.self_attn.q.weight`` is
the encoder_layer family's ``self_attn.q.weight`` of layer 0), so a model's map is its
layers' maps re-rooted with ``harness.porting.entries.nest``. N layers: ``layers(cfg)`` (the
config's ``layers`` field when it has one, else 2).

Weight tying: a model that holds its target embedding and output projection in one
tensor (000, nanoGPT) maps the canonical ``generator.weight`` to ``Tied(...)``. So that
every model can take the same canonical weights, these families draw the tied canonical
tensors equal (``ties``): src/tgt embeddings and the output projection start from one
table. Their gradients stay separate canonical tensors, so sharing and tying are
semantic traits (a shared table's gradient is the sum over its uses).

Decoding is registered beside a model with ``register_decoding``: the write-up's own
greedy loop, and the step functions that the cache checks compare (one step with the
model's cache against the same step recomputed over the whole prefix).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch

from harness.base.boundary import check_output, guarded
from harness.base.config import Config
from harness.base.errors import ConfigError, RegistryError
from harness.families import oracles
from harness.families.base import Case, Family, ParamSpec, TraitSpec, _norm_params, right_pad
from harness.families.layers import LAYER_FAMILIES, LAYER_TRAITS

_LAYERS = {f.name: f for f in LAYER_FAMILIES}
PAD, START = 0, 1  # token ids shared by every model family case (content tokens are 2..V-1)
DEFAULT_LAYERS = 2


def layers(cfg: Config) -> int:
    """N, the number of layers per stack: ``cfg.layers`` when the config has the field."""
    return int(getattr(cfg, "layers", DEFAULT_LAYERS))


@dataclass(frozen=True)
class ModelFamily(Family):
    """A family whose canonical weights tie some tensors (``ties``: (name, equal to))."""

    ties: tuple[tuple[str, str], ...] = ()

    def canonical_weights(self, cfg: Config, seed: int | None = None,
                          traits: Mapping[str, Any] | None = None) -> dict[str, torch.Tensor]:
        weights = super().canonical_weights(cfg, seed, traits)
        for name, source in self.ties:
            weights[name] = weights[source].clone()
        return weights


def _nested(family: str, prefix: str, cfg: Config) -> ParamSpec:
    return {prefix + name: spec for name, spec in _LAYERS[family].params(cfg).items()}


def _vocab_table(cfg: Config) -> tuple[tuple[int, ...], str]:
    return ((cfg.vocab, cfg.d_model), "weight")


def encoder_decoder_params(cfg: Config) -> ParamSpec:
    spec: ParamSpec = {"src_embed.weight": _vocab_table(cfg), "tgt_embed.weight": _vocab_table(cfg)}
    for i in range(layers(cfg)):
        spec.update(_nested("encoder_layer", f"encoder.{i}.", cfg))
    spec.update(_norm_params("encoder.norm.", cfg.d_model))
    for i in range(layers(cfg)):
        spec.update(_nested("decoder_layer", f"decoder.{i}.", cfg))
    spec.update(_norm_params("decoder.norm.", cfg.d_model))
    spec["generator.weight"] = _vocab_table(cfg)
    spec["generator.bias"] = ((cfg.vocab,), "bias")
    return spec


def decoder_only_params(cfg: Config) -> ParamSpec:
    spec: ParamSpec = {"embed.weight": _vocab_table(cfg), "pos.weight": ((cfg.tgt_len, cfg.d_model), "weight")}
    for i in range(layers(cfg)):
        spec.update(_nested("decoder_only_block", f"blocks.{i}.", cfg))
    spec.update(_norm_params("norm.", cfg.d_model))
    spec["head.weight"] = _vocab_table(cfg)
    spec["head.bias"] = ((cfg.vocab,), "bias")
    return spec


def content_tokens(gen: torch.Generator, cfg: Config, batch: int, length: int) -> torch.Tensor:
    if cfg.vocab < 3:
        raise ConfigError(f"vocab={cfg.vocab} is too small: model families need pad, start and a content token")
    return torch.randint(START + 1, cfg.vocab, (batch, length), generator=gen)


def dropout_sites(own: tuple[str, ...], cfg: Config | None = None, **stacks: tuple[str, ...]) -> tuple[str, ...]:
    """A model's dropout sites: its own, then each stack's layer sites once per layer
    (``encoder=("attention weights", ...)`` -> "encoder.0 attention weights", ...), so the
    dropout check counts the draws of the whole model; a "(per head)" suffix stays last."""
    n = layers(cfg or Config())
    return own + tuple(f"{stack}.{i} {site}" for stack, sites in stacks.items() for i in range(n) for site in sites)


# -- the oracles: the layer families' oracles, composed --------------------------------------------

def _sub(w: Mapping[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {n[len(prefix):]: t for n, t in w.items() if n.startswith(prefix)}


def _final_norm(traits, w, name: str, x: torch.Tensor, dtype) -> torch.Tensor:
    if not traits["final_norm"]:
        return x
    return oracles.normalize(x, w[f"{name}.weight"], w[f"{name}.bias"], traits["norm_formula"],
                             oracles._eps(traits["eps"], dtype))


def _embed(traits, table: torch.Tensor, tokens: torch.Tensor, pad_idx: int) -> torch.Tensor:
    x = table[tokens]                                                  # (B, L, D)
    if traits["pad_rows"] == "zeroed":
        x = x.masked_fill((tokens == pad_idx)[..., None], 0.0)
    return x * oracles.EMBEDDING_SCALES[traits["embedding_scale"]](x.shape[-1])


def _positions(traits, length: int, d: int) -> torch.Tensor:
    return oracles.positional_table(length, d, traits["pe_layout"], traits["pe_frequencies"])


def encoder_decoder_oracle(traits, cfg, w, inputs, dtype) -> torch.Tensor:
    """Embeddings (x scale, pad rows), positions, N encoder layers, final norm; the target
    shifted (or not) the way the model declares, N decoder layers, final norm; the output
    projection (the target table when tied); log-softmax."""
    src, tgt, pad_idx = inputs["src"], inputs["tgt"], inputs["pad_idx"]
    d = cfg.d_model
    src_table = w["src_embed.weight"]
    tgt_table = src_table if traits["shared_embeddings"] else w["tgt_embed.weight"]
    x = _embed(traits, src_table, src, pad_idx)
    x = x + _positions(traits, src.shape[1], d).to(x.dtype)
    src_pad = src != pad_idx                                           # (B, S) True = real
    for i in range(layers(cfg)):
        x = oracles.encoder_layer(traits, cfg, _sub(w, f"encoder.{i}."), {"x": x, "pad": src_pad}, dtype)
    memory = _final_norm(traits, w, "encoder.norm", x, dtype)
    y = _embed(traits, tgt_table, tgt, pad_idx)
    if traits["target_shift"] == "inside decode (zero vector first)":
        y = torch.nn.functional.pad(y[:, :-1], (0, 0, 1, 0))
    y = y + _positions(traits, tgt.shape[1], d).to(y.dtype)
    t = tgt.shape[1]
    tgt_mask = torch.ones(t, t, dtype=torch.bool).tril().expand(tgt.shape[0], t, t)  # the target is unpadded
    for i in range(layers(cfg)):
        y = oracles.decoder_layer(traits, cfg, _sub(w, f"decoder.{i}."),
                                  {"x": y, "memory": memory, "src_pad": src_pad, "tgt_mask": tgt_mask}, dtype)
    y = _final_norm(traits, w, "decoder.norm", y, dtype)
    logits = y @ tgt_table.T if traits["tied_output"] else oracles.linear(y, w, "generator")
    return torch.log_softmax(logits, dim=-1)


def decoder_only_oracle(traits, cfg, w, inputs, dtype) -> torch.Tensor:
    """Embedding (+ learned positions), N causal blocks, final norm, head (the embedding
    when tied), log-softmax. Right padding only: no query row loses every key."""
    tokens, pad = inputs["tokens"], inputs["pad"]
    x = w["embed.weight"][tokens] * oracles.EMBEDDING_SCALES[traits["embedding_scale"]](cfg.d_model)
    if traits["positional_encoding"] == "learned":
        x = x + w["pos.weight"][: tokens.shape[1]]
    block_traits = {**traits, "fully_masked_row": "NaN"}  # not reached: every row keeps key 0
    for i in range(layers(cfg)):
        x = oracles.decoder_only_block(block_traits, cfg, _sub(w, f"blocks.{i}."), {"x": x, "pad": pad}, dtype)
    x = _final_norm(traits, w, "norm", x, dtype)
    logits = x @ w["embed.weight"].T if traits["tied_output"] else oracles.linear(x, w, "head")
    return torch.log_softmax(logits, dim=-1)


def _seq2seq(cfg: Config, gen: torch.Generator) -> dict:
    src = content_tokens(gen, cfg, cfg.batch, cfg.src_len)
    src[~right_pad(gen, cfg.batch, cfg.src_len)] = PAD
    tgt = content_tokens(gen, cfg, cfg.batch, cfg.tgt_len)
    tgt[:, 0] = START
    return {"src": src, "tgt": tgt, "pad_idx": PAD, "start": START}


BOOL = (True, False)
MODEL_TRAITS = {
    **LAYER_TRAITS,
    "final_norm": TraitSpec("each stack ends with a norm", BOOL),
    "embedding_scale": TraitSpec("the factor token embeddings are multiplied by", tuple(oracles.EMBEDDING_SCALES)),
    "tied_output": TraitSpec("the output projection is the (target) embedding table", BOOL),
}

# The whole-model families run the default config only (their cost); a small extra one
# reads another vocabulary, so a model that hard-codes V = 11 is caught.
VOCAB_CONFIG = Config(d_model=16, heads=2, d_ff=32, batch=2, tgt_len=4, src_len=3, vocab=13)

ENCODER_DECODER = ModelFamily(
    name="encoder_decoder",
    matrix=("default",),
    extra_configs={"vocab13": VOCAB_CONFIG},
    call="(src (B,S) int, tgt (B,T) int starting with the start symbol; pad 0) -> log-probabilities (B,T,V)",
    doc="A whole encoder-decoder: embeddings, positional encoding, N encoder and decoder layers, generator.",
    params=encoder_decoder_params,
    # One case: the source padded, the target full length. Target padding is where the
    # write-ups' target masks differ (003 masks pad query rows, 000 masks nothing, the
    # others pad keys): the masks family compares those builders; a padded-target case
    # here would double the family's cost in the suite.
    cases=(Case("src_padded", "source right-padded, target full length", _seq2seq),),
    traits={
        **MODEL_TRAITS,
        "pad_rows": TraitSpec("what a pad token's embedding becomes", ("kept", "zeroed")),
        "pe_layout": TraitSpec("how sines and cosines are laid out", oracles.PE_LAYOUTS),
        "pe_frequencies": TraitSpec("the frequency of pair i", tuple(oracles.PE_FREQUENCIES)),
        "shared_embeddings": TraitSpec("source and target share one table", BOOL),
        "target_shift": TraitSpec("where the decoder input is shifted right",
                                  ("by the caller", "inside decode (zero vector first)")),
    },
    oracle=encoder_decoder_oracle,
    ties=(("tgt_embed.weight", "src_embed.weight"), ("generator.weight", "src_embed.weight")),
)


def _tokens(cfg: Config, gen: torch.Generator, padded: bool) -> dict:
    tokens = content_tokens(gen, cfg, cfg.batch, cfg.tgt_len)
    pad = right_pad(gen, cfg.batch, cfg.tgt_len) if padded else torch.ones_like(tokens, dtype=torch.bool)
    tokens[~pad] = PAD
    return {"tokens": tokens, "pad": pad}


DECODER_ONLY_MODEL = ModelFamily(
    name="decoder_only_model",
    matrix=("default",),
    extra_configs={"vocab13": VOCAB_CONFIG},
    call="(tokens (B,T) int, pad (B,T) bool True=real token) -> log-probabilities (B,T,V); causal inside",
    doc="A whole decoder-only language model: embedding, N causal blocks, output head.",
    params=decoder_only_params,
    cases=(
        Case("full", "no padding", lambda c, g: _tokens(c, g, False)),
        Case("right_pad", "right padding: every query row sees a key", lambda c, g: _tokens(c, g, True)),
    ),
    traits={**MODEL_TRAITS,
            "positional_encoding": TraitSpec("positions added to the embedding", ("none", "learned"))},
    oracle=decoder_only_oracle,
    ties=(("head.weight", "embed.weight"),),
)

MODEL_FAMILIES = (ENCODER_DECODER, DECODER_ONLY_MODEL)  # listed in harness.families.catalog


# -- decoding ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Decoding:
    """How one registered model decodes.

    prepare  (module, inputs, cached) -> state: encodes the source (encoder-decoder) and
             sets up the model's cache when ``cached``; ``inputs`` as the family's case
    step     (module, state, ys (B,n)) -> log-probabilities (B,V) of the token after ys;
             with a cached state it may feed only what the cache has not seen
    greedy   (module, inputs, steps) -> tokens (B, steps): the write-up's own greedy loop
             (None: the harness's loop over ``step``)
    cache    what the model's cache holds ("" when it has none)
    bos      whether the decoder input starts with the start symbol (False: the model
             builds its own start, as 000's shift inserts a zero vector)
    padding  the padding sides the cache handles ("right", "left"): the cache parity
             (``harness.systems.cache_parity``) runs the family's case of each side; a
             step reads the pad mask ``prepare`` was given in ``inputs``
    """

    prepare: Callable[[Any, dict, bool], Any]
    step: Callable[[Any, Any, torch.Tensor], torch.Tensor]
    greedy: Callable[[Any, dict, int], torch.Tensor] | None = None
    cache: str = ""
    bos: bool = True
    padding: tuple[str, ...] = ("right",)


DECODINGS: dict[str, Decoding] = {}


def register_decoding(family: str, id: str, **fields: Any) -> Decoding:
    """Declare, beside a model's ``register``, how it decodes: the fields of ``Decoding``
    (``prepare``, ``step``, ``greedy``, ``cache``, ``bos``, ``padding``; docs/models.md)."""
    if family not in (ENCODER_DECODER.name, DECODER_ONLY_MODEL.name, "llama_model"):
        raise RegistryError(f"decoding is declared for model families only, not '{family}'")
    known = [f.name for f in dataclasses.fields(Decoding)]
    if unknown := sorted(set(fields) - set(known)) or sorted({"prepare", "step"} - set(fields)):
        raise RegistryError(f"register_decoding('{family}', '{id}'): field(s) {unknown} unknown or missing; "
                            f"its fields: {known} (prepare and step required)")
    if isinstance(fields.get("padding"), str):  # one side named: that side, not its letters
        fields["padding"] = (fields["padding"],)
    decoding = Decoding(**fields)
    if not decoding.padding or not set(decoding.padding) <= {"right", "left"}:
        raise RegistryError(f"decoding '{family}/{id}': padding={decoding.padding!r} must name the sides the cache "
                            "handles: ('right',), ('left',) or ('right', 'left')")
    who = f"{family}/{id}"
    stages = {"prepare": ("cache prefill (prepare)", None), "step": ("decoding step", _step_result),
              "greedy": ("greedy loop", _step_result)}
    decoding = dataclasses.replace(decoding, **{
        name: guarded(stage, getattr(decoding, name), who=who, check=check)
        for name, (stage, check) in stages.items() if getattr(decoding, name) is not None})
    DECODINGS[who] = decoding
    return decoding


def _step_result(result: Any, args: tuple, kwargs: dict) -> str | None:
    return check_output(result, what="it")


def incremental(full: Callable[[Any, torch.Tensor], torch.Tensor],
                cached: Callable[[Any, torch.Tensor, list], torch.Tensor]) -> dict[str, Callable]:
    """``prepare``/``step`` for a decoder-only model whose cache is a list it extends:
    ``full(model, ys)`` gives the log-probabilities after ``ys`` re-running the prefix,
    ``cached(model, new, cache)`` after feeding only the ``new`` tokens the cache has not seen."""

    def prepare(model, inputs, use_cache):
        return {"cache": [] if use_cache else None, "fed": 0}

    def step(model, state, ys):
        if state["cache"] is None:
            return full(model, ys)
        out = cached(model, ys[:, state["fed"]:], state["cache"])
        state["fed"] = ys.size(1)
        return out

    return {"prepare": prepare, "step": step}
