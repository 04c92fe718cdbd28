"""A candidate timed against its reference on the same inputs: ``time_pair``.

Interleaved: rounds alternate the order (reference then candidate, candidate then reference,
...), so a drift in the machine's speed falls on both; a round is each callable called until
``min_time`` is spent (at least once), its value the median per-call time of that round.
Each time is the median of its rounds with a percentile-bootstrap interval, the speedup
(reference time / candidate time) the ratio of the medians over paired rounds with its
interval (``harness.bench.timing``: the interval every timed target is decided on).

On CUDA each call is timed between two ``torch.cuda.synchronize(device)`` (every stream of
the device, not only the current one: work a callable leaves on a side stream is in its
time) and is preceded by writing a 256 MB buffer, as ``triton.testing.do_bench`` does, so no
call finds its inputs in the L2 cache the previous call left them in. Both callables are
called ``warmup`` times first.

A speedup the machine cannot give is flagged, never reported: the candidate's median time
is set against the machine's measured peak (``MachinePeak``: the best call of the square
matmul the sweep measures its peak with, and of a copy; on CPU each at torch's thread count
and at one thread, the better kept: on a shared machine a call that splits across the
intra-op pool waits for a descheduled thread, milliseconds a one-thread call never waits),
for the work the pair needs (the smaller of the two FLOP counts, ``torch.utils.flop_counter``
through ``harness.bench.counters``) and the bytes any implementation moves (every input read
once, the reference's output written once). Above 100% of either, ``PairTiming.flag`` says so
and ``speedup`` is None.

On CPU the pair runs at one intra-op thread unless told otherwise (``threads``), as
``torch.utils.benchmark.Timer`` times (its ``num_threads=1``), the caller's thread count put
back afterwards: on a shared machine a small operation split across the pool waits
milliseconds for a descheduled thread, in every round alike, so the interval does not show it.
The 1-minute load average is read before and after (``harness.bench.machine.load_disturbance``,
the check every timing makes): on CPU a reading above the cores marks the pair ``disturbed``.

A time the peak cannot bound is said so, not flagged: the per-call floor (an identity call,
timed in the same rounds: the harness's own cost of one call) is the third callable of the
rounds, and where neither the candidate's time nor the least time the work needs at peak is
clearly above it (``FLOOR_MARGIN`` times the floor), the answer is ``TooShortToBound``
(``PairTiming.note``): the speedup is reported, with the note that at this size a kernel and
skipped work take the same time. A cached output on a problem whose work needs more than that
margin at peak is still flagged.
"""

from __future__ import annotations

import gc
import statistics
import time
from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable, Sequence

import torch
from torch.utils._pytree import tree_leaves, tree_map

from harness.base.errors import ConfigError
from harness.bench import counters, timing
from harness.bench.machine import LoadDisturbance, intra_op_threads, load_average, load_disturbance, pair_threads

L2_FLUSH_BYTES = 256 * 2**20  # triton.testing.do_bench's cache buffer, written before each timed call
PEAK_MATMUL = {"cpu": 1024, "cuda": 8192}  # the square matmul the sweep's peak is measured with
PEAK_CALLS = 5  # the peak is the best of this many calls of the matmul and of the copy
# "Clearly above the per-call floor": more than this many times the floor's interval high end.
# Measured on this 2-core machine: an identity call through the timed wrapper 0.3-0.5 us,
# a 6x40 softmax candidate 3-15 us, its work at the one-thread copy peak 0.02 us.
FLOOR_MARGIN = 2.0


class Bound(str, Enum):
    """The limit a candidate's time is set against."""

    FLOPS = "FLOP/s"
    BANDWIDTH = "memory bandwidth"


@dataclass(frozen=True)
class Interval:
    """A figure and its bootstrap interval (``level`` in ``PairTiming``)."""

    value: float
    low: float
    high: float

    def contains(self, x: float) -> bool:
        return self.low <= x <= self.high


@dataclass(frozen=True)
class MachinePeak:
    """What this machine was measured to do at best: FLOP/s of a square ``matmul_size``
    matmul in ``dtype``, and bytes/s of copying ``copy_bytes`` (read plus write)."""

    device: str
    dtype: str
    flops_per_s: float
    bytes_per_s: float
    matmul_size: int
    copy_bytes: int
    flops_threads: int | None = None  # on CPU, the thread count the best matmul ran at
    copy_threads: int | None = None   # on CPU, the thread count the best copy ran at


@dataclass(frozen=True)
class BeyondPeak:
    """The candidate's time implies ``fraction`` (3.4 = 340%) of the machine's peak ``bound``."""

    bound: Bound
    fraction: float

    def __str__(self) -> str:
        return (f"candidate at {self.fraction:.0%} of this machine's measured peak {self.bound.value}: "
                "a counting error or a hack (skipped work, cached output), not a speedup")


