"""Bad input to list, check, diff, map and the ways variants are loaded (the CLI and pytest): each
gets exactly one line on stderr naming the problem, exit 2 (pytest: its usage error,
exit 4), and no traceback. bench and report have theirs in tests/test_bench_inputs.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness.cli.common import VARIANTS_ENV
from harness.cli.main import main
from harness.registry import scratch

ROOT = Path(__file__).resolve().parents[1]
NORM = ["check", "--family", "norm", "--dtype", "float64"]

LN = "traits={'norm_formula': 'layernorm', 'eps': 1e-5}"
# A variant file's text -> the message it must produce (written to tmp_path/<name>.py).
FILES = {
    "syntax": ("from harness import register\n\nx = (\n", "has a syntax error at line 3: '(' was never closed"),
    "raises": ("import torch\n\n\nraise RuntimeError('boom')\n", "failed to import: RuntimeError: boom (line 4)"),
    "missing_module": ("import not_a_module_anywhere\n",
                       "ModuleNotFoundError: No module named 'not_a_module_anywhere' (line 1)"),
    "nothing": ("import torch\n", "registered no variant (call harness.register)"),
    "bad_family": ("from harness import register\nregister(id='x', family='nope', source='s', build=None, call=None)\n",
                   "unknown family 'nope'"),
    "bad_field": ("from harness import register\n"
                  "register(id='x', family='norm', source='s', build=None, call=None, colour=1)\n",
                  "bad register(...) call"),
    "bad_id": ("from harness import register\n"
               f"register(id='a b', family='norm', source='s', build=None, call=None, {LN})\n",
               "variant id 'a b' must be letters, digits"),
    # an id the project has taken is loaded under the file's name (tests/test_renamed.py)
    "twice": ("from harness import register\nfor _ in range(2):\n"
              f"    register(id='mine', family='norm', source='s', build=None, call=None, {LN})\n",
              "variant 'norm/mine' is registered twice"),
}


def _cases(tmp: Path) -> list[tuple[list[str], str]]:
    folder = tmp / "a_folder"
    folder.mkdir()
    text = tmp / "notes.txt"
    text.write_text("not python\n")
    cases = [
        # the command line itself
        ([], "the following arguments are required: command"),
        (["nope"], "invalid choice: 'nope'"),
        (["check", "--bogus"], "unrecognized arguments: --bogus"),
        (["check", "--device"], "argument --device: expected one argument"),
        (["list", "--family"], "argument --family: expected one argument"),
        # names
        (["list", "--family", "nope"], "unknown family 'nope'"),
        (["check", "--family", "nope"], "unknown family 'nope'"),
        ([*NORM[:3], "--dtype", "float8"], "unknown dtype 'float8'"),
        (["check", "--family", "attention", "--dtype", "bool"], "dtype 'bool' is not a floating dtype"),
        ([*NORM, "--precision-factor", "0"], "--precision-factor 0 must be a factor > 0"),
        ([*NORM, "--precision-factor", "x"], "argument --precision-factor: invalid float value: 'x'"),
        ([*NORM, "--pairs", "some"], "argument --pairs: invalid choice: 'some'"),
        ([*NORM, "--device", "tpu"], "unknown device 'tpu'"),
        # impossible configs
        ([*NORM, "--set", "d_model=65", "--set", "heads=5"], "d_model=65 must be even"),
        ([*NORM, "--set", "d_model=64", "--set", "heads=6"], "d_model=64 is not divisible by heads=6"),
        ([*NORM, "--set", "d_model"], "bad --set 'd_model': expected KEY=VALUE"),
        ([*NORM, "--set", "depth=3"], "bad --set 'depth=3': expected KEY=VALUE with KEY one of"),
        ([*NORM, "--set", "d_model=64.0"], "d_model takes an integer, got '64.0'"),
        ([*NORM, "--set", "seed=x"], "seed takes an integer, got 'x'"),
        ([*NORM, "--set", "dropout=abc"], "dropout takes a number, got 'abc'"),
        ([*NORM, "--set", "heads=0"], "heads=0 must be a positive integer"),
        ([*NORM, "--set", "batch=-2"], "batch=-2 must be a positive integer"),
        ([*NORM, "--set", "vocab=1"], "vocab=1 must be at least 2"),
        ([*NORM, "--set", "dropout=1.5"], "dropout=1.5 must be in [0, 1)"),
        ([*NORM, "--set", "batch=100000", "--set", "tgt_len=100000"], "needs about"),
        ([*NORM, "--variant", "nope"], "no variant 'nope' in"),
        # output paths, refused before the run
        ([*NORM, "--json", "/proc/x.json"], "cannot write --json '/proc/x.json'"),
        ([*NORM, "--json", str(folder)], f"cannot write --json '{folder}': it is a directory"),
        (["list", "--json", "/proc/x.json"], "cannot write --json '/proc/x.json'"),
        # diff and map
        (["diff", "attention", "annotated"], "the following arguments are required: b"),
        (["diff", "nope", "a", "b"], "unknown family 'nope'"),
        (["diff", "attention", "annotated", "nope"], "unknown variant 'nope' in family 'attention'"),
        (["diff", "attention", "annotated", "torch_mha", "--case", "nope"], "family 'attention' has no case 'nope'"),
        (["diff", "attention", "annotated", "torch_mha", "--dtype", "float8"], "unknown dtype 'float8'"),
        (["diff", "attention", "annotated", "torch_mha", "--json", "/proc/x.json"],
         "cannot write --json '/proc/x.json'"),
        (["map", "--family", "attention"], "the following arguments are required: target"),
        (["map", "nope.py:X", "--family", "attention"], "file 'nope.py' does not exist"),
        (["map", "examples/my_attention.py", "--family", "attention"], "expected FILE.py:CLASS or module.path:CLASS"),
        (["map", "torch.nn:NoSuchThing", "--family", "attention"],
         "'NoSuchThing' is not found in 'torch.nn'; its nn.Module classes: "),
        (["map", f"{ROOT}/examples/my_attention.py:EinsumAttention", "--family", "nope"], "unknown family 'nope'"),
        (["map", f"{ROOT}/examples/my_attention.py:EinsumAttention", "--family", "attention", "--init", "x=("],
         "bad --init 'x=('"),
        (["map", f"{ROOT}/examples/my_attention.py:EinsumAttention", "--family", "attention", "--json", "/proc/x.json"],
         "cannot write --json '/proc/x.json'"),
        (["differences", "--out", "/proc/x.md"], "cannot write --out '/proc/x.md'"),
        # variant files
        (["list", "--variants", "does/not/exist.py"], "variant file 'does/not/exist.py' does not exist"),
        (["check", "--family", "norm", "--variants", str(folder)], f"variant file '{folder}' is a directory"),
        (["list", "--variants", str(text)], f"variant file '{text}' is not a Python file"),
    ]
    if not torch.cuda.is_available():
        cases.append(([*NORM, "--device", "cuda"], "device 'cuda' asked for, but torch sees no CUDA device"))
    for name, (content, message) in FILES.items():
        path = tmp / f"{name}.py"
        path.write_text(content)
        cases.append((["list", "--variants", str(path)], message))
    return cases


def test_each_bad_input_gets_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(VARIANTS_ENV, raising=False)
    cases = _cases(tmp_path)
    assert len(cases) >= 50
    failures = []
    for argv, message in cases:
        with scratch():
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse exits by itself
                code = exc.code
        err = capsys.readouterr().err
        lines = err.splitlines()
        if code != 2 or len(lines) != 1 or message not in lines[0] or "Traceback" in err:
            failures.append(f"{argv}: exit {code}, stderr {err[-400:]!r}")
    assert not failures, "\n".join(failures)


def test_a_broken_file_leaves_no_half_registration(tmp_path, capsys):
    half = tmp_path / "half.py"
    half.write_text("from harness import register\n"
                    f"register(id='first', family='norm', source='s', build=None, call=None, {LN})\n"
                    "raise ValueError('second half broken')\n")
    with scratch() as reg:
        assert main(["list", "--variants", str(half)]) == 2
        assert "norm/first" not in reg  # a fixed file loads again without "registered twice"
    assert "ValueError: second half broken (line 3)" in capsys.readouterr().err


def test_the_environment_variable_names_a_bad_file(capsys, monkeypatch):
    monkeypatch.setenv(VARIANTS_ENV, "missing_from_env.py")
    with scratch():
        assert main(["list"]) == 2
    assert capsys.readouterr().err.splitlines() == ["error: variant file 'missing_from_env.py' does not exist"]


def test_the_real_command_line_is_one_line_too():
    """Through a real process (what a user sees): one line, exit 2."""
    run = subprocess.run([sys.executable, "-m", "harness", "check", "--set", "vocab=1"], capture_output=True,
                         text=True, timeout=300, env={k: v for k, v in os.environ.items() if k != VARIANTS_ENV})
    assert run.returncode == 2 and run.stderr == "error: vocab=1 must be at least 2 (token 0 is the padding token)\n"


@pytest.mark.parametrize("name,message", [  # the other kinds go the same way: see the CLI's above
    ("gone", "ERROR: variant file 'gone.py' does not exist"),
    ("syntax", "has a syntax error at line 3: '(' was never closed"),
])
def test_pytest_with_a_bad_variant_file_is_a_usage_error(tmp_path, name, message):
    """Not an INTERNALERROR (exit 3): pytest's usage error, exit 4, one line."""
    if name in FILES:
        (tmp_path / f"{name}.py").write_text(FILES[name][0])
    env = {k: v for k, v in os.environ.items() if k != VARIANTS_ENV}
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--variants", f"{name}.py"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 4, run.stdout + run.stderr
    assert message in run.stderr and "INTERNALERROR" not in run.stdout + run.stderr
    assert run.stderr.strip().count("\n") == 0, run.stderr
