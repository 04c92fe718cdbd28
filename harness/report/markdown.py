"""The report: ``reports/<device>/<profile>/`` with REPORT.md (the first screen: the summary, the
targets, the method), TABLES.md and VERDICTS.md (the long tables), results.csv, results.json and
PNG plots.

Tables through pandas + tabulate; plots through matplotlib (Agg). Made from benchmark
rows (a bench log, a results.json or a pytest-benchmark JSON) and, when given, the
check's pair results.
"""

from __future__ import annotations

import datetime as _dt
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
from tabulate import tabulate

from harness.base.errors import HarnessError, ResultsFileError
from harness.base.files import atomic_write, held_signals, make_public, output_lock
from harness.bench.flops import FUSED_TILES
from harness.bench.measured import Status
from harness.bench.timing import CPU_PEAK_METHOD, CUDA_PEAK_METHOD, PEAK_FRACTION, PEAK_SPREAD_LIMIT
from harness.check.results import PairResult, PathResult
from harness.families.catalog import get_family
from harness.registry import reference_of
from harness.report.bench_frame import ENV_KEYS, compare_with, frame
from harness.report.bench_tables import (
    counting_errors,
    family_table,
    machine_state,
    mechanisms_table,
    peaks_table,
)
from harness.report.io import write_json
from harness.report.plots import plot_sweeps, plot_verdicts
from harness.report.summary import summary_table
from harness.report.tables import (
    LEGEND,
    differences_table,
    fit_width,
    paths_table,
    traits_table,
    verdict_matrix,
)
from harness.report.targets import MET_TEXT, asked_targets, evaluate


def method_lines(cases: pd.DataFrame, device: str) -> list[str]:
    threads = sorted({int(x) for x in cases["threads"].dropna()}) if "threads" in cases else []
    interleaved = bool(cases["interleaved"].fillna(False).astype(bool).any())
    rounds = sorted({int(x) for x in cases["rounds"].dropna()}) if "rounds" in cases else []
    lines = ["## Method", ""]
    if interleaved:
        lines.append(
            "- Time: `torch.utils.benchmark.Timer`, the one timing engine (CPU and CUDA; its timer synchronizes "
            "CUDA; garbage collector off), with `num_threads` set explicitly to "
            f"{', '.join(map(str, threads)) or '?'} (also `torch.set_num_threads`, and recorded in every row). "
            "The variants of one family at one shape, dtype and mode form a group; the group's variants, the "
            f"family's reference and a square matmul are timed in {', '.join(map(str, rounds))} alternating rounds "
            "in one window (forward order, then reverse), after one warm-up call each. Each round is Timer blocks "
            "for at least `--min-time`: a call of a quarter of that or more is a block by itself, a shorter one "
            "gets its block size once from `blocked_autorange`. `median ms` and `IQR ms`: over every block of "
            "every round.")
        lines.append(
            "- Ratios: `vs baseline` (reference time / variant time, > 1 is faster) and `% peak` come from the "
            "same interleaved rounds: the figure is the ratio of the two medians over rounds, shown with the "
            "per-round ratio's quartiles [q1-q3]. A target is decided on a 90% bootstrap interval of that ratio "
            "(rounds resampled in pairs, seeded): met only when its low end meets the threshold, not met only "
            "when its high end misses it, undecided when the threshold lies inside it.")
    else:
        lines.append(
            "- Time: rows from pytest-benchmark (`benchmarks/`, same callables, its own timer; threads "
            f"{', '.join(map(str, threads)) or '?'}). Not interleaved: no ratio is stated and no timed target "
            "is claimed from them.")
    lines += [
        "- `fwd` runs under `torch.no_grad()` in eval mode (where torch's fused fast paths run); `fwd+bwd` runs "
        "forward with autograd and `backward` with a seeded gradient, eval mode (dropout off), gradients reset "
        "before each call.",
        "- FLOPs: `torch.utils.flop_counter.FlopCounterMode`, matmul-class operators, counted as executed where "
        "the kernel's work is known (`flops_basis` in `results.csv`: `executed` or `dense-equivalent`). A causal "
        "fused kernel computes whole tiles up to the diagonal and skips the tiles past it: the CPU flash kernel "
        "(key blocks 512 wide; query blocks of 32, 64 or 256; its backward recomputes QK^T, 5 matmuls per "
        "visited block) and SDPA's CUDA kernels, counted at their tiles: "
        + "; ".join(f"{t.backend} {t.q_tile} x {t.k_tile}" for t in FUSED_TILES.values())
        + " (forward QK^T and PV per visited tile; backward QK^T again, dV, dP, dQ, dK). At T=2048 that is "
        "about 53% of the dense scores. Explicit masked attention, a kernel given an explicit mask and SDPA's "
        "math backend compute every score. An attention kernel whose skipping is not modelled (flex_attention, "
        "the low-level and varlen flash entry points) is counted as torch counts it, every score: its row is "
        "`dense-equivalent`, its GFLOP/s says so and it has no executed `% peak`. `% peak dense-eq.` counts "
        "every score of QK^T and PV (torch's own formulas): labelled dense-equivalent; above the peak it is "
        "shown as such, never as a fraction. Formulas added for the CPU flash kernel, SDPA's CUDA kernels and "
        "torch's fused MHA / encoder fast paths, which torch does not count as executed.",
        "- `% peak`: executed FLOP/s over the FLOP/s of the square matmul timed in the same rounds, same dtype "
        "(per family in TABLES.md, with its spread and the load average). Above 100% it is a **counting error** "
        "(FLOPs counted that no kernel executed), named in the list at the top, never a figure.",
        "- A group is **disturbed** when the 1-minute load average at its start or end exceeds the cores + 0.5, "
        f"its matmul peak is below {PEAK_FRACTION:.0%} of the best group peak of the run (same dtype), "
        f"or its matmul peak's IQR across rounds exceeds {PEAK_SPREAD_LIMIT:.0%} of its median; "
        "its rows are marked (d).",
        "- Saved for backward: `torch.autograd.graph.saved_tensors_hooks`, unique storages, parameters and "
        "inputs excluded.",
        f"- Peak memory: {CUDA_PEAK_METHOD if device.startswith('cuda') else CPU_PEAK_METHOD}. `not measured` "
        "says why in `results.csv` (`rss_note`).",
        "- `compiled` rows: `torch.compile` (Inductor), compiled by the first call outside any dispatch mode; "
        "`compile s` is that first call (Dynamo + Inductor + one run), timings are steady state after it; the "
        "row is refused unless Dynamo's counters show a compiled graph. Their FLOPs, path and memory are the "
        "eager module's.",
        "- `path`: the kernel operators recorded by `torch.profiler`, nested ones included.",
        "",
    ]
    return lines


