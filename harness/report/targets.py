"""Performance targets as data, evaluated on benchmark rows by the report (never in a
timed unit test). The harness knows no variant by name: the project's targets are
registered by ``variants/targets.py``, a user's by their own file."""

from __future__ import annotations

import math
from typing import Mapping

import numpy as np
import pandas as pd

from harness.bench.measured import FlopBasis, Status
from harness.bench.timing import INTERVAL_LEVEL, ratio_of_medians
from harness.registry import TARGETS, Target, reference_of


def targets_for(cases: pd.DataFrame) -> list[Target]:
    """The registered targets about the devices the rows were measured on (a CUDA report
    decides the CUDA targets, a CPU report the CPU ones); a target naming no device, always."""
    kinds = {str(d).split(":")[0] for d in cases["device"].dropna()} if "device" in cases else set()
    return [t for t in TARGETS if t.device is None or t.device in kinds]


def asked_targets(cases: pd.DataFrame) -> list[Target]:
    """The targets of ``targets_for`` whose variant was measured in ``cases``: a report of a
    user's variants, or of one family, says nothing about targets nobody asked for."""
    measured = set(cases["variant"]) if "variant" in cases else set()
    return [t for t in targets_for(cases) if t.variant in measured]


def _select(df: pd.DataFrame, family: str, variant: str, where: Mapping[str, object]) -> pd.DataFrame:
    if df.empty:
        return df
    sel = df[(df["family"] == family) & (df["variant"] == variant) & (df["status"] == Status.OK)]
    for column, value in where.items():
        sel = sel[sel[column] == value]
    return sel


def growth_exponent(df: pd.DataFrame, metric: str = "saved_bytes") -> float:
    """Slope of log(metric) against log(T): 1 is linear, 2 quadratic."""
    df = df[df[metric].notna() & (df[metric] > 0)].sort_values("seq")
    if df["seq"].nunique() < 2:
        return math.nan
    slope, _ = np.polyfit(np.log(df["seq"].astype(float)), np.log(df[metric].astype(float)), 1)
    return float(slope)


def _disturbed(rows: pd.DataFrame) -> str:
    if "disturbed" not in rows:
        return ""
    marks = [str(x) for x in rows["disturbed"] if isinstance(x, str) and x]
    return marks[0] if marks else ""


def _spread(rows: pd.DataFrame, column: str) -> tuple[float, float, float, float, float] | None:
    """(figure, low, high, q1, q3) of the first selected row: the ratio of medians with its
    bootstrap interval, and the per-round quartiles; None when the rows were not measured
    interleaved (e.g. pytest-benchmark rows). Rows logged before the interval existed are
    decided on their quartiles."""
    if column not in rows or f"{column}_q1" not in rows:
        return None
    r = rows.iloc[0]
    if not r.get("interleaved") or pd.isna(r[column]) or pd.isna(r[f"{column}_q1"]):
        return None
    q1, q3 = float(r[f"{column}_q1"]), float(r[f"{column}_q3"])
    low, high = r.get(f"{column}_lo"), r.get(f"{column}_hi")
    if low is None or pd.isna(low):
        low, high = q1, q3
    return float(r[column]), float(low), float(high), q1, q3


def _figure(row, name: str, fmt: str, scale: float = 1.0) -> str:
    """A row's figure for a sentence; '?' where the row has none (a file that lacks the key)."""
    value = row.get(name)
    try:
        return fmt.format(float(value) * scale) if value is not None and value == value else "?"
    except (TypeError, ValueError):
        return "?"


def _paired_spread(row, base) -> tuple[float, float, float, float, float] | None:
    """(figure, low, high, q1, q3) of base time / row time from the per-round medians of one
    group (the two timed in the same interleaved rounds), as the sweep computes
    ``vs_baseline`` against the family's reference; None when they were not."""
    a, b = row.get("round_s"), base.get("round_s")
    if not (isinstance(a, list) and isinstance(b, list) and a and len(a) == len(b)
            and row.get("group") == base.get("group") and row.get("interleaved") and base.get("interleaved")):
        return None
    ratio, low, high = ratio_of_medians(b, a)
    per_round = sorted(x / y for x, y in zip(b, a))
    q1, q3 = np.quantile(per_round, [0.25, 0.75])
    return ratio, low, high, float(q1), float(q3)


