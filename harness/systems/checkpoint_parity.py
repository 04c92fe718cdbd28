"""Parity of a port with the class its checkpoint belongs to, on that checkpoint's weights.

``prepare(path, port, reference=...)`` opens a checkpoint (``harness.porting.checkpoint``),
takes the class it belongs to (its Hugging Face class through ``config.json``, or a
registered variant whose ``state_dict`` it is) and the user's port (a registered variant
of the same family, or a ``Variant`` built by hand: a module with a map), and holds the
checkpoint to the class's map strictly. ``compare(comparison, tokens)`` loads the
checkpoint into both, one layer at a time, through the family's canonical names, and
measures on real token sequences:

- per-token KL(reference || port) at every position, with the worst (row, position): the
  pair agrees when the worst is at most the bound. float32: ``KL_BOUND`` (the registry's
  model parity bound); bfloat16/float16: ``NOISE_MULTIPLE`` times the reference's own KL
  against its float32 run (what rounding in that dtype alone costs), at least ``KL_BOUND``;
- top-1 and top-``TOP_K`` agreement: the fraction of positions whose argmax (top-k set)
  agree; positions where the reference's own top-1/top-2 (k-th/k+1-th) gap is within
  twice its rounding (its largest log-probability change against its run in the next
  wider dtype) are ties and may differ;
- greedy generation from each row's first ``prompt`` tokens, both by their full forward:
  the first differing (row, step), with each side's top-1/top-2 margin there;
- each side's k/v cache against its own full forward (prefill + steps, and chunked
  prefill), every call's log-probabilities with the check's verdict (the wider dtype's
  runs giving the noise).

Where the port does not agree, each classic porting mistake is undone in turn (``FIXES``:
the q/k rows' RoPE permutation, K/V heads tiled instead of grouped, a norm gain 1 + w read
as w, a missing embedding scale, an untied head the checkpoint holds no tensor for); the
one after which the port agrees with the reference names the mistake. ``harness.trace``
adds the first diverging sub-module on the same weights.

A canonical tensor the checkpoint does not hold (a tied head saved once) that the port
keeps as a parameter of its own is left at the port's initial values, as loading the
checkpoint by name leaves it, and said.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

from harness.base.config import Config, ModelConfig
from harness.base.dtypes import dtype_of
from harness.base.errors import ConfigError, InputError
from harness.base.verdicts import Verdict
from harness.check.spec import one_thread
from harness.check.tensors import NOISE_MULTIPLE, compare_tensors
from harness.families.catalog import get_family
from harness.families.models import DECODINGS, Decoding
from harness.porting.checkpoint import Checkpoint, CheckpointReader, check_memory, open_checkpoint
from harness.porting.entries import Absent, Param, RopePermuted, Tied
from harness.registry import Variant, build, get_variant
from harness.registry.checkpoints import HF_DECODING, family_of, hf_variant, load_hf_config, model_config
from harness.systems.cache_parity import schedules
from harness.systems.parity import KL_BOUND, TOP_K, token_kl, topk_overlap

FAMILIES = ("llama_model", "decoder_only_model")
TIE = 2.0  # a top-1/top-2 gap within TIE x the reference's rounding is a tie
DTYPES = ("float32", "bfloat16", "float16")


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

    @property
    def base(self) -> torch.dtype:
        """The wider dtype whose runs give the rounding: float64 for float32, else float32."""
        return torch.float64 if self.dtype == torch.float32 else torch.float32


def _side_variant(family: str, given: Variant | str) -> Variant:
    if isinstance(given, Variant):
        if given.family != family:
            raise ConfigError(f"'{given.id}' is a {given.family} model; the checkpoint's class is a {family}")
        return given
    return get_variant(family, given)


def _decoding(variant: Variant, decoding: Decoding | None) -> Decoding | None:
    return decoding or DECODINGS.get(variant.key)


def prepare(path: str | Path, port: Variant | str, *, reference: Variant | str | None = None,
            family: str | None = None, dtype: str | torch.dtype = "float32", changes: Mapping[str, Any] | None = None,
            port_decoding: Decoding | None = None, reference_decoding: Decoding | None = None,
            tokens: tuple[int, int] = (4, 16)) -> Comparison:
    """Open the checkpoint, size the model, refuse what will not fit, hold the checkpoint to
    its class's map; builds nothing yet. ``reference`` None: the class ``config.json``
    names (transformers); else a registered variant id (or ``Variant``) of ``family``.
    ``changes``: model config fields (``layers``, ``d_model``, ...) for a checkpoint
    without ``config.json``. ``tokens``: (batch, length) the comparison will run on."""
    dt = dtype_of(dtype) if isinstance(dtype, str) else dtype
    if dt not in (torch.float32, torch.bfloat16, torch.float16):
        raise ConfigError(f"--dtype {dtype}: the comparison runs in one of {list(DTYPES)}")
    ckpt = open_checkpoint(path)
    changes = dict(changes or {})
    if reference is None:
        if ckpt.config is None:
            raise InputError(f"checkpoint '{path}' has no config.json to build its class from: name the class "
                             "with --reference (a registered variant whose state_dict it is)")
        family_of(ckpt.config.get("model_type", ""))  # a model type with no map: one line, before transformers
        hf = load_hf_config(ckpt.path)
        fam, cfg = model_config(hf, **changes)
        ref = hf_variant(hf, cfg)
        ref_decoding = reference_decoding or HF_DECODING
    else:
        if ckpt.config is not None and "model_type" in ckpt.config and not changes:
            fam, cfg = model_config(ckpt.config)
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
        ref = _side_variant(fam, reference)
        ref_decoding = _decoding(ref, reference_decoding)
    if fam not in FAMILIES:
        raise ConfigError(f"family '{fam}': checkpoints are compared in {list(FAMILIES)}")
    port_variant = _side_variant(fam, port)
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
    reader = CheckpointReader(ckpt, ref.map_for(cfg), get_family(fam).canonical_shapes(cfg), ref.id)
    return Comparison(ckpt, fam, cfg, Side("reference", ref, ref_decoding),
                      Side("port", port_variant, _decoding(port_variant, port_decoding)), reader, dt)


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
    cfg = comparison.cfg
    module, portmap = build(side.variant, cfg, dtype=dtype)
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
        module, portmap = build(side.variant, comparison.cfg, dtype=dtype)
        for name in not_held(comparison, portmap.entries):
            weights[name] = portmap.read(name).detach().clone()
    return weights


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
    """The family's call on unpadded sequences: every token real, positions 0..T-1."""
    pad = torch.ones_like(tokens, dtype=torch.bool)
    out = {"tokens": tokens, "pad": pad}
    if family == "llama_model":
        out["positions"] = torch.arange(tokens.shape[1]).expand_as(tokens).contiguous()
    return out