@dataclass(frozen=True)
class TooShortToBound:
    """Neither the candidate's median time nor the least time the work needs at the peak
    (``work_s``) is clearly above the per-call floor (``floor_s``, an identity call): the
    peak cannot tell a kernel from skipped work at this size."""

    candidate_s: float
    work_s: float
    floor_s: float

    def __str__(self) -> str:
        return (f"too short to bound: the candidate's {self.candidate_s * 1e6:.3g} us and the work's "
                f"{self.work_s * 1e6:.3g} us at peak are within {FLOOR_MARGIN:g}x the per-call floor "
                f"({self.floor_s * 1e6:.3g} us): at this size the time cannot tell a kernel from skipped work")


@dataclass(frozen=True)
class PairTiming:
    """Per-call seconds of the reference and the candidate, the speedup (reference time over
    candidate time; None when ``flag`` is set), each with its ``level`` interval; the per-call
    floor (an identity call in the same rounds); the raw round medians; the work counted (FLOPs
    of each, the bytes floor); the machine's peak and the fractions of it the candidate's median
    time implies; ``note`` where the peak cannot bound the candidate's time (never with ``flag``);
    ``threads``, the intra-op thread count the rounds ran at; the 1-minute load average before
    and after (None where the system gives none), and ``disturbed`` where it was above the cores."""

    device: str
    reference_s: Interval
    candidate_s: Interval
    speedup: Interval | None
    flag: BeyondPeak | None
    note: TooShortToBound | None
    floor_s: Interval
    level: float
    rounds: int
    reference_round_s: tuple[float, ...]
    candidate_round_s: tuple[float, ...]
    reference_calls: int
    candidate_calls: int
    reference_flops: int
    candidate_flops: int
    bytes_floor: int
    peak: MachinePeak | None
    flops_fraction: float | None
    bandwidth_fraction: float | None
    l2_flushed: bool
    threads: int
    load_before: float | None
    load_after: float | None
    disturbed: LoadDisturbance | None


Clock = Callable[[], float]


def _sync(device: torch.device) -> Callable[[], None]:
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def _args(make_inputs: Callable[[], Any], device: torch.device) -> tuple:
    made = make_inputs()
    args = tuple(made) if isinstance(made, (tuple, list)) else (made,)
    return tree_map(lambda t: t.to(device) if isinstance(t, torch.Tensor) and t.device != device else t, args)


def _storage_bytes(values: Any) -> int:
    """Bytes of the unique tensor storages in ``values`` (nested containers included)."""
    seen: dict[tuple, int] = {}
    for t in tree_leaves(values):
        if isinstance(t, torch.Tensor):
            s = t.untyped_storage()
            seen.setdefault((t.device.type, s.data_ptr()), s.nbytes())
    return sum(seen.values())


def _dtype(args: tuple) -> torch.dtype:
    return next((t.dtype for t in tree_leaves(args) if isinstance(t, torch.Tensor) and t.is_floating_point()),
                torch.float32)


def _best(fn: Callable[[], object], sync: Callable[[], None], clock: Clock, calls: int) -> float:
    fn()  # warm-up
    best = float("inf")
    for _ in range(calls):
        sync()
        started = clock()
        fn()
        sync()
        best = min(best, clock() - started)
    return best


def _best_over_threads(fn: Callable[[], object], sync: Callable[[], None], clock: Clock,
                       threads: Sequence[int]) -> tuple[float, int]:
    """(best seconds of ``PEAK_CALLS`` calls, the intra-op thread count it ran at) over ``threads``."""
    best = (float("inf"), torch.get_num_threads())
    for n in threads:
        with intra_op_threads(n):
            best = min(best, (_best(fn, sync, clock, PEAK_CALLS), n))
    return best


