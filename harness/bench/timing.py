"""Measurements of callables: time, interleaved ratios, saved bytes, memory, kernel path.

Time: ``torch.utils.benchmark.Timer`` is the one timing engine, on CPU and CUDA (its timer
synchronizes CUDA; it runs with the garbage collector off and ``num_threads`` set).
``time_callable`` is ``blocked_autorange``; ``interleave`` times several callables in
alternating rounds in one window (A B C, C B A, ...), each round a few Timer blocks, so
that a ratio between two of them comes from one window: the ratio of their medians
(``ratio_of_medians``, with a bootstrap interval over rounds) and its per-round spread.
FLOPs: ``harness.bench.flops``.
Saved bytes: ``torch.autograd.graph.saved_tensors_hooks``, unique storages, without the
parameters and inputs (they are resident anyway); exact and the same on CPU and CUDA.
Peak memory: on CUDA the allocator's peak above what was allocated before the call; on
CPU two figures: the peak of live tensor storages created during the call (dispatcher +
weak references; blind to a kernel's internal buffers) and the process's resident-set
high-water above its size before the call (``harness.bench.memprobe``: a separate process with a
small malloc mmap threshold so frees return to the system, and /proc/self/clear_refs to
reset the high-water mark), which sees what kernels allocate too.
Kernel path: ``torch.profiler`` records every operator, nested ones included (the ops a
fused kernel calls inside itself), with shapes and scalar arguments.
"""

from __future__ import annotations

import statistics
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

if TYPE_CHECKING:
    from torch.utils.benchmark import Timer

# Matmul peak: IQR over median across rounds above this = disturbed. Measured on this 2-core
# machine at load 0.8-1.9 (no other work running): 1024 matmuls in 0.02 s rounds spread 4-32%
# across rounds, so 10% flagged a quiet machine; a target is claimed only when its lower
# quartile holds anyway. The load average is the other signal.
PEAK_SPREAD_LIMIT = 0.35
# A group whose matmul peak (median over its rounds) is below this fraction of the run's best
# group peak is disturbed, whatever the load average says. Measured: the committed full run
# (load 1.7-2.0, its own two threads) has group peaks at 55-100% of its best (median 81%);
# 71 groups timed while seven other jobs shared this 2-core machine (load 8.4-12.0) ranged
# 8-100% of their best, 66 of them under half, 56 of those with a round spread under 35%
PEAK_FRACTION = 0.5


# -- time ----------------------------------------------------------------------------------------

def quartiles(samples: list[float]) -> tuple[float, float, float]:
    """(median, first quartile, third quartile)."""
    if not samples:
        return float("nan"), float("nan"), float("nan")
    if len(samples) < 2:
        return samples[0], samples[0], samples[0]
    q = statistics.quantiles(samples, n=4, method="inclusive")
    return statistics.median(samples), q[0], q[2]


# The interval a timed target is decided on: a percentile bootstrap over the rounds.
INTERVAL_LEVEL = 0.9
RESAMPLES = 2000


def ratio_of_medians(num: list[float], den: list[float], *, level: float = INTERVAL_LEVEL,
                     resamples: int = RESAMPLES, seed: int = 0) -> tuple[float, float, float]:
    """(median(num) / median(den), low, high): the ratio of the two medians over paired
    rounds, with a ``level`` percentile-bootstrap interval (rounds resampled in pairs,
    seeded: the same rounds give the same interval).

    Why not the per-round ratio's quartiles: on this 2-core shared machine a 0.1 s call
    varies +-10% from call to call, independently of the matmul timed a second later in the
    same round, so the per-round ratio carries both noises; two quick runs with the same
    medians (109 and 110 GFLOP/s over a 131 GFLOP/s peak, 83.5% both) gave per-round
    medians of 94.9% and 79.4%. The ratio of medians is what repeats; its interval is what
    the rounds can tell."""
    a, b = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    if a.size == 0 or a.size != b.size:
        return float("nan"), float("nan"), float("nan")
    ratio = float(np.median(a) / np.median(b))
    if a.size < 2:
        return ratio, ratio, ratio
    idx = np.random.default_rng(seed).integers(0, a.size, size=(resamples, a.size))
    boot = np.median(a[idx], axis=1) / np.median(b[idx], axis=1)
    low, high = np.quantile(boot, [(1 - level) / 2, (1 + level) / 2])
    return ratio, float(low), float(high)


def median_interval(samples: list[float], *, level: float = INTERVAL_LEVEL, resamples: int = RESAMPLES,
                    seed: int = 0) -> tuple[float, float, float]:
    """(median, low, high): the median of ``samples`` with the same seeded ``level``
    percentile-bootstrap interval as ``ratio_of_medians`` (a ratio to a constant 1)."""
    return ratio_of_medians(samples, [1.0] * len(samples), level=level, resamples=resamples, seed=seed)


@dataclass
class Timing:
    median: float
    q1: float
    q3: float
    reps: int
    threads: int

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1


def timer(fn: Callable[[], object], threads: int | None = None) -> Timer:
    # imported here: torch.utils.benchmark imports setuptools (through cpp_extension), which
    # every command that imports the bench package but times nothing would pay at start
    from torch.utils.benchmark import Timer

    return Timer(stmt="fn()", globals={"fn": fn}, num_threads=threads or torch.get_num_threads())


