"""Benchmark machinery on tiny cases: the method, resumable logs, the report, bad input.
No speed target is asserted here; targets live in the report."""

from __future__ import annotations

import json

import pytest
import torch

from harness import measure
from harness.bench import BenchCase, load_rows, plan, prepare, read_log, run_sweep
from harness.cli import main
from harness.registry import variants_of

TINY = ["--device", "cpu", "--family", "norm", "--seq", "8,16", "--batch", "1",
        "--min-time", "0.01", "--no-progress"]


def test_quartiles_and_reps():
    t = measure.time_callable(lambda: None, warmup=0, min_reps=7, min_time=0.0)
    assert t.reps >= 7 and t.q1 <= t.median <= t.q3 and t.iqr >= 0


def test_flops_counted_for_the_cpu_flash_kernel():
    q = torch.randn(2, 4, 32, 16)
    flops = measure.count_flops(lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q))
    assert flops == 2 * 2 * (2 * 4 * 32 * 32 * 16)  # QK^T and PV, dense


def test_saved_bytes_linear_for_sdpa_quadratic_for_explicit():
    def saved(variant, t):
        p = prepare(BenchCase("attention", variant, 1, t, 32, 4, 128, "float32", "cpu", "fwd+bwd"))
        return measure.saved_bytes(p.forward, p.resident)

    assert saved("fused_sdpa", 128) / saved("fused_sdpa", 64) == pytest.approx(2.0, rel=0.05)
    assert saved("fused_explicit", 128) / saved("fused_explicit", 64) > 2.5


def test_cpu_peak_sees_intermediates():
    x = torch.randn(256, 256)
    peak = measure.peak_bytes(lambda: (x @ x).relu().sum(), "cpu")
    assert peak >= 2 * 256 * 256 * 4  # the matmul output and the relu output live at once


def test_plan_covers_every_benchmarked_variant():
    cases = plan("quick", "cpu")
    attention = {c.variant for c in cases if c.family == "attention"}
    assert attention == {v.id for v in variants_of("attention")}
    assert any(c.batch == 8 and c.seq == 512 and c.d_model == 512 for c in cases)


def test_bench_resumes_and_keeps_rows(tmp_path, capsys):
    log = tmp_path / "log.jsonl"
    assert main(["bench", *TINY, "--log", str(log)]) == 0
    first = read_log(log)
    n_cases = len([r for r in first if r["kind"] == "case"])
    assert n_cases == len(variants_of("norm")) * 2 * 2  # variants x seq x modes
    assert all(r["status"] == "ok" and r["median_s"] > 0 for r in first if r["kind"] == "case")
    assert main(["bench", *TINY, "--log", str(log)]) == 0  # resumes: nothing new measured
    assert len(read_log(log)) == len(first)


def test_interrupted_sweep_keeps_what_it_measured(tmp_path):
    log = tmp_path / "log.jsonl"
    cases = plan("quick", "cpu", ["norm"], None, [1], [8])
    done = []
    with pytest.raises(KeyboardInterrupt):
        for row in run_sweep(cases, log, min_time=0.01, progress=False):
            done.append(row)
            if len(done) == 2:
                raise KeyboardInterrupt
    assert len([r for r in read_log(log) if r["kind"] == "case"]) == 2
    rest = list(run_sweep(cases, log, min_time=0.01, progress=False))
    assert len(rest) == len(cases) - 2


def test_report_from_log_and_compare(tmp_path, capsys):
    log = tmp_path / "log.jsonl"
    assert main(["bench", *TINY, "--log", str(log)]) == 0
    out = tmp_path / "reports"
    assert main(["report", "--device", "cpu", "--from", str(log), "--out", str(out)]) == 0
    report = (out / "cpu" / "REPORT.md").read_text()
    assert "## norm" in report and "torch_layernorm" in report and "## Targets" in report
    rows = json.loads((out / "cpu" / "results.json").read_text())["rows"]
    assert {"median_s", "iqr_s", "gflops", "saved_bytes", "peak_bytes", "torch", "threads"} <= set(rows[0])
    assert (out / "cpu" / "results.csv").exists()
    assert list((out / "cpu").glob("time_norm_*.png")) and list((out / "cpu").glob("memory_norm_*.png"))
    # --compare against itself: every change is 0, no regression
    old = out / "cpu" / "results.json"
    assert main(["report", "--device", "cpu", "--from", str(log), "--out", str(tmp_path / "r2"),
                 "--compare", str(old)]) == 0
    again = (tmp_path / "r2" / "cpu" / "REPORT.md").read_text()
    assert "0 regression(s)" in again and "+0%" in again


