"""``python -m harness kernelbench``'s outputs, rendered from the rows it is given: the terminal
table, the timed rows' thread count and load, flags, notes and disturbances, the CSV text
(KernelBench's columns, the speedup's interval, the flag and the note, the thread count, the
load and the disturbance, then the regimes seen) and the fast_p line."""

from __future__ import annotations

import csv
import io
from typing import Any, Iterable

from tabulate import tabulate

from harness.bench.timing import INTERVAL_LEVEL

CSV_COLUMNS = ("problem", "candidate", "compiled", "correct", "failing_check", "runtime_ms", "ref_runtime_ms",
               "speedup", "speedup_low", "speedup_high", "peak_flag", "peak_note", "threads", "load_before",
               "load_after", "disturbed", "regimes", "failing_regimes")
FAILURE_WIDTH = 110  # the terminal's failing check, cut (the JSON and CSV keep it whole)
DISTURBED_MARK = " (d)"  # after a speedup timed under a load above the cores


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def _cut(text: str, width: int = FAILURE_WIDTH) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def _speedup(r: Any) -> tuple[str, str]:
    """(the speedup, its interval): "beyond peak" where the flag withheld it, a * where noted,
    ``DISTURBED_MARK`` where the load disturbed the timing."""
    mark = DISTURBED_MARK if r.disturbed else ""
    if r.peak_flag:
        return "beyond peak" + mark, "-"
    if r.speedup is None:
        return "-", "-"
    return (f"{r.speedup:.2f}x" + ("*" if r.peak_note else "") + mark,
            "-" if r.speedup_low is None else f"{r.speedup_low:.2f}-{r.speedup_high:.2f}")


def table(rows: Iterable[Any]) -> str:
    """A row per candidate: compiled, correct, the regimes seen, the failing check, the times."""
    body = [[r.problem, r.candidate, "yes" if r.compiled else "no", "yes" if r.correct else "NO",
             len(r.regimes), _ms(r.runtime_ms), _ms(r.ref_runtime_ms), *_speedup(r), _cut(r.failing_check) or "-"]
            for r in rows]
    return tabulate(body, headers=["problem", "candidate", "compiled", "correct", "regimes", "ms", "ref ms",
                                   "speedup", f"{INTERVAL_LEVEL:.0%} interval", "failing check"],
                    tablefmt="simple", disable_numparse=True)


def _load(x: float | None) -> str:
    return "unknown" if x is None else f"{x:.2f}"


def _conditions(timed: list[Any]) -> str:
    """The line the timed rows' figures were measured under: threads, load before and after."""
    threads = sorted({r.threads for r in timed if r.threads is not None})
    counts = "/".join(str(n) for n in threads) or "unknown"
    loads = [x for r in timed for x in (r.load_before, r.load_after) if x is not None]
    span = f"{_load(min(loads))}-{_load(max(loads))}" if loads else "unknown"
    return f"timed at {counts} intra-op thread(s); 1-minute load average {span} (before and after each pair)"


def timing_lines(rows: Iterable[Any]) -> list[str]:
    """For timed rows, the thread count and load they were timed under; then a line per row the
    peak flagged (its speedup withheld) or could not bound (``*``), and one per row the load
    disturbed (``DISTURBED_MARK``)."""
    timed = [r for r in rows if r.timed]
    if not timed:
        return []
    lines = [_conditions(timed)]
    lines += [f"{r.problem}/{r.candidate}: " + (r.peak_flag if r.peak_flag else f"* {r.peak_note}")
              for r in timed if r.peak_flag or r.peak_note]
    lines += [f"{r.problem}/{r.candidate}:{DISTURBED_MARK} disturbed: timed at {r.disturbed}: "
              "time again on a quiet machine" for r in timed if r.disturbed]
    return lines


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
