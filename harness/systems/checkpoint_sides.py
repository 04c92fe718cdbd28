"""The two sides of a checkpoint comparison, and what they run on.

``prepare`` opens a checkpoint (``harness.porting.checkpoint``), takes the class it belongs
to (its Hugging Face class through ``config.json``, or a registered variant whose
``state_dict`` it is) and the user's port (a registered variant of the same family, or a
``Variant`` built by hand: a module with a map), refuses a comparison that would not fit in
memory, and holds the checkpoint to the class's map strictly; ``load`` ports the
checkpoint into a side one layer at a time. A canonical tensor the checkpoint does not
hold (a tied head saved once) that the port keeps as a parameter of its own is left at the
port's initial values, as loading the checkpoint by name leaves it (``not_held``).

The token sequences: a file of ids, texts through the checkpoint's own tokenizer, or a
seeded sample of the vocabulary; ``inputs_of`` makes the family's call of them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

from harness.base.config import Config, ModelConfig
from harness.base.defaults import PARITY_DTYPES, PARITY_FAMILIES
from harness.base.dtypes import dtype_of
from harness.base.errors import ConfigError, InputError, UnknownName
from harness.base.seeding import seed_everything
from harness.families.catalog import get_family
from harness.families.models import DECODINGS, Decoding
from harness.porting.checkpoint import Checkpoint, CheckpointReader, check_memory, open_checkpoint
from harness.porting.entries import Absent, Param, Tied
from harness.porting.portmap import PortMap
from harness.registry import REGISTRY, Variant, build, get_variant
from harness.registry.checkpoints import HF_DECODING, hf_variant, load_hf_config, model_config, rope_fraction
from harness.registry.hf_class import (
    ClassParams,
    by_name_map,
    by_name_shapes,
    class_params,
    extensions_of,
    family_of,
    gpt2_map,
    hf_class,
    llama_map,
    saved_map,
)

FAMILIES, DTYPES = PARITY_FAMILIES, PARITY_DTYPES


@dataclass
class Side:
    role: str                      # "reference" or "port"
    variant: Variant
    decoding: Decoding | None

    @property
    def name(self) -> str:
        return self.variant.id


@dataclass
class Comparison:
    checkpoint: Checkpoint
    family: str
    cfg: ModelConfig
    reference: Side
    port: Side
    reader: CheckpointReader
    dtype: torch.dtype
    left_at_init: list[str] = field(default_factory=list)  # canonical names the port keeps at its init
    # by name (the port uses the class's parameter names): the class's names and shapes are the
    # canonical ones; None: the family's
    shapes: dict[str, tuple[int, ...]] | None = None

    @property
    def by_name(self) -> bool:
        return self.shapes is not None

    @property
    def base(self) -> torch.dtype:
        """The wider dtype whose runs give the rounding: float64 for float32, else float32."""
        return torch.float64 if self.dtype == torch.float32 else torch.float32


def _side_variant(family: str, given: Variant | str, any_family: bool = False) -> Variant:
    if isinstance(given, Variant):
        if given.family != family and not any_family:
            raise ConfigError(f"'{given.id}' is a {given.family} model; the checkpoint's class is a {family}")
        return given
    try:
        return get_variant(family, given)
    except UnknownName:
        found = [v for v in REGISTRY.values() if v.id == given and v.family in FAMILIES]
        if len(found) == 1:  # a port by the class's names may be registered in the other family
            return found[0]
        raise


def _decoding(variant: Variant, decoding: Decoding | None) -> Decoding | None:
    return decoding or DECODINGS.get(variant.key)


def by_name_port(variant: Variant, cfg: ModelConfig, params: ClassParams) -> Variant | None:
    """``variant`` mapped by name where its parameters are the class's, names and shapes (built on the meta
    device: nothing allocated), a head it keeps untied where the class ties one aside; None
    where they are not."""
    try:
        with torch.device("meta"):
            module = variant.build(cfg)
    except Exception:
        return None
    if not isinstance(module, torch.nn.Module):
        return None
    names = {n: tuple(p.shape) for n, p in module.named_parameters()}
    shapes = by_name_shapes(params)
    if any(names.get(n, shape) != shape for n, shape in shapes.items()) or not set(params.shapes) <= set(names) \
            or not set(names) - set(params.shapes) <= set(params.ties):
        return None
    entries = {**{n: Tied(to) for n, to in params.ties.items()}, **{n: Param(n) for n in names}}
    return dataclasses.replace(variant, param_map=entries)


def _hf_sides(ckpt: Checkpoint, port: Variant | str, changes: dict):
    """(family, config, reference variant, port variant, canonical shapes or None, the
    reference's map over the checkpoint's names) of a checkpoint compared with the class its
    config.json names."""
    hf = load_hf_config(ckpt.path)
    params = class_params(hf_class(hf), hf)
    fam = family_of(params)
    gpt2 = fam == "decoder_only_model"
    cfg = model_config(hf, extensions=() if gpt2 else extensions_of(params), gpt2=gpt2, **changes)
    port_variant = _side_variant(fam, port, any_family=True)
    named = by_name_port(port_variant, cfg, params)
    if named is not None:
        ref = hf_variant(hf, named.family, by_name_map(params))
        return named.family, cfg, ref, named, by_name_shapes(params), saved_map(ref.map_for(cfg), params)
    if port_variant.family != fam:
        raise ConfigError(f"'{port_variant.id}' is a {port_variant.family} model; the checkpoint's class is a {fam}")
    ref_map = gpt2_map(cfg) if gpt2 else llama_map(params, hf, cfg, rope_fraction(hf))
    return fam, cfg, hf_variant(hf, fam, ref_map), port_variant, None, saved_map(ref_map, params)


def prepare(path: str | Path, port: Variant | str, *, reference: Variant | str | None = None,
            family: str | None = None, dtype: str | torch.dtype = "float32", changes: Mapping[str, Any] | None = None,
            port_decoding: Decoding | None = None, reference_decoding: Decoding | None = None,
            tokens: tuple[int, int] = (4, 16)) -> Comparison:
    """Open the checkpoint, size the model, refuse what will not fit, hold the checkpoint to
    its class's map; builds nothing yet. ``reference`` None: the class ``config.json``
    names (transformers; the port mapped by name where its parameters are the class's,
    else through the family's canonical names); else a registered variant id (or
    ``Variant``) of ``family``. ``changes``: model config fields (``layers``, ``d_model``,
    ...) for a checkpoint without ``config.json``. ``tokens``: (batch, length) the
    comparison will run on."""
    dt = dtype_of(dtype) if isinstance(dtype, str) else dtype
    if dt not in (torch.float32, torch.bfloat16, torch.float16):
        raise ConfigError(f"--dtype {dtype}: the comparison runs in one of {list(DTYPES)}")
    ckpt = open_checkpoint(path)
    changes = dict(changes or {})
    shapes = None
    if reference is None:
        if ckpt.config is None:
            raise InputError(f"checkpoint '{path}' has no config.json to build its class from: name the class "
                             "with --reference (a registered variant whose state_dict it is)")
        fam, cfg, ref, port_variant, shapes, saved = _hf_sides(ckpt, port, changes)
        if family is not None and family != fam:
            raise ConfigError(f"--family {family}: the checkpoint's config.json says a {fam}")
        ref_decoding = reference_decoding or HF_DECODING
    else:
        fam, cfg = _registered_sizes(ckpt, reference, family, changes)
        ref = _side_variant(fam, reference)
        ref_decoding = _decoding(ref, reference_decoding)
        port_variant = _side_variant(fam, port)
        saved = ref.map_for(cfg)
    if fam not in FAMILIES:
        raise ConfigError(f"family '{fam}': checkpoints are compared in {list(FAMILIES)}")
    for v in (ref, port_variant):
        reason = v.supports(cfg)
        if reason:
            raise ConfigError(f"{v.key} cannot be built for this checkpoint's config: {reason}")
    base = torch.float64 if dt == torch.float32 else torch.float32
    batch, length = tokens
    activations = 16 * batch * length * (cfg.vocab + 4 * cfg.d_model + 2 * cfg.d_ff) * 8
    need = ckpt.numel() * 2 * (dt.itemsize + base.itemsize) + activations
    check_memory(f"checkpoint {ckpt.path} ({ckpt.numel():,} numbers)", need,
                 f"the reference and the port in {str(dt).removeprefix('torch.')} and in "
                 f"{str(base).removeprefix('torch.')} for the rounding, and their activations on "
                 f"{batch} x {length} tokens")
    canonical = shapes if shapes is not None else get_family(fam).canonical_shapes(cfg)
    reader = CheckpointReader(ckpt, saved, canonical, ref.id)
    return Comparison(ckpt, fam, cfg, Side("reference", ref, ref_decoding),
                      Side("port", port_variant, _decoding(port_variant, port_decoding)), reader, dt, shapes=shapes)


def _registered_sizes(ckpt: Checkpoint, reference: Variant | str, family: str | None,
                      changes: dict) -> tuple[str, ModelConfig]:
    """(family, config) of a checkpoint whose class is a registered variant: sizes from its
    config.json, else from ``changes``."""
    if ckpt.config is not None and "model_type" in ckpt.config and not changes:
        gpt2 = "n_embd" in ckpt.config
        cfg = model_config(ckpt.config, gpt2=gpt2)
        fam = "decoder_only_model" if gpt2 else "llama_model"
    else:
        fam = family or (reference.family if isinstance(reference, Variant) else None)
        if fam is None:
            raise InputError("a checkpoint without config.json needs its family (--family) and its sizes "
                             "(--set layers=N d_model=D heads=H ...)")
        try:
            cfg = ModelConfig(**changes)
        except (TypeError, ConfigError) as exc:
            raise ConfigError(f"model config {changes}: {exc}") from None
    if family is not None and family != fam:
        raise ConfigError(f"--family {family}: the checkpoint's config.json says a {fam}")
    return fam, cfg


def build_side(comparison: Comparison, side: Side, dtype: torch.dtype,
               weights: Mapping[str, torch.Tensor] | None = None):
    """(module, port map) of ``side`` in ``dtype``: ``harness.registry.build``, or by name
    over the class's own names."""
    c = comparison
    if c.shapes is None:
        return build(side.variant, c.cfg, dtype=dtype, weights=weights)
    seed_everything(c.cfg.seed)
    module = side.variant.build(c.cfg).to(dtype=dtype).eval()
    portmap = PortMap(side.variant.key, module, side.variant.map_for(c.cfg), c.shapes)
    if weights is not None:
        portmap.load({n: t for n, t in weights.items() if n in c.shapes})
    return module, portmap