def test_compare_flags_regressions(tmp_path):
    log = tmp_path / "log.jsonl"
    assert main(["bench", *TINY, "--log", str(log)]) == 0
    rows = read_log(log)
    faster = [{**r, "median_s": r["median_s"] / 2} if r.get("kind") == "case" else r for r in rows]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(faster))
    assert main(["report", "--device", "cpu", "--from", str(log), "--out", str(tmp_path / "r"),
                 "--compare", str(old)]) == 0
    assert "REGRESSION" in (tmp_path / "r" / "cpu" / "REPORT.md").read_text()


@pytest.mark.parametrize("argv,message", [
    (["bench", "--device", "cpu", "--family", "masks"], "family 'masks' has no benchmark"),
    (["bench", "--device", "cpu", "--family", "norm", "--seq", "0"], "impossible sweep"),
    (["bench", "--device", "cpu", "--family", "norm", "--seq", "a,b"], "impossible sweep"),
    (["bench", "--device", "cpu", "--variant", "nope"], "no benchmarked variant is called ['nope']"),
    (["report", "--device", "cpu", "--from", "missing.json"], "results file 'missing.json' does not exist"),
])
def test_bad_bench_input(argv, message, capsys, tmp_path):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_malformed_compare_file(tmp_path, capsys):
    bad = tmp_path / "old.json"
    bad.write_text("{not json")
    assert main(["report", "--device", "cpu", "--from", str(bad), "--compare", str(bad)]) == 2
    assert "is not JSON" in capsys.readouterr().err
    bad.write_text(json.dumps({"rows": [{"no": "key"}]}))
    assert main(["report", "--device", "cpu", "--from", str(bad)]) == 2
    assert "not a results file of this harness" in capsys.readouterr().err


def test_unsupported_and_cuda_rows_are_recorded(tmp_path):
    """A variant that cannot take the shape is a row with its reason, and the sweep goes on."""
    from harness.bench import measure_case

    row = measure_case(BenchCase("encoder_layer", "t2t", 1, 8, 64, 4, 256, "float32", "cpu", "fwd"),
                       min_time=0.01, min_reps=2, peak_flops=1.0)
    assert row["status"] == "unsupported" and "8 heads" in row["error"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the CUDA timing path runs on a GPU machine")
def test_cuda_timing_and_peak():
    a = torch.randn(1024, 1024, device="cuda")
    t = measure.time_callable(lambda: a @ a, "cuda", min_reps=5, min_time=0.05)
    assert t.median > 0
    assert measure.peak_bytes(lambda: a @ a, "cuda") >= 1024 * 1024 * 4


def test_load_rows_reads_pytest_benchmark_json(tmp_path):
    info = {"key": "norm/x|...", "family": "norm", "variant": "x", "batch": 1, "seq": 8, "d_model": 64,
            "heads": 8, "d_ff": 256, "dtype": "float32", "device": "cpu", "mode": "fwd", "compiled": False,
            "flops": 1000, "peak_flops": 1e9}
    data = {"machine_info": {"cpu": {"brand_raw": "test cpu"}}, "benchmarks": [
        {"name": "t", "extra_info": info, "stats": {"median": 0.001, "q1": 0.0009, "q3": 0.0011,
                                                    "iqr": 0.0002, "rounds": 10}}]}
    path = tmp_path / "pb.json"
    path.write_text(json.dumps(data))
    [row] = load_rows(path)
    assert row["median_s"] == 0.001 and row["gflops"] == pytest.approx(1e-3) and row["cpu"] == "test cpu"
