"""Measurements of one callable: time, FLOPs, bytes saved for backward, peak memory.

Timing: warm-up calls, then timed samples until both a minimum count and a minimum time
are reached; a sample is one call, or a block of calls for calls under 1 ms (as
torch.utils.benchmark does), timed by ``time.perf_counter`` on CPU and by CUDA events
with a synchronize on CUDA; median and interquartile range of the per-call times.
FLOPs: ``torch.utils.flop_counter.FlopCounterMode`` with the CPU flash-attention kernel
added (torch 2.13 registers no formula for it), matmul-class operators only, dense
count (a causal kernel that skips the upper triangle is still credited with all of it).
Saved bytes: ``torch.autograd.graph.saved_tensors_hooks``, unique storages, without the
parameters and inputs (they are resident anyway); exact and the same on CPU and CUDA.
Peak: on CUDA the allocator's peak above what was allocated before the call; on CPU the
peak of live tensor storages created during the call, tracked at the dispatcher with a
weak reference per storage (kernels' internal scratch buffers are not seen).
"""

from __future__ import annotations

import statistics
import time
import warnings
import weakref
from dataclasses import dataclass
from typing import Callable, Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

aten = torch.ops.aten


@dataclass
class Timing:
    median: float
    q1: float
    q3: float
    reps: int

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1


def _quartiles(samples: list[float]) -> tuple[float, float, float]:
    if len(samples) < 2:
        return samples[0], samples[0], samples[0]
    q = statistics.quantiles(samples, n=4, method="inclusive")
    return q[1], q[0], q[2]


def time_callable(
    fn: Callable[[], object],
    device: str = "cpu",
    *,
    warmup: int = 3,
    min_reps: int = 10,
    min_time: float = 0.2,
    max_reps: int = 1000,
    block_time: float = 1e-3,
) -> Timing:
    """Median and quartiles of per-call wall time, in seconds. Calls shorter than
    ``block_time`` are timed in blocks of several calls (as torch.utils.benchmark does),
    each sample being the block's time over its number of calls."""
    cuda = device.startswith("cuda")

    def clock(number: int) -> float:
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(number):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3 / number
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        return (time.perf_counter() - t0) / number

    for _ in range(warmup):
        fn()
    if cuda:
        torch.cuda.synchronize()
    number = max(1, min(1000, int(block_time / max(clock(1), 1e-9))))
    samples: list[float] = []
    started = time.perf_counter()
    while len(samples) < max_reps and (len(samples) < min_reps or time.perf_counter() - started < min_time):
        samples.append(clock(number))
    median, q1, q3 = _quartiles(samples)
    return Timing(median, q1, q3, len(samples) * number)


def timer_median(fn: Callable[[], object], min_run_time: float = 0.5) -> float:
    """The same callable timed by a bare torch.utils.benchmark.Timer (the method check)."""
    from torch.utils.benchmark import Timer

    return Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads()).blocked_autorange(
        min_run_time=min_run_time
    ).median


# -- FLOPs ------------------------------------------------------------------------------------

def _cpu_flash_fwd(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _cpu_flash_bwd(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


def _attention_block_flops(b: int, t: int, s: int, d: int) -> int:
    """Projections (q from T rows, k and v from S rows, output) and QK^T, PV: dense."""
    return 2 * b * t * d * d + 2 * 2 * b * s * d * d + 2 * 2 * b * t * s * d + 2 * b * t * d * d


def _native_mha(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    """torch's fused MultiheadAttention fast path (no formula in torch 2.13)."""
    b, t, d = query_shape
    return _attention_block_flops(b, t, key_shape[1], d)


def _encoder_layer_fast(src_shape, embed_dim, num_heads, *args, out_shape=None, **kwargs) -> int:
    """torch's fused TransformerEncoderLayer fast path: attention block plus the FFN."""
    b, t, d = src_shape
    ffn_weight_1 = args[11]  # (F, D), after qkv/proj weights, flags and the norms
    return _attention_block_flops(b, t, t, d) + 2 * 2 * b * t * d * ffn_weight_1[0]


EXTRA_FLOP_FORMULAS = {
    aten._scaled_dot_product_flash_attention_for_cpu: _cpu_flash_fwd,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_flash_bwd,
    aten._native_multi_head_attention: _native_mha,
    aten._transformer_encoder_layer_fwd: _encoder_layer_fast,
}


def count_flops(fn: Callable[[], object]) -> int:
    with warnings.catch_warnings():
        # The counter's module tracker is a global hook; a compiled module warns that it
        # fires twice. Only the operator counts are used, so the warning does not apply.
        warnings.filterwarnings("ignore", message=".*global hooks on modules.*")
        with FlopCounterMode(display=False, custom_mapping=EXTRA_FLOP_FORMULAS) as counter:
            fn()
    return int(counter.get_total_flops())


# -- memory -------------------------------------------------------------------------------------

def _storage_key(t: torch.Tensor) -> tuple:
    return (t.device.type, t.untyped_storage().data_ptr())


def saved_bytes(forward: Callable[[], object], resident: Iterable[torch.Tensor]) -> int:
    """Bytes of the unique storages autograd saves for backward during ``forward()``,
    not counting storages of ``resident`` tensors (parameters, inputs)."""
    skip = {_storage_key(t) for t in resident}
    seen: dict[tuple, int] = {}

    def pack(t: torch.Tensor):
        key = _storage_key(t)
        if key not in skip and key not in seen:
            seen[key] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        forward()
    return sum(seen.values())


class LiveStorages(TorchDispatchMode):
    """Peak bytes of live tensor storages created while active (the CPU peak method)."""

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
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
                    self._refs[key] = weakref.ref(
                        storage, lambda _ref, k=key, n=nbytes: self._freed(k, n)
                    )
        return out


CPU_PEAK_METHOD = ("peak of the live tensor storages created during the call (dispatcher + weakrefs); "
                   "a fused kernel's internal buffers (torch's fast paths, SDPA) are not seen")
CUDA_PEAK_METHOD = "torch.cuda.max_memory_allocated above the allocation before the call"


def peak_bytes(fn: Callable[[], object], device: str) -> int:
    """Peak memory of one call above what was allocated before it."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        fn()
        torch.cuda.synchronize()
        return int(torch.cuda.max_memory_allocated() - before)
    with LiveStorages() as tracker:
        fn()
    return tracker.peak


def matmul_peak(device: str, dtype: torch.dtype, size: int | None = None) -> tuple[float, int]:
    """FLOP/s of a large square matmul in ``dtype`` on ``device``: the machine's own peak."""
    size = size or (2048 if device == "cpu" else 8192)
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(size, size, device=device, dtype=dtype, generator=gen)
    b = torch.randn(size, size, device=device, dtype=dtype, generator=gen)
    timing = time_callable(lambda: a @ b, device, warmup=3, min_reps=8, min_time=0.5)
    return 2 * size**3 / timing.median, size