# -- loading ------------------------------------------------------------------------------------

def not_held(comparison: Comparison, port_map: Mapping[str, Any]) -> list[str]:
    """Canonical names the checkpoint holds no tensor for (saved once for a tied pair) that
    the port keeps as parameters of its own."""
    return [n for n, e in comparison.reader.entries.items()
            if isinstance(e, Tied) and not isinstance(port_map.get(n), (Tied, Absent))]


def load(comparison: Comparison, side: Side, dtype: torch.dtype, *,
         transform: Callable[[dict], dict] | None = None):
    """(module, port map) of ``side`` in ``dtype`` with the checkpoint's weights, ported one
    layer at a time (``transform``: all at once, changed first)."""
    module, portmap = build_side(comparison, side, dtype)
    skip = set(not_held(comparison, portmap.entries)) if side.role == "port" else set()
    if side.role == "port":
        comparison.left_at_init = sorted(skip)
    groups = [comparison.reader.read_all(dtype)] if transform else comparison.reader.read_groups(dtype)
    for group in groups:
        if transform:
            group = transform(group)
        portmap.load({n: t for n, t in group.items() if n not in skip}, partial=True)
    return module, portmap


def canonical_weights(comparison: Comparison, side: Side, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The canonical weights ``side`` runs on: the checkpoint's, and for the port, the
    tensors it keeps at its init (see ``not_held``) as it was built."""
    weights = comparison.reader.read_all(dtype)
    if side.role == "port":
        module, portmap = build_side(comparison, side, dtype)
        for name in not_held(comparison, portmap.entries):
            weights[name] = portmap.read(name).detach().clone()
    return weights


def run(comparison: Comparison, side: Side, tokens: torch.Tensor, transform: Callable[[dict], dict] | None = None):
    """(B, T, V) log-probabilities of ``side`` on its canonical weights (``transform``: changed
    first, as the stress settings of checkpoint_stress change both sides)."""
    w = canonical_weights(comparison, side, comparison.dtype)
    module, _ = build_side(comparison, side, comparison.dtype, w if transform is None else transform(w))
    return logprobs(side, module, comparison.family, tokens)


# -- token sequences ----------------------------------------------------------------------------

def sample_tokens(cfg: Config, batch: int, length: int, seed: int) -> torch.Tensor:
    """(batch, length) ids drawn uniformly from the vocabulary with ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, cfg.vocab, (batch, length), generator=gen)


