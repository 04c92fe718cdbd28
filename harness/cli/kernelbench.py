"""``python -m harness kernelbench PROBLEM.py CANDIDATE.py|FOLDER/`` (or ``FOLDER/`` of problems,
each ``NAME.py`` with its candidates in ``NAME/``): every candidate judged against its
problem's ``Model`` (``harness.check.kernelbench``), a table on the terminal, ``--json`` and
``--csv`` rows in KernelBench's columns, the fast_p line; ``--time`` also times each correct
candidate (no hack found) against its reference (``harness.bench.pair.time_pair``: the speedup with its
interval, a speedup beyond the machine's peak flagged, one too short to bound noted, at one
intra-op thread on CPU unless ``--threads``, one timed under a load above the cores marked).
Exit 0 when every candidate is correct, 1 when one is not, 2 on a usage mistake (one line)."""

from __future__ import annotations

from pathlib import Path

from harness.base.boundary import UserCodeError, describe
from harness.base.errors import HarnessError, InputError
from harness.base.files import read_text, refuse_foreign, write_text
from harness.bench.pair import PairTiming, time_pair
from harness.check.kernelbench import FAST_P, Problem, Row, discover, fast_p, judge_candidate, load_problem, timing_pair
from harness.report.io import ensure_writable, write_json
from harness.report.kernelbench_text import csv_text, fast_p_line, is_own_csv, table, timing_lines


def _own_csv(path: Path) -> bool:
    try:
        return is_own_csv(read_text(path))
    except (OSError, UnicodeDecodeError):
        return False


def _timed(row: Row, t: PairTiming) -> None:
    """``row`` with the pair's times: KernelBench's columns, the interval, the flag or the note."""
    row.runtime_ms, row.ref_runtime_ms = t.candidate_s.value * 1e3, t.reference_s.value * 1e3
    if t.speedup is not None:
        row.speedup, row.speedup_low, row.speedup_high = t.speedup.value, t.speedup.low, t.speedup.high
    row.peak_flag = "" if t.flag is None else str(t.flag)
    row.peak_note = "" if t.note is None else str(t.note)
    row.threads, row.load_before, row.load_after = t.threads, t.load_before, t.load_after
    row.disturbed = "" if t.disturbed is None else str(t.disturbed)
    row.timed = True


def _time(row: Row, problem: Problem, path: Path, args) -> None:
    """``row`` timed against its reference; a candidate that fails to import again, or that
    changes the reference's code to be timed, is its row's failure (the run goes on)."""
    try:
        pair = timing_pair(problem, path, args.device)
        timing = time_pair(pair.reference, pair.candidate, pair.make_inputs, device=args.device, threads=args.threads)
    except (InputError, UserCodeError) as exc:
        row.correct, row.failing_check = False, f"cannot be timed: {describe(exc)}"
        return
    except HarnessError:
        raise
    except Exception as exc:  # noqa: BLE001  (the candidate's code raised while it was timed: its row)
        row.correct, row.failing_check = False, f"cannot be timed: {describe(exc)}"
        return
    found = pair.patched()
    if found:
        row.correct, row.hacks, row.failing_check = False, found, found[0].line
        return
    _timed(row, timing)


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
            if args.time and row.correct and not row.hacks:
                _time(row, problem, path, args)
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
    for line in timing_lines(rows):
        print(line)
    print(fast_p_line(fast, len(rows)))
    return 0 if all(r.correct for r in rows) else 1
