"""The ``bench`` and ``report`` commands.

bench   measures a profile's cases (resumable: rows already in the log are skipped)
report  runs the check and the benchmarks and writes reports/<device>/; or, with
        --from FILE, writes the report from rows measured before (a bench log, a
        results.json, or pytest-benchmark's --benchmark-json output)
"""

from __future__ import annotations

import sys
from pathlib import Path

from .errors import ConfigError


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
                           ("report", "check + benchmarks -> reports/<device>/")):
        p = sub.add_parser(name, help=helptext)
        common(p)
        p.add_argument("--device", default="auto", help="cpu, cuda or auto (default: cuda when present)")
        prof = p.add_mutually_exclusive_group()
        prof.add_argument("--quick", dest="profile", action="store_const", const="quick",
                          help="the quick profile (default; under two minutes on a 2-core CPU)")
        prof.add_argument("--full", dest="profile", action="store_const", const="full", help="the full sweep")
        p.set_defaults(profile="quick")
        p.add_argument("--variant", action="append", metavar="ID", help="only this variant (repeatable)")
        p.add_argument("--seq", type=str, help="override the sequence lengths, e.g. 64,128")
        p.add_argument("--batch", type=str, help="override the batch sizes, e.g. 1,8")
        p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
        p.add_argument("--fresh", action="store_true", help="ignore rows already measured in the log")
        p.add_argument("--no-progress", action="store_true", help="no progress bar")
        p.add_argument("--min-time", type=float, default=0.1, help="seconds of timed calls per case (min)")
        if name == "bench":
            p.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
            p.add_argument("--log", metavar="PATH", help="the JSONL log (default reports/<device>/bench-<profile>.jsonl)")
            p.set_defaults(func=cmd_bench)
        else:
            p.add_argument("--out", default="reports", help="parent folder of <device>/ (default reports)")
            p.add_argument("--from", dest="from_file", metavar="FILE",
                           help="make the report from rows measured before; measure nothing")
            p.add_argument("--compare", metavar="OLD.json", help="a change column against an earlier results.json")
            p.add_argument("--threshold", type=float, default=0.10, help="regression threshold (default 0.10)")
            p.add_argument("--skip-check", action="store_true", help="leave the verdicts out")
            p.set_defaults(func=cmd_report)


def _setup(args):
    import torch

    from .cli import _load, resolve_device

    _load(args)
    if args.threads is not None:
        if args.threads < 1:
            raise ConfigError(f"--threads {args.threads} must be at least 1")
        torch.set_num_threads(args.threads)
    return resolve_device(args.device)


def _plan(args, device):
    from .bench import plan

    return plan(args.profile, device, args.family, args.variant,
                _int_list(args.batch) if args.batch else None, _int_list(args.seq) if args.seq else None)


def _summary(rows) -> str:
    import pandas as pd
    from tabulate import tabulate

    out = []
    for r in rows:
        ok = r.get("status") == "ok"
        out.append({
            "family": r["family"], "variant": r["variant"],
            "shape": f"B={r['batch']} T={r['seq']} D={r['d_model']}", "dtype": r["dtype"],
            "mode": r["mode"] + (" compiled" if r.get("compiled") else ""),
            "median ms": f"{r['median_s'] * 1e3:.3g}" if ok else r.get("status"),
            "IQR ms": f"{r['iqr_s'] * 1e3:.2g}" if ok else str(r.get("error", ""))[:40],
            "GFLOP/s": f"{r['gflops']:.1f}" if ok and r.get("gflops") == r.get("gflops") else "-",
            "saved MiB": f"{r['saved_bytes'] / 2**20:.3g}" if r.get("saved_bytes") is not None else "-",
        })
    return tabulate(pd.DataFrame(out), headers="keys", tablefmt="simple", showindex=False) if out else "(no rows)"


def _measure(args, cases, log: Path) -> tuple[list, bool]:
    """Run the sweep over ``cases``; returns (new rows, interrupted)."""
    from .bench import run_sweep

    rows, interrupted = [], False
    try:
        for row in run_sweep(cases, log, fresh=args.fresh, min_time=args.min_time, progress=not args.no_progress):
            rows.append(row)
    except KeyboardInterrupt:
        interrupted = True
        print(f"\ninterrupted: {len(rows)} new case(s) kept in {log}; run the same command to resume",
              file=sys.stderr)
    return rows, interrupted


def cmd_bench(args) -> int:
    from .bench import device_dir, read_log

    device = _setup(args)
    log = Path(args.log) if args.log else Path("reports") / device_dir(device) / f"bench-{args.profile}.jsonl"
    cases = _plan(args, device)
    _, interrupted = _measure(args, cases, log)
    wanted = {c.key for c in cases}
    rows = [r for r in read_log(log) if r.get("key") in wanted]
    print(_summary(rows))
    print(f"\n{len(rows)} case(s) in {log}")
    if args.json:
        from .cli import write_json

        write_json(args.json, [r for r in read_log(log) if r.get("kind") == "peak"] + rows)
    return 130 if interrupted else 0


def _agreement(cases) -> dict | None:
    """Harness timing vs a bare torch.utils.benchmark.Timer on the smallest forward case."""
    from . import measure
    from .bench import prepare

    fwd = [c for c in cases if c.mode == "fwd" and not c.compiled]
    if not fwd:
        return None
    case = min(fwd, key=lambda c: (c.batch * c.seq * c.d_model, c.key))
    try:
        step = prepare(case).step
    except Exception:  # an unsupported case: nothing to agree on
        return None
    harness = measure.time_callable(step, case.device, warmup=5, min_reps=20, min_time=1.0).median
    timer = measure.timer_median(step, min_run_time=1.0)
    return {"case": case.key, "harness_s": harness, "timer_s": timer}


def cmd_report(args) -> int:
    from .bench import device_dir, load_rows, read_log
    from .cli import run_check
    from .config import Config
    from .families import FAMILIES
    from .differences import write_differences
    from .report import load_old, write_report

    device = _setup(args)
    old = load_old(args.compare) if args.compare else None
    out = Path(args.out) / device_dir(device)
    results = paths = None
    agreement = None
    note = ""
    if args.from_file:
        rows = load_rows(Path(args.from_file))
        note = f"Rows from `{args.from_file}`."
        measured = next((r for r in rows if r.get("kind", "case") == "case"), {})
        out = Path(args.out) / device_dir(measured.get("device", device), measured.get("device_name"))
    else:
        log = out / f"bench-{args.profile}.jsonl"
        if not args.skip_check:
            print("check: every pair of every family ...", file=sys.stderr)
            results, paths = run_check(args.family or list(FAMILIES), Config(), device)
        cases = _plan(args, device)
        _, interrupted = _measure(args, cases, log)
        wanted = {c.key for c in cases}
        rows = [r for r in read_log(log) if r.get("kind") == "peak" or r.get("key") in wanted]
        if interrupted:
            note = "Interrupted: the sweep is incomplete."
        else:
            agreement = _agreement(cases)
    report = write_report(rows, out, results=results, paths=paths, old_rows=old, threshold=args.threshold,
                          profile=args.profile, note=note, agreement=agreement)
    print(f"wrote {report} (+ results.csv, results.json, plots)")
    if results is not None:  # where and why the variants differ, from the same check (harness.differences)
        print(f"wrote {write_differences(Path(args.out) / 'DIFFERENCES.md', results, paths, families=args.family)}")
    if results is not None:
        bad = [r for r in results if not r.ok]
        print(f"check: {len(results)} comparisons, {len(bad)} contradict their declarations")
        if bad:
            return 1
    return 130 if note.startswith("Interrupted") else 0
