"""What a user meets first in ``check``'s output: the verdict on its first line (holds, or
how many checks contradict and in which variants), then each failure once however many
configs, cases and dtypes it repeats on, with its count and where; a variant whose
constructor raises is one line naming the exception, and the other variants are judged as
usual."""

from __future__ import annotations

import math

import pytest

from harness.base.verdicts import Verdict
from harness.check.results import CheckReport, SpecResult
from harness.cli.common import VARIANTS_ENV
from harness.cli.main import main
from harness.registry import scratch
from harness.report.failures_text import folded_failures, verdict_lines, where_text

MINE = '''
from torch import nn
from harness import Param, register

LN = {"norm_formula": "layernorm", "eps": 1e-5}
MAP = {"weight": Param("weight"), "bias": Param("bias")}


class Broken(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        raise ValueError("d_model must be even here")


register(id="my_broken", family="norm", source="mine.py", build=lambda cfg: Broken(cfg.d_model),
         call=lambda m, i: m(i["x"]), param_map=MAP, traits=LN)
register(id="my_ln", family="norm", source="mine.py", build=lambda cfg: nn.LayerNorm(cfg.d_model),
         call=lambda m, i: m(i["x"]), param_map=MAP, traits=LN)
'''
ARGS = ["check", "--family", "norm", "--dtype", "float64", "--set", "d_model=16", "--set", "heads=2"]


@pytest.fixture
def mine(tmp_path, monkeypatch):
    monkeypatch.delenv(VARIANTS_ENV, raising=False)
    path = tmp_path / "mine.py"
    path.write_text(MINE)
    return path


def _check(argv, capsys) -> tuple[int, list[str]]:
    with scratch():
        status = main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err, err
    return status, out.splitlines()


def _contradictions(lines: list[str]) -> list[str]:
    start = next(i for i, x in enumerate(lines) if x.startswith("== Contradictions"))
    return lines[start + 1:lines.index("", start)]


def test_a_raising_constructor_is_one_line_and_the_other_variant_is_judged(mine, capsys):
    status, lines = _check(ARGS + ["--variants", str(mine), "--variant", "my_broken", "--variant", "my_ln"], capsys)
    assert status == 1  # a failure happened: not 0, and not a usage error (2)
    assert lines[0] == "verdict: 5 contradict (5 could not run), in 1 of 2 variant(s) checked: norm/my_broken"
    [row] = _contradictions(lines)
    assert row.startswith("  norm/my_broken: build: ValueError: d_model must be even here (at ")
    assert "5 checks could not run: rows, large on " in row and "gradcheck" in row, row
    assert "gradcheck 1/2" in lines[-1] and lines[-1].endswith("; 5 contradict")  # my_ln's gradcheck ran and held


def test_the_control_alone_holds_on_the_first_line(mine, capsys):
    status, lines = _check(ARGS + ["--variants", str(mine), "--variant", "my_ln"], capsys)
    assert status == 0
    assert lines[0] == "verdict: holds: 1 variant(s) checked, 0 contradict"
    assert not any(x.startswith("== Contradictions") for x in lines)


def _spec(variant, config, case, dtype, verdict=Verdict.DIFFERENT, err=1.0, ratio=math.nan, note=""):
    return SpecResult("attention", variant, config, case, dtype, "cpu", verdict, Verdict.EQUIVALENT,
                      verdict == Verdict.EQUIVALENT, err, math.nan, ratio, "output", "ref", "", note)


def test_the_same_failure_on_many_cells_is_one_line_with_its_count_and_where():
    specs = [_spec("wrong", c, case, d, err=2.0 + i) for i, (d, c, case) in enumerate(
        (d, c, case) for d in ("float64", "float32") for c in ("default", "edge") for case in ("causal", "window"))]
    specs += [_spec("wrong", "default", "self", "float64", verdict=Verdict.EQUIVALENT),
              _spec("lossy", "default", "self", "float32", Verdict.LESS_PRECISE, 1e-3, 4.5),
              _spec("lossy", "edge", "cross", "float32", Verdict.LESS_PRECISE, 1e-3, 7.25, note="long logits"),
              _spec("lossy", "edge", "cross", "float64")]
    report = CheckReport(configs={}, dtypes=["float64", "float32"], specs=specs)
    folded = folded_failures(report)
    assert folded == [
        "  attention/wrong: different, declared equivalent, on 8 checks: causal, window on default, edge in "
        "float64, float32; worst output max_abs 9 (edge window float32)",
        "  attention/lossy: less precise, declared equivalent, on 2 checks: self on default in float32; cross on "
        "edge in float32; worst output 7.25x the baseline's error (edge cross float32): long logits",
        "  attention/lossy: different, declared equivalent, on 1 check: cross on edge in float64; "
        "worst output max_abs 1 (edge cross float64)"]
    head = verdict_lines(report, 2, ["  attention/wrong: reads as causal='bottom_right'"])
    assert head[:2] == ["verdict: 11 contradict, in 2 of 2 variant(s) checked: attention/wrong, attention/lossy",
                        "  attention/wrong: reads as causal='bottom_right'"]
    assert head[2].startswith("\n== Contradictions: 11 checks, 3 line(s)") and head[3:] == folded


def test_where_names_every_cell_when_they_are_not_a_product():
    cells = [("default", "causal", "float64"), ("edge", "causal", "float32"), ("default", "window", "float64"),
             ("edge", "window", "float32")]
    assert where_text(cells) == "causal, window on default in float64, edge in float32"
    assert where_text([("a", "x", "f")]) == "x on a in f"