def _not_executed(r) -> str:
    """Why a row's fraction of the peak decides no target: a counting error, or FLOPs that
    are dense-equivalent; "" when it is an executed fraction."""
    error = r.get("counting_error")
    if isinstance(error, str) and error:
        return f"not measured: {error}"
    if r.get("flops_basis") == FlopBasis.DENSE_EQUIVALENT.value:
        dense = r.get("peak_fraction_dense")
        return ("not measured: the row's FLOPs are dense-equivalent (every score counted, skipped ones "
                f"too: {dense:.0%} of the peak dense-equivalent), not executed; measure it again with "
                "this version, which counts the fused kernels' tiles")
    return ""


def evaluate(target: Target, df: pd.DataFrame) -> dict:
    """{'target', 'threshold', 'uses', 'measured', 'met'}. ``met`` is True/False, or None
    when not measured, or a string: 'not claimed' for a disturbed window, 'undecided' when
    the threshold lies inside the interval. A timed target is decided on the ratio of the
    medians over interleaved rounds and its bootstrap interval: met only when the interval's
    low end meets the threshold, not met only when its high end misses it."""
    out = {"target": target.text or target.name, "threshold": "", "uses": "", "measured": "not measured",
           "met": None}
    rows = _select(df, target.family, target.variant, target.where)
    if target.kind in ("speedup", "peak_fraction"):
        column = "vs_baseline" if target.kind == "speedup" else "peak_fraction"
        if target.kind == "speedup":
            out.update(threshold=f">= {target.threshold:g}x (interval's low end)",
                       uses=f"median time {target.baseline} over median time {target.variant}, interleaved rounds")
        else:
            out.update(threshold=f">= {target.threshold:.0%} (interval's low end)",
                       uses="median executed FLOP/s over the median matmul peak, the same interleaved rounds")
        base_rows = None
        if target.kind == "speedup" and len(rows):
            base_rows = _select(df, target.family, target.baseline, target.where)
            if not len(base_rows):
                rows = rows.iloc[0:0]
        if not len(rows):
            return out
        r = rows.iloc[0]
        ref = reference_of(target.family)
        if base_rows is not None and (ref is None or target.baseline != ref.id):
            spread = _paired_spread(r, base_rows.iloc[0])
        else:
            spread = _spread(rows, column)
        if target.kind == "peak_fraction":
            refused = _not_executed(r)
            if refused:
                out["measured"] = refused
                return out
        if spread is None:
            out["measured"] = "not measured: the rows were not timed interleaved (e.g. pytest-benchmark rows)"
            return out
        value, low, high, q1, q3 = spread
        level = f"{INTERVAL_LEVEL:.0%} interval"
        if target.kind == "speedup":
            out["measured"] = (f"{value:.2f}x, {level} {low:.2f}-{high:.2f}; per-round quartiles {q1:.2f}-{q3:.2f} "
                               f"over {_figure(r, 'rounds', '{:.0f}')} rounds "
                               f"({_figure(r, 'median_s', '{:.1f}', 1e3)} ms)")
        else:
            out["measured"] = (f"{value:.1%}, {level} {low:.1%}-{high:.1%}; per-round quartiles {q1:.1%}-{q3:.1%} "
                               f"over {_figure(r, 'rounds', '{:.0f}')} rounds ({_figure(r, 'gflops', '{:.1f}')} "
                               f"GFLOP/s executed; peak {_figure(r, 'peak_flops', '{:.1f}', 1e-9)} GFLOP/s; "
                               f"dense-equivalent {_figure(r, 'peak_fraction_dense', '{:.1%}')})")
        out["met"] = True if low >= target.threshold else False if high < target.threshold else "undecided"
        why = _disturbed(rows)
        if why:
            out["met"] = "not claimed"
            out["measured"] += f"; disturbed window: {why}"
    elif target.kind == "growth":
        low = target.minimum
        out["threshold"] = (f"{low:g} <= exponent <= {target.threshold:g}" if low is not None
                            else f"exponent <= {target.threshold:g}")
        out["uses"] = f"{target.metric} (no time, no FLOPs)"
        exp = growth_exponent(rows, target.metric) if len(rows) else math.nan
        if not math.isnan(exp):
            out.update(measured=f"{exp:.2f}",
                       met=exp <= target.threshold and (low is None or exp >= low))
    else:
        raise ValueError(f"unknown target kind {target.kind!r}")
    return out


MET_TEXT = {True: "yes", False: "NO", None: "not measured", "not claimed": "not claimed (disturbed)",
            "undecided": "undecided (threshold inside the interval)"}