def read_token_file(path: str | Path, cfg: Config, length: int | None = None) -> torch.Tensor:
    """One sequence per line, ids separated by spaces or commas; rows cut to the shortest
    (or ``length``). An id outside the vocabulary is one line naming it."""
    path = Path(path)
    try:
        lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
    except OSError as exc:
        raise InputError(f"token file '{path}': {exc.strerror or exc}") from None
    rows = []
    for i, line in enumerate(lines, 1):
        try:
            rows.append([int(x) for x in line.replace(",", " ").split()])
        except ValueError:
            raise InputError(f"token file '{path}' line {i}: not integer ids: {line.strip()[:40]!r}") from None
    return _rows(rows, cfg, length, f"token file '{path}'")


def _rows(rows: list[list[int]], cfg: Config, length: int | None, what: str) -> torch.Tensor:
    if not rows or not all(rows):
        raise InputError(f"{what} holds no tokens")
    n = min(len(r) for r in rows)
    if length is not None:
        if length > n:
            raise InputError(f"{what}: its shortest sequence has {n} tokens, --length asks {length}")
        n = length
    if n < 2:
        raise InputError(f"{what}: sequences of at least 2 tokens are needed, the shortest has {n}")
    out = torch.tensor([r[:n] for r in rows], dtype=torch.long)
    bad = (out < 0) | (out >= cfg.vocab)
    if bad.any():
        r, t = (int(x) for x in bad.nonzero()[0])
        raise InputError(f"{what}: id {int(out[r, t])} (sequence {r}, position {t}) is outside the vocabulary "
                         f"0..{cfg.vocab - 1}")
    return out


