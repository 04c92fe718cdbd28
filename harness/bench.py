"""Benchmarks: cases as data, one loop, every row carrying its environment.

A sweep expands into ``BenchCase`` rows (family x variant x batch x seq x dtype x mode x
compile). Cases that differ only by variant form a group; a group's variants, the family's
reference and a square matmul (the machine's peak) are timed together, interleaved in
alternating rounds (``harness.measure.interleave``), so every ratio (variant vs reference,
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

import dataclasses
import json
import math
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import torch

from . import measure
from .compare import cast_inputs, cotangent, dtype_of, unique_grad_inputs
from .config import Config
from .errors import ConfigError, HarnessError, ResultsFileError, UnknownName
from .families import get_family
from .porting import zero_unrepresented
from .registry import REGISTRY, get_variant, reference_of, variants_of
from .seeding import build

MODES = ("fwd", "fwd+bwd")
BENCH_FAMILIES = ("attention", "norm", "ffn", "encoder_layer", "decoder_layer", "decoder_only_block",
                  "encoder_decoder", "decoder_only_model")
# The family case each benchmark runs: no padding for attention (causal, so SDPA may use
# is_causal), the padded cases for layers (what a batch of real sentences looks like).
BENCH_CASE = {"attention": "causal_only", "decoder_only_block": "right_pad"}


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

    @property
    def case(self) -> str:
        return BENCH_CASE.get(self.family, get_family(self.family).cases[0].name)

    @property
    def key(self) -> str:
        return (f"{self.family}/{self.variant}|B={self.batch}|T={self.seq}|D={self.d_model}|H={self.heads}"
                f"|F={self.d_ff}|{self.dtype}|{self.device}|{self.mode}|compile={int(self.compiled)}")

    @property
    def shape(self) -> str:
        return f"B={self.batch} T={self.seq} D={self.d_model} H={self.heads}"

    def config(self) -> Config:
        return Config(d_model=self.d_model, heads=self.heads, d_ff=self.d_ff, batch=self.batch,
                      tgt_len=self.seq, src_len=self.seq)


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

    def expand(self, device: str, families: Iterable[str] | None, variants: Iterable[str] | None) -> list[BenchCase]:
        wanted_f = set(families) if families else None
        wanted_v = set(variants) if variants else None
        cases = []
        for family in self.families:
            if wanted_f and family not in wanted_f:
                continue
            for v in variants_of(family):
                if wanted_v and v.id not in wanted_v:
                    continue
                for b in self.batch:
                    for t in self.seq:
                        for dt in self.dtypes:
                            for mode in self.modes:
                                for comp in self.compiled:
                                    cases.append(BenchCase(family, v.id, b, t, self.d_model, self.heads,
                                                           4 * self.d_model, dt, device, mode, comp))
        return cases


LAYERS = ("norm", "ffn", "encoder_layer", "decoder_layer", "decoder_only_block")
# Whole models (N=2 layers, the family's vocabulary of 11: the copy task's), full profile only
MODELS = ("encoder_decoder", "decoder_only_model")

# Timing per profile: seconds of timed calls per variant per round, and rounds per group.
TIMING = {"quick": {"min_time": 0.02, "rounds": 7}, "full": {"min_time": 0.05, "rounds": 7}}

PROFILES: dict[str, dict[str, list[Sweep]]] = {
    "quick": {  # within two minutes on an idle 2-core CPU, with the check
        "cpu": [
            # the targets' shape (variants/targets.py): B=8, T=512, D=512, H=8, causal
            Sweep(("attention",), batch=(8,), seq=(512,), d_model=512, heads=8, modes=("fwd",)),
            # the saved-bytes growth targets: fwd+bwd over T (exponents over 64..256: 1.00, 1.50, 1.51)
            Sweep(("attention",), batch=(2,), seq=(64, 128, 256), d_model=256, heads=8, modes=("fwd+bwd",)),
            # the layer families, forward only (their backward is in the full profile)
            Sweep(LAYERS, batch=(4,), seq=(128,), d_model=256, heads=8, modes=("fwd",)),
        ],
        "cuda": [
            Sweep(("attention",), batch=(8,), seq=(512, 2048), d_model=512, heads=8,
                  dtypes=("float32", "bfloat16")),
            Sweep(LAYERS, batch=(8,), seq=(512,), d_model=512, heads=8, dtypes=("bfloat16",)),
        ],
    },
    "full": {
        "cpu": [
            Sweep(("attention",), batch=(8,), seq=(512,), d_model=512, heads=8),
            Sweep(("attention",), batch=(2, 8), seq=(64, 128, 256, 512, 1024), d_model=256, heads=8),
            Sweep(("attention",), batch=(8,), seq=(256,), d_model=256, heads=8, compiled=(True,)),
            Sweep(LAYERS, batch=(8,), seq=(64, 256, 1024), d_model=512, heads=8),
            Sweep(MODELS, batch=(8,), seq=(64, 256), d_model=512, heads=8),
        ],
        "cuda": [
            Sweep(("attention",), batch=(8,), seq=(128, 256, 512, 1024, 2048, 4096, 8192), d_model=1024,
                  heads=8, dtypes=("float32", "bfloat16", "float16")),
            Sweep(("attention",), batch=(8,), seq=(1024, 4096), d_model=1024, heads=8,
                  dtypes=("bfloat16",), compiled=(True,)),
            Sweep(LAYERS, batch=(8,), seq=(512, 2048, 8192), d_model=1024, heads=8,
                  dtypes=("float32", "bfloat16", "float16")),
            Sweep(MODELS, batch=(8,), seq=(512, 2048), d_model=1024, heads=8, dtypes=("float32", "bfloat16")),
        ],
    },
}


def plan(profile: str, device: str, families=None, variants=None, batch=None, seq=None) -> list[BenchCase]:
    """The cases of a profile, optionally narrowed, or re-swept over ``batch``/``seq``."""
    if profile not in PROFILES:
        raise UnknownName(f"unknown profile '{profile}'; profiles: {sorted(PROFILES)}")
    for f in families or []:
        get_family(f)
        if f not in BENCH_FAMILIES:
            raise UnknownName(f"family '{f}' has no benchmark; benchmarked: {list(BENCH_FAMILIES)}")
    for value in list(batch or []) + list(seq or []):
        if value < 1:
            raise ConfigError(f"impossible sweep: batch and seq must be positive, got {value}")
    kind = "cuda" if device.startswith("cuda") else "cpu"
    cases: list[BenchCase] = []
    for sweep in PROFILES[profile][kind]:
        if batch or seq:
            sweep = dataclasses.replace(sweep, batch=tuple(batch or sweep.batch), seq=tuple(seq or sweep.seq))
        cases += sweep.expand(device, families, variants)
    if variants and not cases:
        known = sorted({v.id for f in (families or BENCH_FAMILIES) if f in BENCH_FAMILIES for v in variants_of(f)})
        raise UnknownName(f"no benchmarked variant is called {sorted(variants)}; variants: {', '.join(known)}")
    if variants:  # the family's reference is timed beside them: the ratios need it
        refs = {ref.id for f in {c.family for c in cases} if (ref := reference_of(f)) is not None}
        if refs - set(variants):
            return plan(profile, device, families, sorted(set(variants) | refs), batch, seq)
    return _unique(cases)


def _unique(cases: list[BenchCase]) -> list[BenchCase]:
    seen, unique = set(), []
    for c in cases:
        if c.key not in seen:
            seen.add(c.key)
            unique.append(c)
    for c in unique[:1]:
        c.config()  # validates d_model / heads
    return unique


# -- running one group -----------------------------------------------------------------------

COMPILE_BACKEND = "inductor"  # torch.compile's default; the tests use "eager" (Dynamo only, cheap)


@dataclass
class Prepared:
    forward: Callable[[], torch.Tensor]   # eager forward (FLOPs, saved bytes, path: run under modes)
    step: Callable[[], object]            # the timed callable of the case's mode (compiled if asked)
    eager_step: Callable[[], object]      # the same step, eager
    resident: list[torch.Tensor]
    compile_s: float | None = None        # first compiled call: Dynamo + Inductor + one run
    graphs: int | None = None             # graphs Dynamo compiled for it (0 = it ran eager)


def prepare(case: BenchCase) -> Prepared:
    """Build, port the seeded canonical weights, make inputs; return the callables. A
    compiled case is compiled here, by its first call, outside any dispatch mode."""
    variant = get_variant(case.family, case.variant)
    family = get_family(case.family)
    cfg = case.config()
    dtype = dtype_of(case.dtype)
    module, portmap = build(variant, cfg, dtype=dtype, device=case.device)
    if portmap is not None:
        portmap.load(zero_unrepresented(family.canonical_weights(cfg), portmap.zero_names()))
    train = case.mode == "fwd+bwd"
    inputs = cast_inputs(family.inputs(case.case, cfg), dtype, case.device, family.grad_inputs if train else ())
    params = [p for p in module.parameters()] if isinstance(module, torch.nn.Module) else []
    leaves = list(unique_grad_inputs(family, inputs).values()) + [p for p in params if p.requires_grad]
    resident = params + [t for t in inputs.values() if isinstance(t, torch.Tensor)]
    grad_out = None
    if train:
        probe = variant.call(module, inputs)
        grad_out = cotangent(probe.shape, cfg.seed).to(case.device, dtype)
        del probe

    def make_step(target):
        def forward():
            return variant.call(target, inputs)

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
        return Prepared(forward, eager_step, eager_step, resident)
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
    return Prepared(forward, step, eager_step, resident, compile_s, graphs)


PEAK = "__matmul_peak__"
PEAK_SIZE = {"cpu": 1024, "cuda": 8192}
# Seconds of matmul per round (several blocks, their median is the round's peak): with the
# rows' 0.02 s a 1024 matmul (16 ms here) got 2 blocks a round, and one slow block moved
# the peak's spread past the limit in 1 quick run of 2 on this machine.
PEAK_MIN_TIME = 0.1
# Matmul peak: IQR over median across rounds above this = disturbed. Measured on this 2-core
# machine at load 0.8-1.9 (no other work running): 1024 matmuls in 0.02 s rounds spread 4-32%
# across rounds, so 10% flagged a quiet machine; a target is claimed only when its lower
# quartile holds anyway. The load average is the other signal.
PEAK_SPREAD_LIMIT = 0.35


def load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def disturbance(loads: list[float | None], peak_rounds: list[float], device: str) -> str:
    """Why the window was disturbed, with the figures; "" when it was not."""
    why = []
    cores = os.cpu_count() or 1
    worst = max((x for x in loads if x is not None), default=None)
    if device == "cpu" and worst is not None and worst > cores + 0.5:
        why.append(f"load average {worst:.1f} on {cores} cores")
    med, q1, q3 = measure.quartiles(peak_rounds)
    if peak_rounds and med > 0 and (q3 - q1) / med > PEAK_SPREAD_LIMIT:
        why.append(f"matmul peak spread {(q3 - q1) / med:.0%} across rounds (IQR/median)")
    return "; ".join(why)


def _static(case: BenchCase, prepared: Prepared, row: dict) -> None:
    """What is not time, from one instrumented call of the eager step: kernel path, FLOPs
    (executed and dense-equivalent), tensor peak, bytes saved for backward."""
    train = case.mode == "fwd+bwd"
    st = measure.instrumented(prepared.eager_step, case.device, prepared.resident if train else None)
    row["path"] = ("compiled: " if case.compiled else "") + measure.path_name(st.ops)
    row.update(path_ops=st.ops, flops=st.flops, flops_dense=st.flops_dense, peak_bytes=st.peak_bytes,
               largest_tensor=f"{list(st.largest[1])} ({st.largest[0] / 2**20:.3g} MiB)" if st.largest[0] else None,
               peak_method=measure.CUDA_PEAK_METHOD if case.device.startswith("cuda") else measure.CPU_PEAK_METHOD)
    if train:
        row["saved_bytes"] = st.saved_bytes


def _failed(row: dict, case: BenchCase, exc: Exception) -> dict:
    if isinstance(exc, torch.cuda.OutOfMemoryError) or (
            "out of memory" in str(exc).lower() and torch.cuda.is_available()):
        torch.cuda.empty_cache()
        return {**row, "status": "oom", "error": str(exc).splitlines()[0]}
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    status = "unsupported" if case.compiled else "error"  # e.g. torch.compile unsupported here
    return {**row, "status": status, "error": f"{type(exc).__name__}: {first}"[:300]}


def measure_group(cases: list[BenchCase], *, min_time: float, rounds: int, threads: int,
                  probe=None) -> tuple[list[dict], dict]:
    """Rows of one group (one family, shape, dtype, mode: its variants and the family's
    reference) and its matmul-peak row, timed interleaved in one window with the peak."""
    first = cases[0]
    started = time.perf_counter()
    ref = reference_of(first.family)
    rows: dict[str, dict] = {}
    fns: dict[str, Callable[[], object]] = {}
    loads = [load_average()]
    for case in cases:
        row: dict[str, Any] = {**dataclasses.asdict(case), "case": case.case, "key": case.key,
                               "threads": threads, "baseline": ref.id if ref else None}
        reason = get_variant(case.family, case.variant).supports(case.config())
        if reason:
            rows[case.variant] = {**row, "status": "unsupported", "error": reason}
            continue
        try:
            prepared = prepare(case)
            if case.compiled:
                row.update(compile_s=prepared.compile_s, compile_graphs=prepared.graphs)
                if not prepared.graphs:
                    raise RuntimeError("torch.compile compiled no graph: the case would run eager")
            _static(case, prepared, row)
            rows[case.variant] = {**row, "status": "ok"}
            fns[case.variant] = prepared.step
        except HarnessError:
            raise
        except Exception as exc:  # a finding, not a crash: the sweep goes on
            rows[case.variant] = _failed(row, case, exc)
    size = PEAK_SIZE["cuda" if first.device.startswith("cuda") else "cpu"]
    mm, mm_flops = measure.matmul_callable(first.device, dtype_of(first.dtype), size)
    timed = measure.interleave({**fns, PEAK: mm}, rounds=rounds, min_time=min_time, threads=threads,
                               min_times={PEAK: max(min_time, PEAK_MIN_TIME)})
    loads.append(load_average())
    peak_rounds = [mm_flops / t for t in timed.rounds[PEAK]]
    disturbed = disturbance(loads, peak_rounds, first.device)
    group = first.key.replace(f"{first.family}/{first.variant}|", f"{first.family}|")
    pk, pk1, pk3 = measure.quartiles(peak_rounds)
    peak_row = {"kind": "peak", "key": f"peak|{group}", "group": group, "family": first.family,
                "device": first.device, "dtype": first.dtype, "size": size, "peak_flops": pk,
                "peak_q1": pk1, "peak_q3": pk3, "peak_rounds": peak_rounds, "rounds": rounds, "load": loads,
                "disturbed": disturbed,
                "threads": threads}
    for vid in fns:
        row = rows[vid]
        med, q1, q3 = measure.quartiles(timed.blocks[vid])
        per_round = timed.rounds[vid]
        fractions = [row["flops"] / t / p for t, p in zip(per_round, peak_rounds)] if row["flops"] else []
        _, f1, f3 = measure.quartiles(fractions)  # the per-round spread, shown
        # the figure and the interval a target is decided on: ratio of the medians over rounds
        f, f_lo, f_hi = (measure.ratio_of_medians([row["flops"] / t for t in per_round], peak_rounds)
                         if row["flops"] else (math.nan,) * 3)
        dense = f * row["flops_dense"] / row["flops"] if row["flops"] and row["flops_dense"] else math.nan
        row.update(median_s=med, q1_s=q1, q3_s=q3, iqr_s=q3 - q1, round_s=per_round, rounds=rounds,
                   reps=len(timed.blocks[vid]) * timed.number[vid],
                   gflops=row["flops"] / med / 1e9 if row["flops"] else math.nan,
                   gflops_dense=row["flops_dense"] / med / 1e9 if row["flops_dense"] else math.nan,
                   peak_flops=pk, peak_fraction=f, peak_fraction_q1=f1, peak_fraction_q3=f3,
                   peak_fraction_lo=f_lo, peak_fraction_hi=f_hi,
                   peak_fraction_dense=dense,
                   load=loads, disturbed=disturbed, group=group, interleaved=True)
        if ref is not None and ref.id in fns:
            _, r1, r3 = measure.quartiles(timed.ratio(ref.id, vid))
            r, r_lo, r_hi = measure.ratio_of_medians(timed.rounds[ref.id], per_round)
            row.update(vs_baseline=r, vs_baseline_q1=r1, vs_baseline_q3=r3, vs_baseline_lo=r_lo,
                       vs_baseline_hi=r_hi)
    if probe is not None:
        for vid in fns:
            case = next(c for c in cases if c.variant == vid)
            if case.compiled:
                rows[vid].update(rss_peak_bytes=None, rss_note="compiled: the probe would compile it again")
            else:
                rss, why = probe.measure(dataclasses.asdict(case))
                rows[vid].update(rss_peak_bytes=rss, rss_note=why)
    peak_row["elapsed_s"] = time.perf_counter() - started
    return [rows[c.variant] for c in cases], peak_row


# -- environment -----------------------------------------------------------------------------------

def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_commit() -> str:
    root = Path(__file__).resolve().parents[1]
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return (sha + ("-dirty" if dirty else "")) if sha else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def environment(device: str) -> dict[str, Any]:
    env = {
        "torch": torch.__version__, "python": platform.python_version(), "cpu": cpu_model(),
        "cpu_count": os.cpu_count(), "threads": torch.get_num_threads(), "commit": git_commit(),
        "device": device,
        "device_name": torch.cuda.get_device_name(0) if device.startswith("cuda") else cpu_model(),
    }
    return env


def device_dir(device: str, device_name: str | None = None) -> str:
    """``cpu``, or ``cuda-<gpu>`` (e.g. ``cuda-h100-80gb-hbm3``) from the GPU's name."""
    if not device.startswith("cuda"):
        return "cpu"
    name = (device_name or torch.cuda.get_device_name(0)).lower()
    slug = "".join(ch if ch.isalnum() else "-" for ch in name).strip("-")
    while "--" in slug:
        slug = slug.replace("--", "-")
    return f"cuda-{slug.replace('nvidia-', '')}"


