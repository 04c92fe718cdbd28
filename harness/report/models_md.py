"""The whole-model results as files: the copy task's table and plot (copy_task.md,
copy_task.png) and the cache benchmark's (cache_bench.md, cache_bench.png), rendered from
the runs and rows ``harness.systems.copy_task`` and ``harness.bench.cache_bench`` return.
REPORT.md shows them in its "Whole models" section (``markdown.models_section``)."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import torch
from tabulate import tabulate

from harness.base.files import atomic_write, save_figure
from harness.bench.row import CacheBenchRow
from harness.check.results import CopyRun


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def write_copy_task_report(runs: list[CopyRun], out: Path) -> None:
    """copy_task.md (the table) and copy_task.png (loss curves; exact-match accuracy)."""
    atomic_write(out / "copy_task.md", copy_task_table(runs) + "\n")
    plot_copy_task(runs, out / "copy_task.png")


def copy_task_table(runs: list[CopyRun]) -> str:
    rows = [(r.variant, r.steps, f"{r.losses[0]:.3f}", f"{sum(r.losses[-10:]) / len(r.losses[-10:]):.3f}",
             f"{r.exact_match:.1%}", f"{r.token_accuracy:.1%}", f"{r.seconds:.1f}") for r in runs]
    return tabulate(rows, headers=("model", "steps", "first loss", "last-10 loss", "exact match",
                                   "token accuracy", "train s"), tablefmt="github")


def plot_copy_task(runs: list[CopyRun], path: Path) -> None:
    """Loss curves (left) and exact-match accuracy (right) of the copy-task runs."""
    plt = _plt()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for r in runs:
        left.plot(range(1, len(r.losses) + 1), r.losses, label=r.variant, linewidth=1)
    left.set_xlabel("update")
    left.set_ylabel("loss per token (NLL)")
    left.set_yscale("log")
    left.set_title("copy task: training loss")
    left.legend(fontsize=8)
    right.bar([r.variant for r in runs], [100 * r.exact_match for r in runs])
    right.set_ylabel("exact-match accuracy (%)")
    right.set_title("greedy decoding, held-out sequences")
    right.tick_params(axis="x", rotation=30, labelsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


# -- the cache benchmark ------------------------------------------------------------------------


def write_cache_bench_report(rows: list[CacheBenchRow], out: Path) -> None:
    """cache_bench.md (the method and machine note, then the table) and cache_bench.png."""
    atomic_write(out / "cache_bench.md", cache_bench_markdown(rows))
    plot_cache_bench(rows, out / "cache_bench.png")


def cache_bench_markdown(rows: list[CacheBenchRow]) -> str:
    """Per model and length: tokens/s with and without the cache, the speed-up, peak bytes
    and the load average, under a note on the method and the machine."""
    table = []
    for r in rows:
        if r.cached:
            base = next(x for x in rows
                        if (x.family, x.variant, x.seq, x.cached) == (r.family, r.variant, r.seq, False))
            table.append((r.family, r.variant, r.seq, f"{r.tokens_per_s:.0f}", f"{base.tokens_per_s:.0f}",
                          f"{r.tokens_per_s / base.tokens_per_s:.2f}x", r.peak_bytes, base.peak_bytes, f"{r.load:.1f}"))
    text = tabulate(table, headers=("family", "model", "T", "tokens/s cached", "tokens/s full", "speed-up",
                                    "peak B cached", "peak B full", "load avg"), tablefmt="github")
    return _machine_note(rows) + "\n\n" + text + "\n"


def _machine_note(rows: list[CacheBenchRow]) -> str:
    """Method and machine, and a warning when the machine was loaded during the sweep."""
    cores, load = os.cpu_count() or 1, max(r.load for r in rows)
    note = (f"Greedy generation on CPU ({platform.processor() or platform.machine()}, {cores} cores, "
            f"torch {torch.__version__}, {rows[0].threads} intra-op thread(s)); per length, cached and "
            f"full-prefix runs alternate 3 times and the median is kept; peak = live tensor storages "
            f"created during one generation. B={rows[0].batch}.")
    if load > cores:
        note += (f"\n\n**Disturbed:** the 1-minute load average reached {load:.1f} on {cores} cores during "
                 f"the sweep (other jobs on the machine); timings and speed-ups are indicative only.")
    return note


def plot_cache_bench(rows: list[CacheBenchRow], path: Path) -> None:
    """Tokens/s against the generated length, with and without each model's cache."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    for key in sorted({(r.variant, r.cached) for r in rows}):
        pts = sorted((r.seq, r.tokens_per_s) for r in rows if (r.variant, r.cached) == key)
        ax.plot(*zip(*pts), marker="o", linestyle="-" if key[1] else "--",
                label=f"{key[0]} {'cache' if key[1] else 'full prefix'}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("generated length T")
    ax.set_ylabel("tokens/s (greedy, CPU)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)
