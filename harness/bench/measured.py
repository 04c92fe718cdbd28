"""The parts of a measurement that are more than a number: its ``Status``, what its FLOPs
count (``FlopBasis``), the raw ``Rounds`` of its interleaved window, and the
``Statistics`` derived from them the way
``torch.utils.benchmark``'s ``Measurement`` derives its median from ``raw_times``
(``statistics_of``, computed once per rounds). ``harness.bench.row`` holds them in a row."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from enum import Enum

from harness.bench import timing


class FlopBasis(str, Enum):
    """What a row's ``flops`` count. ``executed``: the work the kernels ran (a fused causal
    kernel's skipped tiles not counted); ``dense-equivalent``: every score of QK^T and PV,
    masked or skipped or not (an attention kernel ran whose skipping is not modelled): its
    rate is not the machine's work, and no executed fraction of the peak is read from it."""

    EXECUTED = "executed"
    DENSE_EQUIVALENT = "dense-equivalent"


# The fused attention kernels of SDPA's CUDA backends: before the executed counting of
# ``harness.bench.flops.FUSED_TILES``, torch's dense formulas counted them.
CUDA_FUSED_OPS = ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                  "_scaled_dot_product_cudnn_attention")


class Status(str, Enum):
    """What became of a case: ``ok`` (measured), ``unsupported`` (the variant refuses the
    case, a declared fill the dtype cannot hold, or torch.compile failed on it), ``error``
    (it raised, or its output shows it computes something else), ``oom`` (out of memory).
    Its text is its value, in JSON and in a table alike."""

    OK = "ok"
    UNSUPPORTED = "unsupported"
    ERROR = "error"
    OOM = "oom"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


@dataclass(frozen=True)
class Rounds:
    """The raw times of one variant's interleaved window, as timed: each round's median
    per-call seconds (``round_s``) and the calls timed in all (``reps``); a row measured in
    this process also has every block's per-call seconds, the matmul peak's FLOP/s in the
    same rounds, and the baseline's per-round seconds (None: no baseline timed beside it).
    A log keeps ``round_s`` and ``reps`` only: a row read back has its statistics as
    recorded."""

    round_s: tuple[float, ...] | None = None
    reps: int | None = None
    blocks: tuple[float, ...] = ()
    peak_rounds: tuple[float, ...] = ()
    baseline_round_s: tuple[float, ...] | None = None


@dataclass(frozen=True)
class Statistics:
    """What the rounds give: time (median and quartiles over blocks); rates, and the
    fraction of the matmul peak and the ratio to the baseline, each with its per-round
    quartiles and the bootstrap interval of its ratio of medians over rounds."""

    median_s: float | None = None
    q1_s: float | None = None
    q3_s: float | None = None
    iqr_s: float | None = None
    gflops: float | None = None
    gflops_dense: float | None = None
    peak_flops: float | None = None
    peak_fraction: float | None = None
    peak_fraction_q1: float | None = None
    peak_fraction_q3: float | None = None
    peak_fraction_lo: float | None = None
    peak_fraction_hi: float | None = None
    peak_fraction_dense: float | None = None
    vs_baseline: float | None = None
    vs_baseline_q1: float | None = None
    vs_baseline_q3: float | None = None
    vs_baseline_lo: float | None = None
    vs_baseline_hi: float | None = None


@functools.lru_cache(maxsize=4096)
def statistics_of(rounds: Rounds, flops: int | None, flops_dense: int | None) -> Statistics:
    """The statistics of raw ``rounds`` (every block timed) of a step of ``flops`` executed
    and ``flops_dense`` dense-equivalent FLOPs. The figure a target is decided on is a ratio
    of medians over rounds with its interval (``timing.ratio_of_medians``); the per-round
    quartiles are the spread shown beside it."""
    per_round, peaks = list(rounds.round_s or ()), list(rounds.peak_rounds)
    med, q1, q3 = timing.quartiles(list(rounds.blocks))
    fractions = [flops / t / p for t, p in zip(per_round, peaks)] if flops else []
    _, f1, f3 = timing.quartiles(fractions)
    f, f_lo, f_hi = (timing.ratio_of_medians([flops / t for t in per_round], peaks) if flops
                     else (math.nan,) * 3)
    vs: dict[str, float] = {}
    if rounds.baseline_round_s is not None:
        base = list(rounds.baseline_round_s)
        _, r1, r3 = timing.quartiles([a / b for a, b in zip(base, per_round)])
        r, r_lo, r_hi = timing.ratio_of_medians(base, per_round)
        vs = dict(vs_baseline=r, vs_baseline_q1=r1, vs_baseline_q3=r3, vs_baseline_lo=r_lo, vs_baseline_hi=r_hi)
    return Statistics(
        median_s=med, q1_s=q1, q3_s=q3, iqr_s=q3 - q1,
        gflops=flops / med / 1e9 if flops else math.nan,
        gflops_dense=flops_dense / med / 1e9 if flops_dense else math.nan,
        peak_flops=timing.quartiles(peaks)[0],
        peak_fraction=f, peak_fraction_q1=f1, peak_fraction_q3=f3, peak_fraction_lo=f_lo, peak_fraction_hi=f_hi,
        peak_fraction_dense=f * flops_dense / flops if flops and flops_dense else math.nan, **vs)