def time_callable(fn: Callable[[], object], *, min_time: float = 0.2, threads: int | None = None) -> Timing:
    """Per-call time of ``fn`` by ``Timer.blocked_autorange``: median and quartiles of the
    blocks' per-call times (CUDA synchronized by Timer's own timer)."""
    threads = threads or torch.get_num_threads()
    m = timer(fn, threads).blocked_autorange(min_run_time=min_time)
    med, q1, q3 = quartiles(list(m.times))
    return Timing(med, q1, q3, m.number_per_run * len(m.raw_times), threads)


@dataclass
class Interleaved:
    """Per callable: the median per-call time of each round, and every block's time."""

    rounds: dict[str, list[float]] = field(default_factory=dict)
    blocks: dict[str, list[float]] = field(default_factory=dict)
    number: dict[str, int] = field(default_factory=dict)
    threads: int = 0

    def ratio(self, num: str, den: str) -> list[float]:
        """Round-by-round ratio time[num] / time[den] (rounds are one window each)."""
        return [a / b for a, b in zip(self.rounds[num], self.rounds[den])]


def interleave(fns: Mapping[str, Callable[[], object]], *, rounds: int = 7, min_time: float = 0.05,
               threads: int | None = None, min_times: Mapping[str, float] | None = None) -> Interleaved:
    """Time every callable in ``rounds`` alternating rounds (forward order, then reverse, so
    a drift in machine speed falls on each pair both ways). Each callable is first called
    once (warm-up, discarded): a call of ``min_time / 4`` or more is a block by itself,
    a shorter one gets its block size from ``blocked_autorange`` (discarded too); then in
    every round, Timer blocks of that size until ``min_time`` (at least one block).
    ``min_times`` gives some callables their own ``min_time`` (the matmul peak: more blocks
    per round, so its round median is steady).

    A block is one ``Timer`` run of ``number`` calls (its timer, garbage collector off, CUDA
    synchronized) without ``Timer.timeit``'s own warm-up of two further calls per block:
    every callable is already warm here, and that warm-up tripled the cost of a long call."""
    threads = threads or torch.get_num_threads()
    timers = {name: timer(fn, threads) for name, fn in fns.items()}
    out = Interleaved(threads=threads)
    own = {name: (min_times or {}).get(name, min_time) for name in timers}
    for name, t in timers.items():
        first = t.timeit(1).raw_times[0]  # warm-up; a call this long is a block by itself
        out.number[name] = 1 if first >= own[name] / 4 else t.blocked_autorange(min_run_time=own[name]).number_per_run
        out.rounds[name], out.blocks[name] = [], []
    order = list(timers)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)  # what Timer.timeit sets around each block
    try:
        for r in range(rounds):
            for name in (order if r % 2 == 0 else order[::-1]):
                t, number, spent, times = timers[name], out.number[name], 0.0, []
                while not times or spent < own[name]:
                    raw = _block(t, number)
                    spent += raw
                    times.append(raw / number)
                out.rounds[name].append(statistics.median(times))
                out.blocks[name] += times
    finally:
        torch.set_num_threads(previous)
    return out


def _block(t: Timer, number: int) -> float:
    """Seconds for ``number`` calls: ``Timer._timeit`` (the timed part of ``Timer.timeit``),
    or ``Timer.timeit`` where a torch release has no such method."""
    run = getattr(t, "_timeit", None)
    return run(number) if callable(run) else t.timeit(number).raw_times[0]


def matmul_callable(device: str, dtype: torch.dtype, size: int) -> tuple[Callable[[], object], int]:
    """A square matmul in ``dtype`` on ``device`` and its FLOPs: the machine's own peak."""
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(size, size, device=device, dtype=dtype, generator=gen)
    b = torch.randn(size, size, device=device, dtype=dtype, generator=gen)
    return (lambda: a @ b), 2 * size**3


# -- memory --------------------------------------------------------------------------------------

def _storage_key(t: torch.Tensor) -> tuple:
    return (t.device.type, t.untyped_storage().data_ptr())




class LiveStorages(TorchDispatchMode):
    """Peak bytes of live tensor storages created while active, and the largest tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self.largest: tuple[int, tuple[int, ...], str] = (0, (), "")
        self._refs: dict[int, weakref.ref] = {}

    def _freed(self, key: int, nbytes: int) -> None:
        self.live -= nbytes
        self._refs.pop(key, None)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                storage = t.untyped_storage()
                key = storage.data_ptr()
                if key and key not in self._refs:
                    nbytes = storage.nbytes()
                    self.live += nbytes
                    self.peak = max(self.peak, self.live)
                    if nbytes > self.largest[0]:
                        self.largest = (nbytes, tuple(t.shape), func.overloadpacket.__name__)
                    self._refs[key] = weakref.ref(
                        storage, lambda _ref, k=key, n=nbytes: self._freed(k, n)
                    )
        return out


CPU_PEAK_METHOD = ("tensor peak: live tensor storages created during the call (dispatcher + weakrefs; "
                   "blind to a kernel's internal buffers); RSS peak: the process's resident-set high-water "
                   "above its size before the call, in a separate process with MALLOC_MMAP_THRESHOLD_=65536 "
                   "(frees return to the system) and /proc/self/clear_refs (the mark reset before the call)")
CUDA_PEAK_METHOD = "torch.cuda.max_memory_allocated above the allocation before the call"


def tensor_peak(fn: Callable[[], object], device: str) -> tuple[int, tuple[int, tuple, str]]:
    """(peak bytes of one call above what was allocated before it, largest tensor created)."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        fn()
        torch.cuda.synchronize()
        return int(torch.cuda.max_memory_allocated() - before), (0, (), "")
    with LiveStorages() as tracker:
        fn()
    return tracker.peak, tracker.largest
