"""A user's variant that fails in any way (its file does not import, its constructor raises,
its call returns the wrong shape, not a tensor, or NaN) is that variant's error row with its
real cause, in every command: check, diff, bench, map and the pytest plugin. Never a
traceback, never a misleading cause (a wrong shape is not "NaN in 1008 elements")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli.common import VARIANTS_ENV
from harness.cli.main import main
from harness.registry import scratch

ROOT = Path(__file__).resolve().parents[1]

BAD = '''
import torch
from torch import nn
from harness import Param, register

LN = {"norm_formula": "layernorm", "eps": 1e-5, "std": "biased, eps inside sqrt"}
MAP = {"weight": Param("weight"), "bias": Param("bias")}


def _raises(cfg):
    raise RuntimeError("constructor boom")


def _ln(cfg):
    return nn.LayerNorm(cfg.d_model)


register(id="bad_ctor", family="norm", source="mine", build=_raises, call=lambda m, i: m(i["x"]),
         param_map=MAP, traits=LN)
register(id="bad_shape", family="norm", source="mine", build=_ln, call=lambda m, i: m(i["x"])[..., :-1],
         param_map=MAP, traits=LN)
register(id="bad_type", family="norm", source="mine", build=_ln, call=lambda m, i: (m(i["x"]), None),
         param_map=MAP, traits=LN)
register(id="bad_nan", family="norm", source="mine", build=_ln, call=lambda m, i: m(i["x"]) * float("nan"),
         param_map=MAP, traits=LN)
'''
# variant -> the cause every command must name
CAUSE = {"bad_ctor": "RuntimeError: constructor boom",
         "bad_shape": "output shape",
         "bad_type": "the call returned tuple, not a tensor",
         "bad_nan": "NaN"}


@pytest.fixture
def bad(tmp_path, monkeypatch):
    monkeypatch.delenv(VARIANTS_ENV, raising=False)
    path = tmp_path / "mine.py"
    path.write_text(BAD)
    return path


def _no_traceback(capsys) -> tuple[str, str]:
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err, err[-2000:]
    return out, err


def test_check_gives_each_failing_variant_its_error_row(bad, tmp_path, capsys):
    report = tmp_path / "check.json"
    argv = ["check", "--family", "norm", "--dtype", "float64", "--set", "d_model=16", "--set", "heads=2",
            "--variants", str(bad), "--json", str(report)] + [x for v in CAUSE for x in ("--variant", v)]
    with scratch():
        assert main(argv) == 1  # contradictions, not a usage error
    out, _ = _no_traceback(capsys)
    specs = json.loads(report.read_text())["specs"]
    for variant, cause in CAUSE.items():
        mine = [s for s in specs if s["variant"] == variant]
        assert mine and not any(s["ok"] for s in mine), variant
        assert all(cause in s["note"] for s in mine), (variant, {s["note"] for s in mine})
    assert not any("traceback" in s for s in specs)  # the user's code failed, not the harness: its line says where
    shape = [s for s in specs if s["variant"] == "bad_shape"]
    assert all(s["verdict"] == "error" and "NaN" not in s["note"] for s in shape)


@pytest.mark.parametrize("variant", ["bad_ctor", "bad_shape", "bad_type", "bad_nan"])
def test_diff_names_the_cause(bad, variant, capsys):
    with scratch():
        code = main(["diff", "norm", "torch_layernorm", variant, "--variants", str(bad), "--case", "rows",
                     "--dtype", "float64", "--set", "d_model=16", "--set", "heads=2"])
    out, err = _no_traceback(capsys)
    assert code == 0, err
    said = {"bad_shape": "shapes (3, 7, 16) vs (3, 7, 15)", "bad_nan": "B NaN"}.get(variant, CAUSE[variant])
    assert said in out, out


def test_bench_does_not_time_a_failing_variant(bad, tmp_path, capsys):
    log = tmp_path / "bench.jsonl"
    argv = ["bench", "--family", "norm", "--variants", str(bad), "--seq", "8", "--batch", "1", "--min-time",
            "0.0005", "--rounds", "3", "--no-rss", "--no-progress", "--log", str(log)]
    with scratch():
        assert main(argv + [x for v in CAUSE for x in ("--variant", v)]) == 0
    _no_traceback(capsys)
    rows = {r["variant"]: r for r in map(json.loads, log.read_text().splitlines()[1:]) if r.get("kind") == "case"}
    assert rows["torch_layernorm"]["status"] == "ok"
    for variant, cause in CAUSE.items():
        assert rows[variant]["status"] == "error" and cause in rows[variant]["error"], rows[variant]
        assert "median_s" not in rows[variant]


ATT = (ROOT / "examples" / "my_attention.py").read_text().split("\n\nregister(")[0].replace(
    "from harness import Chunk, Param, register\n", "") + '''


class CtorRaises(EinsumAttention):
    def __init__(self, d_model, heads):
        raise RuntimeError("constructor boom")


class WrongShape(EinsumAttention):
    def forward(self, query, key, value, mask):
        return super().forward(query, key, value, mask)[..., :-1]


class Nan(EinsumAttention):
    def forward(self, query, key, value, mask):
        return super().forward(query, key, value, mask) * float("nan")
'''


@pytest.mark.parametrize("cls, code, said", [
    ("CtorRaises", 2, "RuntimeError: constructor boom"),
    ("WrongShape", 1, "output: shapes (3, 7, 47) vs (3, 7, 48)"),
    pytest.param("Nan", 1, "output: NaN in 1008 vs 0 elements", marks=pytest.mark.slow),  # the same path
])
def test_map_names_the_cause(tmp_path, cls, code, said, capsys):
    mods = tmp_path / "mods.py"
    mods.write_text(ATT)
    with scratch():
        assert main(["map", f"{mods}:{cls}", "--family", "attention"]) == code
    out, err = _no_traceback(capsys)
    assert said in out + err, out + err


def test_pytest_plugin_summary_names_the_cause(bad):
    """The failure's first line names the cause (after the aspect and the count): bad_nan's comparison
    (the costly one: gradcheck on NaN) is the same path as check's, tested above."""
    env = {k: v for k, v in os.environ.items() if k != VARIANTS_ENV}
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--variants", bad.name,
                          "-k", "cpu-semantics and not bad_nan"], cwd=bad.parent, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr
    summary = [x for x in run.stdout.splitlines() if x.startswith("FAILED ")]
    assert len(summary) == 3, run.stdout[-3000:]
    heads = [x for x in run.stdout.splitlines() if x.startswith("norm/bad_") and "contradict" in x]
    for variant, cause in CAUSE.items():
        if variant == "bad_nan":
            continue
        head = next(x for x in heads if x.startswith(f"norm/{variant} contradicts its declaration (semantics"))
        assert cause in head, head
    assert "NaN" not in next(x for x in heads if x.startswith("norm/bad_shape "))


