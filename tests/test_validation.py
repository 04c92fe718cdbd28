"""Bad input by construction: every command's options are checked in one place
(``harness.cli.validate``) before anything runs; a property-based test draws argument vectors
for every subcommand from the parser's own options (valid, boundary and invalid values) and
asserts no traceback, a documented exit status and no file changed outside the outputs."""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.cli.main import build_parser, main
from harness.registry import scratch

NORM = ["check", "--family", "norm", "--dtype", "float64"]
EXAMPLE = str(Path(__file__).resolve().parents[1] / "examples" / "my_attention.py")


@pytest.mark.parametrize("argv, said", [
    ([*NORM, "--precision-factor", "nan"], "--precision-factor nan must be"),
    ([*NORM, "--precision-factor", "inf"], "--precision-factor inf must be"),
    ([*NORM, "--set", "seed=99999999999999999999999"], "seed=99999999999999999999999 must be an integer"),
    ([*NORM, "--set", "d_model=200000"], "GiB to check or run"),
    (["diff", "attention", "a", "b", "--set", "d_model=200000"], "weights"),
    (["cache-bench", "--out", "x", "--seq", "100000"], "GiB to check or run"),
    (["report", "--threshold", "nan"], "--threshold nan must be"),
    (["report", "--threshold", "-0.5"], "--threshold -0.5 must be"),
    (["bench", "--min-time", "inf"], "--min-time inf must be a positive number"),
    (["bench", "--min-time", "1e9"], "--min-time 1e+09 must be"),
    (["bench", "--rounds", "2"], "--rounds 2 must be"),
    (["bench", "--threads", "0"], "--threads 0 must be"),
    (["copy-task", "--out", "x", "--steps", "0"], "--steps 0 must be"),
    (["report", "--no-compare", "--compare", "old.json"], "contradict each other"),
    (["report", "--compare", "missing.json"], "'missing.json' does not exist"),
    (["bench", "--log", "same.json", "--json", "./same.json"], "name one file"),
    (["check", "--json", ""], "--json is empty"),
    (["bench", "--log", " "], "--log is empty"),
    (["list", "--variants", ""], "--variants is empty"),
])
def test_bad_option_is_one_line_before_the_run(argv, said, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and said in err, err
    assert not list(tmp_path.iterdir())


def test_a_family_filter_that_leaves_out_the_users_variant_says_so(capsys):
    with scratch():  # the example's registration is undone afterwards
        assert main(["list", "--family", "norm", "--variants", EXAMPLE]) == 0
    err = capsys.readouterr().err
    assert "--family norm leaves out my_einsum (attention family)" in err


# -- property-based: argument vectors drawn from the parser's own options -------------------------

class Reached(Exception):
    """The command got past validation to its measurement: it would run (not run here)."""


HEAVY = [("harness.cli.check", "check_all"), ("harness.cli.report", "check_all"),
         ("harness.cli.bench", "run_sweep"), ("harness.cli.report", "differences"),
         ("harness.cli.review", "differences"), ("harness.cli.review", "propose_map"),
         ("harness.cli.review", "diff_pair"), ("harness.cli.review", "pick_case"),
         ("harness.cli.models", "write_cache_bench"), ("harness.cli.models", "write_copy_task"),
         ("harness.cli.models", "check_caches"), ("harness.cli.models", "compare_greedy"),
         ("harness.cli.models", "compare_train_step")]

FLOATS = ["nan", "inf", "-inf", "-1", "0", "1e-9", "0.002", "0.5", "2", "1e400", "abc", ""]
NON_FINITE = {"nan", "inf", "-inf", "1e400"}
INTS = ["-1", "0", "1", "2", "3", "7", "99999999999999999999999", "x", ""]
BY_DEST = {
    "set": ["d_model=64", "seed=1", "seed=99999999999999999999999", "seed=-1", "d_model=200000",
            "heads=5", "bogus=1", "d_model=", "tgt_len=0", "dropout=nan", "window=2,0", "softcap=inf"],
    "family": ["norm", "attention", "nope", ""],
    "variants": ["", "missing.py", "notes.txt"],  # a real file would stay registered in this process
    "variant": ["nope", "torch_rmsnorm", ""],
    "dtype": ["float64", "float32", "int8", "nope"],
    "device": ["cpu", "auto", "tpu", ""],
    "seq": ["8", "0", "8,16", "a", "", "-4", "100000"],
    "batch": ["1", "0", "1,2", "x", ""],
    "json": ["", "out.json", "sub/out.json", "notes.txt", ".", "/proc/nope/x.json"],
    "log": ["", "bench.jsonl", "notes.txt", "out.json", "."],
    "out": ["", "outdir", "notes.txt", "/proc/nope"],
    "compare": ["", "missing.json", "notes.txt"],
    "from_file": ["", "missing.jsonl", "notes.txt", "."],
    "family_pos": ["norm", "attention", "nope"],
    "a": ["nope", "torch_rmsnorm"], "b": ["nope", "rmsnorm_explicit"],
    "target": ["", "nope.py:X", "torch.nn:LayerNorm", "notes.txt:X"],
}
DEFAULT = ["", "x", "norm"]


def _values(action: argparse.Action) -> st.SearchStrategy[str]:
    if action.choices:
        return st.sampled_from([*map(str, action.choices), "bogus"])
    if action.type is float:
        return st.sampled_from(FLOATS)
    if action.type is int:
        return st.sampled_from(INTS)
    key = "family_pos" if not action.option_strings and action.dest == "family" else action.dest
    return st.sampled_from(BY_DEST.get(key, DEFAULT))


def _commands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


COMMANDS = _commands()


@st.composite
def argv_for(draw, name: str) -> list[str]:
    argv = [name]
    for action in COMMANDS[name]._actions:
        if isinstance(action, argparse._HelpAction):
            if draw(st.integers(0, 30)) == 0:
                argv.append("--help")
            continue
        if not action.option_strings:  # positional: always given
            argv.append(draw(_values(action)))
            continue
        if not draw(st.booleans()):
            continue
        flag = draw(st.sampled_from(action.option_strings))
        if action.nargs == 0:
            argv.append(flag)
        else:
            argv += [flag, draw(_values(action))]
    if draw(st.integers(0, 20)) == 0:
        argv.append("--no-such-option")
    return argv


ANY_ARGV = st.sampled_from(sorted(COMMANDS)).flatmap(argv_for)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@settings(max_examples=250, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(argv=ANY_ARGV)
def test_any_argument_vector_is_a_documented_exit(argv, capsys, monkeypatch):
    for module, name in HEAVY:
        monkeypatch.setattr(f"{module}.{name}", _reached)
    with tempfile.TemporaryDirectory() as tmp, contextlib.chdir(tmp):
        root = Path(tmp)
        (root / "notes.txt").write_text("a user's notes\n")
        before = _files(root)
        try:
            status = main(argv)
        except Reached:
            status = "ran"
        except SystemExit as exc:  # argparse: --help (0) and usage mistakes (2)
            status = exc.code
        out, err = capsys.readouterr()
        assert "Traceback" not in err + out, (argv, err)
        assert status in (0, 1, 2, 130, "ran"), (argv, status, err)
        if status == 2:
            lines = [x for x in err.splitlines() if x.strip() and not x.startswith("note:")]
            assert len(lines) == 1 and lines[0].startswith("error:"), (argv, err)
        if status == "ran":  # what reached the run was valid: no non-finite number, no seed beyond 64 bits
            assert not NON_FINITE & set(argv), argv
            assert "seed=99999999999999999999999" not in argv and "d_model=200000" not in argv, argv
            assert "" not in argv[1:], argv
        after = _files(root)
        declared = [v for i, v in enumerate(argv) if i and argv[i - 1] in ("--json", "--log", "--out")]
        changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
        stray = [k for k in changed if not any(k == d or k.startswith(d.rstrip("/") + "/") for d in declared)
                 and not k.startswith("reports/")]
        assert not stray, (argv, stray)
        assert after.get("notes.txt") == before["notes.txt"], argv


def _reached(*args, **kwargs):
    raise Reached