# -- results ------------------------------------------------------------------------------------

@dataclass
class Metric:
    name: str
    verdict: Verdict     # equivalent, or different
    value: str           # the measurement, as text
    bound: str           # what it was held to
    detail: str = ""

    @property
    def ok(self) -> bool:
        return Verdict(self.verdict).agrees


@dataclass
class CacheCheck:
    side: str
    model: str
    schedule: str
    verdict: Verdict
    max_abs: float
    first_bad: str        # "call k (position p)" or ""
    ok: bool


@dataclass
class ParityReport:
    checkpoint: str
    family: str
    reference: str
    port: str
    dtype: str
    tokens: str                      # where the sequences came from
    shape: tuple[int, int]
    kl_worst: float
    kl_mean: float
    kl_at: str
    kl_bound: float
    top1: float
    topk: float
    greedy_steps: int
    greedy_same: int                 # steps before the first difference (all: none)
    metrics: list[Metric] = field(default_factory=list)
    cache: list[CacheCheck] = field(default_factory=list)
    kl_per_position: list = field(default_factory=list)
    left_at_init: list = field(default_factory=list)
    mistakes: list = field(default_factory=list)      # [(name, explanation, worst KL with it undone)]
    divergence: str = ""
    notes: list = field(default_factory=list)

    @property
    def agrees(self) -> bool:
        return all(m.ok for m in self.metrics) and all(c.ok for c in self.cache)

    def as_dict(self) -> dict:
        return {**asdict(self), "agrees": self.agrees}


