"""The cache benchmark: generation time with and without the incremental cache."""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

import torch

from harness.base.config import Config
from harness.base.errors import ConfigError
from harness.base.files import OUTPUT_MAGIC, SCHEMA_VERSION, atomic_write, check_output_folder
from harness.bench.counters import peak_bytes
from harness.bench.row import CacheBenchRow
from harness.check.spec import one_thread
from harness.systems.decoding import greedy_steps, prefix
from harness.systems.models import MODEL_FAMILIES, Models, decodable


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
    """Runs ``cache_bench``, writes cache_bench.json and returns the rows. Their table and
    plot (cache_bench.md, cache_bench.png) are rendered by ``harness.report.models_md``; the
    folder is checked for all three before anything is measured."""
    lengths = lengths or [8, 16, 32, 64]
    if min(lengths) < 2:
        raise ConfigError(f"impossible sweep: generated lengths {lengths} must be at least 2")
    (cfg or Config()).replace(tgt_len=max(lengths), src_len=max(lengths)).check_fits("cache-bench --seq")
    out = Path(out_dir)
    check_output_folder(out, ("cache_bench.json", "cache_bench.md", "cache_bench.png"), "cache-bench --out")
    out.mkdir(parents=True, exist_ok=True)
    rows = cache_bench(lengths, cfg)
    atomic_write(out / "cache_bench.json", json.dumps({"written_by": OUTPUT_MAGIC, "schema": SCHEMA_VERSION,
                                                        "rows": [r.as_dict() for r in rows]}, indent=1))
    return rows