# -- the log's first line: what measured it --------------------------------------------------------

LOG_MAGIC = "attention-harness bench log"


def code_fingerprint(variant_files: Iterable[str] = ()) -> str:
    """A hash of the code a measurement depends on: the harness package's sources, the files
    every registered variant came from (its pack module or a user's file), and ``variant_files``.
    Rows measured under another fingerprint are not reused."""
    import hashlib

    files = {Path(f).resolve() for f in Path(__file__).resolve().parent.rglob("*.py")}
    for origin in {v.origin for v in REGISTRY.values() if v.origin} | set(variant_files):
        module = sys.modules.get(origin)
        path = getattr(module, "__file__", None) if module is not None else origin
        if path and Path(path).is_file():
            files.add(Path(path).resolve())
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def log_stamp(*, device: str, profile: str, min_time: float, rounds: int, threads: int, memory: bool,
              variant_files: Iterable[str] = ()) -> dict[str, Any]:
    """What a log's rows were measured with: rows are resumed or reused only under an equal stamp."""
    return {"code": code_fingerprint(variant_files), "torch": torch.__version__, "device": device,
            "cpu": cpu_model(), "profile": profile, "min_time": min_time, "rounds": rounds,
            "threads": threads, "memory": memory}


def stamp_difference(old: dict[str, Any] | None, new: dict[str, Any]) -> str:
    """'' when equal, else what differs, for the message that explains a fresh start."""
    if old is None:
        return "it has no header line (written by an earlier version of the harness)"
    names = {"code": "the harness's or the variants' code", "min_time": "--min-time", "rounds": "--rounds",
             "threads": "--threads", "memory": "--no-rss", "profile": "the profile"}
    diff = [names.get(k, k) for k in new if old.get(k) != new[k]]
    return ", ".join(diff) + (" differ" if len(diff) > 1 else " differs") if diff else ""


