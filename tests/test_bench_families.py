"""The attention kernels, the LLaMA-style block and the LLaMA-style model are benchmarked:
``bench --family`` gives a well-formed row (time, memory, FLOPs) for each registered
variant, the kernels' shapes written as (B, H, T, d), in the summary and the report's tables.
Tiny cases (B=1, T=16, D=32, H=2) and short rounds: the method, not the machine, is under test."""

from __future__ import annotations

import pytest

from harness.bench import sweep
from harness.bench.cases import BENCH_FAMILIES, plan
from harness.bench.log import read_log
from harness.bench.shapes import shape_text
from harness.cli.main import main
from harness.registry import reference_of, variants_of
from harness.report.bench_frame import frame
from harness.report.bench_tables import family_table

FAST = ["--min-time", "0.002", "--rounds", "3", "--threads", "1", "--no-progress", "--no-rss"]
TINY = ["--device", "cpu", "--seq", "16", "--batch", "1", "--set", "d_model=32", "--set", "heads=2", *FAST]
# what each family's rows must show as their shape (d = D / H for a kernel)
SHAPES = {"attention_kernel": "B=1 H=2 T=16 d=16", "llama_block": "B=1 T=16 D=32", "llama_model": "B=1 T=16 D=32"}


@pytest.fixture(autouse=True)
def small_peak(monkeypatch):
    """A 64x64 matmul as the peak: the method, not the machine, is under test here."""
    monkeypatch.setitem(sweep.PEAK_SIZE, "cpu", 64)
    monkeypatch.setattr(sweep, "PEAK_MIN_TIME", 0.002)


@pytest.mark.parametrize("family", sorted(SHAPES))
def test_a_bench_run_gives_a_well_formed_row_per_variant(family, tmp_path, capsys):
    log = tmp_path / "log.jsonl"
    assert main(["bench", *TINY, "--family", family, "--log", str(log)]) == 0
    summary = capsys.readouterr().out
    rows = [r for r in read_log(log) if r["kind"] == "case"]
    assert sorted(r["variant"] for r in rows) == sorted(v.id for v in variants_of(family))
    ref = reference_of(family).id
    ok = [r for r in rows if r["status"] == "ok"]
    assert ref in {r["variant"] for r in ok} and len(ok) >= 2  # the reference and at least one other
    for r in ok:  # time, FLOPs, memory, the ratio to the reference, measured interleaved
        assert r["median_s"] > 0 and len(r["round_s"]) == 3 and r["interleaved"], r["key"]
        assert r["flops"] > 0 and r["peak_bytes"] > 0 and r["baseline"] == ref, r["key"]
        assert r["vs_baseline"] > 0 and r["gflops"] > 0, r["key"]
    assert all(r["vs_baseline"] == 1.0 for r in ok if r["variant"] == ref)
    for r in rows:
        assert (r["batch"], r["seq"], r["d_model"], r["heads"]) == (1, 16, 32, 2)
        assert r["status"] == "ok" or (r["status"] == "unsupported" and r["error"]), r  # said why
    assert summary.count(SHAPES[family]) == len(rows)  # one summary line per row, with its shape
    peaks = [r for r in read_log(log) if r["kind"] == "peak"]
    assert len(peaks) == 1 and peaks[0]["peak_flops"] > 0


def test_the_kernel_table_has_heads_and_head_width(tmp_path):
    log = tmp_path / "log.jsonl"
    assert main(["bench", *TINY, "--family", "attention_kernel", "--variant", "sdpa_math", "--log", str(log)]) == 0
    cases, _ = frame(read_log(log))
    table = family_table(cases, "attention_kernel")
    header = next(line for line in table.splitlines() if line.startswith("| variant"))
    assert [c.strip() for c in header.strip("|").split("|")][:7] == ["variant", "mode", "B", "H", "T", "d", "dtype"]
    assert "| sdpa_math " in table and "| eager " in table  # the reference is timed beside it
    assert shape_text("attention_kernel", 1, 16, 32, float("nan")) == "B=1 T=16 D=32"  # no heads read back
    assert shape_text("llama_block", 1, 16, 32, 2) == "B=1 T=16 D=32"


def test_every_profile_times_the_new_families_at_their_shapes():
    for profile in ("quick", "full"):
        for family in SHAPES:
            cases = plan(profile, "cpu", [family])
            assert {c.variant for c in cases} == {v.id for v in variants_of(family)}, (profile, family)
    kernels = {(c.batch, c.heads, c.seq, c.d_model // c.heads) for c in plan("full", "cpu", ["attention_kernel"])}
    assert len(kernels) >= 3  # a few (B, H, T, d)


@pytest.mark.parametrize("family, message", [
    ("nope", "unknown family 'nope'"),
    ("masks", "family 'masks' has no benchmark; benchmarked: "),
])
def test_a_family_with_no_benchmark_is_one_line(family, message, capsys):
    assert main(["bench", "--device", "cpu", "--family", family, *FAST]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and message in err[0] and "Traceback" not in err[0], err
    if family == "masks":
        assert all(f"'{f}'" in err[0] for f in BENCH_FAMILIES) and "'attention_kernel'" in err[0]
