"""Benchmark rows as data frames: cases and peaks apart, and a comparison with an earlier run."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np
import pandas as pd

from harness.base.errors import HarnessError, ResultsFileError
from harness.bench.log import load_rows
from harness.bench.row import BenchRow, PeakRow, Row, typed_rows

ENV_KEYS = ["torch", "python", "device_name", "cpu", "cpu_count", "threads", "commit"]


NUMERIC = ("median_s", "iqr_s", "gflops", "gflops_dense", "peak_fraction", "peak_fraction_q1",
           "peak_fraction_q3", "peak_fraction_lo", "peak_fraction_hi", "peak_fraction_dense", "vs_baseline",
           "vs_baseline_q1", "vs_baseline_q3", "vs_baseline_lo", "vs_baseline_hi",
           "saved_bytes", "peak_bytes", "rss_peak_bytes", "flops", "flops_dense", "compile_s")
TEXT = ("error", "path", "disturbed", "rss_note", "largest_tensor")


def frame(rows: Iterable[Row | Mapping]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(case rows, matmul-peak rows) as DataFrames, one column per field a row wrote. The
    rows are typed (``harness.bench.row``; a dict is typed on the way in), so a column is
    numeric as it is, None where a row has no figure. Ratios are the sweep's, measured
    interleaved; rows that were not (pytest-benchmark's) carry none."""
    rows = typed_rows(rows)
    cases = pd.DataFrame([r.to_json() for r in rows if isinstance(r, BenchRow)])
    peaks = pd.DataFrame([r.to_json() for r in rows if isinstance(r, PeakRow)])
    if cases.empty:
        return cases, peaks
    for col in NUMERIC:
        if col not in cases:
            cases[col] = np.nan
        cases[col] = pd.to_numeric(cases[col])  # None -> NaN; the values are numbers already
    for col in TEXT + ("interleaved", "path_ops"):
        if col not in cases:
            cases[col] = None
    return cases, peaks


def compare_with(cases: pd.DataFrame, old_rows: list[Row], threshold: float) -> pd.DataFrame:
    """Add ``change`` (median / old median - 1) and ``regression`` (change > threshold)."""
    old = {r.key: r.measurement.median_s for r in typed_rows(old_rows) if isinstance(r, BenchRow) and r.ok}
    cases = cases.copy()
    cases["change"] = [
        (m / old[k] - 1) if k in old and isinstance(m, float) and not math.isnan(m) else np.nan
        for k, m in zip(cases["key"], cases["median_s"])
    ]
    cases["regression"] = cases["change"] > threshold
    return cases


# -- plots -----------------------------------------------------------------------------------------


def load_old(path: str) -> list[Row]:
    try:
        return load_rows(Path(path))
    except HarnessError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise ResultsFileError(f"--compare file '{path}' is malformed: {exc}") from None