def tokenize(folder: Path, texts: list[str], cfg: Config, length: int | None = None) -> torch.Tensor:
    """``texts`` through the checkpoint's own tokenizer (transformers' ``AutoTokenizer``)."""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise InputError("--text needs transformers (pip install -e '.[hf]'); give --tokens FILE instead") \
            from None
    try:
        tok = AutoTokenizer.from_pretrained(str(folder))
    except Exception as exc:
        raise InputError(f"{folder}: no tokenizer transformers can load ({type(exc).__name__}); give --tokens "
                         "FILE instead") from None
    return _rows([tok(t)["input_ids"] for t in texts], cfg, length, "--text")


def inputs_of(family: str, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """The family's call on unpadded sequences: every token real, positions 0..T-1, one
    sequence per row (segments 0)."""
    pad = torch.ones_like(tokens, dtype=torch.bool)
    out = {"tokens": tokens, "pad": pad}
    if family == "llama_model":
        out["positions"] = torch.arange(tokens.shape[1]).expand_as(tokens).contiguous()
        out["segments"] = torch.zeros_like(tokens)
    return out




def logprobs(side: Side, module, family: str, tokens: torch.Tensor) -> torch.Tensor:
    """(B, T, V) float64 log-probabilities of ``side``'s full forward on ``tokens``."""
    with torch.no_grad():
        return side.variant.call(module, inputs_of(family, tokens)).double()
