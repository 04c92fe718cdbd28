"""REPORT.md's first table: one row per variant, answering both questions side by side:
is it equivalent to its family's reference, and how much faster or slower is it."""

from __future__ import annotations

import math
import textwrap

import pandas as pd
from tabulate import tabulate

from harness.base.verdicts import Verdict
from harness.check.results import PairResult
from harness.registry import reference_of

REASON_WIDTH = 56


def _verdict(value) -> Verdict:
    try:
        return Verdict(value)
    except ValueError:
        return Verdict.ERROR


def verdict_against_reference(family: str, variant: str, results: list[PairResult] | None) -> str:
    """'reference', 'equivalent', 'different (declared: ...)', ... over every case, dtype and
    config the check ran; '-' when the check did not run (--skip-check) or has no such pair."""
    ref = reference_of(family)
    if ref is not None and ref.id == variant:
        return "reference"
    if not results or ref is None:
        return "-"
    mine = [r for r in results if r.family == family and {r.a, r.b} == {ref.id, variant}]
    if not mine:
        return "-"
    worst = max(mine, key=lambda r: _verdict(r.verdict).rank)
    agrees = _verdict(worst.verdict).agrees
    text = "equivalent" if agrees else str(worst.verdict)
    if not agrees:
        why = (worst.reason or worst.expected or "").replace("\n", " ").replace("|", "/")
        if why:
            text += f" ({why[:REASON_WIDTH]}{'...' if len(why) > REASON_WIDTH else ''})"
    if not all(r.ok for r in mine):
        text += " !contradicts its declaration"
    return text


def _ratio(row: pd.Series | None) -> str:
    if row is None or row.get("status") != "ok":
        return "-" if row is None else str(row.get("status"))
    r, lo, hi = (row.get(k) for k in ("vs_baseline", "vs_baseline_lo", "vs_baseline_hi"))
    if r is None or not isinstance(r, float) or math.isnan(r):
        return "-"
    if lo is None or hi is None or any(isinstance(x, float) and math.isnan(x) for x in (lo, hi)):
        return f"{r:.2f}x"
    return f"{r:.2f}x [{min(lo, r):.2f}-{max(hi, r):.2f}]"


def _mib(row: pd.Series | None) -> str:
    value = None if row is None else row.get("peak_bytes")
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value / 2**20:.3g}"


def summary_table(cases: pd.DataFrame, results: list[PairResult] | None) -> list[str]:
    """The summary section: per family, the headline shape (the largest B*T measured, eager,
    the first dtype); per variant, its verdict and its speed against the baseline there."""
    lines = ["## Summary: equivalent to the reference? how much faster or slower?", "",
             *textwrap.wrap("One row per variant. Verdict: against its family's reference, over every case, "
                            "dtype and config the check ran. Speed: `vs baseline` = baseline time / variant "
                            "time (> 1 is faster) at the family's headline shape (the largest timed in both "
                            "modes), with its 90% bootstrap interval (widened to contain the ratio where the "
                            "resampling missed it); memory: peak MiB of forward + backward there. The long "
                            "tables follow.", 100), ""]
    eager = cases[~cases.get("compiled", pd.Series(False, index=cases.index)).fillna(False).astype(bool)]
    table = []
    for family, rows in eager.groupby("family", sort=False):
        dtype = rows["dtype"].iloc[0]
        rows = rows[rows["dtype"] == dtype]
        size = rows["batch"] * rows["seq"]
        both = [n for n in size.unique()
                if set(rows[size == n]["mode"]) >= {"fwd", "fwd+bwd"}]  # a shape timed in both modes
        head = rows[size == (max(both) if both else size.max())]
        b, t, d = head.iloc[0][["batch", "seq", "d_model"]]
        for variant in dict.fromkeys(head["variant"]):
            mine = head[head["variant"] == variant]
            pick = {m: (mine[mine["mode"] == m].iloc[0] if (mine["mode"] == m).any() else None)
                    for m in ("fwd", "fwd+bwd")}
            table.append({"family": family, "variant": variant,
                          "verdict vs reference": verdict_against_reference(family, variant, results),
                          "fwd vs baseline": _ratio(pick["fwd"]), "fwd+bwd vs baseline": _ratio(pick["fwd+bwd"]),
                          "peak MiB": _mib(pick["fwd+bwd"] if pick["fwd+bwd"] is not None else pick["fwd"]),
                          "at": f"B={b} T={t} D={d} {dtype}"})
    if not table:
        return []
    return lines + [tabulate(pd.DataFrame(table), headers="keys", tablefmt="github", showindex=False), ""]
