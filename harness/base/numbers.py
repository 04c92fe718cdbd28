"""Numbers as table cells: one format for every report and trace."""

from __future__ import annotations

import math


def fmt(x: float) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return f"{x:.2e}" if x else "0"