# -- the comparison -----------------------------------------------------------------------------

def _logprobs(side: Side, module, family: str, tokens: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return side.variant.call(module, inputs_of(family, tokens)).double()


def _gap(logp: torch.Tensor, k: int) -> torch.Tensor:
    """(B, T) the k-th largest minus the (k+1)-th largest log-probability."""
    top = logp.topk(min(k + 1, logp.shape[-1]), -1).values
    return top[..., k - 1] - top[..., k]


def _greedy(side: Side, module, family: str, prompt: torch.Tensor, steps: int) -> tuple[torch.Tensor, list]:
    """Greedy tokens after ``prompt`` by the full forward each step, and every step's
    log-probabilities (B, V)."""
    ys, per_step = prompt, []
    with torch.no_grad():
        for _ in range(steps):
            lp = side.variant.call(module, inputs_of(family, ys))[:, -1].double()
            per_step.append(lp)
            ys = torch.cat([ys, lp.argmax(-1, keepdim=True)], dim=1)
    return ys[:, prompt.shape[1]:], per_step


def _cache_checks(side: Side, runs: Mapping[torch.dtype, Any], family: str, tokens: torch.Tensor,
                  dtype: torch.dtype, base: torch.dtype) -> list[CacheCheck]:
    """``side``'s cached sessions against its full forward, a verdict per call."""
    if side.decoding is None or not side.decoding.cache:
        return []
    out = []
    inputs = inputs_of(family, tokens)
    for schedule, lengths in schedules(tokens.shape[1]).items():
        results = {}
        for dt in (dtype, base):
            module, full = runs[dt]
            with torch.no_grad():
                state = side.decoding.prepare(module, inputs, True)
                results[dt] = [side.decoding.step(module, state, tokens[:, :k]).double() for k in lengths]
        checks = [compare_tensors(results[dtype][i], runs[dtype][1][:, k - 1], results[base][i],
                                  runs[base][1][:, k - 1], dtype) for i, k in enumerate(lengths)]
        bad = [i for i, ch in enumerate(checks) if not Verdict(ch.verdict).agrees]
        first = "" if not bad else f"call {bad[0] + 1} ({lengths[bad[0]]} tokens fed, position {lengths[bad[0]] - 1})"
        verdict = Verdict.worst(ch.verdict for ch in checks)
        out.append(CacheCheck(side.role, side.name, schedule, verdict, max(ch.max_abs for ch in checks), first,
                              not bad))
    return out


def compare(comparison: Comparison, tokens: torch.Tensor, *, prompt: int = 2, steps: int | None = None,
            source: str = "", explain: bool = True) -> ParityReport:
    """Every metric of the module docstring on ``tokens`` (B, T)."""
    with one_thread():
        return _compare(comparison, tokens, prompt, steps, source, explain)


def _compare(c: Comparison, tokens: torch.Tensor, prompt: int, steps: int | None, source: str,
             explain: bool) -> ParityReport:
    fam, dt, base = c.family, c.dtype, c.base
    if tokens.shape[1] < 2:
        raise InputError("the comparison needs sequences of at least 2 tokens")
    if fam == "decoder_only_model" and tokens.shape[1] > c.cfg.tgt_len:
        raise InputError(f"sequences of {tokens.shape[1]} tokens exceed the model's {c.cfg.tgt_len} positions")
    prompt = max(1, min(prompt, tokens.shape[1] - 1))
    steps = tokens.shape[1] - prompt if steps is None else steps
    if fam == "decoder_only_model":
        steps = min(steps, c.cfg.tgt_len - prompt)
    runs: dict[str, dict[torch.dtype, tuple]] = {}
    modules = {}
    for side in (c.reference, c.port):
        runs[side.role] = {}
        for d in (dt, base):
            module, _ = load(c, side, d)
            runs[side.role][d] = (module, _logprobs(side, module, fam, tokens))
        modules[side.role] = runs[side.role][dt][0]
    la, lb = runs["reference"][dt][1], runs["port"][dt][1]
    la0 = runs["reference"][base][1]
    noise = float((la - la0).abs().max())
    kl = token_kl(la, lb)
    flat = int(kl.argmax())
    r, t = divmod(flat, kl.shape[1])
    if dt == torch.float32:
        bound, bound_text = KL_BOUND, f"<= {KL_BOUND:g} (float32)"
    else:
        baseline = float(token_kl(la0, la).max())
        bound = max(KL_BOUND, NOISE_MULTIPLE * baseline)
        bound_text = (f"<= {bound:.3g} ({NOISE_MULTIPLE:g} x the reference's own {_name(dt)} KL against its "
                      f"float32 run, {baseline:.3g})")
    kl_worst = float(kl.max())
    metrics = [Metric("per-token KL", _verdict(kl_worst <= bound),
                      f"worst {kl_worst:.3g} at row {r}, position {t}; mean {float(kl.mean()):.3g}", bound_text)]
    tie = TIE * noise
    same1 = la.argmax(-1) == lb.argmax(-1)
    ties1 = _gap(la, 1) <= tie
    top1 = float(same1.double().mean())
    missed = int((~same1 & ~ties1).sum())
    metrics.append(Metric("top-1 agreement", _verdict(missed == 0),
                          f"{top1:.4f} ({int(same1.sum())} of {same1.numel()} positions)",
                          f"every position outside ties (a top-1/top-2 gap <= {tie:.2g}: {int(ties1.sum())})",
                          "" if missed == 0 else f"{missed} positions differ outside ties"))
    overlap = topk_overlap(la, lb, TOP_K)
    tiesk = _gap(la, TOP_K) <= tie
    topk = float(overlap.mean())
    missed_k = int(((overlap < 1) & ~tiesk).sum())
    metrics.append(Metric(f"top-{TOP_K} agreement", _verdict(missed_k == 0),
                          f"{topk:.4f} (mean overlap of the top-{TOP_K} sets)",
                          f"every position outside ties at the {TOP_K}th place (gap <= {tie:.2g})",
                          "" if missed_k == 0 else f"{missed_k} positions' sets differ outside ties"))
    pa, step_a = _greedy(c.reference, modules["reference"], fam, tokens[:, :prompt], steps)
    pb, step_b = _greedy(c.port, modules["port"], fam, tokens[:, :prompt], steps)
    diff = (pa != pb)
    first_step = steps
    detail, verdict = "", Verdict.EQUIVALENT
    if diff.any():
        cols = diff.any(0).nonzero()
        first_step = int(cols[0])
        row = int(diff[:, first_step].nonzero()[0])
        ma = float(_gap(step_a[first_step][row:row + 1], 1))
        mb = float(_gap(step_b[first_step][row:row + 1], 1))
        at_tie = ma <= tie
        verdict = _verdict(at_tie)
        detail = (f"first difference at row {row}, step {first_step}: {int(pa[row, first_step])} vs "
                  f"{int(pb[row, first_step])} (top-1/top-2 margins {ma:.3g} vs {mb:.3g}"
                  + ("; the reference's is a tie" if at_tie else "") + ")")
    metrics.append(Metric("greedy generation", verdict,
                          f"{first_step} of {steps} steps the same" if diff.any() else f"all {steps} steps the same",
                          f"the same tokens from a {prompt}-token prompt, {pa.shape[0]} rows", detail))
    cache = []
    for side in (c.reference, c.port):
        cache += _cache_checks(side, runs[side.role], fam, tokens, dt, base)
    report = ParityReport(
        str(c.checkpoint.path), fam, c.reference.name, c.port.name, _name(dt), source, tuple(tokens.shape),
        kl_worst, float(kl.mean()), f"row {r}, position {t}", bound, top1, topk, steps, first_step,
        metrics, cache, kl.max(0).values.tolist(), list(c.left_at_init))
    for side in (c.reference, c.port):
        if side.decoding is None or not side.decoding.cache:
            report.notes.append(f"{side.role} {side.name} declares no cache: its cache parity is not measured")
    if c.left_at_init:
        report.notes.append(
            f"the checkpoint holds no tensor for {', '.join(c.left_at_init)} (saved once, tied to "
            f"{', '.join(sorted({c.reader.entries[n].to for n in c.left_at_init}))}); the port keeps its own "
            "parameter there at its initial values, as loading the checkpoint by name leaves it")
    if explain and not report.agrees and not metrics[0].ok:
        report.mistakes = name_mistakes(c, tokens, la, bound)
    return report


def _verdict(ok: bool) -> Verdict:
    return Verdict.EQUIVALENT if ok else Verdict.DIFFERENT


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


# -- naming the mistake -------------------------------------------------------------------------

@dataclass(frozen=True)
class Fix:
    """A classic porting mistake, and how to undo it on the port's side: ``weights``
    changes the canonical weights the port is loaded with, ``hook`` patches its module
    (returns the hook handles, or None where the port has no place for it)."""

    name: str
    explanation: str
    weights: Callable[[dict, ModelConfig], dict | None] | None = None
    hook: Callable[[Any, Any, ModelConfig], list | None] | None = None


def _per_layer(w: dict, suffix: str) -> list[str]:
    return [n for n in w if n.endswith(suffix) and n.startswith(("layers.", "blocks."))]


def _rope_rows(w: dict, cfg: ModelConfig, undo: bool) -> dict | None:
    if "llama" not in _kind(w):
        return None
    out = dict(w)
    for name in _per_layer(w, "self_attn.q.weight") + _per_layer(w, "self_attn.k.weight"):
        heads = cfg.heads if name.endswith("q.weight") else cfg.n_kv_heads
        index = RopePermuted(Param(name), heads).index(w[name].shape[0])
        if undo:
            out[name] = w[name][index]
        else:
            back = torch.empty_like(w[name])
            back[index] = w[name]
            out[name] = back
    return out


def _kind(w: dict) -> str:
    return "llama" if any(n.startswith("layers.") for n in w) else "gpt"


def _heads_regrouped(w: dict, cfg: ModelConfig) -> dict | None:
    """Query heads reordered so that a port giving query head p the K/V head p mod H_kv
    (tiled) computes what the class's consecutive grouping (p // (H / H_kv)) does."""
    h, kv = cfg.heads, cfg.n_kv_heads
    if kv in (h, 1) or "llama" not in _kind(w):
        return None
    group, d = h // kv, cfg.d_k
    sigma = torch.tensor([(p % kv) * group + p // kv for p in range(h)])
    out = dict(w)
    for name in _per_layer(w, "self_attn.q.weight"):
        prefix = name.removesuffix("q.weight")
        out[name] = w[name].view(h, d, -1)[sigma].reshape(h * d, -1)
        out[prefix + "q.bias"] = w[prefix + "q.bias"].view(h, d)[sigma].reshape(-1)
        o = w[prefix + "o.weight"]
        out[prefix + "o.weight"] = o.view(o.shape[0], h, d)[:, sigma].reshape(o.shape[0], h * d)
    return out


def _gains(w: dict, cfg: ModelConfig, delta: float) -> dict | None:
    names = [n for n in w if n.endswith("norm.weight")]
    return {**w, **{n: w[n] + delta for n in names}} if names else None


def _head_from_embedding(w: dict, cfg: ModelConfig) -> dict | None:
    return {**w, "head.weight": w["embed.weight"].clone()} if "head.weight" in w else None


def _embedding_module(module, portmap):
    entry = portmap.entries.get("embed.weight")
    if not isinstance(entry, Param) or not entry.path.endswith(".weight"):
        return None
    owner = entry.path.removesuffix(".weight")
    try:
        found = module.get_submodule(owner)
    except AttributeError:
        return None
    return found if isinstance(found, torch.nn.Embedding) else None


def _embedding_scaled(power: float):
    def hook(module, portmap, cfg):
        embedding = _embedding_module(module, portmap)
        if embedding is None:
            return None
        factor = math.sqrt(cfg.d_model) ** power
        return [embedding.register_forward_hook(lambda m, args, out: out * factor)]
    return hook


FIXES = (
    Fix("RoPE rows not permuted", "the port rotates pairs (2i, 2i+1) (Meta's interleaved RoPE) on q/k rows "
        "laid out for half-split RoPE (rotate_half): its map needs RopePermuted on q and k (HF's converter's "
        "permute)", weights=lambda w, cfg: _rope_rows(w, cfg, undo=False)),
    Fix("RoPE rows permuted where they are not", "the port's map permutes q/k rows (RopePermuted) for a "
        "module that rotates half-split", weights=lambda w, cfg: _rope_rows(w, cfg, undo=True)),
    Fix("K/V heads tiled", "query head h reads K/V head h mod H_kv (repeat/tile) where the class groups "
        "consecutive query heads on one K/V head (h // (H / H_kv): repeat_interleave, HF's repeat_kv)",
        weights=_heads_regrouped),
    Fix("norm gain 1 + w read as w", "the class's RMSNorm multiplies by 1 + w (Gemma stores the gain "
        "minus one); the port multiplies by w", weights=lambda w, cfg: _gains(w, cfg, 1.0)),
    Fix("norm gain w read as 1 + w", "the class's norm multiplies by w; the port by 1 + w (Gemma's form)",
        weights=lambda w, cfg: _gains(w, cfg, -1.0)),
    Fix("embedding scale missing", "the class multiplies token embeddings by sqrt(D) (Gemma's normalizer); "
        "the port does not", hook=_embedding_scaled(1.0)),
    Fix("embedding scale added", "the port multiplies token embeddings by sqrt(D); the class does not",
        hook=_embedding_scaled(-1.0)),
    Fix("untied head left at its init", "the checkpoint saves the head tied to the embedding, once "
        "(deduplicated); the port's own head matrix is not in it and keeps its initial values: tie it "
        "(Tied(\"embed.weight\") in its map)", weights=_head_from_embedding),
)


def name_mistakes(c: Comparison, tokens: torch.Tensor, reference: torch.Tensor, bound: float) -> list[dict]:
    """Each fix after which the port agrees with the reference (worst KL within the bound),
    with that KL; the untied-head fix only where the port kept a head at its init."""
    found = []
    for fix in FIXES:
        if fix.name.startswith("untied head") and "head.weight" not in c.left_at_init:
            continue
        weights = canonical_weights(c, c.port, c.dtype)
        if fix.weights is not None:
            weights = fix.weights(weights, c.cfg)
            if weights is None:
                continue
        module, portmap = build(c.port.variant, c.cfg, dtype=c.dtype, weights=weights)
        handles = []
        if fix.hook is not None:
            handles = fix.hook(module, portmap, c.cfg)
            if handles is None:
                continue
        try:
            kl = float(token_kl(reference, _logprobs(c.port, module, c.family, tokens)).max())
        finally:
            for h in handles:
                h.remove()
        if kl <= bound:
            found.append({"name": fix.name, "explanation": fix.explanation, "kl_undone": kl})
    return found
