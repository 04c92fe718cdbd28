"""A failure of the harness's own code (a bug to report, not the user's): its row says it in one
line, as any failure; the JSON output keeps the whole traceback (``"traceback"``, or diff's
``"tracebacks"`` per variant), and ``--debug`` prints it on stderr too. A failure of the user's
code keeps its one line naming their file and line, and no traceback of the harness."""

from __future__ import annotations

import json

import pytest

from harness.base.boundary import UserCodeError, user_code
from harness.base.errors import ConfigError
from harness.base.failures import harness_failure, harness_traceback
from harness.cli.main import main
from harness.registry import scratch
from harness.trace import divergence

DIFF = ["diff", "norm", "torch_layernorm", "t2t_layernorm", "--case", "rows", "--dtype", "float64",
        "--set", "d_model=16", "--set", "heads=2"]
TRACEBACK = "Traceback (most recent call last)"

USER_FILE = '''
from torch import nn
from harness import Param, register


def _raises(cfg):
    raise RuntimeError("constructor boom")


register(id="mine_ctor", family="norm", source="mine", build=_raises, call=lambda m, i: m(i["x"]),
         param_map={"weight": Param("weight"), "bias": Param("bias")},
         traits={"norm_formula": "layernorm", "eps": 1e-5, "std": "biased, eps inside sqrt"})
'''


@pytest.fixture
def planted(monkeypatch):
    """The harness's own op recorder fails as a trace starts (a bug of the harness)."""

    class Broken(divergence.ParamOps):
        def __enter__(self):
            raise RuntimeError("planted harness bug")

    monkeypatch.setattr(divergence, "ParamOps", Broken)


def test_a_harness_failure_is_one_line_on_the_terminal_and_whole_in_the_json(planted, tmp_path, capsys):
    out = tmp_path / "diff.json"
    assert main([*DIFF, "--json", str(out)]) == 0
    printed, err = capsys.readouterr()
    assert TRACEBACK not in printed + err
    [line] = [x for x in printed.splitlines() if x.startswith("error:")]
    assert "torch_layernorm: RuntimeError: planted harness bug" in line
    data = json.loads(out.read_text())
    assert data["verdict"] == "error" and set(data["tracebacks"]) == {"torch_layernorm", "t2t_layernorm"}
    for text in data["tracebacks"].values():
        assert text.startswith(TRACEBACK) and "in __enter__" in text and "planted harness bug" in text


def test_debug_prints_the_harness_failure_traceback(planted, capsys):
    assert main(["--debug", *DIFF]) == 0
    err = capsys.readouterr().err
    assert err.count(TRACEBACK) == 2 and "planted harness bug" in err
    assert main(DIFF) == 0  # --debug holds for its own command only
    assert TRACEBACK not in capsys.readouterr().err


def test_a_user_code_failure_has_no_harness_traceback(tmp_path, capsys):
    mine, out = tmp_path / "mine.py", tmp_path / "diff.json"
    mine.write_text(USER_FILE)
    with scratch():
        code = main(["--debug", "diff", "norm", "torch_layernorm", "mine_ctor", "--variants", str(mine), "--case",
                     "rows", "--dtype", "float64", "--set", "d_model=16", "--set", "heads=2", "--json", str(out)])
    assert code == 0
    printed, err = capsys.readouterr()
    assert TRACEBACK not in printed + err
    data = json.loads(out.read_text())
    assert "tracebacks" not in data
    assert "RuntimeError: constructor boom (at " in data["errors"]["mine_ctor"] and "mine.py:7" in data["errors"][
        "mine_ctor"]


def test_what_counts_as_the_harness_own_failure():
    with pytest.raises(UserCodeError) as user:
        with user_code("call"):
            raise ValueError("the user's")
    refusal = ConfigError("heads=7 does not divide d_model")
    try:
        raise KeyError("the harness's")
    except KeyError as exc:
        ours = exc
    assert not harness_failure(user.value) and harness_traceback(user.value) is None
    assert not harness_failure(refusal) and harness_traceback(refusal) is None
    assert harness_failure(ours) and "KeyError: \"the harness's\"" in harness_traceback(ours)


