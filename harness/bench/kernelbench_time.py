"""A candidate timed against its reference (``python -m harness kernelbench --time``): the two
calls interleaved in alternating rounds (``harness.bench.timing.interleave``: one window, so a
drift in the machine's speed falls on both), the ratio of the medians with its 90% bootstrap
interval. ``time_pair`` is the one function the command calls."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Callable

from harness.bench.timing import INTERVAL_LEVEL, interleave, ratio_of_medians


@dataclass(frozen=True)
class PairTime:
    """Per-call medians in milliseconds, and the speedup (reference time / candidate time, > 1
    is faster) with its ``INTERVAL_LEVEL`` interval."""

    ref_ms: float
    cand_ms: float
    speedup: float
    low: float
    high: float


def time_pair(reference: Callable[[], Any], candidate: Callable[[], Any], *, rounds: int = 7,
              min_time: float = 0.05) -> PairTime:
    """``reference`` and ``candidate`` (no-argument calls) timed in ``rounds`` interleaved rounds."""
    t = interleave({"reference": reference, "candidate": candidate}, rounds=rounds, min_time=min_time)
    ref, cand = t.rounds["reference"], t.rounds["candidate"]
    speedup, low, high = ratio_of_medians(ref, cand, level=INTERVAL_LEVEL)
    return PairTime(statistics.median(ref) * 1e3, statistics.median(cand) * 1e3, speedup, low, high)
