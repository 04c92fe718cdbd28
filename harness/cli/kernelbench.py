"""``python -m harness kernelbench PROBLEM.py CANDIDATE.py|FOLDER/`` (or ``FOLDER/`` of problems,
each ``NAME.py`` with its candidates in ``NAME/``): every candidate judged against its
problem's ``Model`` (``harness.check.kernelbench``), a table on the terminal, ``--json`` and
``--csv`` rows in KernelBench's columns, the fast_p line; ``--time`` also times each correct
candidate against its reference. Exit 0 when every candidate is correct, 1 when one is not,
2 on a usage mistake (one line)."""

from __future__ import annotations

from pathlib import Path

from harness.base.errors import HarnessError
from harness.base.files import read_text, refuse_foreign, write_text
from harness.bench.kernelbench_time import time_pair
from harness.check.kernelbench import FAST_P, Row, discover, fast_p, judge_candidate, load_problem, timing_pair
from harness.report.io import ensure_writable, write_json
from harness.report.kernelbench_text import csv_text, fast_p_line, is_own_csv, table


def _own_csv(path: Path) -> bool:
    try:
        return is_own_csv(read_text(path))
    except (OSError, UnicodeDecodeError):
        return False


def cmd_kernelbench(args) -> int:
    if args.device not in ("cpu", "cuda"):
        raise HarnessError(f"--device {args.device!r}: give cpu or cuda")
    ensure_writable(args.json)
    if args.csv:
        ensure_writable(args.csv, "--csv", own=_own_csv)
    pairs = discover(args.problem, args.candidates)
    problems = [(load_problem(p), cs) for p, cs in pairs]  # every problem loads before any work
    rows: list[Row] = []
    verdicts: dict[str, dict] = {}
    for problem, candidates in problems:
        for path in candidates:
            row, j = judge_candidate(problem, path, gradients=args.gradients, device=args.device, only=args.only)
            if args.time and row.correct:
                t = time_pair(*timing_pair(problem, path, args.device))
                row.runtime_ms, row.ref_runtime_ms, row.speedup = t.cand_ms, t.ref_ms, t.speedup
            rows.append(row)
            if j is not None:
                verdicts[f"{problem.name}/{row.candidate}"] = j.as_dict()
    fast = fast_p(rows, FAST_P)
    if args.json:
        write_json(args.json, {"rows": [r.as_dict() for r in rows], "fast_p": fast, "verdicts": verdicts})
    if args.csv:
        refuse_foreign(args.csv, "--csv", own=_own_csv)
        write_text(args.csv, csv_text(rows))
    print(table(rows))
    print(fast_p_line(fast, len(rows)))
    return 0 if all(r.correct for r in rows) else 1
