"""REPORT.md's first table: one row per variant, answering both questions side by side:
is it equivalent to its family's reference, and how much faster or slower is it."""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass

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


@dataclass(frozen=True)
class ReferenceVerdict:
    """A variant against its family's reference over every case, dtype and config the check
    ran: the worst verdict where both ran (with the declared difference that explains it), and
    apart from it the errors a declaration expects (a mask fill a dtype cannot hold: an
    outcome of the variant's own code, not a failure to compare), per dtype."""

    verdict: Verdict | None                          # None: no pair ran (every one a declared error)
    why: str = ""
    declared_errors: tuple[tuple[str, str], ...] = ()  # (dtype, the declaration), each once
    contradicts: bool = False

    def __str__(self) -> str:
        if self.verdict is None:
            text = "-"
        elif self.verdict.agrees:
            text = "equivalent"
        else:
            text = str(self.verdict)
            if self.why:
                text += f" ({self.why[:REASON_WIDTH]}{'...' if len(self.why) > REASON_WIDTH else ''})"
        by_dtype: dict[str, list[str]] = {}
        for dtype, why in self.declared_errors:
            by_dtype.setdefault(dtype, []).append(why)
        for dtype, whys in by_dtype.items():
            text += f"; {dtype}: declared error ({'; '.join(whys)})"
        if self.contradicts:
            text += " !contradicts its declaration"
        return text


def reference_verdict(family: str, variant: str, results: list[PairResult] | None) -> ReferenceVerdict | str:
    """The variant's ``ReferenceVerdict``; 'reference' for the reference itself, '-' when the
    check did not run (--skip-check) or has no such pair."""
    ref = reference_of(family)
    if ref is not None and ref.id == variant:
        return "reference"
    if not results or ref is None:
        return "-"
    mine = [r for r in results if r.family == family and {r.a, r.b} == {ref.id, variant}]
    if not mine:
        return "-"
    declared = [r for r in mine if _verdict(r.verdict) == Verdict.ERROR and r.expected == Verdict.ERROR
                and r.ok and r.declared]
    ran = [r for r in mine if r not in declared]
    worst = max(ran, key=lambda r: _verdict(r.verdict).rank) if ran else None
    why = "" if worst is None else (worst.reason or worst.expected or "").replace("\n", " ").replace("|", "/")
    return ReferenceVerdict(
        verdict=None if worst is None else _verdict(worst.verdict), why=why,
        declared_errors=tuple(dict.fromkeys((r.dtype, r.declared) for r in declared)),
        contradicts=not all(r.ok for r in mine))


def verdict_against_reference(family: str, variant: str, results: list[PairResult] | None) -> str:
    """'reference', 'equivalent', 'different (declared: ...)', '...; float16: declared error
    (...)' over every case, dtype and config the check ran; '-' when it did not run."""
    return str(reference_verdict(family, variant, results))


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