def refuse_foreign_log(log: Path) -> None:
    """Refuse a non-empty file whose first line is not this harness's: a log is only ever
    appended to, resumed or replaced when the harness wrote it."""
    if not log.is_file():
        return
    with log.open("rb") as f:
        first = f.readline().decode(errors="replace").strip()
        more = f.read(1)
    if not first and not more:
        return
    header = json.dumps({"harness_log": LOG_MAGIC})[:-1]
    try:
        ours = _is_harness_row(json.loads(first))
    except json.JSONDecodeError:  # the header itself cut off by an interrupt
        ours = not more and (header.startswith(first) or first.startswith(header))
    if not ours:
        raise ResultsFileError(f"'{log}' is not a log written by this harness; it is left as it is: "
                               "give another --log path")


def _is_harness_row(row: Any) -> bool:
    return isinstance(row, dict) and (row.get("harness_log") == LOG_MAGIC
                                      or row.get("kind") in ("case", "peak", "end") and "key" in row)


# -- the sweep -------------------------------------------------------------------------------------------

def read_log(path: Path, *, quiet: bool = False) -> list[dict]:
    """The measured rows of a JSONL log (its first line, what measured it, left out)."""
    return [r for r in _read_jsonl(path, quiet=quiet) if r.get("harness_log") != LOG_MAGIC]


