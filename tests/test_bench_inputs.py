"""Bad input to ``bench`` and ``report``: one line on stderr naming the problem, exit 2,
no traceback, and (where it can be known) before anything is measured."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from harness.cli.main import main

CPU = ["--device", "cpu", "--no-progress"]


def bad_inputs(tmp):
    folder = tmp / "a_folder"
    folder.mkdir()
    broken = tmp / "broken.json"
    broken.write_text("{not json")
    foreign = tmp / "foreign.json"
    foreign.write_text(json.dumps({"rows": [{"no": "key"}]}))
    log = tmp / "log.jsonl"  # a real log: the refusals below are about the other arguments
    log.write_text((Path(__file__).parent / "fixtures" / "report-mine-cpu.jsonl").read_text())
    special = "it is on a special filesystem"
    return [
        (["bench", *CPU, "--family", "masks"], "family 'masks' has no benchmark"),
        (["bench", *CPU, "--family", "norm", "--seq", "0"], "impossible sweep"),
        (["bench", *CPU, "--family", "norm", "--seq", "a,b"], "impossible sweep"),
        (["bench", *CPU, "--variant", "nope"], "no benchmarked variant is called ['nope']; variants: annotated"),
        (["bench", *CPU, "--log", "/proc/x.jsonl"], f"cannot write --log '/proc/x.jsonl': {special}"),
        (["bench", *CPU, "--log", str(folder)], f"cannot write --log '{folder}': it is a directory"),
        (["bench", *CPU, "--json", "/proc/x.json"], "cannot write --json '/proc/x.json'"),
        (["bench", *CPU, "--min-time", "-1"], "--min-time -1 must be a positive number of seconds"),
        (["bench", *CPU, "--min-time", "0"], "--min-time 0 must be a positive"),
        (["bench", *CPU, "--rounds", "1"], "--rounds 1 must be at least 3"),
        (["bench", *CPU, "--threads", "0"], "--threads 0 must be at least 1"),
        (["bench", *CPU, "--family", "attention", "--batch", "100000", "--seq", "100000"], "GiB available"),
        (["report", *CPU, "--batch", "100000", "--seq", "100000", "--skip-check", "--out", str(tmp / "r")],
         "lower --batch or --seq"),
        (["report", *CPU, "--from", "missing.json"], "results file 'missing.json' does not exist"),
        (["report", *CPU, "--from", str(folder)], f"--from file '{folder}' is a directory"),
        (["report", *CPU, "--from", str(broken)], "is not JSON"),
        (["report", *CPU, "--from", str(foreign)], "not a results file of this harness"),
        (["report", *CPU, "--from", str(log), "--compare", str(folder)], f"--compare file '{folder}' is a directory"),
        (["report", *CPU, "--from", str(log), "--compare", str(broken)], "is not JSON"),
        (["report", *CPU, "--from", str(log), "--compare", "missing.json"], "'missing.json' does not exist"),
        (["report", *CPU, "--from", str(log), "--full"], "--full (a profile to measure) contradicts it"),
        (["report", *CPU, "--from", str(log), "--quick"], "--quick (a profile to measure) contradicts it"),
        (["report", *CPU, "--from", str(log), "--seq", "8"], "--seq does not apply"),
        (["report", *CPU, "--from", str(log), "--out", "/proc/x"], f"cannot write --out '/proc/x': {special}"),
        (["report", *CPU, "--out", "/proc/x", "--skip-check"], f"cannot write --out '/proc/x': {special}"),
        (["report", *CPU, "--threshold", "-1"], "--threshold -1 must be a fraction >= 0"),
        (["report", *CPU, "--threshold", "nan"], "--threshold nan must be a fraction >= 0"),
        (["report", *CPU, "--min-time", "-1"], "--min-time -1 must be a positive number"),
    ]




def test_each_bad_input_gets_one_line_and_exit_2(tmp_path, capsys):
    failures = []
    for argv, message in bad_inputs(tmp_path):
        code = main(argv)
        captured = capsys.readouterr()
        lines = [x for x in captured.err.splitlines() if x.strip()]
        if code != 2 or len(lines) != 1 or message not in lines[0] or "Traceback" in captured.err:
            failures.append((argv, code, captured.err[-300:]))
        if "--out" in argv and "/proc" not in " ".join(argv):
            assert not (tmp_path / "r").exists(), argv  # refused before anything was made
    assert not failures, failures


def test_bad_input_from_the_command_line_has_no_traceback(tmp_path):
    """The same through a real process: the first line of stderr is the whole story."""
    out = subprocess.run([sys.executable, "-m", "harness", "report", "--device", "cpu", "--from", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.strip().count("\n") == 0 and "is a directory" in out.stderr
