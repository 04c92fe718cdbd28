"""The ``report`` command: the check and the benchmarks written to reports/<device>/<profile>/
(whole or not at all); or, with --from FILE, reports/<device>/from/ from rows measured before
(a bench log, a results.json, or pytest-benchmark's JSON). ``cmd_report`` reads as its steps:
where the report goes, what it is compared with, the outputs refused before the run, the
check, the sweep and how it ended (``SweepEnd``), the report, DIFFERENCES.md, the exit status.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import torch

from harness.base.config import CONFIG_MATRIX, Config, config_matrix
from harness.base.dtypes import default_dtypes
from harness.base.errors import ResultsFileError
from harness.base.files import refuse_unwritable
from harness.bench.cases import PROFILES, plan
from harness.bench.log import is_own_log, load_many, read_log
from harness.bench.row import BenchRow, PeakRow, Row, typed_rows
from harness.bench.sweep import device_dir
from harness.check.api import check_all
from harness.cli.bench import _disturbed_lines, _measure, _plan, _setup
from harness.families.catalog import FAMILIES
from harness.registry import reference_of, variants_of
from harness.registry.nearest import nearest_reference
from harness.report.bench_frame import compare_with, frame, load_old
from harness.report.bench_tables import print_targets
from harness.report.differences_md import is_own_differences, write_differences
from harness.report.io import ensure_writable
from harness.report.markdown import refuse_foreign_report, write_report
from harness.trace.differences import differences

# Seconds a time budget keeps for writing the report after the sweep (tables, plots): 15 s
# for the quick profile's 200 rows on this project's loaded 2-core machine.
REPORT_RESERVE_S = 20.0



def _coverage(rows, profile: str, device: str) -> str:
    """' Incomplete: ...' when the rows cover only part of their profile's plan."""
    if profile not in PROFILES:
        return ""
    planned = {c.key: c for c in plan(profile, device)}
    measured = {r.key for r in rows}
    missing = [c for k, c in planned.items() if k not in measured]
    if not missing:
        return ""
    families = sorted({c.family for c in missing})
    return (f" **Incomplete: {len(missing)} of {len(planned)} cases of the {profile} profile were not "
            f"measured** (the sweep was stopped; families with missing cases: {', '.join(families)}).")


def _like_reference(rows, old, reference: str, threshold: float):
    """(old rows, path) of the committed reference when it measured some case as this run
    does (same machine, torch, threads, --min-time); else (None, None) and one line saying
    why: a reference from another machine or profile is no default comparison."""
    compared = compare_with(frame(rows)[0], old, threshold)
    if compared["change"].notna().any():
        return old, reference
    notes = [n for n in compared["change_note"] if n]
    why = f"measured otherwise there: {'; '.join(dict.fromkeys(notes))}" if notes else "no case measured in both"
    print(f"note: not compared with {reference} ({why}); --compare FILE compares with an earlier run",
          file=sys.stderr)
    return None, None


def _check_configs(args) -> dict[str, Config]:
    """The configs the report's check runs on: the default one (quick), the whole matrix
    (full), or with --set the one config it gives (as ``check --set``)."""
    if args.set:
        return config_matrix(args.set)
    return dict(CONFIG_MATRIX) if args.profile == "full" else {"default": Config()}


def _checked_variants(names: list[str] | None, families: list[str], device: str) -> list[str] | None:
    """The keys the report's check covers: the variants ``--variant`` names, the references
    of their families (the precision baseline) and each one's nearest reference (the
    summary's verdict is taken against it); None: all."""
    if not names:
        return None
    named = [v for f in families for v in variants_of(f) if v.id in names]
    refs = [ref.key for ref in (reference_of(f) for f in dict.fromkeys(v.family for v in named)) if ref]
    nearest = [n.candidate.key for v in named if (n := nearest_reference(v, device)) is not None]
    return list(dict.fromkeys([v.key for v in named] + refs + nearest))


class SweepEnd(Enum):
    """How the report's sweep ended; what the report says and the exit status follow from it."""

    COMPLETE = "complete"              # every case planned was measured (or the rows were read from files)
    OVER_BUDGET = "over budget"        # --time-budget ended it with cases left: the same command measures them
    NOTHING_FITTED = "nothing fitted"  # --time-budget left no time for any group: no report
    INTERRUPTED = "interrupted"        # Ctrl-C: the rows measured so far


