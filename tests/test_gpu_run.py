"""The whole GPU run in one command (``scripts/gpu-run.sh`` -> ``scripts/gpu_run.py``),
tested on the CPU as far as it goes: the report folder's GPU-name slug, the plan and its
deadlines, a step past its timeout killed while the others go on, a sweep stopped by its
time budget and resumed, and (slow) a rehearsal of every step on the CPU."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from harness.bench import sweep
from harness.bench.cases import BenchCase, plan
from harness.bench.log import read_log
from harness.bench.row import BenchRow, Measurement, PeakRow, RowSpec
from harness.bench.sweep import device_dir, run_sweep

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "scripts") not in sys.path:
    sys.path.insert(0, str(ROOT / "scripts"))
gpurun = importlib.import_module("gpu_run")  # scripts/gpu_run.py: an operator's script, not a harness command
main = gpurun.main


@pytest.mark.parametrize("name, folder", [
    ("NVIDIA H200", "cuda-h200"),
    ("NVIDIA H100 80GB HBM3", "cuda-h100-80gb-hbm3"),
    ("NVIDIA GeForce RTX 4090", "cuda-geforce-rtx-4090"),
    ("Tesla V100-SXM2-16GB", "cuda-tesla-v100-sxm2-16gb"),
])
def test_the_report_folder_is_named_after_the_gpu(name, folder):
    assert device_dir("cuda", name) == folder
    assert device_dir("cpu") == "cpu"


def test_the_test_workers_are_sized_to_the_cores():
    assert [gpurun.xdist_workers(n) for n in (1, 2, 8, 16, 64)] == [1, 1, 3, 6, 24]


def test_the_plan_installs_the_project_alone_and_fits_the_budget(capsys):
    assert main(["--device", "cpu", "--dry-run", "--budget", "480"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "budget 480 s, output reports/cpu/" in lines[0]
    steps = {line.split()[0]: line for line in lines[1:]}
    assert list(steps) == ["install", "tests", "check", "quick", "full"]
    assert "until 48 s" in steps["install"] and "-m pip install --no-deps --no-build-isolation -e ." in steps["install"]
    assert "until 240 s beside the next" in steps["tests"] and "-m pytest tests -k cuda" in steps["tests"]
    assert "until 240 s" in steps["check"] and "harness check --device cpu" in steps["check"]
    assert "until 408 s (with --time-budget to it)" in steps["quick"] and "--quick" in steps["quick"]
    assert "until 480 s" in steps["full"] and "--full" in steps["full"] and "--skip-check" in steps["full"]
    assert max(gpurun.DEADLINES.values()) == 1.0  # nothing runs past the budget
    assert main(["--device", "cpu", "--dry-run", "--family", "nrom"]) == 2  # one line, no step run
    assert "unknown family 'nrom'" in capsys.readouterr().err


def _step(tmp_path, name, code, deadline):
    return gpurun.Step(name, [sys.executable, "-c", code], tmp_path / f"gpu-run-{name}.txt", {}, deadline)


def test_a_step_past_its_timeout_is_killed_and_the_others_run(tmp_path, monkeypatch):
    """Side by side: a step that would run 60 s is killed at its 1 s deadline (its whole
    process group); the one beside it ends normally; a step left under MIN_STEP_S is skipped."""
    import time

    monkeypatch.setattr(gpurun, "MIN_STEP_S", 0.5)
    slow = _step(tmp_path, "check", "import subprocess, time; subprocess.Popen(['sleep', '60']); time.sleep(60)", 0.25)
    quick = _step(tmp_path, "tests", "print('ran')", 0.5)
    started = time.monotonic()
    gpurun.run_side_by_side([slow, quick], started, 4.0)
    assert time.monotonic() - started < 4
    assert slow.timed_out and 0.8 < slow.seconds < 4 and "TIMEOUT (killed)" in slow.line()
    assert quick.rc == 0 and not quick.timed_out and "rc=0" in quick.line()
    text = quick.output.read_text()
    assert text.startswith(gpurun.OUTPUT_MAGIC) and "ran" in text and text.rstrip().endswith("exit 0")
    assert "killed at its timeout of 1 s" in slow.output.read_text()
    late = _step(tmp_path, "install", "print('never')", 0.01)
    gpurun.run_side_by_side([late], started, 4.0)
    assert late.skipped and late.rc is None and "skipped:" in late.line()


def test_a_file_gpu_run_did_not_write_is_refused(tmp_path):
    mine = tmp_path / "gpu-run-tests.txt"
    mine.write_text("my notes\n")
    step = gpurun.Step("tests", [sys.executable, "-c", "pass"], mine, {}, 1.0)
    from harness.base.errors import HarnessError

    with pytest.raises(HarnessError, match="was not written by gpu-run"):
        gpurun.run_side_by_side([step], __import__("time").monotonic(), 60.0)
    assert mine.read_text() == "my notes\n"


def test_a_time_budget_stops_the_sweep_between_groups_and_the_rest_resumes(tmp_path, monkeypatch):
    """A clock that moves 10 s per group and a deadline at 15 s: the first group starts at 0,
    the second not at 10 (with the longest group as its guess it would end past the
    deadline); the log gets no end row, and the same sweep without a deadline measures it."""
    clock = [0.0]
    monkeypatch.setattr(sweep, "time", types.SimpleNamespace(monotonic=lambda: clock[0],
                                                             perf_counter=lambda: clock[0]))

    def ten_seconds(cases, **kwargs):  # the deadline is under test, not the measuring
        clock[0] += 10
        group = sweep.group_key(cases[0])
        rows = [BenchRow(RowSpec(key=c.key, family=c.family, variant=c.variant, group=group),
                         Measurement(status="ok")) for c in cases]
        return rows, PeakRow(key=f"peak|{group}", group=group)

    monkeypatch.setattr(sweep, "measure_group", ten_seconds)
    cases = plan("full", "cpu", ["norm"], ["torch_layernorm"], [1], [8])  # fwd and fwd+bwd: two groups
    log = tmp_path / "log.jsonl"
    first = list(run_sweep(cases, log, min_time=0.002, rounds=3, progress=False, memory=False, deadline=15.0))
    assert len(first) == 1 and not any(r.get("kind") == "end" for r in read_log(log))
    rest = list(run_sweep(cases, log, min_time=0.002, rounds=3, progress=False, memory=False))
    assert {r.key for r in first} | {r.key for r in rest} == {c.key for c in cases} and len(rest) == 1
    assert read_log(log)[-1]["kind"] == "end"


def test_under_a_budget_the_groups_a_target_reads_go_first():
    from harness.bench.cases import serves_target

    at = dict(batch=8, seq=512, d_model=512, heads=8, d_ff=2048, dtype="float32", device="cpu", mode="fwd")
    assert serves_target(BenchCase("attention", "fused_sdpa", **at))
    assert not serves_target(BenchCase("attention", "fused_sdpa", **{**at, "seq": 256}))
    assert serves_target(BenchCase("attention", "torch_sdpa", **{**at, "seq": 2048, "dtype": "bfloat16",
                                                                 "device": "cuda"}))


@pytest.mark.slow
def test_the_whole_run_rehearsed_on_the_cpu(tmp_path):
    """scripts/gpu-run.sh with --device cpu, narrowed: every step runs and is logged with rc=0;
    the quick and full reports are written under <out>/cpu/, the full one within its budget."""
    out = tmp_path / "reports"
    run = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu-run.sh"), "--device", "cpu", "--no-install", "--budget", "200",
         "--tests", "tests/test_gpu_figures.py", "-k", "round_trips", "--family", "norm", "--out", str(out),
         "--sweep-args", "--seq 8 --batch 1 --min-time 0.002 --rounds 3 --no-rss --threads 1 --no-compare"],
        cwd=ROOT, capture_output=True, text=True, timeout=260, env={**os.environ, "PYTHON": sys.executable})
    assert run.returncode == 0, run.stdout + run.stderr
    log = (out / "cpu" / "gpu-run.log").read_text()
    assert log.startswith(gpurun.LOG_MAGIC) and log.count("rc=0") == 4 and "total" in log
    assert "install  skipped: --no-install" in log
    assert "1 passed" in (out / "cpu" / "gpu-run-tests.txt").read_text()
    assert (out / "cpu" / "quick" / "REPORT.md").exists() and (out / "cpu" / "full" / "REPORT.md").exists()
    assert "--time-budget" in log


def test_a_second_run_killed_at_its_timeout_keeps_the_finished_output(tmp_path, monkeypatch):
    """A step's finished output from an earlier run stays when a second run's step is killed
    at its timeout (the second's goes beside it, NAME.timed-out); a Ctrl-C while steps run
    leaves no unfinished output behind."""
    import time

    monkeypatch.setattr(gpurun, "MIN_STEP_S", 0.5)
    first = _step(tmp_path, "check", "print('finished')", 0.5)
    gpurun.run_side_by_side([first], time.monotonic(), 4.0)
    again = _step(tmp_path, "check", "import time; time.sleep(60)", 0.25)
    gpurun.run_side_by_side([again], time.monotonic(), 4.0)
    assert again.timed_out and "finished" in first.output.read_text()
    assert "killed at its timeout" in (tmp_path / "gpu-run-check.txt.timed-out").read_text()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(gpurun, "_wait", interrupted)
    third = _step(tmp_path, "check", "import time; time.sleep(60)", 0.5)
    with pytest.raises(KeyboardInterrupt):
        gpurun.run_side_by_side([third], time.monotonic(), 4.0)
    assert "finished" in first.output.read_text()
    assert not list(tmp_path.glob(".*partial*"))
