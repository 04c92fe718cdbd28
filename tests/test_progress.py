"""Progress of a sweep (``bench``, ``report``): a bar on a terminal; off a terminal (a CI log,
a pipe, a file) one plain line per finished group and never a carriage return; none with
``--no-progress``."""

from __future__ import annotations

import io
import sys

import pytest

from harness.cli.common import VARIANTS_ENV
from harness.cli.main import main
from harness.registry import scratch

BENCH = ["bench", "--family", "norm", "--variant", "torch_layernorm", "--seq", "8,16", "--batch", "1",
         "--min-time", "0.0005", "--rounds", "3", "--no-rss", "--fresh"]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _bench(tmp_path, monkeypatch, *extra, stderr=None) -> str:
    monkeypatch.delenv(VARIANTS_ENV, raising=False)
    err = stderr if stderr is not None else io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    with scratch():
        assert main([*BENCH, "--log", str(tmp_path / "b.jsonl"), *extra]) == 0
    return err.getvalue()


def _progress(err: str) -> list[str]:
    return [x for x in err.splitlines() if x.startswith("bench")]


def test_off_a_terminal_one_line_per_finished_group_and_no_carriage_return(tmp_path, monkeypatch):
    err = _bench(tmp_path, monkeypatch)
    assert "\r" not in err
    assert _progress(err) == ["bench: 1/2 groups: norm B=1 T=8 fwd", "bench: 2/2 groups: norm B=1 T=16 fwd"]


def test_no_progress_prints_none(tmp_path, monkeypatch):
    err = _bench(tmp_path, monkeypatch, "--no-progress")
    assert "\r" not in err and _progress(err) == []


@pytest.mark.parametrize("flag", [(), ("--no-progress",)], ids=["bar", "none"])
def test_on_a_terminal_the_bar_redraws_in_place(tmp_path, monkeypatch, flag):
    """The control: a terminal gets tqdm's bar (carriage returns), not the plain lines."""
    err = _bench(tmp_path, monkeypatch, *flag, stderr=Terminal())
    assert not any(x.startswith("bench: 1/2 groups") for x in err.splitlines())
    assert ("\r" in err and "2/2" in err) if not flag else "\r" not in err