def _read_jsonl(path: Path, *, quiet: bool = False) -> list[dict]:
    """Rows of a JSONL log. A cut-off last line (the row in progress when the run stopped)
    is dropped with a message; every earlier row is kept. A bad line before it is an error."""
    rows: list[dict] = []
    if not path.exists():
        return rows
    if path.is_dir():
        raise ResultsFileError(f"bench log '{path}' is a directory, not a JSONL file")
    lines = [(n, line) for n, line in enumerate(path.read_text().splitlines(), 1) if line.strip()]
    for i, (n, line) in enumerate(lines):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                if not quiet:
                    print(f"note: {path}:{n} is cut off (the row in progress when the run stopped); "
                          f"dropped, {len(rows)} earlier row(s) kept", file=sys.stderr)
                break
            raise ResultsFileError(f"{path}:{n} is not a JSON line: not a log of this harness, or damaged; "
                                   "it is left as it is (give another --log path)") from None
    return rows


def _rewrite_without_cut_line(path: Path, rows: list[dict]) -> None:
    """Before appending to a log whose last line was cut off, write it back whole."""
    if len([x for x in path.read_text().splitlines() if x.strip()]) > len(rows):
        path.write_text("".join(json.dumps(r, default=str) + "\n" for r in rows))


def groups(cases: list[BenchCase]) -> list[list[BenchCase]]:
    """Cases timed together: same family, shape, dtype, device, mode and compile flag."""
    out: dict[tuple, list[BenchCase]] = {}
    for c in cases:
        out.setdefault((c.family, c.batch, c.seq, c.d_model, c.heads, c.d_ff, c.dtype, c.device, c.mode,
                        c.compiled), []).append(c)
    return list(out.values())


