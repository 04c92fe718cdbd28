"""``python -m harness kernelbench``'s outputs, rendered from the rows it is given: the terminal
table, the timed rows' flags and notes, the CSV text (KernelBench's columns, the speedup's
interval, the flag and the note, then the regimes seen) and the fast_p line."""

from __future__ import annotations

import csv
import io
from typing import Any, Iterable

from tabulate import tabulate

from harness.bench.timing import INTERVAL_LEVEL

CSV_COLUMNS = ("problem", "candidate", "compiled", "correct", "failing_check", "runtime_ms", "ref_runtime_ms",
               "speedup", "speedup_low", "speedup_high", "peak_flag", "peak_note", "regimes", "failing_regimes")
FAILURE_WIDTH = 110  # the terminal's failing check, cut (the JSON and CSV keep it whole)


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def _cut(text: str, width: int = FAILURE_WIDTH) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def _speedup(r: Any) -> tuple[str, str]:
    """(the speedup, its interval): "beyond peak" where the flag withheld it, a * where noted."""
    if r.peak_flag:
        return "beyond peak", "-"
    if r.speedup is None:
        return "-", "-"
    return (f"{r.speedup:.2f}x" + ("*" if r.peak_note else ""),
            "-" if r.speedup_low is None else f"{r.speedup_low:.2f}-{r.speedup_high:.2f}")


def table(rows: Iterable[Any]) -> str:
    """A row per candidate: compiled, correct, the regimes seen, the failing check, the times."""
    body = [[r.problem, r.candidate, "yes" if r.compiled else "no", "yes" if r.correct else "NO",
             len(r.regimes), _ms(r.runtime_ms), _ms(r.ref_runtime_ms), *_speedup(r), _cut(r.failing_check) or "-"]
            for r in rows]
    return tabulate(body, headers=["problem", "candidate", "compiled", "correct", "regimes", "ms", "ref ms",
                                   "speedup", f"{INTERVAL_LEVEL:.0%} interval", "failing check"],
                    tablefmt="simple", disable_numparse=True)


def timing_lines(rows: Iterable[Any]) -> list[str]:
    """A line per timed row the peak flagged (its speedup withheld) or could not bound (``*``)."""
    return [f"{r.problem}/{r.candidate}: " + (r.peak_flag if r.peak_flag else f"* {r.peak_note}")
            for r in rows if r.peak_flag or r.peak_note]


def fast_p_line(fast: dict[str, float | None], n: int) -> str:
    parts = [f"{k} {'-' if v is None else f'{v:.2f}'}" for k, v in fast.items()]
    timed = all(v is not None for v in fast.values())
    return f"{n} candidate(s): " + ", ".join(parts) + ("" if timed else " (fast_p above 0 needs --time)")


def csv_text(rows: Iterable[Any]) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for r in rows:
        d = r.as_dict()
        w.writerow(["" if d[c] is None else (";".join(d[c]) if isinstance(d[c], list) else d[c])
                    for c in CSV_COLUMNS])
    return out.getvalue()


def is_own_csv(text: str) -> bool:
    """A CSV this command wrote: its header line."""
    return text.splitlines()[:1] == [",".join(CSV_COLUMNS)]
