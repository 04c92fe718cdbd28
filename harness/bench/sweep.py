"""The sweep: cases measured in interleaved groups with a matmul peak beside them, every row
carrying its environment, appended to the JSONL log."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Generator, Iterator

import torch

from harness.base.boundary import describe
from harness.base.dtypes import dtype_of
from harness.base.errors import HarnessError, ResultsFileError
from harness.base.failures import harness_traceback
from harness.base.files import SCHEMA_VERSION, make_public, output_lock
from harness.base.output import write_failed
from harness.bench import counters, timing
from harness.bench.cases import BenchCase, Prepared, prepare, serves_target
from harness.bench.log import (
    LOG_MAGIC,
    _rewrite_without_cut_line,
    code_fingerprint,
    is_harness_row,
    read_jsonl,
    refuse_foreign_log,
    stamp_difference,
)
from harness.bench.machine import (  # noqa: F401  (environment, load_average: re-exported)
    cpu_model,
    environment,
    git_commit,
    load_average,
    load_disturbance,
)
from harness.bench.measured import Rounds, Status
from harness.bench.memprobe import MemProbe
from harness.bench.progress import Progress, write
from harness.bench.row import BenchRow, Environment, Measurement, PeakRow, RowSpec
from harness.bench.sizes import case_bytes
from harness.check.runs import fill_overflow
from harness.registry import get_variant, reference_of

PEAK = "__matmul_peak__"
PEAK_SIZE = {"cpu": 1024, "cuda": 8192}
# Seconds of matmul per round (several blocks, their median is the round's peak): with the
# rows' 0.02 s a 1024 matmul (16 ms here) got 2 blocks a round, and one slow block moved
# the peak's spread past the limit in 1 quick run of 2 on this machine.
PEAK_MIN_TIME = 0.1


def disturbance(loads: list[float | None], peak_rounds: list[float], device: str) -> str:
    """Why the window was disturbed, with the figures; "" when it was not."""
    load = load_disturbance(loads, device)
    why = [str(load)] if load else []
    med, q1, q3 = timing.quartiles(peak_rounds)
    if peak_rounds and med > 0 and (q3 - q1) / med > timing.PEAK_SPREAD_LIMIT:
        why.append(f"matmul peak spread {(q3 - q1) / med:.0%} across rounds (IQR/median)")
    return "; ".join(why)


def wrong_outputs(outputs: dict[str, tuple[tuple[int, ...], int]], ref: str | None) -> dict[str, str]:
    """Variants whose output (shape, NaN count) tells that they compute something else than
    the family's reference: another shape, or NaN where the reference has none. What ``check``
    calls an error or a difference is not timed as a speed."""
    if ref not in outputs:
        return {}
    shape, nans = outputs[ref]
    wrong = {}
    for vid, (s, n) in outputs.items():
        if s != shape:
            wrong[vid] = f"output shape {s} where the reference {ref}'s is {shape}: not timed"
        elif n and not nans:
            wrong[vid] = f"output has NaN in {n} element(s) where the reference {ref}'s has none: not timed"
    return wrong


def _static(case: BenchCase, prepared: Prepared, m: Measurement) -> None:
    """What is not time, from one instrumented call of the eager step: kernel path, FLOPs
    (executed and dense-equivalent), tensor peak, bytes saved for backward."""
    train = case.mode == "fwd+bwd"
    st = counters.instrumented(prepared.eager_step, case.device, prepared.resident if train else None)
    m.path = ("compiled: " if case.compiled else "") + counters.path_name(st.ops)
    m.path_ops, m.flops, m.flops_dense, m.peak_bytes = st.ops, st.flops, st.flops_dense, st.peak_bytes
    m.flops_basis = st.flops_basis if st.flops else None
    m.largest_tensor = f"{list(st.largest[1])} ({st.largest[0] / 2**20:.3g} MiB)" if st.largest[0] else None
    m.peak_method = timing.CUDA_PEAK_METHOD if case.device.startswith("cuda") else timing.CPU_PEAK_METHOD
    if train:
        m.saved_bytes = st.saved_bytes


def _failed(m: Measurement, case: BenchCase, exc: Exception) -> None:
    if isinstance(exc, torch.cuda.OutOfMemoryError) or (
            "out of memory" in str(exc).lower() and torch.cuda.is_available()):
        torch.cuda.empty_cache()
        m.status, m.error = Status.OOM, str(exc).splitlines()[0]
        return
    m.status = Status.UNSUPPORTED if case.compiled else Status.ERROR  # e.g. torch.compile unsupported here
    m.error, m.traceback = describe(exc), harness_traceback(exc)


def _spec(case: BenchCase, threads: int, baseline: str | None) -> RowSpec:
    fields = {**dataclasses.asdict(case), "sets": list(case.sets) or None}
    return RowSpec(key=case.key, **fields, case=case.case, threads=threads, baseline=baseline)


def measure_group(cases: list[BenchCase], *, min_time: float, rounds: int, threads: int,
                  probe=None) -> tuple[list[BenchRow], PeakRow]:
    """Rows of one group (one family, shape, dtype, mode: its variants and the family's
    reference) and its matmul-peak row, timed interleaved in one window with the peak."""
    first = cases[0]
    started = time.perf_counter()
    ref = reference_of(first.family)
    rows: dict[str, BenchRow] = {}
    fns: dict[str, Callable[[], object]] = {}
    outputs: dict[str, tuple[tuple[int, ...], int]] = {}
    loads = [load_average()]
    for case in cases:
        row = BenchRow(_spec(case, threads, ref.id if ref else None))
        rows[case.variant] = row
        m = row.measurement
        variant = get_variant(case.family, case.variant)
        reason = variant.refuses(case.config(), case.device, case.case) or variant.dtype_reason(case.dtype)
        overflow = fill_overflow(variant, dtype_of(case.dtype))
        if reason or overflow:  # a declared fill the dtype cannot hold raises by design: not run, said why
            m.status, m.error = Status.UNSUPPORTED, reason or f"declared error: {overflow}"
            continue
        try:
            prepared = prepare(case)
            if case.compiled:
                m.compile_s, m.compile_graphs = prepared.compile_s, prepared.graphs
                if not prepared.graphs:
                    raise RuntimeError("torch.compile compiled no graph: the case would run eager")
            _static(case, prepared, m)
            m.status = Status.OK
            fns[case.variant] = prepared.step
            outputs[case.variant] = prepared.output
        except HarnessError:
            raise
        except Exception as exc:  # a finding, not a crash: the sweep goes on
            _failed(m, case, exc)
    for vid, why in wrong_outputs(outputs, ref.id if ref else None).items():  # not timed: its error row
        rows[vid].measurement.status, rows[vid].measurement.error = Status.ERROR, why
        del fns[vid]
    size = PEAK_SIZE["cuda" if first.device.startswith("cuda") else "cpu"]
    mm, mm_flops = timing.matmul_callable(first.device, dtype_of(first.dtype), size)
    timed = timing.interleave({**fns, PEAK: mm}, rounds=rounds, min_time=min_time, threads=threads,
                               min_times={PEAK: max(min_time, PEAK_MIN_TIME)})
    loads.append(load_average())
    peak_rounds = [mm_flops / t for t in timed.rounds[PEAK]]
    disturbed = disturbance(loads, peak_rounds, first.device)
    group = group_key(first)
    pk, pk1, pk3 = timing.quartiles(peak_rounds)
    peak_row = PeakRow(key=f"peak|{group}", group=group, family=first.family, device=first.device,
                       dtype=first.dtype, size=size, peak_flops=pk, peak_q1=pk1, peak_q3=pk3,
                       peak_rounds=peak_rounds, rounds=rounds, load=loads, disturbed=disturbed, threads=threads)
    for vid in fns:
        row = rows[vid]
        m = row.measurement
        row.spec = dataclasses.replace(row.spec, group=group)
        baseline = tuple(timed.rounds[ref.id]) if ref is not None and ref.id in fns else None
        m.times = Rounds(round_s=tuple(timed.rounds[vid]), reps=len(timed.blocks[vid]) * timed.number[vid],
                         blocks=tuple(timed.blocks[vid]), peak_rounds=tuple(peak_rounds), baseline_round_s=baseline)
        m.rounds, m.min_time = rounds, min_time  # like with like: --compare reads min_time
        m.load, m.disturbed, m.interleaved = loads, disturbed, True
    if probe is not None:
        for vid in fns:
            case = next(c for c in cases if c.variant == vid)
            m = rows[vid].measurement
            if case.compiled:
                m.rss_peak_bytes, m.rss_note = None, "compiled: the probe would compile it again"
            else:
                m.rss_peak_bytes, m.rss_note = probe.measure(dataclasses.asdict(case))
    peak_row.elapsed_s = time.perf_counter() - started
    return [rows[c.variant] for c in cases], peak_row


@dataclasses.dataclass(frozen=True)
class SweepSettings:
    """How a sweep measures, passed through whole: ``fresh`` (measure again what the log
    holds), ``min_time`` and ``rounds`` (per case), ``threads`` (None: torch's), ``progress``
    (``bench.progress``), ``memory`` (each row's resident peak, CPU), ``variant_files`` (user
    files the rows' code depends on), ``profile`` (the report profile, stamped on each row) and
    ``deadline`` (a ``time.monotonic()`` instant no group may run past)."""

    fresh: bool = False
    min_time: float = 0.05
    rounds: int = 7
    threads: int | None = None
    progress: bool = True
    memory: bool = True
    variant_files: tuple[str, ...] = ()
    profile: str = ""
    deadline: float | None = None

    def __post_init__(self) -> None:  # a caller's list of files
        object.__setattr__(self, "variant_files", tuple(self.variant_files or ()))


def log_stamp(device: str, s: SweepSettings) -> dict[str, Any]:
    """What a log's rows were measured with: rows are resumed or reused only under an equal stamp."""
    return {"code": code_fingerprint(s.variant_files), "torch": torch.__version__, "device": device,
            "cpu": cpu_model(), "profile": s.profile, "min_time": s.min_time, "rounds": s.rounds,
            "threads": s.threads, "memory": s.memory}


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

def group_key(case: BenchCase) -> str:
    """The key of the group a case is timed in (its own key without the variant)."""
    return case.key.replace(f"{case.family}/{case.variant}|", f"{case.family}|")


def shard(cases: list[BenchCase], index: int, count: int) -> list[BenchCase]:
    """Shard ``index`` (1-based) of ``count``: whole groups (a group's ratios need one window),
    dealt round-robin over the groups sorted by work (largest first, then key), so each shard
    gets a like share and the split depends only on the plan."""
    ordered = sorted(groups(cases), key=lambda g: (-sum(case_bytes(c) for c in g), group_key(g[0])))
    return [c for j, g in enumerate(ordered) if j % count == index - 1 for c in g]


def groups(cases: list[BenchCase]) -> list[list[BenchCase]]:
    """Cases timed together: same family, shape, dtype, device, mode and compile flag."""
    out: dict[tuple, list[BenchCase]] = {}
    for c in cases:
        out.setdefault((c.family, c.batch, c.seq, c.d_model, c.heads, c.d_ff, c.dtype, c.device, c.mode,
                        c.compiled), []).append(c)
    return list(out.values())


def run_sweep(cases: list[BenchCase], log: Path, settings: SweepSettings | None = None,
              **fields: Any) -> Iterator[BenchRow]:
    """Measure each group with a case not yet in ``log``; append its rows (and its matmul
    peak row) as soon as the group finishes; yield the case rows. A group is timed as a
    whole (its ratios need one window), so a resumed group is measured again whole.
    Ends the log with an ``end`` row when every group is done.

    ``deadline`` (a ``time.monotonic()`` instant): a group is started only when it would end
    before it, taking the longest group measured so far as its length; the groups a
    registered target reads go first. The groups left are not measured and the log gets no
    ``end`` row: the same sweep resumes them later. ``settings`` (or its fields as keywords)
    say how."""

    s = dataclasses.replace(settings or SweepSettings(), **fields)
    s = dataclasses.replace(s, threads=s.threads or torch.get_num_threads())
    log.parent.mkdir(parents=True, exist_ok=True)
    stamp = log_stamp(cases[0].device if cases else "cpu", s)
    with output_lock(log, "the bench log"):
        yield from _sweep_locked(cases, log, stamp, s)


def _measured_before(cases: list[BenchCase], log: Path, stamp: dict, *, fresh: bool
                     ) -> tuple[list[dict], set[str], bool]:
    """What ``log`` already holds for this sweep: (its rows without the header line, the keys
    of the cases measured, whether the log is to be replaced: a fresh start, or rows measured
    with another stamp). A log the harness did not write is refused, and a cut-off last line
    is written back whole before anything is appended."""
    refuse_foreign_log(log)
    old = read_jsonl(log, quiet=fresh)
    if old and not all(is_harness_row(r) for r in old):
        raise ResultsFileError(f"'{log}' is not a log written by this harness; it is left as it is: "
                               "give another --log path")
    header = next((r for r in old if r.get("harness_log") == LOG_MAGIC), None)
    stale = stamp_difference(header and header.get("stamp"), stamp) if old else ""
    if stale:
        print(f"{log}: its rows were measured with other settings ({stale}); measuring again",
              file=sys.stderr)
    # a fresh start writes beside the old log and replaces it only once a group is whole:
    # interrupted before that, the old log is left byte for byte
    replace = bool((fresh or stale) and log.exists())
    if replace:
        old = []
    if old:
        _rewrite_without_cut_line(log, old)
    old = [r for r in old if r is not header]
    done = {r["key"] for r in old if r.get("kind", "case") == "case"}
    if old and cases:
        left = sum(c.key not in done for c in cases)
        if left:
            print(f"resuming {log}: {len(cases) - left} of {len(cases)} case(s) already measured with this "
                  "code and these settings (--fresh measures all again)", file=sys.stderr)
        else:
            print(f"all {len(cases)} case(s) already measured in {log} with this code and these settings; "
                  "nothing to measure (--fresh measures again)", file=sys.stderr)
    return old, done, replace


@contextlib.contextmanager
def _appending(target: Path, log: Path) -> Iterator:
    """``target`` open for appending; a failure to open it is one line naming ``log``."""
    try:
        out = target.open("a")
    except OSError as exc:
        raise write_failed(log, exc) from None
    try:
        yield out
    finally:
        with contextlib.suppress(OSError):  # every row was flushed when written; a failed one said so
            out.close()


def _sweep_locked(cases: list[BenchCase], log: Path, stamp: dict, s: SweepSettings) -> Iterator[BenchRow]:
    old, done, replace = _measured_before(cases, log, stamp, fresh=s.fresh)
    threads = s.threads or torch.get_num_threads()
    env = environment(cases[0].device) if cases else {}
    machine = Environment(**{k: v for k, v in env.items() if k not in ("device", "threads")})
    todo = _order(cases, done, s.deadline)
    cpu = bool(cases) and not cases[0].device.startswith("cuda")
    probe = MemProbe(list(s.variant_files), threads) if s.memory and cpu else None
    writer = _LogWriter(log, log.parent / f".{log.name}.new-{os.getpid()}" if replace else log, placed=not replace)
    try:
        with _appending(writer.target, log) as writer.out:
            if not old:
                writer.emit({"harness_log": LOG_MAGIC, "kind": "log", "schema": SCHEMA_VERSION, "stamp": stamp})
            left = yield from _measure_all(todo, s, threads, probe, machine, writer)
            if left:
                print(f"time budget: {len(todo) - left} of {len(todo)} group(s) measured; {left} left in "
                      f"{log} for the same command to resume", file=sys.stderr)
            elif todo or not (old and old[-1].get("kind") == "end"):
                writer.emit({"kind": "end", "key": "end", "profile": s.profile})
                writer.place()
    finally:
        if not writer.placed:
            writer.target.unlink(missing_ok=True)
        if probe is not None:
            probe.close()


def _order(cases: list[BenchCase], done: set, deadline: float | None) -> list[list[BenchCase]]:
    """The groups left, cheapest first (by memory estimate: the first rows land in seconds, a
    sweep stopped early keeps the most groups); under a time budget, those targets read first."""
    todo = sorted((g for g in groups(cases) if any(c.key not in done for c in g)),
                  key=lambda g: sum(case_bytes(c) for c in g))
    if deadline is not None:
        todo.sort(key=lambda g: not any(serves_target(c) for c in g))
    return todo


@dataclasses.dataclass
class _LogWriter:
    """Rows appended to ``target``: the log, or a new file put in its place once a group is whole."""

    log: Path
    target: Path
    placed: bool
    out: Any = None

    def emit(self, row: dict) -> None:
        try:
            self.out.write(json.dumps(row, default=str) + "\n")
            self.out.flush()
        except OSError as exc:  # a full disk: one line naming the log (the rows before it are whole)
            raise write_failed(self.log, exc) from None

    def place(self) -> None:
        if not self.placed:
            make_public(self.target)
            os.replace(self.target, self.log)  # the open file goes on being appended to, now as ``log``
            self.placed = True


def _measure_all(todo: list[list[BenchCase]], s: SweepSettings, threads: int, probe: MemProbe | None,
                 machine: Environment, writer: _LogWriter) -> Generator[BenchRow, None, int]:
    """Each group measured and written in turn; returns how many groups the time budget left."""
    longest = 0.0  # the longest group yet: one that could not end before the deadline is not begun
    progress = Progress(len(todo), s.progress)
    for i, group in enumerate(progress.each(todo)):
        c = group[0]
        if s.deadline is not None and time.monotonic() + longest > s.deadline:
            progress.close()
            return len(todo) - i
        started = time.monotonic()
        progress.starts(f"{c.family} B={c.batch} T={c.seq} {c.mode}")
        rows = _measure_one(group, s, threads, probe, machine, writer)
        longest = max(longest, time.monotonic() - started)
        yield from rows
    progress.close()
    return 0


def _measure_one(group: list[BenchCase], s: SweepSettings, threads: int, probe: MemProbe | None,
                 machine: Environment, writer: _LogWriter) -> list[BenchRow]:
    """One group's rows and its peak row, measured, written to the log and returned."""
    c = group[0]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        # what a variant prints while timed is no part of the output (its guarded first call showed it)
        rows, peak = measure_group(group, min_time=s.min_time, rounds=s.rounds, threads=threads, probe=probe)
    if peak.disturbed:
        write(f"disturbed: {c.family} B={c.batch} T={c.seq} {c.mode}: {peak.disturbed}", file=sys.stderr)
    peak.profile, peak.environment = s.profile, machine
    writer.emit(peak.to_json())
    rows = [dataclasses.replace(row, spec=dataclasses.replace(row.spec, profile=s.profile), environment=machine)
            for row in rows]
    for row in rows:
        writer.emit(row.to_json())
        if row.counting_error():
            write(row.counting_error(), file=sys.stderr)
    writer.place()
    return rows