def run_sweep(
    cases: list[BenchCase],
    log: Path,
    *,
    fresh: bool = False,
    min_time: float = 0.05,
    rounds: int = 7,
    threads: int | None = None,
    progress: bool = True,
    memory: bool = True,
    variant_files: list[str] | None = None,
    profile: str = "",
) -> Iterator[dict]:
    """Measure each group with a case not yet in ``log``; append its rows (and its matmul
    peak row) as soon as the group finishes; yield the case rows. A group is timed as a
    whole (its ratios need one window), so a resumed group is measured again whole.
    Ends the log with an ``end`` row when every group is done."""
    from tqdm import tqdm

    from .memprobe import MemProbe

    threads = threads or torch.get_num_threads()
    log.parent.mkdir(parents=True, exist_ok=True)
    stamp = log_stamp(device=cases[0].device if cases else "cpu", profile=profile, min_time=min_time,
                      rounds=rounds, threads=threads, memory=memory, variant_files=variant_files or [])
    refuse_foreign_log(log)
    old = _read_jsonl(log, quiet=fresh)
    if old and not all(_is_harness_row(r) for r in old):
        raise ResultsFileError(f"'{log}' is not a log written by this harness; it is left as it is: "
                               "give another --log path")
    header = next((r for r in old if r.get("harness_log") == LOG_MAGIC), None)
    stale = stamp_difference(header and header.get("stamp"), stamp) if old else ""
    if stale:
        print(f"{log}: its rows were measured with other settings ({stale}); measuring again",
              file=sys.stderr)
    if (fresh or stale) and log.exists():
        log.unlink()
        old = []
    if old:
        _rewrite_without_cut_line(log, old)
    old = [r for r in old if r is not header]
    done = {r["key"] for r in old if r.get("kind", "case") == "case"}
    env = environment(cases[0].device) if cases else {}
    env["threads"] = threads
    if old and cases:
        left = sum(c.key not in done for c in cases)
        if left:
            print(f"resuming {log}: {len(cases) - left} of {len(cases)} case(s) already measured with this "
                  "code and these settings (--fresh measures all again)", file=sys.stderr)
        else:
            print(f"all {len(cases)} case(s) already measured in {log} with this code and these settings; "
                  "nothing to measure (--fresh measures again)", file=sys.stderr)
    todo = [g for g in groups(cases) if any(c.key not in done for c in g)]
    cpu = bool(cases) and not cases[0].device.startswith("cuda")
    probe = MemProbe(list(variant_files or []), threads) if memory and cpu else None
    try:
        with log.open("a") as out:
            def emit(row):
                out.write(json.dumps(row, default=str) + "\n")
                out.flush()

            if not old:
                emit({"harness_log": LOG_MAGIC, "kind": "log", "stamp": stamp})

            bar = tqdm(todo, desc="bench", unit="group", disable=not progress, dynamic_ncols=True)
            for group in bar:
                c = group[0]
                bar.set_postfix_str(f"{c.family} B={c.batch} T={c.seq} {c.mode}", refresh=False)
                rows, peak = measure_group(group, min_time=min_time, rounds=rounds, threads=threads, probe=probe)
                if peak["disturbed"]:
                    tqdm.write(f"disturbed: {c.family} B={c.batch} T={c.seq} {c.mode}: {peak['disturbed']}",
                               file=sys.stderr)
                emit({**peak, "profile": profile, **env})
                for row in rows:
                    row = {**row, "kind": "case", "profile": profile, **env}
                    emit(row)
                    yield row
            if todo or not (old and old[-1].get("kind") == "end"):
                emit({"kind": "end", "key": "end", "profile": profile})
    finally:
        if probe is not None:
            probe.close()


