"""Benchmark rows as data frames: cases and peaks apart, and a comparison with an earlier run."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from harness.base.errors import HarnessError, ResultsFileError
from harness.bench.log import load_rows

ENV_KEYS = ["torch", "python", "device_name", "cpu", "cpu_count", "threads", "commit"]


NUMERIC = ("median_s", "iqr_s", "gflops", "gflops_dense", "peak_fraction", "peak_fraction_q1",
           "peak_fraction_q3", "peak_fraction_lo", "peak_fraction_hi", "peak_fraction_dense", "vs_baseline",
           "vs_baseline_q1", "vs_baseline_q3", "vs_baseline_lo", "vs_baseline_hi",
           "saved_bytes", "peak_bytes", "rss_peak_bytes", "flops", "flops_dense", "compile_s")
TEXT = ("error", "path", "disturbed", "rss_note", "largest_tensor")


def frame(rows: Iterable[dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(case rows, matmul-peak rows) as DataFrames. Ratios are the sweep's, measured
    interleaved; rows that were not (pytest-benchmark's) carry none."""
    rows = list(rows)
    cases = pd.DataFrame([r for r in rows if r.get("kind", "case") == "case"])
    peaks = pd.DataFrame([r for r in rows if r.get("kind") == "peak"])
    if cases.empty:
        return cases, peaks
    for col in NUMERIC:
        if col not in cases:
            cases[col] = np.nan
        cases[col] = pd.to_numeric(cases[col], errors="coerce")
    for col in TEXT + ("interleaved", "path_ops"):
        if col not in cases:
            cases[col] = None
    return cases, peaks


def compare_with(cases: pd.DataFrame, old_rows: list[dict], threshold: float) -> pd.DataFrame:
    """Add ``change`` (median / old median - 1) and ``regression`` (change > threshold)."""
    old = {r["key"]: r for r in old_rows if r.get("kind", "case") == "case" and r.get("status") == "ok"}
    cases = cases.copy()
    cases["change"] = [
        (m / old[k]["median_s"] - 1) if k in old and isinstance(m, float) and not math.isnan(m) else np.nan
        for k, m in zip(cases["key"], cases["median_s"])
    ]
    cases["regression"] = cases["change"] > threshold
    return cases


# -- plots -----------------------------------------------------------------------------------------


def load_old(path: str) -> list[dict]:
    try:
        return load_rows(Path(path))
    except HarnessError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise ResultsFileError(f"--compare file '{path}' is malformed: {exc}") from None