def write_report(
    rows: list[dict],
    out: Path,
    *,
    results: list[PairResult] | None = None,
    paths: list[PathResult] | None = None,
    old_rows: list[dict] | None = None,
    threshold: float = 0.10,
    profile: str = "",
    note: str = "",
    compared_with: str | None = None,
) -> Path:
    """Write the report into a temporary folder beside ``out``, then put it in place: a
    report is written whole or not at all."""
    cases, _ = frame(rows)
    if cases.empty:
        raise ResultsFileError("no benchmark rows to report")
    refuse_foreign_report(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with output_lock(out, "the report folder"):
        tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.tmp-"))
        make_public(tmp)  # mkdtemp's 0700 would hide the report from the group
        try:
            _write(rows, tmp, results=results, paths=paths, old_rows=old_rows, threshold=threshold,
                   profile=profile, note=note, compared_with=compared_with)
            refuse_foreign_report(out)
            old = out.parent / f".{out.name}.old-{os.getpid()}"
            with held_signals():  # the old folder out and the new one in: never neither
                if out.exists():
                    out.rename(old)
                tmp.rename(out)
            shutil.rmtree(old, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return out / "REPORT.md"


REPORT_FILES = ("REPORT.md", "TABLES.md", "VERDICTS.md", "results.json", "results.csv")


def refuse_foreign_report(out: Path) -> None:
    """A report folder is replaced whole, so refuse one holding anything the harness did not
    write there (a file, another folder's contents, a user's notes): nothing is deleted."""
    if not out.exists():
        return
    if not out.is_dir():
        raise HarnessError(f"the report folder '{out}' exists and is not a folder; it is left as it is: "
                           "give another --out")
    try:
        names = [p.name for p in out.iterdir()]
    except OSError as exc:
        raise HarnessError(f"cannot read the report folder '{out}': {exc.strerror}") from None
    foreign = [n for n in names if n not in REPORT_FILES and not n.endswith(".png")]
    if foreign or (names and "REPORT.md" not in names):
        shown = ", ".join(sorted(foreign)[:3]) or ", ".join(sorted(names)[:3])
        raise HarnessError(f"the report folder '{out}' holds files this harness did not write ({shown}); "
                           "it would be replaced whole, so it is left as it is: give another --out")


def _write(rows, out: Path, *, results, paths, old_rows, threshold, profile, note, compared_with) -> None:
    """The report's files into ``out``: the data (json, csv), the plots, then REPORT.md,
    TABLES.md and, with check results, VERDICTS.md."""
    cases, peaks = frame(rows)
    if old_rows is not None:
        cases = compare_with(cases, old_rows, threshold)
    first = cases.iloc[0]
    env = {k: first.get(k, "") for k in ENV_KEYS}
    device = str(first["device"])

    write_json(str(out / "results.json"),
               {"environment": env, "profile": profile, "peaks": peaks.replace({np.nan: None}).to_dict("records"),
                "rows": cases.replace({np.nan: None}).to_dict("records")})
    atomic_write(out / "results.csv", cases.drop(columns=["path_ops", "round_s"], errors="ignore").to_csv(index=False))

    plots = plot_sweeps(cases, out)
    verdict_png = plot_verdicts(results, "float32" if device == "cpu" else "bfloat16", out) if results else None

    title = env.get("device_name", device)
    compared = [] if old_rows is None else [
        f"Compared with `{compared_with or 'an earlier run'}`: {int(cases['regression'].sum())} regression(s) "
        f"beyond {threshold:.0%} (`change` column: median time against the old median, where the same case "
        "was measured there)." + unlike_text(cases), ""]
    lines = [f"# Benchmark report: {title}", ""]
    lines += [f"Profile `{profile}`, made {_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M} UTC by "
              f"`python -m harness report`. {note}".rstrip(), ""]
    lines += _report_body(cases, peaks, results, env, device, compared, out.parent.parent / "models")
    atomic_write(out / "REPORT.md", fit_width("\n".join(lines)) + "\n")
    tables = [f"# Benchmark tables: {title}", "", f"Profile `{profile}`; the summary, the targets and the "
              "method are in [REPORT.md](REPORT.md).", "", *compared]
    atomic_write(out / "TABLES.md", fit_width("\n".join(tables + _family_tables(cases, peaks, plots))) + "\n")
    if results:
        verdicts = [f"# Verdicts: {title}", "", "The check's verdicts behind the summary of "
                    "[REPORT.md](REPORT.md).", "", LEGEND, ""]
        verdicts += [f"![verdicts]({verdict_png})", ""] if verdict_png else []
        atomic_write(out / "VERDICTS.md", fit_width("\n".join(verdicts + _verdict_sections(results, paths))) + "\n")


def _report_body(cases: pd.DataFrame, peaks: pd.DataFrame, results, env: dict, device: str,
                 compared: list[str], models: Path) -> list[str]:
    """REPORT.md below its title: the summary, the machine's state, the targets, the method,
    the comparison with an earlier run, the environment, the whole models, what was not measured."""
    lines = [*summary_table(cases, results, peaks)]
    lines += ["---", "", "## The long tables", "",
              "Per family, time, rate, memory and kernel path of every case: [TABLES.md](TABLES.md)"
              + ("; every verdict matrix, the declared differences and the kernel paths with and without "
                 "autograd: [VERDICTS.md](VERDICTS.md)" if results else "")
              + "; every row with its environment: `results.csv`, `results.json`.", ""]
    lines += machine_state(cases, peaks)
    errors = counting_errors(cases)
    if errors:
        lines += [f"**Counting errors: {len(errors)} row(s) execute more FLOP/s than the matmul peak timed beside "
                  "them.** No kernel does: their FLOPs count work that was not executed, so their fraction of "
                  "the peak is no figure (`counting error` in the tables) and decides no target.", "",
                  *(f"- {e}" for e in errors), ""]
    lines += targets_section(cases)
    lines += method_lines(cases, device)
    lines += compared
    lines += ["## Environment", "", tabulate(
        [(k, env.get(k, "")) for k in ENV_KEYS] + [("device", device)],
        headers=["", ""], tablefmt="github"), "",
        "The matmul peak is timed beside each group's rows, in the same rounds (per family in TABLES.md).", ""]
    lines += models_section(models)
    failed = cases[cases["status"] != Status.OK]
    if len(failed):
        lines += ["## Not measured", "", tabulate(failed[["key", "status", "error"]], headers="keys",
                                                  tablefmt="github", showindex=False), ""]
    return lines


def _family_tables(cases: pd.DataFrame, peaks: pd.DataFrame, plots: list[str]) -> list[str]:
    """TABLES.md's sections, one per family: its call and baseline, every case, the kernel
    paths, the matmul peak and the plots."""
    tables: list[str] = []
    for family in list(cases["family"].unique()):
        ref = reference_of(family)
        tables += [f"## {family}", "", f"Call: `{get_family(family).call}`. Baseline: "
                   f"`{ref.id if ref else '-'}`.", "", family_table(cases, family), ""]
        mech = mechanisms_table(cases, family)
        if mech:
            tables += ["Kernel paths at the largest shape measured, and what they mean:", "", mech, ""]
        pk = peaks_table(peaks, family)
        if pk:
            tables += ["Matmul peak timed beside these rows:", "", pk, ""]
        for p in plots:
            if p.startswith((f"time_{family}_", f"memory_{family}_")):
                tables += [f"![{p}]({p})", ""]
    return tables


def _verdict_sections(results: list[PairResult], paths: list[PathResult] | None) -> list[str]:
    """VERDICTS.md's sections: per family its traits and verdict matrices, then the declared
    differences, the kernel paths with and without autograd, and the count of contradictions."""
    verdicts: list[str] = []
    for family in dict.fromkeys(r.family for r in results):
        fam = get_family(family)
        dtypes = sorted({r.dtype for r in results if r.family == family})
        verdicts += [f"## {family}", "", "Declared traits, side by side:", "", traits_table(family, "github"), "",
                     f"Cases, one symbol each: {', '.join(c.name for c in fam.cases)}.", ""]
        for dt in dtypes:
            verdicts += [f"{dt}:", "", verdict_matrix(results, family, dt, "github"), ""]
    one = [r for r in results if r.dtype in ("float32", "bool", "bfloat16")]
    verdicts += ["## Differences and their declared reasons", "", differences_table(one, "github"), ""]
    if paths:
        verdicts += ["## Kernel paths: autograd vs no_grad", "", paths_table(paths, "github"), ""]
    bad = [r for r in results if not r.ok]
    verdicts += [f"{len(results)} comparisons, {len(bad)} contradict their declarations.", ""]
    return verdicts


def targets_section(cases: pd.DataFrame) -> list[str]:
    """The targets that name a variant measured here; none of the others (a report of a
    user's variants says nothing about targets nobody asked for)."""
    asked = asked_targets(cases)
    if not asked:
        return []
    evaluated = [evaluate(t, cases) for t in asked]
    return ["## Targets", "", tabulate(pd.DataFrame([{**e, "met": MET_TEXT[e["met"]]} for e in evaluated]),
                                       headers="keys", tablefmt="github", showindex=False), ""]


def unlike_text(cases: pd.DataFrame) -> str:
    """' N rows are not compared: ...' naming the fields (machine, torch, threads, profile)
    in which the earlier rows differ, with their values."""
    notes = [n for n in cases.get("change_note", pd.Series(dtype=object)) if isinstance(n, str) and n]
    if not notes:
        return ""
    return (f" **{len(notes)} row(s) are not compared: the earlier run measured them otherwise** "
            f"({'; '.join(dict.fromkeys(notes))}); their `change` says `not comparable`.")


def models_section(models: Path) -> list[str]:
    """The whole-model runs beside the benchmark (``python -m harness copy-task`` and
    ``cache-bench`` write them to ``reports/models/``): the copy-task curves and the k/v
    cache's speed-up, shown here as they were written there, with their own method line."""
    parts = [(name, models / f"{name}.md", f"../../models/{name}.png")
             for name in ("copy_task", "cache_bench") if (models / f"{name}.md").exists()]
    if not parts:
        return []
    titles = {"copy_task": "Copy task (004): loss and exact match per encoder-decoder model",
              "cache_bench": "Greedy decoding with and without the k/v cache"}
    lines = ["## Whole models", "",
             "From `reports/models/` (`python -m harness copy-task` and `cache-bench`, run apart from this "
             "sweep; their own method and machine state are in each table's note).", ""]
    for name, md, png in parts:
        lines += [f"### {titles[name]}", "", md.read_text().strip(), ""]
        if (models / f"{name}.png").exists():
            lines += [f"![{name}]({png})", ""]
    return lines