def _copy_callable(device: torch.device, half: int) -> Callable[[], object]:
    """A copy of ``half`` bytes into another ``half`` (the bandwidth peak's call)."""
    src = torch.ones(half, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def measure_peak(device: str | torch.device, dtype: torch.dtype = torch.float32, working_bytes: int = 0,
                 *, clock: Clock = time.perf_counter, threads: Sequence[int] | None = None) -> MachinePeak:
    """The machine's best FLOP/s (the sweep's square matmul, ``PEAK_MATMUL``) and bytes/s (a
    copy: on CUDA of the L2 flush's 256 MB, from device memory; on CPU of ``working_bytes``,
    at least 1 MiB, so a working set the caches hold is set against the caches' speed).
    ``threads``: on CPU, the intra-op thread counts each is measured at, the best kept
    (default: torch's and 1; a copy of 1 MiB splits across the pool, and on a shared machine
    every such call waits milliseconds for a descheduled thread)."""
    dev = torch.device(device)
    kind = dev.type if dev.type in PEAK_MATMUL else "cpu"
    sync = _sync(dev)
    if kind != "cpu":
        threads = (torch.get_num_threads(),)
    elif threads is None:
        threads = tuple(dict.fromkeys((torch.get_num_threads(), 1)))
    if not threads or min(threads) < 1:
        raise ConfigError(f"threads={threads}: give one thread count or more, each at least 1")
    size = PEAK_MATMUL[kind]
    mm, mm_flops = timing.matmul_callable(str(dev), dtype, size)
    mm_s, mm_threads = _best_over_threads(mm, sync, clock, threads)
    half = L2_FLUSH_BYTES if kind == "cuda" else max(working_bytes // 2, 2**20)
    copy_s, copy_threads = _best_over_threads(_copy_callable(dev, half), sync, clock, threads)
    cpu = kind == "cpu"
    return MachinePeak(str(dev), str(dtype).removeprefix("torch."), mm_flops / mm_s, 2 * half / copy_s, size,
                       2 * half, mm_threads if cpu else None, copy_threads if cpu else None)


def _round(fn: Callable[[], object], sync: Callable[[], None], flush: torch.Tensor | None, clock: Clock,
           min_time: float) -> tuple[float, int]:
    """(median per-call seconds, calls) of one round: calls until ``min_time`` is spent."""
    times: list[float] = []
    spent = 0.0
    while not times or spent < min_time:
        if flush is not None:
            flush.zero_()
        sync()
        started = clock()
        fn()
        sync()
        times.append(clock() - started)
        spent += times[-1]
    return statistics.median(times), len(times)


def _interleaved(fns: Sequence[Callable[[], object]], sync: Callable[[], None], flush: torch.Tensor | None,
                 clock: Clock, rounds: int, min_time: float) -> tuple[list[list[float]], list[int]]:
    """Round medians and call counts of each callable, the order reversed every other round."""
    out: list[list[float]] = [[] for _ in fns]
    calls = [0 for _ in fns]
    enabled = gc.isenabled()
    gc.disable()  # as torch.utils.benchmark.Timer: no collection inside a timed call
    try:
        for r in range(rounds):
            order = range(len(fns)) if r % 2 == 0 else reversed(range(len(fns)))
            for i in order:
                median, n = _round(fns[i], sync, flush, clock, min_time)
                out[i].append(median)
                calls[i] += n
    finally:
        if enabled:
            gc.enable()
    return out, calls


def _beyond(flops: int, nbytes: int, seconds: float, peak: MachinePeak
            ) -> tuple[float, float, BeyondPeak | None]:
    """The fractions of the peak FLOP/s and bandwidth ``seconds`` implies, and the flag."""
    f = flops / seconds / peak.flops_per_s if seconds > 0 else float("inf")
    b = nbytes / seconds / peak.bytes_per_s if seconds > 0 else float("inf")
    over = [(frac, bound) for frac, bound in ((f, Bound.FLOPS), (b, Bound.BANDWIDTH)) if frac > 1]
    flag = BeyondPeak(max(over)[1], max(over)[0]) if over else None
    return f, b, flag


def work_seconds(flops: int, nbytes: int, peak: MachinePeak) -> float:
    """The least time ``flops`` and ``nbytes`` take at ``peak``: the slower of the two."""
    return max(flops / peak.flops_per_s, nbytes / peak.bytes_per_s)


def peak_check(flops: int, nbytes: int, candidate_s: Interval, floor_s: Interval, peak: MachinePeak
               ) -> tuple[float, float, BeyondPeak | None, TooShortToBound | None]:
    """(FLOP/s fraction, bandwidth fraction, flag, note) of the candidate's time against ``peak``:
    the note where neither its time (the interval's low end) nor the work's least time at
    peak is clearly above the per-call floor (``FLOOR_MARGIN`` times the floor's high end),
    else the flag where the median time is beyond the peak."""
    f, b, flag = _beyond(flops, nbytes, candidate_s.value, peak)
    clear = FLOOR_MARGIN * floor_s.high
    work = work_seconds(flops, nbytes, peak)
    if candidate_s.low <= clear and work <= clear:
        return f, b, None, TooShortToBound(candidate_s.value, work, floor_s.value)
    return f, b, flag, None


def _identity(*args: Any) -> Any:
    """The per-call floor's callable: the inputs back, no work."""
    return args


def _check_settings(rounds: int, min_time: float, warmup: int, level: float) -> None:
    if rounds < 3:
        raise ConfigError(f"rounds={rounds}: a pair needs at least 3 interleaved rounds (an interval over rounds)")
    if not min_time > 0 or warmup < 0 or not 0 < level < 1:
        raise ConfigError(f"min_time={min_time}, warmup={warmup}, level={level}: min_time must be positive, "
                          "warmup at least 0 and level between 0 and 1")


@dataclass(frozen=True)
class _Work:
    """The pair's work counted and set against the peak (all empty when not checked)."""

    reference_flops: int = 0
    candidate_flops: int = 0
    bytes_floor: int = 0
    peak: MachinePeak | None = None
    flops_fraction: float | None = None
    bandwidth_fraction: float | None = None
    flag: BeyondPeak | None = None
    note: TooShortToBound | None = None


def _work(fns: Sequence[Callable[[], Any]], args: tuple, dev: torch.device, candidate_s: Interval,
          floor_s: Interval, peak: MachinePeak | None, clock: Clock, threads: Sequence[int]) -> _Work:
    """The FLOPs of the reference and the candidate (``fns``' first two), the bytes floor, and
    the candidate's time against ``peak`` (measured at ``threads`` when None)."""
    ref_flops, cand_flops = counters.count_flops(fns[0])[0], counters.count_flops(fns[1])[0]
    nbytes = _storage_bytes(args) + _storage_bytes(fns[0]())
    peak = peak or measure_peak(dev, _dtype(args), nbytes, clock=clock, threads=threads)
    f_frac, b_frac, flag, note = peak_check(min(ref_flops, cand_flops), nbytes, candidate_s, floor_s, peak)
    return _Work(ref_flops, cand_flops, nbytes, peak, f_frac, b_frac, flag, note)


def time_pair(reference: Callable[..., Any], candidate: Callable[..., Any], make_inputs: Callable[[], Any], *,
              device: str | torch.device, rounds: int = 10, min_time: float = 0.01, warmup: int = 3,
              level: float = timing.INTERVAL_LEVEL, flush_l2: bool | None = None, check_peak: bool = True,
              peak: MachinePeak | None = None, threads: int | None = None, clock: Clock = time.perf_counter,
              load: Callable[[], float | None] = load_average, seed: int = 0) -> PairTiming:
    """Time ``candidate(*inputs)`` against ``reference(*inputs)``, ``inputs = make_inputs()``
    (a tuple or list of arguments, or one argument; tensors moved to ``device``), with the
    per-call floor (an identity call) in the same rounds.

    ``rounds`` interleaved rounds (at least 3) of ``min_time`` seconds per callable, after
    ``warmup`` calls of each; ``level``: the intervals' level (0.9); ``flush_l2``: write the
    256 MB buffer before each call (default: on CUDA); ``check_peak``: count the work and set
    the candidate's time against ``peak`` (measured here when None, at the caller's thread
    count, the pair's and 1, the best kept); ``threads``: the intra-op thread count (default
    ``pair_threads``: 1 on CPU), the caller's put back after; ``clock``: seconds, as
    ``time.perf_counter``; ``load``: the 1-minute load average, read before and after, as
    ``harness.bench.machine.load_average``; ``seed``: the bootstrap's. A bad argument is one
    ``ConfigError``."""
    _check_settings(rounds, min_time, warmup, level)
    dev = torch.device(device)
    n = pair_threads(threads, dev)
    load_before = load()
    with intra_op_threads(n) as caller:
        args = _args(make_inputs, dev)
        sync = _sync(dev)
        flushed = dev.type == "cuda" if flush_l2 is None else flush_l2
        flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=dev) if flushed else None
        fns = (lambda: reference(*args), lambda: candidate(*args), lambda: _identity(*args))
        for fn in fns:
            for _ in range(warmup):
                fn()
        sync()
        (ref_rounds, cand_rounds, floor_rounds), (ref_calls, cand_calls, _) = _interleaved(
            fns, sync, flush, clock, rounds, min_time)
        del flush
        ref_s, cand_s, floor_s = (Interval(*timing.median_interval(r, level=level, seed=seed))
                                  for r in (ref_rounds, cand_rounds, floor_rounds))
        work = _work(fns, args, dev, cand_s, floor_s, peak, clock, tuple(dict.fromkeys((caller, n, 1)))
                     ) if check_peak else _Work()
    load_after = load()
    speedup = None if work.flag is not None else Interval(
        *timing.ratio_of_medians(ref_rounds, cand_rounds, level=level, seed=seed))
    return PairTiming(str(dev), ref_s, cand_s, speedup, work.flag, work.note, floor_s, level, rounds,
                      tuple(ref_rounds), tuple(cand_rounds), ref_calls, cand_calls, work.reference_flops,
                      work.candidate_flops, work.bytes_floor, work.peak, work.flops_fraction,
                      work.bandwidth_fraction, flushed, n, load_before, load_after,
                      load_disturbance((load_before, load_after), dev.type))