@pytest.mark.parametrize("where", ["oracle", "run"])
def test_a_spec_check_that_fails_in_the_harness_keeps_its_traceback_in_check_json(where, monkeypatch, tmp_path,
                                                                                   capsys):
    """The check itself failing (its oracle) or the harness's part of a variant's run (the
    input snapshot, outside the variant's code): each spec's error row, one line on the
    terminal; ``check --json`` keeps the traceback in the spec row."""
    from harness.check import runs

    def broken(*args, **kwargs):
        raise RuntimeError("planted harness bug")

    if where == "oracle":
        monkeypatch.setattr(runs.RunCache, "oracle", broken)
    else:
        monkeypatch.setattr(runs, "snapshot", broken)
    out = tmp_path / "check.json"
    assert main(["check", "--family", "norm", "--variant", "t2t_layernorm", "--dtype", "float64", "--set",
                 "d_model=16", "--set", "heads=2", "--json", str(out)]) == 1
    printed, err = capsys.readouterr()
    assert TRACEBACK not in printed + err and "planted harness bug" in printed
    specs = [s for s in json.loads(out.read_text())["specs"] if s["variant"] == "t2t_layernorm"]
    assert specs and all(s["verdict"] == "error" and s["traceback"].startswith(TRACEBACK)
                         and "planted harness bug" in s["traceback"] for s in specs)


def test_a_gradcheck_that_fails_in_the_harness_keeps_its_traceback(monkeypatch):
    from harness.check import extras
    from harness.registry import get_variant, load_packs

    def broken(*args, **kwargs):
        raise RuntimeError("planted harness bug")

    load_packs()
    variant = get_variant("norm", "t2t_layernorm")
    assert "traceback" not in extras.gradcheck_variant(variant).as_dict()
    monkeypatch.setattr(extras, "unique_grad_inputs", broken)
    result = extras.gradcheck_variant(variant)
    assert not result.ok and "planted harness bug" in result.note
    assert result.as_dict()["traceback"].startswith(TRACEBACK)


def test_a_train_step_that_fails_in_the_harness_keeps_its_traceback(monkeypatch):
    """A whole-model command's rows (here train-step's) keep it as the check's do."""
    from harness.base.config import Config
    from harness.systems import training

    def broken(*args, **kwargs):
        raise RuntimeError("planted harness bug")

    monkeypatch.setattr(training, "train_step", broken)
    rows = training.compare_train_step("decoder_only_model", Config().replace(seed=7919))  # a config of its own
    assert rows and all(r.verdict == "error" and "planted harness bug" in r.error for r in rows)
    assert all(r.as_dict()["traceback"].startswith(TRACEBACK) for r in rows)


def test_a_bench_row_keeps_the_harness_traceback_as_a_key_only_where_set():
    """A case the harness itself failed to measure: its log row carries ``traceback`` (read back
    as it was written); a user's failure, and every row that did not fail, have no such key."""
    from types import SimpleNamespace

    from harness.bench.row import BenchRow, Measurement, RowSpec
    from harness.bench.sweep import _failed

    def row_after(exc: Exception) -> dict:
        m = Measurement()
        _failed(m, SimpleNamespace(compiled=False), exc)  # type: ignore[arg-type]
        return BenchRow(RowSpec(key="k"), m).to_json()

    try:
        raise RuntimeError("planted harness bug")
    except RuntimeError as exc:
        ours = row_after(exc)
    assert ours["status"] == "error" and ours["traceback"].startswith(TRACEBACK)
    assert list(ours)[-1] == "traceback" and BenchRow.from_json(ours).to_json() == ours
    assert "traceback" not in row_after(UserCodeError("call", "my_file.py:3: boom"))
    assert "traceback" not in BenchRow(RowSpec(key="k")).to_json()