def test_list_with_a_file_that_exits_at_import(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(VARIANTS_ENV, raising=False)
    exits = tmp_path / "exits.py"
    exits.write_text("import sys\n\nsys.exit(0)\n")
    with scratch():
        assert main(["list", "--variants", str(exits)]) == 2
    _, err = _no_traceback(capsys)
    assert err.splitlines() == [err.strip()] and "exited at import with SystemExit(0) (line 3)" in err, err


def test_pytest_variants_from_another_folder_is_refused_in_one_line(tmp_path):
    """Two words (``--variants /elsewhere/mine.py``): pytest would take its rootdir from the
    file's folder and drop this checkout's settings; refused in one line naming the cure.
    One word (``--variants=/elsewhere/mine.py``) keeps the settings (below)."""
    mine = tmp_path / "mine.py"
    mine.write_text((ROOT / "examples" / "my_attention.py").read_text())
    env = {k: v for k, v in os.environ.items() if k != VARIANTS_ENV}
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q",
                          "--variants", str(mine)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 4, run.stdout[-2000:] + run.stderr
    assert f"write --variants={mine}" in run.stderr and str(ROOT / "pyproject.toml") in run.stderr
    assert run.stderr.strip().count("\n") == 0, run.stderr


@pytest.mark.slow  # a second pytest process collecting a test file: seconds under load
def test_pytest_variants_as_one_word_keeps_the_settings(tmp_path):
    mine = tmp_path / "mine.py"
    mine.write_text((ROOT / "examples" / "my_attention.py").read_text())
    env = {k: v for k, v in os.environ.items() if k != VARIANTS_ENV}
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q",
                          f"--variants={mine}", "tests/test_config.py"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr
    # node ids relative to this checkout: its rootdir and pyproject.toml settings were kept
    assert "attention/my_einsum[cpu-semantics]" in run.stdout and "\ntests/test_config.py::" in "\n" + run.stdout
