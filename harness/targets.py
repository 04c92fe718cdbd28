"""Performance targets as data, evaluated on benchmark rows by the report (never in a
timed unit test). The harness knows no variant by name: the project's targets are
registered by ``variants/targets.py``, a user's by their own file."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Target:
    """kind: 'speedup' (variant vs baseline, >= threshold), 'peak_fraction' (>= threshold),
    'growth' (fitted exponent of ``metric`` against T, <= threshold)."""

    name: str
    kind: str
    family: str
    variant: str
    threshold: float
    where: Mapping[str, object] = field(default_factory=dict)  # row filters: batch, seq, mode, ...
    baseline: str = ""
    metric: str = "saved_bytes"
    minimum: float | None = None  # growth: also at least this exponent
    text: str = ""


TARGETS: list[Target] = []


def register_target(**fields) -> Target:
    target = Target(**fields)
    TARGETS.append(target)
    return target


def _select(df: pd.DataFrame, family: str, variant: str, where: Mapping[str, object]) -> pd.DataFrame:
    if df.empty:
        return df
    sel = df[(df["family"] == family) & (df["variant"] == variant) & (df["status"] == "ok")]
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


def evaluate(target: Target, df: pd.DataFrame) -> dict:
    """{'target', 'measured', 'threshold', 'met'}; met is None when the data is missing."""
    out = {"target": target.text or target.name, "threshold": "", "measured": "not measured", "met": None}
    rows = _select(df, target.family, target.variant, target.where)
    if target.kind == "speedup":
        base = _select(df, target.family, target.baseline, target.where)
        out["threshold"] = f">= {target.threshold:g}x"
        if len(rows) and len(base):
            ratio = float(base["median_s"].median() / rows["median_s"].median())
            out.update(measured=f"{ratio:.2f}x ({rows['median_s'].median() * 1e3:.1f} ms vs "
                                f"{base['median_s'].median() * 1e3:.1f} ms)", met=ratio >= target.threshold)
    elif target.kind == "peak_fraction":
        out["threshold"] = f">= {target.threshold:.0%}"
        if len(rows) and rows["peak_fraction"].notna().any():
            frac = float(rows["peak_fraction"].median())
            out.update(measured=f"{frac:.1%} ({rows['gflops'].median():.1f} GFLOP/s)", met=frac >= target.threshold)
    elif target.kind == "growth":
        low = target.minimum
        out["threshold"] = (f"{low:g} <= exponent <= {target.threshold:g}" if low is not None
                            else f"exponent <= {target.threshold:g}")
        exp = growth_exponent(rows, target.metric) if len(rows) else math.nan
        if not math.isnan(exp):
            out.update(measured=f"{exp:.2f}",
                       met=exp <= target.threshold and (low is None or exp >= low))
    else:
        raise ValueError(f"unknown target kind {target.kind!r}")
    return out