# -- sizes that cannot fit ---------------------------------------------------------------------------

ATTENTION_FAMILIES = {"attention", "encoder_layer", "decoder_layer", "decoder_only_block"}


def case_bytes(case: BenchCase) -> int:
    """A rough lower estimate of one case's memory: inputs, output and activations of
    (B, T, D) and (B, T, F), and, for families with attention, one (B, H, T, S) weights
    tensor (the explicit variants hold it); twice that with backward."""
    itemsize = dtype_of(case.dtype).itemsize
    b, t, d = case.batch, case.seq, case.d_model
    n = 6 * b * t * d + b * t * case.d_ff
    if case.family in ATTENTION_FAMILIES:
        n += b * case.heads * t * t
    return itemsize * n * (2 if case.mode == "fwd+bwd" else 1)


def available_bytes(device: str) -> int | None:
    if device.startswith("cuda"):
        return torch.cuda.mem_get_info()[0]
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def check_sizes(cases: list[BenchCase]) -> None:
    """Refuse, before the run, a sweep whose largest case cannot fit in memory."""
    if not cases:
        return
    big = max(cases, key=case_bytes)
    need, have = case_bytes(big), available_bytes(big.device)
    if have is not None and need > have:
        raise ConfigError(
            f"case {big.family}/{big.variant} B={big.batch} T={big.seq} D={big.d_model} {big.mode} needs at "
            f"least ~{need / 2**30:,.1f} GiB (activations and the (B,H,T,S) attention weights), more than the "
            f"{have / 2**30:,.1f} GiB available; lower --batch or --seq")


