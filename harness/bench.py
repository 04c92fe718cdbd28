"""Benchmarks: cases as data, one loop, every row carrying its environment.

A sweep expands into ``BenchCase`` rows (family x variant x batch x seq x dtype x mode x
compile). Each case builds the variant with the family's seeded canonical weights, takes
the family's benchmark inputs, and measures time, FLOPs, bytes saved for backward and
peak memory (see ``harness.measure``). Rows are appended to a JSONL log as each case
finishes: an interrupted sweep keeps what it measured, and a rerun resumes, skipping the
cases already in the log. Unsupported cases, errors and CUDA out-of-memory are rows too.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import torch

from . import measure
from .compare import OpRecorder, cast_inputs, cotangent, dtype_of, unique_grad_inputs
from .config import Config
from .errors import ConfigError, HarnessError, ResultsFileError, UnknownName
from .families import get_family
from .porting import zero_unrepresented
from .registry import get_variant, variants_of
from .seeding import build

MODES = ("fwd", "fwd+bwd")
BENCH_FAMILIES = ("attention", "norm", "ffn", "encoder_layer", "decoder_layer", "decoder_only_block")
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

PROFILES: dict[str, dict[str, list[Sweep]]] = {
    "quick": {  # under two minutes on a 2-core CPU, with the check
        "cpu": [
            # the targets' shape (variants/targets.py): B=8, T=512, D=512, H=8, causal
            Sweep(("attention",), batch=(8,), seq=(512,), d_model=512, heads=8, modes=("fwd",)),
            Sweep(("attention",), batch=(2,), seq=(64, 128, 256, 512), d_model=256, heads=8),
            Sweep(LAYERS, batch=(4,), seq=(128,), d_model=256, heads=8),
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
        ],
        "cuda": [
            Sweep(("attention",), batch=(8,), seq=(128, 256, 512, 1024, 2048, 4096, 8192), d_model=1024,
                  heads=8, dtypes=("float32", "bfloat16", "float16")),
            Sweep(("attention",), batch=(8,), seq=(1024, 4096), d_model=1024, heads=8,
                  dtypes=("bfloat16",), compiled=(True,)),
            Sweep(LAYERS, batch=(8,), seq=(512, 2048, 8192), d_model=1024, heads=8,
                  dtypes=("float32", "bfloat16", "float16")),
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
        raise UnknownName(f"no benchmarked variant is called {sorted(variants)}")
    seen, unique = set(), []
    for c in cases:
        if c.key not in seen:
            seen.add(c.key)
            unique.append(c)
    for c in unique[:1]:
        c.config()  # validates d_model / heads
    return unique


# -- running one case ------------------------------------------------------------------------

@dataclass
class Prepared:
    forward: Callable[[], torch.Tensor]
    step: Callable[[], object]          # the timed callable of the case's mode
    resident: list[torch.Tensor]


def prepare(case: BenchCase) -> Prepared:
    """Build, port the seeded canonical weights, make inputs; return the callables."""
    variant = get_variant(case.family, case.variant)
    family = get_family(case.family)
    cfg = case.config()
    dtype = dtype_of(case.dtype)
    module, portmap = build(variant, cfg, dtype=dtype, device=case.device)
    if portmap is not None:
        portmap.load(zero_unrepresented(family.canonical_weights(cfg), portmap.zero_names()))
    train = case.mode == "fwd+bwd"
    inputs = cast_inputs(family.inputs(case.case, cfg), dtype, case.device, family.grad_inputs if train else ())
    call_module = torch.compile(module) if case.compiled else module

    def forward():
        return variant.call(call_module, inputs)

    params = [p for p in module.parameters()] if isinstance(module, torch.nn.Module) else []
    leaves = list(unique_grad_inputs(family, inputs).values()) + [p for p in params if p.requires_grad]
    resident = params + [t for t in inputs.values() if isinstance(t, torch.Tensor)]
    if not train:
        def step():
            with torch.no_grad():
                return forward()
        return Prepared(forward, step, resident)
    probe = forward()
    grad_out = cotangent(probe.shape, cfg.seed).to(case.device, dtype)
    del probe

    def step():
        for leaf in leaves:  # fresh gradients each call: no accumulation in the timing
            leaf.grad = None
        out = forward()
        out.backward(grad_out)
        return out

    return Prepared(forward, step, resident)


def measure_case(case: BenchCase, *, min_time: float, min_reps: int, peak_flops: float) -> dict:
    """One row: time, IQR, FLOPs, GFLOP/s, % of matmul peak, saved bytes, peak bytes."""
    row: dict[str, Any] = {**dataclasses.asdict(case), "case": case.case, "key": case.key}
    variant = get_variant(case.family, case.variant)
    reason = variant.supports(case.config())
    if reason:
        return {**row, "status": "unsupported", "error": reason}
    try:
        prepared = prepare(case)
        recorder = OpRecorder()
        with recorder:
            prepared.step()
        row["path"] = recorder.path()
        timing = measure.time_callable(prepared.step, case.device, warmup=2, min_reps=min_reps, min_time=min_time)
        flops = measure.count_flops(prepared.step)
        row.update(
            status="ok", median_s=timing.median, q1_s=timing.q1, q3_s=timing.q3, iqr_s=timing.iqr,
            reps=timing.reps, flops=flops,
            gflops=flops / timing.median / 1e9 if flops else math.nan,
            peak_fraction=(flops / timing.median) / peak_flops if flops and peak_flops else math.nan,
            peak_bytes=measure.peak_bytes(prepared.step, case.device),
            peak_method=measure.CUDA_PEAK_METHOD if case.device.startswith("cuda") else measure.CPU_PEAK_METHOD,
        )
        if case.mode == "fwd+bwd":
            row["saved_bytes"] = measure.saved_bytes(prepared.forward, prepared.resident)
        return row
    except torch.cuda.OutOfMemoryError as exc:
        torch.cuda.empty_cache()
        return {**row, "status": "oom", "error": str(exc).splitlines()[0]}
    except HarnessError:
        raise
    except Exception as exc:  # e.g. torch.compile unsupported on this machine: a finding, not a crash
        if "out of memory" in str(exc).lower() and torch.cuda.is_available():
            torch.cuda.empty_cache()
            return {**row, "status": "oom", "error": str(exc).splitlines()[0]}
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        status = "unsupported" if case.compiled else "error"
        return {**row, "status": status, "error": f"{type(exc).__name__}: {first}"[:300]}


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


# -- the sweep -------------------------------------------------------------------------------------------

def read_log(path: Path) -> list[dict]:
    rows = []
    if not path.exists():
        return rows
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            raise ResultsFileError(f"{path}:{n} is not a JSON line; delete it or pass --fresh") from None
    return rows


def run_sweep(
    cases: list[BenchCase],
    log: Path,
    *,
    fresh: bool = False,
    min_time: float = 0.1,
    min_reps: int = 5,
    progress: bool = True,
) -> Iterator[dict]:
    """Measure each case not yet in ``log``; append each row as it finishes; yield rows.
    The first rows of a new log are the matmul peaks of the dtypes in the sweep."""
    from tqdm import tqdm

    log.parent.mkdir(parents=True, exist_ok=True)
    if fresh and log.exists():
        log.unlink()
    done = {r["key"]: r for r in read_log(log)}
    peaks = {k: r for k, r in done.items() if r.get("kind") == "peak"}
    env = environment(cases[0].device) if cases else {}
    with log.open("a") as out:
        def emit(row):
            out.write(json.dumps(row, default=str) + "\n")
            out.flush()

        for dt in sorted({c.dtype for c in cases}):
            key = f"peak|{cases[0].device}|{dt}"
            if key not in peaks:
                flops, size = measure.matmul_peak(cases[0].device, dtype_of(dt))
                peaks[key] = {"kind": "peak", "key": key, "device": cases[0].device, "dtype": dt,
                              "peak_flops": flops, "size": size, **env}
                emit(peaks[key])
        todo = [c for c in cases if c.key not in done]
        bar = tqdm(todo, desc="bench", unit="case", disable=not progress, dynamic_ncols=True)
        for case in bar:
            bar.set_postfix_str(f"{case.family}/{case.variant} T={case.seq} {case.mode}", refresh=False)
            peak = peaks[f"peak|{case.device}|{case.dtype}"]["peak_flops"]
            row = {**measure_case(case, min_time=min_time, min_reps=min_reps, peak_flops=peak),
                   "kind": "case", **env}
            emit(row)
            yield row


def load_rows(path: Path) -> list[dict]:
    """Rows from a bench log (JSONL), a results.json, or a pytest-benchmark JSON."""
    if not path.exists():
        raise ResultsFileError(f"results file '{path}' does not exist")
    text = path.read_text()
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
                   iqr_s=stats["iqr"], reps=stats["rounds"], source="pytest-benchmark",
                   cpu=machine.get("cpu", {}).get("brand_raw", info.get("cpu", "")))
        if row.get("flops"):
            row["gflops"] = row["flops"] / row["median_s"] / 1e9
            if row.get("peak_flops"):
                row["peak_fraction"] = row["flops"] / row["median_s"] / row["peak_flops"]
        rows.append(row)
    return rows

