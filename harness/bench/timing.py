"""Measurements of callables: time, interleaved ratios, FLOPs, saved bytes, memory, kernel path.

Time: ``torch.utils.benchmark.Timer`` is the one timing engine, on CPU and CUDA (its timer
synchronizes CUDA; it runs with the garbage collector off and ``num_threads`` set).
``time_callable`` is ``blocked_autorange``; ``interleave`` times several callables in
alternating rounds in one window (A B C, C B A, ...), each round a few Timer blocks, so
that a ratio between two of them comes from one window: the ratio of their medians
(``ratio_of_medians``, with a bootstrap interval over rounds) and its per-round spread.
FLOPs: ``torch.utils.flop_counter.FlopCounterMode``, matmul-class operators, counted twice
in one pass: as executed (the CPU flash kernel computes only the key blocks its causal
loop visits, from the kernel's block sizes; its backward recomputes QK^T per block, five
matmuls) and dense-equivalent (every score of QK^T and PV, as torch's own formulas count,
whose flash backward also counts the recomputation). Explicit attention computes every
score, masked or not, so for it both counts agree.
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
from typing import Callable, Mapping

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.benchmark import Timer
from torch.utils.flop_counter import flop_registry, sdpa_backward_flop_count, sdpa_flop_count

aten = torch.ops.aten

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


# -- FLOPs -----------------------------------------------------------------------------------------

# A fused causal attention kernel walks its scores in tiles: a query tile visits the key
# tiles that start before its last query's diagonal and computes each visited tile whole
# (the part past the diagonal masked after the matmul); tiles wholly past the diagonal are
# skipped. Executed score pairs therefore lie between T(T+1)/2 and T^2, fixed by the tiles.
def _tile_pairs(t: int, s: int, causal: bool, q_tile: int, k_tile: int) -> int:
    """Query-key score pairs a tiled kernel computes for one (batch, head): every pair
    without ``causal``; with it, whole tiles up to each query tile's diagonal (top-left
    aligned, as SDPA's ``is_causal``)."""
    if not causal:
        return t * s
    q_tile, k_tile = min(q_tile, t), min(k_tile, s)
    pairs = 0
    for m in range(0, t, q_tile):
        q_block = min(q_tile, t - m)
        num_keys = min(m + q_block, s)
        for n in range(0, num_keys, k_tile):
            pairs += q_block * min(k_tile, s - n)
    return pairs


# The CPU flash-attention kernel's block sizes (aten/src/ATen/native/cpu/FlashAttentionKernel.cpp):
# queries in blocks of 256 (T >= 768), 64 (T >= 192) or 32, keys in blocks of 512.
# Forward: QK^T and PV per visited block; backward: QK^T recomputed, then dV, dP, dQ, dK,
# five matmuls per visited block.
def _flash_block_pairs(t: int, s: int, causal: bool) -> int:
    """Query-key score pairs the CPU flash kernel computes for one (batch, head)."""
    return _tile_pairs(t, s, causal, 256 if t >= 768 else 64 if t >= 192 else 32, 512)


@dataclass(frozen=True)
class FusedTiles:
    """How a fused CUDA attention kernel walks the scores: its (query, key) tile and where
    its block sizes come from. Forward and backward recompute-based: forward QK^T and PV per
    visited tile, backward QK^T again plus dV, dP, dQ, dK."""

    backend: str
    q_tile: int
    k_tile: int
    source: str


# SDPA's CUDA backends. Tile sizes at head dim <= 64 on sm80/sm90 (the benchmark shapes:
# D=512 or 1024 over 8 heads, d_k 64 or 128): a different tile moves the executed count at
# T=2048 by under 2% (tiles of 64: 51.6% of dense; of 128: 53.1%), against the factor ~2
# that counting every score makes.
FUSED_TILES = {
    "flash": FusedTiles("flash", 128, 128, "FlashAttention-2 forward kernel traits (kBlockM=128, kBlockN=128 "
                        "at head dim 64) in aten/src/ATen/native/transformers/cuda/flash_attn"),
    "efficient": FusedTiles("efficient", 64, 64, "memory-efficient (CUTLASS) kernel: kQueriesPerBlock=64, "
                            "kKeysPerBlock=64 at head dim <= 64 on sm80+ (mem_eff_attention/kernel_forward.h)"),
    "cudnn": FusedTiles("cudnn", 128, 128, "cuDNN's fused flash attention (the FlashAttention-2 algorithm); "
                        "its tiles are not published: counted at FlashAttention-2's 128 x 128"),
}
_FUSED_OPS = {
    aten._scaled_dot_product_flash_attention: ("flash", False),
    aten._scaled_dot_product_flash_attention_backward: ("flash", True),
    aten._scaled_dot_product_efficient_attention: ("efficient", False),
    aten._scaled_dot_product_efficient_attention_backward: ("efficient", True),
    aten._scaled_dot_product_cudnn_attention: ("cudnn", False),
    aten._scaled_dot_product_cudnn_attention_backward: ("cudnn", True),
}


def _bhtsd(query_shape, key_shape) -> tuple[int, int, int, int]:
    b, h, t, d = query_shape
    return b * h, t, key_shape[2], d


