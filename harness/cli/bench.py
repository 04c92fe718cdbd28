"""The ``bench`` and ``report`` commands.

bench   measures a profile's cases (resumable: rows already in the log are skipped)
report  runs the check and the benchmarks and writes reports/<device>/<profile>/ (whole or
        not at all); or, with --from FILE, writes reports/<device>/from/ from rows
        measured before (a bench log, a results.json, or pytest-benchmark's JSON)
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import torch
from tabulate import tabulate

from harness.base.config import CONFIG_MATRIX, Config, config_matrix
from harness.base.dtypes import default_dtypes, resolve_device
from harness.base.errors import ConfigError, HarnessError, ResultsFileError
from harness.bench.cases import PROFILES, TIMING, check_sizes, plan
from harness.bench.log import is_own_log, load_many, read_log, slow_peaks
from harness.bench.row import BenchRow, PeakRow, Row, RowSpec, typed_rows
from harness.bench.sweep import device_dir, run_sweep, shard
from harness.check.api import check_all
from harness.cli.common import _load, _variant_files
from harness.families.catalog import FAMILIES
from harness.registry import reference_of, variants_of
from harness.registry.nearest import nearest_reference
from harness.report.bench_frame import compare_with, frame, load_old
from harness.report.bench_tables import print_targets
from harness.report.differences_md import is_own_differences, write_differences
from harness.report.io import ensure_writable, write_json
from harness.report.markdown import refuse_foreign_report, write_report
from harness.trace.differences import differences


def _int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"impossible sweep: {text!r} is not a comma-separated list of integers") from None
    if not values:
        raise ConfigError(f"impossible sweep: {text!r} names no value")
    return values


def add_commands(sub, common) -> None:
    for name, helptext in (("bench", "speed and memory benchmarks (resumable)"),
                           ("report", "check + benchmarks -> reports/<device>/<profile>/")):
        p = sub.add_parser(name, help=helptext)
        common(p)
        p.add_argument("--device", default="auto", help="cpu, cuda or auto (default: cuda when present)")
        prof = p.add_mutually_exclusive_group()
        prof.add_argument("--quick", dest="profile", action="store_const", const="quick",
                          help="the quick profile (default; about 80 s with the check on an idle 2-core CPU)")
        prof.add_argument("--full", dest="profile", action="store_const", const="full", help="the full sweep")
        p.set_defaults(profile=None)
        p.add_argument("--variant", action="append", metavar="ID",
                       help="only this variant (repeatable; the family's reference is timed beside it)")
        p.add_argument("--seq", type=str, help="override the sequence lengths, e.g. 64,128")
        p.add_argument("--batch", type=str, help="override the batch sizes, e.g. 1,8")
        p.add_argument("--set", action="append", metavar="KEY=VALUE",
                       help="config override on every case, as check's: d_model, heads, d_ff, batch and "
                            "tgt_len (= seq) set the shape; kv_heads=2, window=3,0 ... the attention's config")
        p.add_argument("--dtype", action="append", metavar="DTYPE",
                       help="time in this dtype (repeatable; default: the profile's), e.g. bfloat16")
        p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's default, set explicitly)")
        p.add_argument("--fresh", action="store_true", help="ignore rows already measured in the log")
        p.add_argument("--no-progress", action="store_true", help="no progress bar")
        p.add_argument("--min-time", type=float,
                       help="seconds of timed calls per variant per round (default: quick "
                            f"{TIMING['quick']['min_time']:g}, full {TIMING['full']['min_time']:g})")
        p.add_argument("--rounds", type=int, help="interleaved rounds per group (default: quick "
                       f"{TIMING['quick']['rounds']}, full {TIMING['full']['rounds']})")
        p.add_argument("--no-rss", action="store_true", help="skip the CPU resident-set probe process")
        p.add_argument("--time-budget", type=float, metavar="S",
                       help="seconds for the whole command: a group is started only if it ends in time (the "
                            "longest group so far as its length" + (", and a reserve for writing the report)"
                                                                     if name == "report" else ")")
                            + "; the groups the targets read go first; the same command resumes the rest")
        if name == "bench":
            p.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
            p.add_argument("--log", metavar="PATH",
                           help="the JSONL log (default reports/<device>/bench-<profile>.jsonl, "
                                "bench-<profile>-shard<I>of<N>.jsonl with --shard)")
            p.add_argument("--shard", metavar="I/N",
                           help="measure shard I of N (whole groups, split by key: N machines run 1/N each; "
                                "merge with report --from LOG1 --from LOG2 ...)")
            p.set_defaults(func=cmd_bench)
        else:
            p.add_argument("--out", default="reports", help="parent folder of <device>/ (default reports)")
            p.add_argument("--from", dest="from_file", metavar="FILE", action="append",
                           help="make the report from rows measured before; measure nothing "
                                "(written to <out>/<device>/from/); repeatable: the logs of "
                                "bench --shard runs merge into one report (rows from different "
                                "environments are refused)")
            p.add_argument("--compare", metavar="OLD.json",
                           help="a change column against an earlier results.json "
                                "(default: the committed reference <out>/<device>/full/results.json)")
            p.add_argument("--no-compare", action="store_true", help="no change column")
            p.add_argument("--threshold", type=float, default=0.10, help="regression threshold (default %(default).2f)")
            p.add_argument("--skip-check", action="store_true", help="leave the verdicts out")
            p.set_defaults(func=cmd_report)


def _validate(args) -> None:
    """Options that cannot work, refused before anything runs."""
    timing = TIMING[args.profile or "quick"]
    args.min_time = timing["min_time"] if args.min_time is None else args.min_time
    args.rounds = timing["rounds"] if args.rounds is None else args.rounds
    if args.threads is not None and args.threads < 1:
        raise ConfigError(f"--threads {args.threads} must be at least 1")
    if not args.min_time > 0:
        raise ConfigError(f"--min-time {args.min_time:g} must be a positive number of seconds")
    if args.rounds < 3:
        raise ConfigError(f"--rounds {args.rounds} must be at least 3 (quartiles across rounds)")
    if getattr(args, "threshold", 0) < 0 or getattr(args, "threshold", 0) != getattr(args, "threshold", 0):
        raise ConfigError(f"--threshold {args.threshold:g} must be a fraction >= 0 (0.10 = 10% slower)")
    if getattr(args, "shard", None) is not None:
        args.shard = _shard(args.shard)
    if getattr(args, "from_file", None):
        given = " ".join(args.from_file)
        if args.profile:
            raise ConfigError(f"--from {given} reports rows measured before; --{args.profile} "
                              "(a profile to measure) contradicts it")
        for opt in ("seq", "batch", "variant", "time_budget", "set", "dtype"):
            if getattr(args, opt):
                raise ConfigError(f"--from {given} measures nothing; --{opt.replace('_', '-')} does not apply")
    args.profile = args.profile or "quick"


def _shard(text: str) -> tuple[int, int]:
    index, sep, count = text.partition("/")
    if not (sep and index.isdigit() and count.isdigit() and 1 <= int(index) <= int(count)):
        raise ConfigError(f"--shard {text!r} must be I/N with 1 <= I <= N (e.g. 1/2)")
    return int(index), int(count)


# Seconds a time budget keeps for writing the report after the sweep (tables, plots): 15 s
# for the quick profile's 200 rows on this project's loaded 2-core machine.
REPORT_RESERVE_S = 20.0


def _setup(args):
    args.started = time.monotonic()
    _validate(args)
    _load(args)
    args.threads = args.threads or torch.get_num_threads()
    torch.set_num_threads(args.threads)  # set explicitly; recorded in every row
    return resolve_device(args.device)


def _plan(args, device):
    cases = plan(args.profile, device, args.family, args.variant,
                 _int_list(args.batch) if args.batch else None, _int_list(args.seq) if args.seq else None,
                 sets=args.set, dtypes=args.dtype)
    if getattr(args, "shard", None):
        cases = shard(cases, *args.shard)
    check_sizes(cases)
    return cases


def _writable_dir(path: Path, what: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        Path(tempfile.mkdtemp(dir=path.parent, prefix=".probe-")).rmdir()
    except OSError as exc:
        raise HarnessError(f"cannot write {what} '{path}': {exc.strerror or exc}") from None


def _summary(rows: list[BenchRow]) -> str:
    out = []
    for row in rows:
        s, m, st = row.spec, row.measurement, row.measurement.stats
        ratio = st.vs_baseline
        out.append({
            "family": s.family, "variant": s.variant,
            "shape": f"B={s.batch} T={s.seq} D={s.d_model}" + "".join(f" {x}" for x in s.sets or ()),
            "dtype": s.dtype,
            "mode": s.mode + (" compiled" if s.compiled else ""),
            "median ms": f"{st.median_s * 1e3:.3g}" if m.ok else m.status,
            "IQR ms": f"{st.iqr_s * 1e3:.2g}" if m.ok else str(m.error if m.error is not None else "")[:40],
            "vs baseline [round q1-q3]": (f"{ratio:.2f}x [{st.vs_baseline_q1:.2f}-{st.vs_baseline_q3:.2f}]"
                                          if m.ok and ratio is not None and ratio == ratio else "-"),
            "GFLOP/s": f"{st.gflops:.1f}" if m.ok and st.gflops == st.gflops else "-",
            "path": (m.path if m.path is not None else "-") if m.ok else "-",
        })
    return tabulate(pd.DataFrame(out), headers="keys", tablefmt="simple", showindex=False) if out else "(no rows)"


def _measure(args, cases, log: Path, fresh: bool, reserve: float = 0.0) -> tuple[list[BenchRow], bool]:
    """Run the sweep over ``cases``; returns (new rows, interrupted)."""
    rows, interrupted = [], False
    deadline = None if args.time_budget is None else args.started + args.time_budget - reserve
    try:
        for row in run_sweep(cases, log, fresh=fresh, min_time=args.min_time, rounds=args.rounds,
                             threads=args.threads, progress=not args.no_progress, memory=not args.no_rss,
                             variant_files=_variant_files(args), profile=args.profile, deadline=deadline):
            rows.append(row)
    except KeyboardInterrupt:
        interrupted = True
        print(f"\ninterrupted: {len(rows)} new case(s) kept in {log}; run the same command to resume",
              file=sys.stderr)
    return rows, interrupted


def _disturbed_lines(rows: list[Row]) -> list[str]:
    rows = typed_rows(slow_peaks([r.to_json() if isinstance(r, (BenchRow, PeakRow)) else r for r in rows]))
    peaks = [r for r in rows if isinstance(r, PeakRow) and r.disturbed]
    return [f"disturbed window: {p.group}: {p.disturbed}" for p in peaks]


def cmd_bench(args) -> int:
    device = _setup(args)
    part = f"-shard{args.shard[0]}of{args.shard[1]}" if args.shard else ""
    log = Path(args.log) if args.log else Path("reports") / device_dir(device) / f"bench-{args.profile}{part}.jsonl"
    cases = _plan(args, device)
    ensure_writable(str(log), "the bench log", own=is_own_log)
    if args.json:
        ensure_writable(args.json)
    _, interrupted = _measure(args, cases, log, args.fresh)
    wanted = {c.key for c in cases}
    logged = typed_rows(read_log(log, quiet=True))
    rows = [r for r in logged if isinstance(r, BenchRow) and r.key in wanted]
    print(_summary(rows))
    groups = {r.spec.group for r in rows}
    peaks = [r for r in logged if isinstance(r, PeakRow) and r.group in groups]
    for line in _disturbed_lines(peaks):
        print(line, file=sys.stderr)
    print(f"\n{len(rows)} case(s) in {log}; threads {args.threads}")
    if args.json:
        write_json(args.json, {"peaks": [r.to_json() for r in peaks], "rows": [r.to_json() for r in rows]})
    return 130 if interrupted else 0


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


def cmd_report(args) -> int:
    device = _setup(args)
    root = Path(args.out)
    results = paths = None
    note = ""
    if args.from_file:
        rows = load_many([Path(f) for f in args.from_file])
        if not any(isinstance(r, BenchRow) for r in rows):
            raise ResultsFileError(f"no benchmark rows in {', '.join(repr(f) for f in args.from_file)}: "
                                   "give a bench log or a results.json with measured cases")
        note = "Rows from " + ", ".join(f"`{f}`" for f in args.from_file) + "."
        measured = next((r for r in rows if isinstance(r, BenchRow)), None)
        spec = measured.spec if measured else RowSpec(key="")
        measured_on = spec.device if spec.device is not None else device
        device_folder = root / device_dir(measured_on, measured.environment.device_name if measured else None)
        out = device_folder / "from"
        profile = spec.profile or "from a file"
        note += _coverage(rows, profile, measured_on)
    else:
        device_folder = root / device_dir(device)
        out = device_folder / args.profile
        profile = args.profile
    reference = device_folder / "full" / "results.json"
    compare = None if args.no_compare else (args.compare or (str(reference) if reference.is_file() else None))
    old = load_old(compare) if compare else None
    cases = None if args.from_file else _plan(args, device)
    _writable_dir(out, "the report to")
    refuse_foreign_report(out)  # before the run, not after it
    if not args.from_file and args.profile == "full" and not args.skip_check:
        ensure_writable(str(root / "DIFFERENCES.md"), "the differences file", own=is_own_differences)
    if cases is not None:
        log = device_folder / f"report-{args.profile}.jsonl"
        ensure_writable(str(log), "the bench log", own=is_own_log)
        fresh = args.fresh  # rows measured with this code and settings are reused
        if not args.skip_check:
            # quick: the default config; full: the whole config matrix (as `harness check`)
            print("check: every variant against its spec, every pair ...", file=sys.stderr)
            families = args.family or list(FAMILIES)
            check_report = check_all(families, _check_configs(args), device, args.dtype or default_dtypes(device),
                                     variants=_checked_variants(args.variant, families, device))
            results, paths = check_report.pairs, check_report.paths

            torch.set_num_threads(args.threads)  # the check may pin its own; the benchmark's are these
        _, interrupted = _measure(args, cases, log, fresh, REPORT_RESERVE_S)
        wanted = {c.key for c in cases}
        logged = typed_rows(read_log(log, quiet=True))
        groups = {r.spec.group for r in logged if isinstance(r, BenchRow) and r.key in wanted}
        rows = [r for r in logged if r.key in wanted or (isinstance(r, PeakRow) and r.group in groups)]
        measured = sum(isinstance(r, BenchRow) for r in rows)
        if args.time_budget is not None and not interrupted and measured < len(wanted):
            note = (f"**Time budget: {measured} of {len(wanted)} cases measured** within --time-budget "
                    f"{args.time_budget:g} s (the groups the targets read first, then the cheapest); the same "
                    f"command measures the rest into `{log}`.")
        if args.time_budget is not None and not measured:
            print(f"time budget: no group fitted in --time-budget {args.time_budget:g} s; no report written",
                  file=sys.stderr)
            return 1
        if interrupted and (out / "results.json").exists():  # never replace a report with a partial one
            print(f"the report in {out} is left as it was (an interrupted run replaces no report); "
                  f"the rows measured so far are in {log}: run the same command to resume", file=sys.stderr)
            return 130
        if interrupted:
            note = "Interrupted: the sweep is incomplete."
    if old is not None and not args.compare:
        old, compare = _like_reference(rows, old, compare, args.threshold)
    report = write_report(rows, out, results=results, paths=paths, old_rows=old, threshold=args.threshold,
                          profile=profile, note=note, compared_with=compare)
    print_targets(rows)
    for line in _disturbed_lines(rows):
        print(line, file=sys.stderr)
    print(f"wrote {report} (+ results.csv, results.json, plots)" + (f"; compared with {compare}" if compare else ""))
    if old is not None:  # like with like: rows measured otherwise have no change, said here too
        notes = [n for n in compare_with(frame(rows)[0], old, args.threshold)["change_note"] if n]
        if notes:
            print(f"note: {len(notes)} row(s) not compared with {compare}: measured otherwise there: "
                  f"{'; '.join(dict.fromkeys(notes))}", file=sys.stderr)
    if note.startswith("Interrupted"):
        print("reports/DIFFERENCES.md is not written by an interrupted run", file=sys.stderr)
    elif results is not None and args.profile == "full":  # where and why they differ (harness.trace.differences)
        started = time.perf_counter()
        findings = differences(results, paths, families=args.family, cfg=Config(), sessions=check_report.sessions)
        written = write_differences(Path(args.out) / "DIFFERENCES.md", findings, Config())
        print(f"differences: {len(findings)} families in {time.perf_counter() - started:.0f} s")
        print(f"wrote {written}")
    elif results is not None:
        print("reports/DIFFERENCES.md is written by `report --full` (tracing every boundary takes minutes)")
    if results is not None:
        bad = check_report.failures + [r for r in results if not r.ok]
        print(f"check: {len(check_report.specs)} spec checks and {len(results)} pairs, "
              f"{len(bad)} contradict their declarations")
        if bad:
            return 1
    return 130 if note.startswith("Interrupted") else 0