@dataclass(frozen=True)
class _Sweep:
    rows: list[Row]
    end: SweepEnd
    note: str = ""   # the report's opening note on these rows


@dataclass(frozen=True)
class _Target:
    """Where a report goes: its device's folder and its own; the rows of --from files."""

    device_folder: Path
    out: Path
    profile: str
    read: _Sweep | None = None   # None: measured here

    @property
    def log(self) -> Path:
        return self.device_folder / f"report-{self.profile}.jsonl"


def cmd_report(args) -> int:
    device = _setup(args)
    target = _report_target(args, device)
    compare, old = _reference(args, target)
    cases = None if target.read is not None else _plan(args, device)
    _refuse_before_run(args, target)
    checked = None
    if target.read is not None:
        sweep = target.read
    else:
        checked = None if args.skip_check else _report_check(args, device)
        sweep = _report_sweep(args, cases, target)
        stopped = _stopped(args, sweep, target)
        if stopped is not None:
            return stopped
    if old is not None and not args.compare:
        old, compare = _like_reference(sweep.rows, old, compare, args.threshold)
    _write(args, target, sweep, checked, old, compare)
    _differences(args, sweep.end, checked)
    return _exit_status(sweep.end, checked)


def _report_target(args, device: str) -> _Target:
    """reports/<device>/<profile>/ for a run; for --from files, their rows and the folder of
    the device they were measured on (``from/``)."""
    root = Path(args.out)
    if not args.from_file:
        folder = root / device_dir(device)
        return _Target(folder, folder / args.profile, args.profile)
    rows = load_many([Path(f) for f in args.from_file])
    measured = next((r for r in rows if isinstance(r, BenchRow)), None)
    if measured is None:
        raise ResultsFileError(f"no benchmark rows in {', '.join(repr(f) for f in args.from_file)}: "
                               "give a bench log or a results.json with measured cases")
    spec = measured.spec
    measured_on = spec.device if spec.device is not None else device
    folder = root / device_dir(measured_on, measured.environment.device_name)
    profile = spec.profile or "from a file"
    note = "Rows from " + ", ".join(f"`{f}`" for f in args.from_file) + "." + _coverage(rows, profile, measured_on)
    return _Target(folder, folder / "from", profile, _Sweep(rows, SweepEnd.COMPLETE, note))


def _reference(args, target: _Target):
    """(the results.json compared with, its rows): --compare, else the committed reference
    ``<device>/full/results.json`` when there is one; (None, None) with --no-compare."""
    reference = target.device_folder / "full" / "results.json"
    compare = None if args.no_compare else (args.compare or (str(reference) if reference.is_file() else None))
    return compare, (load_old(compare) if compare else None)


def _refuse_before_run(args, target: _Target) -> None:
    """Every output the report writes, refused now if it cannot be written (not after the run)."""
    refuse_unwritable(target.out, "the report to", folder=True, create=True)  # --out itself: validate.py
    refuse_foreign_report(target.out)
    if target.read is None and args.profile == "full" and not args.skip_check:
        ensure_writable(str(Path(args.out) / "DIFFERENCES.md"), "the differences file", own=is_own_differences)
    if target.read is None:
        ensure_writable(str(target.log), "the bench log", own=is_own_log)


def _report_check(args, device: str):
    """quick: the default config; full: the whole config matrix (as ``harness check``)."""
    print("check: every variant against its spec, every pair ...", file=sys.stderr)
    families = args.family or list(FAMILIES)
    checked = check_all(families, _check_configs(args), device, args.dtype or default_dtypes(device),
                        variants=_checked_variants(args.variant, families, device))
    torch.set_num_threads(args.threads)  # the check may pin its own; the benchmark's are these
    return checked