class FlopCount:
    """FLOPs of one call, as executed and dense-equivalent, in one FlopCounterMode pass.

    The counter runs with the executed formulas; each formula also adds, to ``dense_extra``,
    what the dense formula would count beyond it. An attention operator torch counts with a
    dense formula while its kernel may skip scores (a fused kernel this class has no tile
    model for: flex_attention, the varlen and low-level flash/efficient entry points) is
    counted as torch counts it and named in ``dense_only``: such a call's count is
    dense-equivalent, not executed."""

    def __init__(self) -> None:
        self.dense_extra = 0
        self.ops: list[str] = []
        self.dense_only: list[str] = []

    def _note(self, op: str, executed: int, dense: int) -> int:
        self.dense_extra += dense - executed
        if op not in self.ops:
            self.ops.append(op)
        return executed

    def _flash_fwd(self, query_shape, key_shape, value_shape, dropout_p=0.0, is_causal=False, *args,
                   out_shape=None, **kwargs) -> int:
        bh, t, s, d = _bhtsd(query_shape, key_shape)
        dense = sdpa_flop_count(query_shape, key_shape, value_shape)
        executed = 2 * 2 * bh * _flash_block_pairs(t, s, bool(is_causal)) * d
        return self._note("flash" + (" causal" if is_causal else ""), executed, dense)

    def _flash_bwd(self, grad_out_shape, query_shape, key_shape, value_shape, out_shape_, lse_shape,
                   dropout_p=0.0, is_causal=False, *args, out_shape=None, **kwargs) -> int:
        bh, t, s, d = _bhtsd(query_shape, key_shape)
        dense = sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)
        executed = 5 * 2 * bh * _flash_block_pairs(t, s, bool(is_causal)) * d  # QK^T recomputed
        return self._note("flash backward" + (" causal" if is_causal else ""), executed, dense)

    def _fused(self, op):
        """The executed formula of one of SDPA's CUDA kernels (``FUSED_TILES``): its
        arguments bound by name from the operator's schema (``is_causal``'s place differs)."""
        backend, backward = _FUSED_OPS[op]
        tiles = FUSED_TILES[backend]
        names = [a.name for a in op.default._schema.arguments]

        def formula(*args, out_shape=None, **kwargs) -> int:
            bound = {**dict(zip(names, args)), **kwargs}
            q, k, v = bound["query"], bound["key"], bound["value"]
            causal = bool(bound.get("is_causal")) and bound.get("attn_bias") is None
            bh, t, s, d_qk = _bhtsd(q, k)
            d_v = v[-1]
            pairs = _tile_pairs(t, s, causal, tiles.q_tile, tiles.k_tile)
            if backward:  # QK^T recomputed (d_qk), dV and dP (d_v), dQ and dK (d_qk)
                dense = sdpa_backward_flop_count(bound[names[0]], q, k, v)
                executed = 2 * bh * pairs * (3 * d_qk + 2 * d_v)
            else:  # QK^T and PV
                dense = sdpa_flop_count(q, k, v)
                executed = 2 * bh * pairs * (d_qk + d_v)
            name = f"{backend}{' backward' if backward else ''}{' causal' if causal else ''}"
            return self._note(name, executed, dense)
        return formula

    def _dense_only(self, op, torch_formula):
        """torch's own (dense) formula for an attention operator without a tile model here;
        the call is marked dense-equivalent."""
        def formula(*args, **kwargs) -> int:
            name = str(op)
            if name not in self.dense_only:
                self.dense_only.append(name)
            return torch_formula(*args, **kwargs)
        formula._get_raw = True  # torch's registered formula takes the raw arguments
        return formula

    def _native_mha(self, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
        """nn.MultiheadAttention's no-grad fast path: its kernel gets no is_causal (a mask, if
        any, is applied to every score), so executed = dense."""
        b, t, d = query_shape
        flops = _attention_block_flops(b, t, key_shape[1], d)
        return self._note("native MHA", flops, flops)

    def _encoder_layer_fast(self, src_shape, embed_dim, num_heads, *args, out_shape=None, **kwargs) -> int:
        """nn.TransformerEncoderLayer's no-grad fast path: attention block plus the FFN."""
        b, t, d = src_shape
        ffn_weight_1 = args[11]  # (F, D), after qkv/proj weights, flags and the norms
        flops = _attention_block_flops(b, t, t, d) + 2 * 2 * b * t * d * ffn_weight_1[0]
        return self._note("native encoder layer", flops, flops)

    def mapping(self) -> dict:
        own = {
            aten._scaled_dot_product_flash_attention_for_cpu: self._flash_fwd,
            aten._scaled_dot_product_flash_attention_for_cpu_backward: self._flash_bwd,
            aten._native_multi_head_attention: self._native_mha,
            aten._transformer_encoder_layer_fwd: self._encoder_layer_fast,
            **{op: self._fused(op) for op in _FUSED_OPS},
        }
        dense_only = {op: self._dense_only(op, f) for op, f in flop_registry.items()
                      if "attention" in str(op) and op not in own}
        return {**dense_only, **own}


def _attention_block_flops(b: int, t: int, s: int, d: int) -> int:
    """Projections (q from T rows, k and v from S rows, output) and QK^T, PV: dense."""
    return 2 * b * t * d * d + 2 * 2 * b * s * d * d + 2 * 2 * b * t * s * d + 2 * b * t * d * d




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



# -- kernel path -------------------------------------------------------------------------------------
