"""Benchmark rows as data frames: cases and peaks apart, and a comparison with an earlier run."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np
import pandas as pd

from harness.base.errors import HarnessError, ResultsFileError
from harness.bench.log import load_rows, slow_peaks
from harness.bench.row import KEY_ORDER, BenchRow, PeakRow, Row, typed_rows

ENV_KEYS = ["torch", "python", "device_name", "cpu", "cpu_count", "threads", "commit"]


NUMERIC = ("median_s", "iqr_s", "gflops", "gflops_dense", "peak_fraction", "peak_fraction_q1",
           "peak_fraction_q3", "peak_fraction_lo", "peak_fraction_hi", "peak_fraction_dense", "vs_baseline",
           "vs_baseline_q1", "vs_baseline_q3", "vs_baseline_lo", "vs_baseline_hi",
           "saved_bytes", "peak_bytes", "rss_peak_bytes", "flops", "flops_dense", "compile_s")
TEXT = ("error", "path", "disturbed", "rss_note", "largest_tensor", "flops_basis", "counting_error")


def frame(rows: Iterable[Row | Mapping]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(case rows, matmul-peak rows) as DataFrames, one column per field a row wrote. The
    rows are typed (``harness.bench.row``; a dict is typed on the way in), so a column is
    numeric as it is, None where a row has no figure. Ratios are the sweep's, measured
    interleaved; rows that were not (pytest-benchmark's) carry none."""
    rows = typed_rows(slow_peaks([r.to_json() if isinstance(r, (BenchRow, PeakRow)) else r for r in rows]))
    measured = [r for r in rows if isinstance(r, BenchRow)]
    cases = pd.DataFrame([r.to_json() for r in measured])
    peaks = pd.DataFrame([r.to_json() for r in rows if isinstance(r, PeakRow)])
    if cases.empty:
        return cases, peaks
    # what the FLOPs count (recorded, or what the logging version counted), and a fraction of
    # the peak above 1 named as the counting error it is
    cases["flops_basis"] = [b.value if (b := r.flop_basis) is not None else None for r in measured]
    cases["counting_error"] = [r.counting_error() for r in measured]
    for col in NUMERIC:
        if col not in cases:
            cases[col] = np.nan
        cases[col] = pd.to_numeric(cases[col])  # None -> NaN; the values are numbers already
    for col in TEXT + ("interleaved", "path_ops") + KEY_ORDER + ("change", "regression"):
        if col not in cases:  # a field no row carries (an earlier version's file): an empty column
            cases[col] = None
    return cases, peaks


# What must agree for a time to be compared with an earlier one: the machine, torch, the
# threads, and how long each round timed (--min-time; older rows carry only the profile,
# which sets it). A row measured otherwise gets no change, and says which field differs.
LIKE_WITH_LIKE = ("device_name", "cpu", "cpu_count", "torch", "threads", "min_time", "profile")


def unlike(new: dict, old: dict) -> list[str]:
    """The fields of LIKE_WITH_LIKE in which two rows differ, each 'field (old then, new now)';
    a field one of them does not record is not compared (the profile only where --min-time
    is not recorded by both)."""
    def known(x) -> bool:
        return x is not None and not (isinstance(x, float) and math.isnan(x)) and str(x) != ""

    both_min_time = known(new.get("min_time")) and known(old.get("min_time"))
    out = []
    for field in LIKE_WITH_LIKE:
        if field == "profile" and both_min_time:
            continue
        a, b = old.get(field), new.get(field)
        if known(a) and known(b) and str(a) != str(b):
            out.append(f"{field} ({a} then, {b} now)")
    return out


def compare_with(cases: pd.DataFrame, old_rows: list[Row], threshold: float) -> pd.DataFrame:
    """Add ``change`` (median / old median - 1), ``regression`` (change > threshold) and
    ``change_note``: for a row measured before on another machine, torch, thread count or
    profile, the fields that differ (and no change: it would not compare like with like)."""
    old = {r.key: r.to_json() for r in typed_rows(old_rows) if isinstance(r, BenchRow) and r.ok}
    cases = cases.copy()
    changes, notes = [], []
    for row in cases.to_dict("records"):
        k, m = row["key"], row["median_s"]
        differ = unlike(row, old[k]) if k in old else []
        notes.append("; ".join(differ))
        comparable = k in old and not differ and isinstance(m, float) and not math.isnan(m)
        changes.append(m / old[k]["median_s"] - 1 if comparable else np.nan)
    cases["change"] = changes
    cases["change_note"] = notes
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
