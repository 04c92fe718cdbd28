"""Benchmarks: cases as data, one loop, every row carrying its environment.

A sweep expands into ``BenchCase`` rows (family x variant x batch x seq x dtype x mode x
compile). Cases that differ only by variant form a group; a group's variants, the family's
reference and a square matmul (the machine's peak) are timed together, interleaved in
alternating rounds (``harness.bench.timing.interleave``), so every ratio (variant vs reference,
achieved vs peak) is the ratio of the medians over rounds of one window, with its per-round
spread and a bootstrap interval. Each case builds
the variant with the family's seeded canonical weights and the family's benchmark inputs;
a compiled case is compiled outside any dispatch mode, its compile time kept apart.
Rows are appended to a JSONL log as each group finishes: an interrupted sweep keeps what it
measured, and a rerun resumes. Unsupported cases, errors and CUDA out-of-memory are rows too.
A group measured while the machine was disturbed (load average above its cores, or a
matmul peak that moved across rounds) carries the figures in ``disturbed``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

import torch

from harness.base.boundary import user_code
from harness.base.config import Config
from harness.base.defaults import TIMING, TIMING_ENV
from harness.base.dtypes import PRECISION_DTYPES, dtype_of
from harness.base.errors import ConfigError, UnknownName
from harness.bench.shapes import HEAD_SHAPED, shape_text
from harness.check.runs import cast_inputs, cotangent, unique_grad_inputs
from harness.families.catalog import get_family
from harness.porting.portmap import zero_unrepresented
from harness.registry import TARGETS, build, get_variant, reference_of, variants_of

MODES = ("fwd", "fwd+bwd")
BENCH_FAMILIES = ("attention", "attention_kernel", "norm", "ffn", "encoder_layer", "decoder_layer",
                  "decoder_only_block", "llama_block", "encoder_decoder", "decoder_only_model", "llama_model")
# The family case each benchmark runs: no padding for attention and the kernels (causal, T = S,
# so SDPA may use is_causal and a flash kernel its causal option), the padded cases for layers
# (what a batch of real sentences looks like).
BENCH_CASE = {"attention": "causal_only", "attention_kernel": "causal", "decoder_only_block": "right_pad",
              "llama_block": "right_pad"}
@dataclass(frozen=True)
class BenchCase:
    family: str
    variant: str
    batch: int
    seq: int
    d_model: int
    heads: int
    d_ff: int
    dtype: str
    device: str
    mode: str
    compiled: bool = False
    sets: tuple[str, ...] = ()  # --set items beyond the shape (kv_heads=2, window=3,0, ...)

    def __post_init__(self) -> None:
        # a list after a JSON round trip; one item given as a str is that item, not its letters
        object.__setattr__(self, "sets", (self.sets,) if isinstance(self.sets, str) else tuple(self.sets))

    @property
    def case(self) -> str:
        return BENCH_CASE.get(self.family, get_family(self.family).cases[0].name)

    @property
    def key(self) -> str:
        return (f"{self.family}/{self.variant}|B={self.batch}|T={self.seq}|D={self.d_model}|H={self.heads}"
                f"|F={self.d_ff}|{self.dtype}|{self.device}|{self.mode}|compile={int(self.compiled)}"
                + (f"|{' '.join(self.sets)}" if self.sets else ""))

    @property
    def shape(self) -> str:
        heads = "" if self.family in HEAD_SHAPED else f" H={self.heads}"
        return (shape_text(self.family, self.batch, self.seq, self.d_model, self.heads) + heads
                + "".join(f" {s}" for s in self.sets))

    def config(self) -> Config:
        shape = Config(d_model=self.d_model, heads=self.heads, d_ff=self.d_ff, batch=self.batch,
                       tgt_len=self.seq, src_len=self.seq)
        return Config.parse(list(self.sets), base=shape, fit=False) if self.sets else shape  # sized by case_bytes


@dataclass(frozen=True)
class Sweep:
    families: tuple[str, ...]
    batch: tuple[int, ...]
    seq: tuple[int, ...]
    d_model: int
    heads: int
    dtypes: tuple[str, ...] = ("float32",)
    modes: tuple[str, ...] = MODES
    compiled: tuple[bool, ...] = (False,)
    # only the variants a registered target names in the family (its variant and baseline)
    # and the family's reference: the quick profile's target shape, where every variant
    # would cost a minute of an idle 2-core CPU (the full profile times them all there);
    # variants asked for with --variant are timed there too (the report's summary shape)
    targets_only: bool = False
    d_ff: int | None = None  # F (None: 4 D)

    def expand(self, device: str, families: Iterable[str] | None, variants: Iterable[str] | None,
               sets: tuple[str, ...] = ()) -> list[BenchCase]:
        wanted_f = set(families) if families else None
        wanted_v = set(variants) if variants else None
        cases = []
        for family in self.families:
            if wanted_f and family not in wanted_f:
                continue
            named = target_variants(family, device) if self.targets_only else None
            for v in variants_of(family):
                if wanted_v is not None and v.id not in wanted_v:
                    continue
                if wanted_v is None and named is not None and v.id not in named:
                    continue  # a variant asked for by name is timed at every shape of the profile
                for b in self.batch:
                    for t in self.seq:
                        for dt in self.dtypes:
                            for mode in self.modes:
                                for comp in self.compiled:
                                    cases.append(BenchCase(family, v.id, b, t, self.d_model, self.heads,
                                                           self.d_ff or 4 * self.d_model, dt, device, mode,
                                                           comp, sets))
        return cases


def target_variants(family: str, device: str | None = None) -> set[str]:
    """The variants the registered targets name in ``family`` (variant and baseline; those
    about ``device``'s kind when one is given), and the family's reference."""
    kind = None if device is None else device.split(":")[0]
    named = {vid for t in TARGETS if t.family == family and (kind is None or t.device in (None, kind))
             for vid in (t.variant, t.baseline) if vid}
    ref = reference_of(family)
    return named | ({ref.id} if ref is not None else set())


def serves_target(case: BenchCase) -> bool:
    """Whether a registered target reads ``case``: its variant or baseline, at its ``where``."""
    return any(t.family == case.family and case.variant in (t.variant, t.baseline)
               and all(getattr(case, k, v) == v for k, v in t.where.items()) for t in TARGETS)


LAYERS = ("norm", "ffn", "encoder_layer", "decoder_layer", "decoder_only_block", "llama_block")
# Whole models (N=2 layers, the family's vocabulary of 11: the copy task's); in the quick
# profile only the LLaMA-style ones, at a small shape
MODELS = ("encoder_decoder", "decoder_only_model", "llama_model")
# The quick profile's LLaMA-style block and model at B=2, T=64, D=128, H=4 (a few seconds each)
LLAMA = ("llama_block", "llama_model")
# Attention kernels: every registered kernel against the family's reference (eager) on
# (B, H, T, d) = (B, heads, seq, d_model / heads); a kernel that runs only in half precision
# or only on CUDA is a row saying so
KERNELS = ("attention_kernel",)



def timing_defaults(profile: str, environ: Mapping[str, str] = os.environ) -> dict[str, float | int]:
    """``profile``'s min_time and rounds, each replaced by its environment variable when set
    (``TIMING_ENV``); a value that is not a positive number of seconds (at most 600) or a
    whole number of rounds from 3 to 1000 is one line naming the variable."""
    timing: dict[str, float | int] = dict(TIMING[profile])
    for key, name in TIMING_ENV.items():
        raw = environ.get(name, "").strip()
        if not raw:
            continue
        try:
            value: float | int = float(raw) if key == "min_time" else int(raw)
        except ValueError:
            value = math.nan
        ok = 0 < value <= 600 if key == "min_time" else 3 <= value <= 1000
        if not ok:
            what = ("a positive number of seconds (at most 600)" if key == "min_time"
                    else "a whole number of rounds from 3 to 1000 (quartiles across rounds)")
            raise ConfigError(f"${name}={raw!r} must be {what}")
        timing[key] = value
    return timing

PROFILES: dict[str, dict[str, list[Sweep]]] = {
    "quick": {  # within 100 s on an idle 2-core CPU, with the check (81 s measured)
        "cpu": [
            # the targets' shape (variants/targets.py): B=8, T=512, D=512, H=8, causal; the
            # variants the targets name and the reference (every variant: the full profile)
            Sweep(("attention",), batch=(8,), seq=(512,), d_model=512, heads=8, modes=("fwd",), targets_only=True),
            # the saved-bytes growth targets: fwd+bwd over T (exponents over 64..256: 1.00, 1.50, 1.51)
            Sweep(("attention",), batch=(2,), seq=(64, 128, 256), d_model=256, heads=8, modes=("fwd+bwd",)),
            # the layer families, forward only (their backward is in the full profile)
            Sweep(tuple(f for f in LAYERS if f not in LLAMA), batch=(4,), seq=(128,), d_model=256, heads=8,
                  modes=("fwd",)),
            # the kernels at (B, H, T, d) = (2, 4, 128, 32); the LLaMA-style block and model, small
            # (every group costs seconds: the full profile has the larger shapes)
            Sweep(KERNELS, batch=(2,), seq=(128,), d_model=128, heads=4, modes=("fwd",)),
            Sweep(LLAMA, batch=(2,), seq=(64,), d_model=128, heads=4, modes=("fwd",)),
        ],
        "cuda": [
            Sweep(("attention",), batch=(8,), seq=(512, 2048), d_model=512, heads=8,
                  dtypes=("float32", "bfloat16")),
            Sweep(LAYERS, batch=(8,), seq=(512,), d_model=512, heads=8, dtypes=("bfloat16",)),
            # (B, H, T, d) = (8, 16, 1024 and 4096, 64) and (4, 16, 2048, 128)
            Sweep(KERNELS, batch=(8,), seq=(1024, 4096), d_model=1024, heads=16, dtypes=("float32", "bfloat16")),
            Sweep(KERNELS, batch=(4,), seq=(2048,), d_model=2048, heads=16, dtypes=("bfloat16",)),
            Sweep(("llama_model",), batch=(8,), seq=(512,), d_model=512, heads=8, dtypes=("bfloat16",)),
        ],
    },
    "full": {
        "cpu": [
            Sweep(("attention",), batch=(8,), seq=(512,), d_model=512, heads=8),
            Sweep(("attention",), batch=(2, 8), seq=(64, 128, 256, 512, 1024), d_model=256, heads=8),
            Sweep(("attention",), batch=(8,), seq=(256,), d_model=256, heads=8, compiled=(True,)),
            Sweep(LAYERS, batch=(8,), seq=(64, 256, 1024), d_model=512, heads=8),
            Sweep(MODELS, batch=(8,), seq=(64, 256), d_model=512, heads=8),
            # (B, H, T, d) = (4, 8, 128 and 512, 64) and (2, 8, 512, 128)
            Sweep(KERNELS, batch=(4,), seq=(128, 512), d_model=512, heads=8),
            Sweep(KERNELS, batch=(2,), seq=(512,), d_model=1024, heads=8),
        ],
        "cuda": [
            Sweep(("attention",), batch=(8,), seq=(128, 256, 512, 1024, 2048, 4096, 8192), d_model=1024,
                  heads=8, dtypes=PRECISION_DTYPES["cuda"]),
            Sweep(("attention",), batch=(8,), seq=(1024, 4096), d_model=1024, heads=8,
                  dtypes=("bfloat16",), compiled=(True,)),
            Sweep(LAYERS, batch=(8,), seq=(512, 2048, 8192), d_model=1024, heads=8,
                  dtypes=PRECISION_DTYPES["cuda"]),
            Sweep(MODELS, batch=(8,), seq=(512, 2048), d_model=1024, heads=8, dtypes=("float32", "bfloat16")),
            # (B, H, T, d) = (8, 16, 512..4096, 64) and (4, 16, 2048 and 8192, 128)
            Sweep(KERNELS, batch=(8,), seq=(512, 1024, 2048, 4096), d_model=1024, heads=16,
                  dtypes=PRECISION_DTYPES["cuda"]),
            Sweep(KERNELS, batch=(4,), seq=(2048, 8192), d_model=2048, heads=16, dtypes=("bfloat16",)),
        ],
    },
}


SHAPE_KEYS = ("d_model", "heads", "d_ff", "batch", "tgt_len", "src_len")


def sweep_config(items: list[str] | None) -> tuple[dict, tuple[str, ...]]:
    """``--set`` items for a sweep: (the shape they change: d_model, heads, d_ff, batch, seq;
    the other items, kept on every case: kv_heads=2, window=3,0, ...). Each is checked as
    ``check --set`` checks it (one line naming a bad key or value)."""
    if not items:
        return {}, ()
    keys = [item.partition("=")[0].strip() for item in items]
    cfg = Config.parse([item for item, key in zip(items, keys) if key in SHAPE_KEYS], fit=False)
    shape = {k: getattr(cfg, k) for k in SHAPE_KEYS if k in keys}
    if "tgt_len" in shape or "src_len" in shape:
        lengths = {shape.pop(k) for k in ("tgt_len", "src_len") if k in shape}
        if len(lengths) > 1:
            raise ConfigError(f"--set tgt_len and src_len differ ({sorted(lengths)}): a benchmark case has one "
                              "sequence length (T = S); give one, or --seq")
        shape["seq"] = lengths.pop()
    rest = tuple(item.strip() for item, key in zip(items, keys) if key not in SHAPE_KEYS)
    return shape, rest


def plan(profile: str, device: str, families=None, variants=None, batch=None, seq=None,
         sets: list[str] | None = None, dtypes: list[str] | None = None) -> list[BenchCase]:
    """The cases of a profile, optionally narrowed, or re-swept over ``batch``/``seq``, on the
    shape and config ``sets`` (``--set`` items) give, in ``dtypes`` (default: the profile's)."""
    if profile not in PROFILES:
        raise UnknownName(f"unknown profile '{profile}'; profiles: {sorted(PROFILES)}")
    for f in families or []:
        get_family(f)
        if f not in BENCH_FAMILIES:
            raise UnknownName(f"family '{f}' has no benchmark; benchmarked: {list(BENCH_FAMILIES)}")
    for value in list(batch or []) + list(seq or []):
        if value < 1:
            raise ConfigError(f"impossible sweep: batch and seq must be positive, got {value}")
    for name in dtypes or []:
        if not dtype_of(name).is_floating_point:
            raise UnknownName(f"--dtype {name}: a benchmark runs in a floating dtype (float32, bfloat16, float16, "
                              "float64)")
    shape, rest = sweep_config(sets)
    kind = "cuda" if device.startswith("cuda") else "cpu"
    cases: list[BenchCase] = []
    for sweep in PROFILES[profile][kind]:
        if batch or seq:
            sweep = dataclasses.replace(sweep, batch=tuple(batch or sweep.batch), seq=tuple(seq or sweep.seq))
        if shape:
            sweep = dataclasses.replace(
                sweep, d_model=shape.get("d_model", sweep.d_model), heads=shape.get("heads", sweep.heads),
                d_ff=shape.get("d_ff", sweep.d_ff), batch=(shape["batch"],) if "batch" in shape else sweep.batch,
                seq=(shape["seq"],) if "seq" in shape else sweep.seq)
        if dtypes:
            sweep = dataclasses.replace(sweep, dtypes=tuple(dtypes))
        cases += sweep.expand(device, families, variants, rest)
    if variants and not cases:
        known = sorted({v.id for f in (families or BENCH_FAMILIES) if f in BENCH_FAMILIES for v in variants_of(f)})
        raise UnknownName(f"no benchmarked variant is called {sorted(variants)}; variants: {', '.join(known)}")
    if variants:  # the family's reference is timed beside them: the ratios need it
        refs = {ref.id for f in {c.family for c in cases} if (ref := reference_of(f)) is not None}
        if refs - set(variants):
            return plan(profile, device, families, sorted(set(variants) | refs), batch, seq, sets, dtypes)
    return _unique(cases)


def _unique(cases: list[BenchCase]) -> list[BenchCase]:
    seen, unique = set(), []
    for c in cases:
        if c.key not in seen:
            seen.add(c.key)
            unique.append(c)
    for c in unique:
        c.config()  # validates d_model / heads (and kv_heads against each sweep's heads)
    return unique


# -- preparing a case ------------------------------------------------------------------------

COMPILE_BACKEND = "inductor"  # torch.compile's default; the tests use "eager" (Dynamo only, cheap)


@dataclass
class Prepared:
    forward: Callable[[], torch.Tensor]   # eager forward (FLOPs, saved bytes, path: run under modes)
    step: Callable[[], object]            # the timed callable of the case's mode (compiled if asked)
    eager_step: Callable[[], object]      # the same step, eager
    resident: list[torch.Tensor]
    compile_s: float | None = None        # first compiled call: Dynamo + Inductor + one run
    graphs: int | None = None             # graphs Dynamo compiled for it (0 = it ran eager)
    output: tuple[tuple[int, ...], int] = ((), 0)  # one eager call's output: (shape, NaN count)


def prepare(case: BenchCase) -> Prepared:
    """Build, port the seeded canonical weights, make inputs; return the callables. A
    compiled case is compiled here, by its first call, outside any dispatch mode."""
    variant = get_variant(case.family, case.variant)
    family = get_family(case.family)
    cfg = case.config()
    dtype = dtype_of(case.dtype)
    module, portmap = build(variant, cfg, dtype=dtype, device=case.device)
    if portmap is not None:
        portmap.load(zero_unrepresented(family.canonical_weights(cfg, traits=variant.traits), portmap.zero_names()))
    train = case.mode == "fwd+bwd"
    inputs = cast_inputs(family.inputs(case.case, cfg), dtype, case.device, family.grad_inputs if train else ())
    params = [p for p in module.parameters()] if isinstance(module, torch.nn.Module) else []
    leaves = list(unique_grad_inputs(family, inputs).values()) + [p for p in params if p.requires_grad]
    resident = params + [t for t in inputs.values() if isinstance(t, torch.Tensor)]
    grad_out = None
    with contextlib.nullcontext() if train else torch.no_grad():
        probe = variant.call(module, inputs)  # what it returns, checked against the reference's (sweep)
    output = (tuple(probe.shape), int(probe.isnan().sum()) if probe.is_floating_point() else 0)
    if train:
        grad_out = cotangent(probe.shape, cfg.seed).to(case.device, dtype)
        with user_code("backward", who=variant.key):  # once behind the boundary, before any timing
            probe.backward(grad_out)
        for leaf in leaves:
            leaf.grad = None
    del probe

    # The call above went through the boundary (a failure or a print there is this case's error
    # row); the timed calls go straight to the user's function, so that the guard's few
    # microseconds are no part of any time (a failure there is still the case's row: sweep).
    timed_call = getattr(variant.call, "__wrapped__", variant.call)

    def make_step(target):
        def forward():
            return timed_call(target, inputs)

        if not train:
            def step():
                with torch.no_grad():
                    return forward()
            return forward, step

        def step():
            for leaf in leaves:  # fresh gradients each call: no accumulation in the timing
                leaf.grad = None
            out = forward()
            out.backward(grad_out)
            return out
        return forward, step

    forward, eager_step = make_step(module)
    if not case.compiled:
        return Prepared(forward, eager_step, eager_step, resident, output=output)
    from torch import _dynamo as dynamo
    from torch._dynamo.utils import counters

    dynamo.reset()  # a fresh cache: no recompile limit reached by earlier cases
    before = counters["stats"]["unique_graphs"]
    _, step = make_step(torch.compile(module, backend=COMPILE_BACKEND))
    started = time.perf_counter()
    step()
    if case.device.startswith("cuda"):
        torch.cuda.synchronize()
    compile_s = time.perf_counter() - started
    graphs = counters["stats"]["unique_graphs"] - before
    return Prepared(forward, step, eager_step, resident, compile_s, graphs, output)