def load_rows(path: Path) -> list[dict]:
    """Rows from a bench log (JSONL), a results.json, or a pytest-benchmark JSON."""
    if not path.exists():
        raise ResultsFileError(f"results file '{path}' does not exist")
    if path.is_dir():
        raise ResultsFileError(f"results file '{path}' is a directory; give a results.json or a bench .jsonl in it")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsFileError(f"cannot read results file '{path}': {getattr(exc, 'strerror', None) or exc}") from None
    if path.suffix == ".jsonl":
        return read_log(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultsFileError(f"'{path}' is not JSON: {exc.msg} (line {exc.lineno})") from None
    if isinstance(data, dict) and "benchmarks" in data:
        return rows_from_pytest_benchmark(data)
    if isinstance(data, dict) and "rows" in data:
        data = data["rows"]
    if not isinstance(data, list) or not all(isinstance(r, dict) and "key" in r for r in data):
        raise ResultsFileError(f"'{path}' is not a results file of this harness (rows with a 'key')")
    return data


def rows_from_pytest_benchmark(data: dict) -> list[dict]:
    """pytest-benchmark's --benchmark-json output -> rows of the same shape as ours."""
    rows = []
    machine = data.get("machine_info", {})
    for bench in data["benchmarks"]:
        info = bench.get("extra_info", {})
        if "key" not in info:
            raise ResultsFileError(f"benchmark '{bench.get('name')}' has no harness extra_info (not from benchmarks/)")
        stats = bench["stats"]
        row = dict(info)
        row.update(kind="case", status="ok", median_s=stats["median"], q1_s=stats["q1"], q3_s=stats["q3"],
                   iqr_s=stats["iqr"], reps=stats["rounds"], source="pytest-benchmark", interleaved=False,
                   rss_note="the pytest-benchmark suite runs no RSS probe (python -m harness bench does)",
                   cpu=machine.get("cpu", {}).get("brand_raw", info.get("cpu", "")))
        if row.get("flops"):  # a rate of this row alone; no ratio (nothing timed beside it)
            row["gflops"] = row["flops"] / row["median_s"] / 1e9
        rows.append(row)
    return rows

