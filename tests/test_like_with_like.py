"""Comparisons compare like with like: ``--compare`` and the report's change column give no
change for a row measured on another machine, torch, thread count or profile (--min-time),
naming the field; a group whose matmul peak fell below a fraction of the run's best is
disturbed whatever the load average said."""

from __future__ import annotations

import pandas as pd
import pytest

from harness.bench.log import slow_peaks
from harness.bench.timing import PEAK_FRACTION
from harness.report.bench_frame import compare_with, frame
from harness.report.bench_tables import family_table
from harness.report.markdown import unlike_text

BASE = {"kind": "case", "key": "k1", "family": "norm", "variant": "v", "mode": "fwd", "compiled": False,
        "dtype": "float32", "batch": 1, "seq": 8, "d_model": 16, "device": "cpu", "status": "ok",
        "median_s": 0.002, "iqr_s": 0.0001, "device_name": "AMD EPYC", "cpu": "AMD EPYC", "cpu_count": 2,
        "torch": "2.13.0+cpu", "threads": 2, "profile": "quick", "min_time": 0.02, "group": "g1"}


@pytest.mark.parametrize("field, old_value, said", [
    ("cpu", "Intel Xeon", "cpu (Intel Xeon then, AMD EPYC now)"),
    ("threads", 56, "threads (56 then, 2 now)"),
    ("cpu_count", 56, "cpu_count (56 then, 2 now)"),
    ("torch", "2.12.0", "torch (2.12.0 then, 2.13.0+cpu now)"),
    ("min_time", 0.05, "min_time (0.05 then, 0.02 now)"),
])
def test_a_row_measured_otherwise_gets_no_change_and_names_the_field(field, old_value, said):
    cases, _ = frame([BASE])
    out = compare_with(cases, [{**BASE, "median_s": 0.004, field: old_value}], 0.10)
    assert pd.isna(out["change"].iloc[0]) and not out["regression"].iloc[0]
    assert out["change_note"].iloc[0] == said
    assert "| not comparable " in family_table(out, "norm")  # the fields: in the paragraph above the tables
    assert said in unlike_text(out)


def test_the_profile_decides_only_where_min_time_is_not_recorded():
    cases, _ = frame([BASE])
    old = {k: v for k, v in BASE.items() if k != "min_time"} | {"profile": "full", "median_s": 0.001}
    assert compare_with(cases, [old], 0.10)["change_note"].iloc[0] == "profile (full then, quick now)"
    same_time = {**BASE, "profile": "full", "median_s": 0.001}  # both record --min-time: it decides
    out = compare_with(cases, [same_time], 0.10)
    assert out["change_note"].iloc[0] == "" and out["change"].iloc[0] == pytest.approx(1.0)
    assert out["regression"].iloc[0]


def test_like_rows_are_compared():
    cases, _ = frame([BASE])
    out = compare_with(cases, [{**BASE, "median_s": 0.0025}], 0.10)
    assert out["change"].iloc[0] == pytest.approx(-0.2) and not out["regression"].iloc[0]
    assert unlike_text(out) == ""


def _peak(group: str, gflops: float, dtype: str = "float32") -> dict:
    return {"kind": "peak", "key": f"peak|{group}", "group": group, "device": "cpu", "dtype": dtype,
            "peak_flops": gflops * 1e9, "disturbed": ""}


def test_a_group_below_the_fraction_of_the_best_peak_is_disturbed():
    low = PEAK_FRACTION * 160 - 1
    rows = [_peak("g1", 160), _peak("g2", low), _peak("g3", PEAK_FRACTION * 160 + 1), _peak("g4", 40, "bfloat16"),
            {**BASE, "group": "g2"}, {**BASE, "key": "k3", "group": "g3"}]
    marked = {r["key"]: r.get("disturbed") or "" for r in slow_peaks(rows)}
    assert marked["peak|g1"] == "" and marked["peak|g3"] == "" and marked["peak|g4"] == ""  # own dtype's best
    assert marked["peak|g2"].startswith(f"matmul peak {low:.0f} GFLOP/s")
    assert "of the run's best 160" in marked["peak|g2"]
    assert marked["k1"] == marked["peak|g2"] and marked["k3"] == ""
    _, peaks = frame(rows)
    assert peaks.set_index("group").loc["g2", "disturbed"] == marked["peak|g2"]