def _report_sweep(args, cases, target: _Target) -> _Sweep:
    """Measure the cases not in the log yet (rows measured with this code and settings are
    reused), then take the planned cases' rows and their groups' peaks as the log has them."""
    _, interrupted = _measure(args, cases, target.log, args.fresh, REPORT_RESERVE_S)
    wanted = {c.key for c in cases}
    logged = typed_rows(read_log(target.log, quiet=True))
    groups = {r.spec.group for r in logged if isinstance(r, BenchRow) and r.key in wanted}
    rows = [r for r in logged if r.key in wanted or (isinstance(r, PeakRow) and r.group in groups)]
    measured = sum(isinstance(r, BenchRow) for r in rows)
    budget = args.time_budget
    if budget is not None and not measured:
        return _Sweep(rows, SweepEnd.NOTHING_FITTED)
    if interrupted:
        return _Sweep(rows, SweepEnd.INTERRUPTED, "Interrupted: the sweep is incomplete.")
    if budget is not None and measured < len(wanted):
        return _Sweep(rows, SweepEnd.OVER_BUDGET, (
            f"**Time budget: {measured} of {len(wanted)} cases measured** within --time-budget {budget:g} s (the "
            f"groups the targets read first, then the cheapest); the same command measures the rest into "
            f"`{target.log}`."))
    return _Sweep(rows, SweepEnd.COMPLETE)


def _stopped(args, sweep: _Sweep, target: _Target) -> int | None:
    """The exit status where no report is written: no group fitted the time budget, or an
    interrupted run would replace a whole report with a partial one."""
    if sweep.end is SweepEnd.NOTHING_FITTED:
        print(f"time budget: no group fitted in --time-budget {args.time_budget:g} s; no report written",
              file=sys.stderr)
        return 1
    if sweep.end is SweepEnd.INTERRUPTED and (target.out / "results.json").exists():
        print(f"the report in {target.out} is left as it was (an interrupted run replaces no report); "
              f"the rows measured so far are in {target.log}: run the same command to resume", file=sys.stderr)
        return 130
    return None


def _write(args, target: _Target, sweep: _Sweep, checked, old, compare) -> None:
    rows = sweep.rows
    report = write_report(rows, target.out, results=None if checked is None else checked.pairs,
                          paths=None if checked is None else checked.paths, old_rows=old, threshold=args.threshold,
                          profile=target.profile, note=sweep.note, compared_with=compare)
    print_targets(rows)
    for line in _disturbed_lines(rows):
        print(line, file=sys.stderr)
    print(f"wrote {report} (+ results.csv, results.json, plots)" + (f"; compared with {compare}" if compare else ""))
    if old is not None:  # like with like: rows measured otherwise have no change, said here too
        notes = [n for n in compare_with(frame(rows)[0], old, args.threshold)["change_note"] if n]
        if notes:
            print(f"note: {len(notes)} row(s) not compared with {compare}: measured otherwise there: "
                  f"{'; '.join(dict.fromkeys(notes))}", file=sys.stderr)


def _differences(args, end: SweepEnd, checked) -> None:
    """reports/DIFFERENCES.md, where and why the variants differ (``harness.trace.differences``):
    written by a whole ``report --full`` only."""
    if end is SweepEnd.INTERRUPTED:
        print("reports/DIFFERENCES.md is not written by an interrupted run", file=sys.stderr)
    elif checked is not None and args.profile == "full":
        started = time.perf_counter()
        findings = differences(checked.pairs, checked.paths, families=args.family, cfg=Config(),
                               sessions=checked.sessions)
        written = write_differences(Path(args.out) / "DIFFERENCES.md", findings, Config())
        print(f"differences: {len(findings)} families in {time.perf_counter() - started:.0f} s")
        print(f"wrote {written}")
    elif checked is not None:
        print("reports/DIFFERENCES.md is written by `report --full` (tracing every boundary takes minutes)")


def _exit_status(end: SweepEnd, checked) -> int:
    """1 where the check found a contradiction, else 130 after an interrupted sweep, else 0."""
    if checked is not None:
        bad = checked.failures + [r for r in checked.pairs if not r.ok]
        print(f"check: {len(checked.specs)} spec checks and {len(checked.pairs)} pairs, "
              f"{len(bad)} contradict their declarations")
        if bad:
            return 1
    return 130 if end is SweepEnd.INTERRUPTED else 0
