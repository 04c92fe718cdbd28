"""Every option that names an output (``--json``, ``--log``, ``--out``, ``--csv``, of every
command) is refused before any work when it could not be written: a folder that does not
exist (exit 2) or one the harness may not write in (exit 74), in one ``error:`` line naming
the path and the problem; nothing is created or written. The harness's own default places
(``reports/...``) have their missing folders made; a path in a folder that exists is taken."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from harness.base.errors import HarnessError
from harness.base.files import refuse_unwritable
from harness.base.output import EXIT_OUTPUT, EXIT_USAGE, OutputError
from harness.cli.common import VARIANTS_ENV
from harness.cli.main import main
from harness.registry import scratch
from tests.test_validation import HEAVY

ROOT = Path(__file__).resolve().parents[1]
N = ["--family", "norm"]
# (command line with OUT where the path goes, whether --out names a folder the command writes into)
OUTPUTS = [
    ["list", "--json", "OUT"],
    ["check", *N, "--json", "OUT"],
    ["diff", "norm", "torch_layernorm", "torch_rmsnorm", "--json", "OUT"],
    ["map", f"{ROOT}/examples/my_attention.py:EinsumAttention", "--family", "attention", "--json", "OUT"],
    ["differences", "--out", "OUT"],
    ["bench", *N, "--log", "OUT"],
    ["bench", *N, "--json", "OUT"],
    ["report", *N, "--out", "OUT"],
    ["decode", "--json", "OUT"],
    ["train-step", "--json", "OUT"],
    ["copy-task", "--out", "OUT"],
    ["cache-bench", "--out", "OUT"],
    ["parity", "no_checkpoint", "--port", "x", "--json", "OUT"],
    ["kernelbench", "no_problem.py", "--csv", "OUT"],
    ["kernelbench", "no_problem.py", "--json", "OUT"],
]


class Reached(Exception):
    """The command got past its checks to its work."""


def _reached(*args, **kwargs):
    raise Reached


def _run(argv, capsys, monkeypatch) -> tuple[int | str, str]:
    monkeypatch.delenv(VARIANTS_ENV, raising=False)
    for module, fn in HEAVY:
        monkeypatch.setattr(f"{module}.{fn}", _reached)
    with scratch():
        try:
            status = main(argv)
        except Reached:
            status = "reached"
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err, err
    return status, err


@pytest.mark.parametrize("argv", OUTPUTS, ids=lambda a: f"{a[0]}-{a[-2]}")
def test_a_path_in_a_missing_folder_is_one_line_before_any_work(argv, tmp_path, capsys, monkeypatch):
    path = "missing/sub/x.json"
    with contextlib.chdir(tmp_path):
        status, err = _run([path if a == "OUT" else a for a in argv], capsys, monkeypatch)
    assert status == EXIT_USAGE, err
    assert err.count("\n") == 1 and err.startswith(f"error: cannot write {argv[-2]} '{path}': the folder "), err
    assert "does not exist" in err
    assert list(tmp_path.iterdir()) == []  # nothing made, nothing written


@pytest.mark.parametrize("argv", [["check", *N, "--json", "OUT"], ["bench", *N, "--log", "OUT"],
                                  ["report", *N, "--out", "OUT"], ["copy-task", "--out", "OUT"]],
                         ids=lambda a: f"{a[0]}-{a[-2]}")
def test_a_path_in_a_folder_that_exists_is_taken(argv, tmp_path, capsys, monkeypatch):
    """The control: the same command lines reach their work, having written nothing."""
    (tmp_path / "here").mkdir()
    with contextlib.chdir(tmp_path):
        status, err = _run(["here/x" if a == "OUT" else a for a in argv], capsys, monkeypatch)
    assert status == "reached", err
    assert [p.name for p in tmp_path.rglob("*")] == ["here"]


def test_the_default_places_have_their_folders_made_when_written(tmp_path, capsys, monkeypatch):
    """bench's default log and differences' default file, in a folder with no reports/."""
    with contextlib.chdir(tmp_path):
        for argv in (["bench", *N], ["differences"]):
            status, err = _run(argv, capsys, monkeypatch)
            assert status == "reached", err
    assert list(tmp_path.iterdir()) == []  # made when the output is written, not before


def _as_another_user() -> list[str] | None:
    """The prefix that runs a command as a user who may not write in a 0o555 folder (root may:
    then ``setpriv`` runs it as nobody), or None where that cannot be arranged."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    return None if setpriv is None else [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]


@pytest.mark.parametrize("argv", [["check", *N, "--json", "ro/x.json"], ["list", "--json", "ro/x.json"],
                                  ["bench", *N, "--log", "ro/b.jsonl"], ["report", *N, "--out", "ro/sub"],
                                  ["copy-task", "--out", "ro/sub"]], ids=lambda a: f"{a[0]}-{a[-2]}")
def test_a_read_only_folder_is_one_line_exit_74(argv, capsys):
    prefix = _as_another_user()
    if prefix is None:
        pytest.skip("running as root without setpriv: no user for whom a folder is read-only")
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)  # the other user reaches ro/ inside it
        ro = Path(tmp) / "ro"
        ro.mkdir(mode=0o555)
        ro.chmod(0o555)
        env = {k: v for k, v in os.environ.items() if k != VARIANTS_ENV}
        env["HOME"] = tmp  # the other user's caches, if any, somewhere it may write
        run = subprocess.run([*prefix, sys.executable, "-m", "harness", *argv], cwd=tmp, env=env,
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == EXIT_OUTPUT, run.stderr
        assert run.stderr.count("\n") == 1 and f"error: cannot write {argv[-2]} '{argv[-1]}': no permission to " \
            "write in the folder 'ro'" in run.stderr, run.stderr
        assert "Traceback" not in run.stdout + run.stderr and list(ro.iterdir()) == []


def test_a_read_only_filesystem_and_a_file_in_place_of_a_folder_are_named(tmp_path, monkeypatch):
    (tmp_path / "notes.txt").write_text("a user's notes\n")
    with pytest.raises(HarnessError, match="'.*notes.txt' is a file, not a folder"):
        refuse_unwritable(tmp_path / "notes.txt" / "x.json", "--json")

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(tmp_path / ".harness-probe-x"))

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    with pytest.raises(OutputError, match=f"the folder '{tmp_path}' is on a read-only filesystem; nothing was run"):
        refuse_unwritable(tmp_path / "x.json", "--json")
