"""Benchmark machinery on tiny cases: the method, resumable logs, the report. No speed
target is asserted here; targets live in the report."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from harness.base.errors import ResultsFileError
from harness.bench import counters, sweep, timing
from harness.bench import log as bench_log
from harness.bench.cases import BenchCase, plan, prepare
from harness.bench.log import load_rows, read_log
from harness.bench.sweep import run_sweep
from harness.cli.main import main
from harness.registry import variants_of

FAST = ["--min-time", "0.002", "--rounds", "3", "--threads", "1", "--no-progress"]
# the full profile's norm sweep (both modes; the quick one times the layer families forward only)
TINY = ["--device", "cpu", "--full", "--family", "norm", "--seq", "8,16", "--batch", "1", *FAST, "--no-rss"]


@pytest.fixture(autouse=True)
def small_peak(monkeypatch):
    """A 64x64 matmul as the peak: the method, not the machine, is under test here."""
    monkeypatch.setitem(sweep.PEAK_SIZE, "cpu", 64)
    monkeypatch.setattr(sweep, "PEAK_MIN_TIME", 0.002)


@pytest.fixture(scope="module")
def norm_log(tmp_path_factory):
    """One tiny measured sweep (norm, T=8 and 16, both modes), shared by the tests below."""
    log = tmp_path_factory.mktemp("bench") / "log.jsonl"
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sweep.PEAK_SIZE, "cpu", 64)
        mp.setattr(sweep, "PEAK_MIN_TIME", 0.002)
        assert main(["bench", *TINY, "--log", str(log)]) == 0
    return log


def test_time_callable_is_timer():
    t = timing.time_callable(lambda: None, min_time=0.01, threads=1)
    assert t.reps >= 1 and t.q1 <= t.median <= t.q3 and t.iqr >= 0 and t.threads == 1


def test_interleaved_ratio_sees_a_known_factor():
    """Sleeps, not arithmetic: their ratio holds on a loaded machine too."""
    import time

    timed = timing.interleave({"short": lambda: time.sleep(0.001), "long": lambda: time.sleep(0.004)},
                               rounds=3, min_time=0.01, threads=1)
    assert len(timed.rounds["short"]) == len(timed.rounds["long"]) == 3
    med, q1, q3 = timing.quartiles(timed.ratio("long", "short"))
    assert q1 <= med <= q3 and 1.5 < med < 8  # 4 in theory; wake-up latency moves it under load


def test_interleave_gives_a_callable_its_own_min_time_and_counts_every_call():
    calls = {"a": 0, "b": 0}

    def bump(name):
        calls[name] += 1

    timed = timing.interleave({"a": lambda: bump("a"), "b": lambda: bump("b")}, rounds=2,
                               min_time=1e-6, threads=1, min_times={"b": 0.02})
    timed_b = sum(b * timed.number["b"] for b in timed.blocks["b"])
    assert timed_b >= 2 * 0.02 * 0.9  # every round of b ran its own 0.02 s
    assert sum(timed.blocks["a"]) * timed.number["a"] < timed_b
    # calls = warm-up + block-size estimate + timed blocks (no hidden warm-up per block)
    assert calls["b"] >= len(timed.blocks["b"]) * timed.number["b"]



def test_flops_executed_and_dense_for_the_cpu_flash_kernel():
    q = torch.randn(1, 2, 32, 16)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    assert counters.count_flops(lambda: sdpa(q, q, q)) == (2 * 2 * (2 * 32 * 32 * 16),) * 2
    # causal, T=1024: query blocks of 256, key blocks of 512: 3/4 of the dense scores computed
    q = torch.randn(1, 1, 1024, 8)
    executed, dense = counters.count_flops(lambda: sdpa(q, q, q, is_causal=True))
    assert dense == 2 * 2 * 1024 * 1024 * 8 and executed == dense * 3 // 4
    # causal, T=512: one 512-wide key block per query block: nothing skipped
    q = torch.randn(1, 1, 512, 8)
    executed, dense = counters.count_flops(lambda: sdpa(q, q, q, is_causal=True))
    assert executed == dense


def test_flash_backward_counts_the_recomputation():
    q = torch.randn(1, 1, 1024, 8, requires_grad=True)

    def step():
        torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()

    executed, dense = counters.count_flops(step)
    pairs = 1024 * 1024 * 3 // 4
    assert executed == 2 * 8 * pairs * (2 + 5)  # forward QK^T, PV; backward QK^T again, dV, dP, dQ, dK
    assert dense > executed


def test_kernel_path_sees_inside_the_mha_fast_path():
    """nn.MultiheadAttention's no-grad fast path: no is_causal reaches the kernel; the mask
    goes to a (B, H, T, T) masked softmax inside it."""
    mha = torch.nn.MultiheadAttention(32, 4, batch_first=True).eval()
    x = torch.randn(2, 16, 32)
    future = torch.triu(torch.ones(16, 16, dtype=torch.bool), 1)
    with torch.no_grad():
        ops = counters.kernel_path(lambda: mha(x, x, x, attn_mask=future, is_causal=True, need_weights=False))
    inner = [o for o in ops if o["parent"] == "_native_multi_head_attention"]
    assert [o["op"] for o in inner] == ["_masked_softmax"] and inner[0]["shapes"][0] == [2, 4, 16, 16]


def test_saved_bytes_linear_for_sdpa_quadratic_for_explicit():
    def saved(variant, t):
        p = prepare(BenchCase("attention", variant, 1, t, 32, 4, 128, "float32", "cpu", "fwd+bwd"))
        return counters.saved_bytes(p.forward, p.resident)

    assert saved("fused_sdpa", 128) / saved("fused_sdpa", 64) == pytest.approx(2.0, rel=0.05)
    assert saved("fused_explicit", 128) / saved("fused_explicit", 64) > 2.5


def test_cpu_peak_sees_intermediates():
    x = torch.randn(256, 256)
    peak = counters.peak_bytes(lambda: (x @ x).relu().sum(), "cpu")
    assert peak >= 2 * 256 * 256 * 4  # the matmul output and the relu output live at once


@pytest.mark.skipif(bool(__import__("harness.bench.memprobe", fromlist=["x"]).unavailable()),
                    reason="the RSS probe needs Linux /proc/self/clear_refs")
def test_rss_probe_sees_what_a_kernel_allocates_and_frees():
    """A buffer allocated and freed inside one call (as a fused kernel's scratch space) is
    invisible to the storage count but raises the resident set of the probe process."""
    from harness.bench.memprobe import ENV

    code = ("import torch\nfrom harness.bench.memprobe import rss_rise\n"
            "torch.ones(2**20).sum()\n"
            "print(rss_rise(lambda: torch.ones(16 * 2**20).sum()))")  # 64 MiB, freed inside the call
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **ENV}, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.split()[-1]) >= 60 * 2**20
    # the storage count sees it too
    assert counters.peak_bytes(lambda: torch.ones(16 * 2**20).sum(), "cpu") >= 64 * 2**20
    assert counters.peak_bytes(lambda: torch.nn.functional.scaled_dot_product_attention(
        *(torch.randn(1, 1, 8, 8),) * 3), "cpu") < 2**16  # but not a kernel's internal buffers


def test_plan_covers_every_benchmarked_variant_and_adds_the_reference():
    cases = plan("quick", "cpu")
    attention = {c.variant for c in cases if c.family == "attention"}
    assert attention == {v.id for v in variants_of("attention")}
    assert any(c.batch == 8 and c.seq == 512 and c.d_model == 512 for c in cases)
    only = plan("quick", "cpu", ["attention"], ["fused_sdpa"], [1], [8])
    assert {c.variant for c in only} == {"fused_sdpa", "torch_mha"}


def test_bench_rows_carry_method_and_resume(norm_log):
    rows = read_log(norm_log)
    cases = [r for r in rows if r["kind"] == "case"]
    assert len(cases) == len(variants_of("norm")) * 2 * 2  # variants x seq x modes
    assert rows[-1]["kind"] == "end"
    assert all(r["status"] == "ok" and r["median_s"] > 0 and r["threads"] == 1
               and r["interleaved"] and len(r["round_s"]) == 3 for r in cases)
    ref = [r for r in cases if r["variant"] == r["baseline"]]
    assert ref and all(r["vs_baseline"] == 1.0 for r in ref)
    peaks = [r for r in rows if r["kind"] == "peak"]
    assert len(peaks) == 4 and all(p["peak_flops"] > 0 and "load" in p for p in peaks)
    before = norm_log.read_text()
    assert main(["bench", *TINY, "--log", str(norm_log)]) == 0  # resumes: nothing new measured
    assert norm_log.read_text() == before


def test_log_first_line_says_what_measured_it(norm_log):
    first = json.loads(norm_log.read_text().splitlines()[0])
    assert first["harness_log"] == bench_log.LOG_MAGIC
    assert first["stamp"]["rounds"] == 3 and first["stamp"]["threads"] == 1 and first["stamp"]["code"]


def test_rows_measured_with_other_settings_are_measured_again(norm_log, tmp_path, capsys):
    log = tmp_path / "log.jsonl"
    log.write_text(norm_log.read_text())
    four = [a if a != "3" else "4" for a in TINY]  # --rounds 4 (an option given twice is refused)
    assert main(["bench", *four, "--log", str(log)]) == 0
    assert "(--rounds differs); measuring again" in capsys.readouterr().err
    cases = [r for r in read_log(log) if r["kind"] == "case"]
    assert cases and all(len(r["round_s"]) == 4 for r in cases)  # none of the 3-round rows kept


def test_timing_defaults_from_the_environment(tmp_path, capsys, monkeypatch):
    """$HARNESS_ROUNDS and $HARNESS_MIN_TIME replace the profile's defaults (the rows and the
    log's stamp say so); an option still wins; a bad value is one line naming the variable."""
    monkeypatch.setenv("HARNESS_ROUNDS", "4")
    monkeypatch.setenv("HARNESS_MIN_TIME", "0.001")
    shown = [a if a != "8,16" else "8" for a in TINY if a not in ("--min-time", "0.002", "--rounds", "3")]
    log = tmp_path / "log.jsonl"
    assert main(["bench", *shown, "--log", str(log)]) == 0
    rows = read_log(log)
    cases = [r for r in rows if r["kind"] == "case"]
    assert cases and all(len(r["round_s"]) == 4 and r["min_time"] == 0.001 for r in cases)
    stamp = json.loads(log.read_text().splitlines()[0])["stamp"]
    assert (stamp["rounds"], stamp["min_time"]) == (4, 0.001)
    assert main(["bench", *shown, "--rounds", "3", "--log", str(tmp_path / "own.jsonl")]) == 0
    assert all(len(r["round_s"]) == 3 for r in read_log(tmp_path / "own.jsonl") if r["kind"] == "case")
    capsys.readouterr()
    for name, bad in (("HARNESS_ROUNDS", "2"), ("HARNESS_ROUNDS", "3.5"), ("HARNESS_MIN_TIME", "nan")):
        monkeypatch.setenv(name, bad)
        assert main(["bench", *shown, "--log", str(tmp_path / "bad.jsonl")]) == 2
        err = capsys.readouterr().err.strip()
        assert f"${name}='{bad}' must be" in err and "\n" not in err
        monkeypatch.delenv(name)
    assert not (tmp_path / "bad.jsonl").exists()


def test_a_changed_variant_file_is_another_fingerprint(tmp_path):
    mine = tmp_path / "mine.py"
    mine.write_text("x = 1\n")
    before = bench_log.code_fingerprint([str(mine)])
    assert bench_log.code_fingerprint([str(mine)]) == before
    mine.write_text("x = 2\n")
    assert bench_log.code_fingerprint([str(mine)]) != before


@pytest.mark.parametrize("fresh", [[], ["--fresh"]])
@pytest.mark.parametrize("content", ['{"a": 1}\n', "not json at all\n", '{"kind": "case"}\n{"x": 2}\n'])
def test_a_file_the_harness_did_not_write_is_refused_and_kept(tmp_path, capsys, content, fresh):
    theirs = tmp_path / "results.jsonl"
    theirs.write_text(content)
    assert main(["bench", *TINY, "--log", str(theirs), *fresh]) == 2
    assert "left as it is" in capsys.readouterr().err
    assert theirs.read_text() == content


def test_interrupted_sweep_keeps_what_it_measured(tmp_path):
    log = tmp_path / "log.jsonl"
    cases = plan("full", "cpu", ["norm"], None, [1], [8])
    done = []
    with pytest.raises(KeyboardInterrupt):
        for row in run_sweep(cases, log, min_time=0.002, rounds=3, progress=False, memory=False):
            done.append(row)
            if len(done) == len(variants_of("norm")):  # one whole group
                raise KeyboardInterrupt
    assert len([r for r in read_log(log) if r["kind"] == "case"]) == len(done)
    rest = list(run_sweep(cases, log, min_time=0.002, rounds=3, progress=False, memory=False))
    assert len(rest) == len(cases) - len(done)


def test_cut_off_last_line_is_dropped_and_the_rest_kept(norm_log, tmp_path, capsys):
    log = tmp_path / "cut.jsonl"
    lines = norm_log.read_text().splitlines()
    log.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][: len(lines[-1]) // 2])
    rows = read_log(log)
    assert len(rows) == len(lines) - 2  # the first line (what measured it) and the cut one
    assert "cut off" in capsys.readouterr().err
    log.write_text("{broken\n" + "\n".join(lines) + "\n")
    with pytest.raises(ResultsFileError, match=":1 is not a JSON line"):
        read_log(log)


def test_disturbance_names_its_figures():
    cores = os.cpu_count()
    assert sweep.disturbance([0.1, 0.2], [100.0, 101.0, 99.0], "cpu") == ""
    assert f"load average {cores + 3:.1f} on {cores} cores" in sweep.disturbance([cores + 3.0], [100.0] * 3, "cpu")
    assert "matmul peak spread" in sweep.disturbance([0.1], [20.0, 100.0, 200.0, 100.0], "cpu")  # IQR/median 45%


def test_report_from_log_and_compare(norm_log, tmp_path, capsys):
    out = tmp_path / "reports"
    assert main(["report", "--device", "cpu", "--from", str(norm_log), "--out", str(out)]) == 0
    folder = out / "cpu" / "from"
    report = (folder / "REPORT.md").read_text()
    tables = (folder / "TABLES.md").read_text()
    assert "torch_layernorm" in report and "[TABLES.md](TABLES.md)" in report
    assert "## Targets" not in report  # no target names a norm variant: nobody asked for one
    prose = " ".join(report.split())  # prose is wrapped to the terminal's width
    assert "torch.utils.benchmark.Timer" in prose and "num_threads` set explicitly" in prose
    assert "## norm" in tables and "Matmul peak timed beside these rows" in tables and "RSS peak MiB" in tables
    assert not (folder / "VERDICTS.md").exists()  # no check ran: no verdict to show
    rows = json.loads((folder / "results.json").read_text())["rows"]
    assert {"median_s", "iqr_s", "vs_baseline_q1", "saved_bytes", "peak_bytes", "torch", "threads"} <= set(rows[0])
    assert (folder / "results.csv").exists()
    assert list(folder.glob("time_norm_*.png")) and list(folder.glob("memory_norm_*.png"))
    # --compare: one case twice as fast before (a regression), the others as they were (+0%)
    rows = read_log(norm_log)
    first = next(i for i, r in enumerate(rows) if r.get("kind") == "case")
    rows[first] = {**rows[first], "median_s": rows[first]["median_s"] / 2}
    old = tmp_path / "old.json"
    old.write_text(json.dumps(rows))
    assert main(["report", "--device", "cpu", "--from", str(norm_log), "--out", str(tmp_path / "r2"),
                 "--compare", str(old)]) == 0
    again = (tmp_path / "r2" / "cpu" / "from" / "REPORT.md").read_text()
    tables = (tmp_path / "r2" / "cpu" / "from" / "TABLES.md").read_text()
    assert "1 regression(s)" in again and "+0%" in tables and "+100% REGRESSION" in tables


def test_report_keeps_the_committed_reference(norm_log, tmp_path, capsys):
    """A quick report goes to <device>/quick/; <device>/full/ (the reference) is read, not
    written, and not compared with where it measured no case as this run did (like with like,
    tests/test_report_summary.py)."""
    out = tmp_path / "reports"
    assert main(["report", "--device", "cpu", "--from", str(norm_log), "--out", str(out)]) == 0
    (out / "cpu" / "from").rename(out / "cpu" / "full")
    reference = {p.name: p.read_bytes() for p in (out / "cpu" / "full").iterdir()}
    assert main(["report", "--skip-check", "--device", "cpu", "--family", "norm", "--variant", "torch_layernorm",
                 "--seq", "8", "--batch", "1", *FAST, "--no-rss", "--out", str(out)]) == 0
    assert {p.name: p.read_bytes() for p in (out / "cpu" / "full").iterdir()} == reference
    quick = (out / "cpu" / "quick" / "REPORT.md").read_text()
    assert "Compared with" not in quick
    assert f"not compared with {out / 'cpu' / 'full' / 'results.json'} (no case measured in both)" in \
        capsys.readouterr().err
    assert not list((out / "cpu").glob(".quick*"))  # no temporary folder left


def test_report_is_written_whole_or_not_at_all(norm_log, tmp_path, monkeypatch):
    from harness.report import markdown

    out = tmp_path / "reports"
    assert main(["report", "--device", "cpu", "--from", str(norm_log), "--out", str(out)]) == 0
    before = (out / "cpu" / "from" / "REPORT.md").read_text()

    def broken(rows, folder, **kw):
        (folder / "results.json").write_text("half")
        raise KeyboardInterrupt

    monkeypatch.setattr(markdown, "_write", broken)
    with pytest.raises(KeyboardInterrupt):
        markdown.write_report(read_log(norm_log), out / "cpu" / "from")
    assert (out / "cpu" / "from" / "REPORT.md").read_text() == before
    assert sorted(p.name for p in (out / "cpu").iterdir()) == ["from"]


def test_unsupported_rows_are_recorded():
    """A variant that cannot take the shape is a row with its reason, and the sweep goes on."""
    case = BenchCase("encoder_layer", "t2t", 1, 8, 64, 4, 256, "float32", "cpu", "fwd")
    rows, peak = sweep.measure_group([case], min_time=0.002, rounds=3, threads=1)
    m = rows[0].measurement
    assert m.status == "unsupported" and "8 heads" in m.error and peak.peak_flops > 0


def test_a_declared_float16_fill_overflow_is_recorded_as_declared_not_run():
    """The write-ups' -1e9 fill cannot be held in float16: declared, so the row says so
    instead of an error row with masked_fill's message."""
    case = BenchCase("attention", "annotated", 1, 8, 16, 2, 64, "float16", "cpu", "fwd")
    rows, _ = sweep.measure_group([case], min_time=0.002, rounds=3, threads=1)
    m = rows[0].measurement
    assert (m.status, m.error) == ("unsupported", "declared error: annotated: fill -1e+09 overflows float16")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the CUDA timing path runs on a GPU machine")
def test_cuda_timing_and_peak():
    a = torch.randn(1024, 1024, device="cuda")
    t = timing.time_callable(lambda: a @ a, min_time=0.05)
    assert t.median > 0
    assert counters.peak_bytes(lambda: a @ a, "cuda") >= 1024 * 1024 * 4


def test_load_rows_reads_pytest_benchmark_json(tmp_path):
    info = {"key": "norm/x|...", "family": "norm", "variant": "x", "batch": 1, "seq": 8, "d_model": 64,
            "heads": 8, "d_ff": 256, "dtype": "float32", "device": "cpu", "mode": "fwd", "compiled": False,
            "flops": 1000}
    data = {"machine_info": {"cpu": {"brand_raw": "test cpu"}}, "benchmarks": [
        {"name": "t", "extra_info": info, "stats": {"median": 0.001, "q1": 0.0009, "q3": 0.0011,
                                                    "iqr": 0.0002, "rounds": 10}}]}
    path = tmp_path / "pb.json"
    path.write_text(json.dumps(data))
    [row] = load_rows(path)
    m = row.measurement
    assert m.stats.median_s == 0.001 and m.stats.gflops == pytest.approx(1e-3) and row.environment.cpu == "test cpu"
    assert m.interleaved is False and m.stats.vs_baseline is None and "vs_baseline" not in row.to_json()


@pytest.mark.parametrize("q1, q3, met", [(0.90, 0.95, True), (0.70, 0.80, False), (0.80, 0.90, "undecided")])
def test_timed_target_is_met_not_met_or_undecided_from_its_interval(q1, q3, met):
    import pandas as pd

    from harness.report.targets import MET_TEXT, Target, evaluate

    target = Target(name="t", kind="peak_fraction", family="attention", variant="v", threshold=0.85)
    row = {"family": "attention", "variant": "v", "status": "ok", "interleaved": True, "rounds": 7,
           "peak_fraction": (q1 + q3) / 2, "peak_fraction_q1": q1, "peak_fraction_q3": q3,
           "peak_fraction_dense": (q1 + q3) / 2, "gflops": 100.0, "peak_flops": 1.2e11, "disturbed": ""}
    out = evaluate(target, pd.DataFrame([row]))  # a row logged before the interval: its quartiles
    assert out["met"] == met and MET_TEXT[out["met"]]
    # the interval decides where there is one, whatever the per-round quartiles
    wide = {**row, "peak_fraction_q1": 0.5, "peak_fraction_q3": 1.2, "peak_fraction_lo": q1, "peak_fraction_hi": q3}
    assert evaluate(target, pd.DataFrame([wide]))["met"] == met
    disturbed = evaluate(target, pd.DataFrame([{**row, "disturbed": "load 3.0"}]))
    assert disturbed["met"] == "not claimed"


def test_ratio_of_medians_interval_is_seeded_and_brackets_the_ratio():
    num, den = [1.0, 1.2, 0.9, 1.1, 1.0, 1.3, 0.95], [2.0, 2.1, 1.9, 2.0, 2.2, 1.8, 2.05]
    first = timing.ratio_of_medians(num, den)
    assert first == timing.ratio_of_medians(num, den)
    ratio, low, high = first
    assert ratio == pytest.approx(1.0 / 2.0) and low <= ratio <= high and high - low < 0.3
    assert timing.ratio_of_medians([3.0], [1.5]) == (2.0, 2.0, 2.0)


def test_an_interrupted_report_replaces_no_report(tmp_path, monkeypatch, capsys):
    """A complete report folder is kept byte for byte when a later run is stopped (exit 130)."""
    from harness.cli import bench as bench_cli

    argv = ["report", "--device", "cpu", "--family", "norm", "--seq", "8", "--batch", "1", *FAST, "--no-rss",
            "--skip-check", "--no-compare", "--out", str(tmp_path)]
    assert main(argv) == 0
    folder = tmp_path / "cpu" / "quick"
    before = {p.name: p.read_bytes() for p in folder.iterdir()}

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt
        yield  # a generator, as run_sweep is

    monkeypatch.setattr(bench_cli, "run_sweep", stopped)
    assert main([*argv, "--fresh"]) == 130
    assert "left as it was" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def test_an_interrupted_first_report_says_so_and_exits_130(tmp_path, monkeypatch, capsys):
    """Where no report was there, an interrupted run writes one from the rows measured so far,
    opening with a note that the sweep is incomplete; it writes no DIFFERENCES.md."""
    from harness.cli import bench as bench_cli

    argv = ["report", "--device", "cpu", "--family", "norm", "--seq", "8", "--batch", "1", *FAST, "--no-rss",
            "--skip-check", "--no-compare", "--out", str(tmp_path)]
    assert main(argv) == 0
    folder = tmp_path / "cpu" / "quick"
    assert "Interrupted" not in (folder / "REPORT.md").read_text()
    for written in folder.iterdir():  # the report goes; the log of measured rows stays
        written.unlink()

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt
        yield  # a generator, as run_sweep is

    monkeypatch.setattr(bench_cli, "run_sweep", stopped)
    capsys.readouterr()
    assert main(argv) == 130
    assert "Interrupted: the sweep is incomplete." in (folder / "REPORT.md").read_text()
    assert "DIFFERENCES.md is not written by an interrupted run" in capsys.readouterr().err


def test_the_sweep_measures_the_cheapest_groups_first(norm_log):
    groups = [r["group"].split("|") for r in read_log(norm_log) if r["kind"] == "peak"]
    order = [(int(g[2].removeprefix("T=")), g[-2]) for g in groups]  # (T, mode) in the order measured
    assert order == [(8, "fwd"), (8, "fwd+bwd"), (16, "fwd"), (16, "fwd+bwd")]


def test_two_shards_merged_give_the_unsharded_rows(tmp_path, norm_log):
    """bench --shard 1/2 and 2/2, then report --from both: the same cases and columns as one
    unsharded run's report (norm_log is that run, with the same settings)."""
    logs = [tmp_path / f"shard{i}.jsonl" for i in (1, 2)]
    for i, log in enumerate(logs, 1):
        assert main(["bench", *TINY, "--log", str(log), "--shard", f"{i}/2"]) == 0
    halves = [{r["key"] for r in read_log(log) if r["kind"] == "case"} for log in logs]
    assert halves[0] and halves[1] and not halves[0] & halves[1]

    def report_rows(*logs, out):
        argv = ["report", "--device", "cpu", "--no-compare", "--out", str(out)]
        for log in logs:
            argv += ["--from", str(log)]
        assert main(argv) == 0
        rows = json.loads((out / "cpu" / "from" / "results.json").read_text())["rows"]
        return {r["key"]: set(r) for r in rows if r.get("kind", "case") == "case"}

    merged = report_rows(*logs, out=tmp_path / "merged")
    whole = report_rows(norm_log, out=tmp_path / "whole")
    assert merged.keys() == whole.keys() == halves[0] | halves[1]
    assert all(merged[k] == whole[k] for k in whole)


def test_shards_from_other_environments_are_refused(tmp_path, capsys):
    logs = [tmp_path / f"shard{i}.jsonl" for i in (1, 2)]
    for i, (log, threads) in enumerate(zip(logs, ("1", "2")), 1):
        argv = ["bench", *TINY, "--log", str(log), "--shard", f"{i}/2"]
        argv[argv.index("--threads") + 1] = threads
        assert main(argv) == 0
    capsys.readouterr()
    assert main(["report", "--device", "cpu", "--out", str(tmp_path / "r"), "--from", str(logs[0]),
                 "--from", str(logs[1])]) == 2
    err = capsys.readouterr().err
    assert "different environments" in err and "threads (1 vs 2)" in err
    assert main(["report", "--device", "cpu", "--out", str(tmp_path / "r"), "--from", str(logs[0]),
                 "--from", str(logs[0])]) == 2
    assert "give each shard once" in capsys.readouterr().err


@pytest.mark.parametrize("bad", ["0/2", "3/2", "1", "a/b", "1/0"])
def test_a_bad_shard_is_one_line(bad, capsys):
    assert main(["bench", *TINY, "--shard", bad]) == 2
    assert "must be I/N with 1 <= I <= N" in capsys.readouterr().err


def test_the_quick_target_shape_times_the_targets_variants_and_the_full_profile_every_one():
    """Quick: at B=8 T=512 the variants a registered target names (variant and baseline) and
    the family's reference; full: every attention variant there."""
    from harness.registry import TARGETS, reference_of

    def at_target(profile):
        return {c.variant for c in plan(profile, "cpu", ["attention"])
                if (c.batch, c.seq, c.d_model, c.mode) == (8, 512, 512, "fwd") and not c.compiled}

    named = {v for t in TARGETS if t.family == "attention" and t.device in (None, "cpu")
             for v in (t.variant, t.baseline) if v}
    assert at_target("quick") == named | {reference_of("attention").id}
    assert {"fused_sdpa", "torch_mha"} <= at_target("quick")
    assert at_target("full") == {v.id for v in variants_of("attention")}
    # the smaller shapes of the quick profile still time every attention variant
    assert {c.variant for c in plan("quick", "cpu", ["attention"]) if c.seq == 64} == {
        v.id for v in variants_of("attention")}
