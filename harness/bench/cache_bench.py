"""The cache benchmark: generation time with and without the incremental cache."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tabulate import tabulate

from harness.base.config import Config
from harness.base.errors import ConfigError
from harness.base.files import atomic_write, check_output_folder, save_figure
from harness.bench.counters import peak_bytes
from harness.check.spec import one_thread
from harness.systems.decoding import greedy_steps, prefix
from harness.systems.models import MODEL_FAMILIES, Models, decodable


@dataclass
class CacheBenchRow:
    family: str
    variant: str
    seq: int
    batch: int
    cached: bool
    seconds: float
    tokens_per_s: float
    peak_bytes: int
    load: float
    threads: int

    def as_dict(self) -> dict:
        return asdict(self)


def cache_bench(lengths: list[int], cfg: Config | None = None, repeats: int = 3) -> list[CacheBenchRow]:
    """Tokens/s and peak memory of greedy generation with and without each model's cache,
    as the generated length T grows. Cached and uncached runs alternate (one window), the
    median of ``repeats`` is kept; the 1-minute load average is recorded with each row.
    One intra-op thread (the tensors are tiny; the note in the written table says so)."""
    cfg = cfg or Config()
    rows = []
    with one_thread():
        _cache_sweep(rows, lengths, cfg, repeats)
    return rows


def _cache_sweep(rows: list, lengths: list[int], cfg: Config, repeats: int) -> None:

    for family in MODEL_FAMILIES:
        for t in lengths:
            c = cfg.replace(tgt_len=t, src_len=t)
            models = Models(family, c)
            for variant, decoding in decodable(family, c):
                if not decoding.cache:
                    continue
                module = models.get(variant, models.zero(variant))
                steps = t - prefix(variant, decoding, models.inputs).size(1)
                times = {True: [], False: []}
                for _ in range(repeats):
                    for cached in (True, False):
                        start = time.perf_counter()
                        greedy_steps(variant, decoding, module, models.inputs, steps, cached=cached)
                        times[cached].append(time.perf_counter() - start)
                for cached in (True, False):
                    seconds = statistics.median(times[cached])
                    peak = peak_bytes(lambda: greedy_steps(variant, decoding, module, models.inputs, steps,
                                                           cached=cached), "cpu")
                    rows.append(CacheBenchRow(family, variant.id, t, c.batch, cached, seconds,
                                              c.batch * steps / seconds, peak, os.getloadavg()[0],
                                              torch.get_num_threads()))


def write_cache_bench(out_dir: str | Path, lengths: list[int] | None = None,
                      cfg: Config | None = None) -> list[CacheBenchRow]:
    """Runs ``cache_bench`` and writes cache_bench.json, cache_bench.md and cache_bench.png."""
    lengths = lengths or [8, 16, 32, 64]
    if min(lengths) < 2:
        raise ConfigError(f"impossible sweep: generated lengths {lengths} must be at least 2")
    (cfg or Config()).replace(tgt_len=max(lengths), src_len=max(lengths)).check_fits("cache-bench --seq")
    out = Path(out_dir)
    check_output_folder(out, ("cache_bench.json", "cache_bench.md", "cache_bench.png"), "cache-bench --out")
    out.mkdir(parents=True, exist_ok=True)
    rows = cache_bench(lengths, cfg)
    atomic_write(out / "cache_bench.json", json.dumps([r.as_dict() for r in rows], indent=1))
    table = []
    for r in rows:
        if r.cached:
            base = next(x for x in rows
                        if (x.family, x.variant, x.seq, x.cached) == (r.family, r.variant, r.seq, False))
            table.append((r.family, r.variant, r.seq, f"{r.tokens_per_s:.0f}", f"{base.tokens_per_s:.0f}",
                          f"{r.tokens_per_s / base.tokens_per_s:.2f}x", r.peak_bytes, base.peak_bytes, f"{r.load:.1f}"))
    text = tabulate(table, headers=("family", "model", "T", "tokens/s cached", "tokens/s full", "speed-up",
                                    "peak B cached", "peak B full", "load avg"), tablefmt="github")
    atomic_write(out / "cache_bench.md", _machine_note(rows) + "\n\n" + text + "\n")
    _plot_cache(rows, out / "cache_bench.png")
    return rows


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


def _plot_cache(rows: list[CacheBenchRow], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
