"""Plain-text and Markdown tables of registry entries and verdicts (pandas + tabulate)."""

from __future__ import annotations

import math
from typing import Iterable

import pandas as pd
from tabulate import tabulate

from .compare import PairResult, PathResult
from .families import get_family
from .registry import Variant, variants_of

SYMBOL = {"identical": "≡", "equivalent": "≈", "different": "≠", "error": "E"}
LEGEND = "≡ identical (bitwise)  ≈ equivalent (within rounding)  ≠ different  E error  ! contradicts the declaration  · not applicable"


def fmt(x: float) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return f"{x:.2e}" if x else "0"


def variants_table(variants: Iterable[Variant], tablefmt: str = "simple") -> str:
    rows = []
    for v in variants:
        traits = {k: v for k, v in v.traits.items() if k != "cases"}
        rows.append({"id": v.id, "family": v.family, "source": v.source,
                     "reference": "yes" if v.reference else "",
                     "traits": "; ".join(f"{k}={val}" for k, val in traits.items())})
    return tabulate(pd.DataFrame(rows), headers="keys", tablefmt=tablefmt, showindex=False)


def traits_table(family: str, tablefmt: str = "simple") -> str:
    """One family's traits side by side: a row per variant, a column per trait."""
    members = variants_of(family)
    df = pd.DataFrame(
        [{"id": v.id, "source": v.source, **{k: val for k, val in v.traits.items() if k != "cases"}}
         for v in members]
    ).fillna("")
    return tabulate(df, headers="keys", tablefmt=tablefmt, showindex=False)


def verdict_matrix(results: list[PairResult], family: str, dtype: str, tablefmt: str = "simple") -> str:
    """Cell (a, b): one symbol per case, in the family's case order."""
    cases = [c.name for c in get_family(family).cases]
    ids = [v.id for v in variants_of(family)]
    cell: dict[tuple[str, str, str], str] = {}
    for r in results:
        if r.family == family and r.dtype == dtype:
            sym = SYMBOL[r.verdict] + ("" if r.ok else "!")
            cell[(r.a, r.b, r.case)] = cell[(r.b, r.a, r.case)] = sym
    present = [i for i in ids if any(k[0] == i for k in cell)]
    rows = []
    for a in present:
        row = {"": a}
        for b in present:
            row[b] = "" if a == b else "".join(cell.get((a, b, c), "·") for c in cases)
        rows.append(row)
    return tabulate(pd.DataFrame(rows), headers="keys", tablefmt=tablefmt, showindex=False)


def differences_table(results: list[PairResult], tablefmt: str = "simple", only_problems: bool = False) -> str:
    rows = []
    for r in results:
        if r.verdict in ("identical", "equivalent") and r.ok:
            continue
        if only_problems and r.ok:
            continue
        rows.append({
            "pair": f"{r.a} ~ {r.b}", "case": r.case, "dtype": r.dtype, "verdict": r.verdict,
            "expected": r.expected, "ok": "yes" if r.ok else "NO",
            "max_abs": fmt(r.max_abs), "noise_ratio": fmt(r.noise_ratio),
            "grad_max_abs": fmt(r.grad_max_abs),
            "why": r.reason or r.note,
        })
    if not rows:
        return "(none)"
    return tabulate(pd.DataFrame(rows), headers="keys", tablefmt=tablefmt, showindex=False)


def equivalences_table(results: list[PairResult], tablefmt: str = "simple") -> str:
    rows = [
        {"pair": f"{r.a} ~ {r.b}", "case": r.case, "dtype": r.dtype, "verdict": r.verdict,
         "max_abs": fmt(r.max_abs), "max_rel": fmt(r.max_rel), "noise_ratio": fmt(r.noise_ratio),
         "grad_max_abs": fmt(r.grad_max_abs), "grad_noise_ratio": fmt(r.grad_noise_ratio)}
        for r in results if r.verdict in ("identical", "equivalent")
    ]
    if not rows:
        return "(none)"
    return tabulate(pd.DataFrame(rows), headers="keys", tablefmt=tablefmt, showindex=False)


def paths_table(paths: list[PathResult], tablefmt: str = "simple") -> str:
    """Only the variants whose kernel path is worth naming (a torch fused path, SDPA)."""
    rows = [
        {"variant": p.variant, "case": p.case, "dtype": p.dtype, "autograd path": p.path_autograd,
         "no_grad path": p.path_inference, "no_grad vs autograd": p.verdict, "max_abs": fmt(p.max_abs)}
        for p in paths
        if p.path_autograd != p.path_inference or p.verdict not in ("identical", "equivalent")
    ]
    if not rows:
        return "(every variant runs the same ops with and without autograd)"
    return tabulate(pd.DataFrame(rows), headers="keys", tablefmt=tablefmt, showindex=False)
