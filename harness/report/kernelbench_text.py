"""``python -m harness kernelbench``'s outputs, rendered from the rows it is given: the terminal
table, the CSV text (KernelBench's columns, then the regimes seen) and the fast_p line."""

from __future__ import annotations

import csv
import io
from typing import Any, Iterable

from tabulate import tabulate

CSV_COLUMNS = ("problem", "candidate", "compiled", "correct", "failing_check", "runtime_ms", "ref_runtime_ms",
               "speedup", "regimes", "failing_regimes")
FAILURE_WIDTH = 110  # the terminal's failing check, cut (the JSON and CSV keep it whole)


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def _cut(text: str, width: int = FAILURE_WIDTH) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def table(rows: Iterable[Any]) -> str:
    """A row per candidate: compiled, correct, the regimes seen, the failing check, the times."""
    body = [[r.problem, r.candidate, "yes" if r.compiled else "no", "yes" if r.correct else "NO",
             len(r.regimes), _ms(r.runtime_ms), _ms(r.ref_runtime_ms),
             "-" if r.speedup is None else f"{r.speedup:.2f}x", _cut(r.failing_check) or "-"] for r in rows]
    return tabulate(body, headers=["problem", "candidate", "compiled", "correct", "regimes", "ms", "ref ms",
                                   "speedup", "failing check"], tablefmt="simple", disable_numparse=True)


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
