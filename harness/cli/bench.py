"""The ``bench`` command, and what it shares with ``report`` (``harness.cli.report``): the
sweep's options, their checks, the plan and the measuring loop.

bench   measures a profile's cases (resumable: rows already in the log are skipped)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pandas as pd
import torch
from tabulate import tabulate

from harness.base.dtypes import resolve_device
from harness.base.errors import ConfigError
from harness.bench.cases import plan, timing_defaults
from harness.bench.log import is_own_log, read_log, slow_peaks
from harness.bench.row import BenchRow, PeakRow, Row, typed_rows
from harness.bench.shapes import shape_text
from harness.bench.sizes import check_sizes
from harness.bench.sweep import SweepSettings, device_dir, run_sweep, shard
from harness.cli.common import _load, _variant_files
from harness.report.io import ensure_writable, write_json


def _int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"impossible sweep: {text!r} is not a comma-separated list of integers") from None
    if not values:
        raise ConfigError(f"impossible sweep: {text!r} names no value")
    return values


def _validate(args) -> None:
    """Options that cannot work, refused before anything runs."""
    timing = timing_defaults(args.profile or "quick")
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


def _summary(rows: list[BenchRow]) -> str:
    out = []
    for row in rows:
        s, m, st = row.spec, row.measurement, row.measurement.stats
        ratio = st.vs_baseline
        out.append({
            "family": s.family, "variant": s.variant,
            "shape": shape_text(s.family, s.batch, s.seq, s.d_model, s.heads) + "".join(f" {x}" for x in s.sets or ()),
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
        settings = SweepSettings(fresh=fresh, min_time=args.min_time, rounds=args.rounds, threads=args.threads,
                                 progress=not args.no_progress, memory=not args.no_rss,
                                 variant_files=tuple(_variant_files(args)), profile=args.profile,
                                 deadline=deadline)
        for row in run_sweep(cases, log, settings):
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
