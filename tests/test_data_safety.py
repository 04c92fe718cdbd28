"""The data-safety contract (docs/data-safety.md): outputs are written whole, a file the
harness did not write is never replaced, report folders are readable by the group, two runs
on one output take a lock, and Ctrl-C at any moment exits 130 leaving earlier outputs as
they were, byte for byte."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.base.errors import HarnessError
from harness.base.files import atomic_path, lock_path, output_lock
from harness.cli.main import main
from harness.report.io import write_json

# --threads: the in-process fixture's log and the interrupted processes' agree whatever
# threads an earlier test left torch with in this worker (else a resume measures anew)
TINY = ["--family", "norm", "--seq", "8", "--batch", "1", "--min-time", "0.002", "--rounds", "3",
        "--no-rss", "--no-progress", "--threads", "1"]
SLOWER = [a if a != "0.002" else "0.05" for a in TINY]  # a group takes about a second: time to interrupt it
ROOT = Path(__file__).resolve().parents[1]


def _one_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> Path:
    """One tiny bench log and one report made from it (seconds)."""
    folder = tmp_path_factory.mktemp("measured")
    assert main(["bench", *SLOWER, "--log", str(folder / "bench.jsonl")]) == 0
    assert main(["report", "--from", str(folder / "bench.jsonl"), "--no-compare", "--out",
                 str(folder / "rep")]) == 0
    return folder


def test_atomic_path_leaves_the_old_file_when_the_writer_fails(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("old")
    with pytest.raises(KeyboardInterrupt):
        with atomic_path(target) as tmp:
            tmp.write_text("half of the new")
            raise KeyboardInterrupt
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_json_outputs_are_marked_and_a_foreign_file_is_refused(tmp_path, capsys):
    own = tmp_path / "own.json"
    write_json(str(own), {"a": 1})
    assert json.loads(own.read_text())["written_by"].startswith("attention-harness")
    write_json(str(own), {"a": 2})  # its own output: replaced
    assert json.loads(own.read_text())["a"] == 2
    theirs = tmp_path / "theirs.json"
    theirs.write_text('{"settings": true}\n')
    with pytest.raises(HarnessError, match="not written by this harness"):
        write_json(str(theirs), {"a": 1})
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    assert main(["list", "--family", "norm", "--json", str(notes)]) == 2
    assert "not written by this harness" in _one_line(capsys.readouterr().err)
    assert notes.read_text() == "my notes\n"
    assert main(["list", "--json", ""]) == 2
    assert "--json is empty" in _one_line(capsys.readouterr().err)


@pytest.mark.parametrize("command", ["copy-task", "cache-bench"])
def test_folder_outputs_refuse_a_file_and_foreign_contents(tmp_path, capsys, command):
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    assert main([command, "--out", str(notes)]) == 2
    assert "is a file, not a folder" in _one_line(capsys.readouterr().err)
    stem = command.replace("-", "_")
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / f"{stem}.md").write_text("my own notes")
    assert main([command, "--out", str(folder)]) == 2
    assert "not written by this harness" in _one_line(capsys.readouterr().err)
    assert (folder / f"{stem}.md").read_text() == "my own notes"


def test_bench_never_replaces_a_file_it_did_not_write(tmp_path, capsys, measured):
    report_json = measured / "rep" / "cpu" / "from" / "results.json"
    before = report_json.read_bytes()
    assert main(["bench", *TINY, "--fresh", "--log", str(report_json)]) == 2
    assert "not written by this harness" in _one_line(capsys.readouterr().err)
    assert report_json.read_bytes() == before


def test_report_folder_with_foreign_files_is_refused_before_the_run(tmp_path, capsys, measured):
    out = tmp_path / "rep"
    folder = out / "cpu" / "quick"
    folder.mkdir(parents=True)
    (folder / "REPORT.md").write_text("# mine\n")
    (folder / "notes.txt").write_text("keep me")
    assert main(["report", *TINY, "--skip-check", "--out", str(out)]) == 2
    assert "did not write (notes.txt)" in _one_line(capsys.readouterr().err)
    assert (folder / "notes.txt").read_text() == "keep me"
    assert not (out / "cpu" / "report-quick.jsonl").exists()  # refused before measuring


def test_report_folder_is_readable_by_the_group(tmp_path, measured):
    old = os.umask(0o002)
    try:
        assert main(["report", "--from", str(measured / "bench.jsonl"), "--no-compare",
                     "--out", str(tmp_path / "rep")]) == 0
    finally:
        os.umask(old)
    folder = tmp_path / "rep" / "cpu" / "from"
    assert folder.stat().st_mode & 0o777 == 0o775
    assert (folder / "REPORT.md").stat().st_mode & 0o777 == 0o664
    assert sorted(p.name for p in (tmp_path / "rep" / "cpu").iterdir()) == ["from"]  # no temp, no lock


def test_a_second_run_on_a_locked_output_refuses_naming_the_first(tmp_path, capsys, measured):
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        log = tmp_path / "bench.jsonl"
        log.write_bytes((measured / "bench.jsonl").read_bytes())
        lock_path(log).write_text(f"{holder.pid}\n")
        assert main(["bench", *TINY, "--log", str(log)]) == 2
        assert f"pid {holder.pid}" in _one_line(capsys.readouterr().err)
        assert log.read_bytes() == (measured / "bench.jsonl").read_bytes()
        folder = tmp_path / "rep" / "cpu" / "from"
        lock_path(folder).parent.mkdir(parents=True)
        lock_path(folder).write_text(f"{holder.pid}\n")
        assert main(["report", "--from", str(log), "--no-compare", "--out", str(tmp_path / "rep")]) == 2
        assert f"pid {holder.pid}" in _one_line(capsys.readouterr().err)
        assert not folder.exists()
    finally:
        holder.kill()
        holder.wait()
    # the holder is gone: its lock is stale and taken over
    with output_lock(log, "the bench log"):
        assert lock_path(log).read_text().strip() == str(os.getpid())
    assert not lock_path(log).exists()


def test_a_lock_file_naming_no_process_is_left_as_it_is(tmp_path):
    """Not a pid (a user's file of that name, or a run that has not written its pid yet):
    refused in one line, never deleted."""
    target = tmp_path / "bench.jsonl"
    lock_path(target).write_text("my notes\n")
    with pytest.raises(HarnessError, match="names no process; it is left as it is"):
        with output_lock(target, "the bench log"):
            pass
    assert lock_path(target).read_text() == "my notes\n"


def test_fresh_run_interrupted_before_a_group_is_whole_keeps_the_old_log(tmp_path, monkeypatch, measured):
    import harness.bench.sweep as sweep
    from harness.bench.cases import plan

    log = tmp_path / "bench.jsonl"
    log.write_bytes((measured / "bench.jsonl").read_bytes())

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep, "measure_group", interrupted)
    cases = plan("quick", "cpu", ["norm"], None, [1], [8])
    with pytest.raises(KeyboardInterrupt):
        list(sweep.run_sweep(cases, log, fresh=True, min_time=0.002, rounds=3, progress=False, memory=False))
    assert log.read_bytes() == (measured / "bench.jsonl").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.jsonl"]


# -- Ctrl-C: SIGINT sent to `python -m harness` at several moments -------------------------------


def _run_and_interrupt(args, cwd: Path, when) -> subprocess.CompletedProcess:
    """Start ``python -m harness ARGS``; send SIGINT once ``when(elapsed, stderr so far)``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    err_file = cwd.parent / f"{cwd.name}.stderr"
    with open(err_file, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "harness", *args], cwd=cwd, env=env,
                                stdout=subprocess.DEVNULL, stderr=err, text=True)
        started = time.monotonic()
        while proc.poll() is None and not when(time.monotonic() - started, err_file.read_text()):
            time.sleep(0.01)
        assert proc.poll() is None, ("the command ended before the moment it was to be interrupted; it said:\n"
                                     + err_file.read_text())
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, "", err_file.read_text())


def _interrupted_cleanly(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    said = [x for x in done.stderr.splitlines() if x.startswith("interrupted")]
    assert said, done.stderr
    return said[-1]


def after(seconds: float, condition=lambda t, err: True):
    """A moment: ``condition`` holds, then ``seconds`` more."""
    seen: list[float] = []

    def when(t, err):
        if not seen and condition(t, err):
            seen.append(t)
        return bool(seen) and t >= seen[0] + seconds
    return when


def test_ctrl_c_during_start_up_exits_130_and_changes_nothing(tmp_path, measured):
    log = tmp_path / "bench.jsonl"
    log.write_bytes((measured / "bench.jsonl").read_bytes())
    done = _run_and_interrupt(["bench", *TINY, "--fresh", "--log", str(log)], tmp_path, after(0.3))
    assert "nothing was written" in _interrupted_cleanly(done)
    assert log.read_bytes() == (measured / "bench.jsonl").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.jsonl"]


def test_ctrl_c_mid_sweep_keeps_the_log_it_resumes_and_the_log_it_would_replace(tmp_path, measured):
    old = (measured / "bench.jsonl").read_bytes()
    log = tmp_path / "bench.jsonl"
    log.write_bytes(old)
    # --fresh: the new log is written beside the old one until a group is whole
    done = _run_and_interrupt(["bench", *SLOWER, "--fresh", "--log", str(log)], tmp_path,
                              after(0.1, lambda t, err: any(".new-" in p.name for p in tmp_path.iterdir())))
    _interrupted_cleanly(done)
    assert log.read_bytes() == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.jsonl"]
    # resuming: seq 8 is measured; interrupted while measuring the longer ones, the log only grows
    resumed = [*SLOWER[:2], "--seq", "8,64,128,256", *SLOWER[4:]]
    done = _run_and_interrupt(["bench", *resumed, "--log", str(log)], tmp_path,
                              after(0.3, lambda t, err: "resuming" in err))
    assert "run the same command to resume" in _interrupted_cleanly(done)
    assert log.read_bytes().startswith(old)
    assert not lock_path(log).exists()


def test_ctrl_c_during_a_report_leaves_the_previous_report(tmp_path):
    out = tmp_path / "rep"
    assert main(["report", *TINY, "--skip-check", "--out", str(out)]) == 0
    before = _snapshot(out)
    args = ["report", *TINY, "--out", str(out)]  # with the check
    _interrupted_cleanly(_run_and_interrupt(args, tmp_path, after(0.3)))  # start-up
    assert _snapshot(out) == before
    _interrupted_cleanly(_run_and_interrupt(args, tmp_path, after(0.1, lambda t, err: "check:" in err)))
    assert _snapshot(out) == before
    # mid-sweep (longer cases, so measured anew): the report folder is left byte for byte
    folder = out / "cpu" / "quick"
    kept = _snapshot(folder)
    longer = ["report", *SLOWER[:2], "--seq", "8,64,128,256", *SLOWER[4:], "--skip-check", "--out", str(out)]
    lock = out / "cpu" / ".report-quick.jsonl.lock"
    said = _interrupted_cleanly(_run_and_interrupt(longer, tmp_path, after(0.3, lambda t, err: lock.exists())))
    assert "kept" in said
    assert _snapshot(folder) == kept
    assert not lock.exists()


@pytest.mark.parametrize("committed", ["reports/models/copy_task.json", "reports/cpu/full/results.json"])
def test_outputs_of_an_earlier_version_are_the_harnesss_own(committed):
    """Written before outputs carried ``written_by`` (the committed reference runs): still ours,
    so the manual's copy-task command can write reports/models/ again."""
    from harness.base.files import is_own_json

    assert is_own_json(Path(__file__).resolve().parents[1] / committed)


def test_a_dict_with_only_some_earlier_keys_is_not_ours(tmp_path):
    from harness.base.files import is_own_json

    theirs = tmp_path / "theirs.json"
    theirs.write_text(json.dumps({"config": {}, "runs": [], "notes": "mine"}))  # copy_task's keys in part
    assert not is_own_json(theirs)


def test_every_json_output_is_an_object_with_its_schema_and_an_earlier_list_still_loads(tmp_path, capsys):
    """``list``, ``bench`` (and ``train-step``, ``cache-bench``) wrote a bare list before: each
    now writes an object marked with ``written_by`` and ``"schema"``; a list one of them wrote
    then is still the harness's own (replaced, not refused), and an earlier ``bench --json``
    list still loads where the harness reads its rows (``report --from``)."""
    from harness.base.files import SCHEMA_VERSION
    from harness.bench.log import load_rows

    listed = tmp_path / "variants.json"
    listed.write_text(json.dumps([{"id": "x", "family": "norm"}]))  # what list --json wrote before
    assert main(["list", "--family", "norm", "--json", str(listed)]) == 0
    data = json.loads(listed.read_text())
    assert data["schema"] == SCHEMA_VERSION and data["written_by"].startswith("attention-harness")
    assert {v["family"] for v in data["variants"]} == {"norm"}
    rows = tmp_path / "rows.json"
    assert main(["bench", *TINY, "--log", str(tmp_path / "b.jsonl"), "--json", str(rows)]) == 0
    data = json.loads(rows.read_text())
    assert data["schema"] == SCHEMA_VERSION and data["rows"] and data["peaks"]
    earlier = tmp_path / "earlier.json"  # the same rows as the list an earlier version wrote
    earlier.write_text(json.dumps(data["peaks"] + data["rows"]))
    assert [r.key for r in load_rows(earlier) if hasattr(r, "key")] == [r.key for r in load_rows(rows)
                                                                        if hasattr(r, "key")]


def test_no_json_output_of_the_harness_is_a_bare_list():
    """Every JSON file the harness writes (``write_json``, or ``json.dumps`` into
    ``atomic_write``) is given an object, where ``"schema"`` goes: a list or a list
    comprehension passed there is refused here, whichever command writes it."""
    import ast

    found = []
    for path in sorted((ROOT / "harness").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            payload = None
            if name == "write_json" and len(node.args) > 1:
                payload = node.args[1]
            elif name == "atomic_write" and len(node.args) > 1 and isinstance(node.args[1], ast.Call) \
                    and getattr(node.args[1].func, "attr", None) == "dumps":
                payload = node.args[1].args[0]
            if isinstance(payload, (ast.List, ast.ListComp)):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, found
