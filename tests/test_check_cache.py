"""The check cache (``$HARNESS_CHECK_CACHE``, ``harness.check.check_cache``): a family's part
read back is the part the check makes, a change to a variant's file or to the settings is a
new part, and a folder that cannot be written never fails a check."""

from __future__ import annotations

import json

import pytest

from harness.base.config import CONFIG_MATRIX
from harness.check import api
from harness.check.api import check_all
from harness.check.check_cache import CACHE_ENV
from harness.registry import load_file, scratch

ONE = {"default": CONFIG_MATRIX["default"]}
NORM = '''
import torch
from torch import nn
from harness import Param, register


class MyNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.g = nn.Parameter(torch.ones(d))
        self.b = nn.Parameter(torch.zeros(d))
        self.eps = 1e-5

    def forward(self, x):
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + EPS) * self.g + self.b


register(id="cached_norm", family="norm", source="tests/test_check_cache.py",
         build=lambda cfg: MyNorm(cfg.d_model), call=lambda m, x: m(x["x"]),
         param_map={"weight": Param("g"), "bias": Param("b")}, traits={"norm_formula": "layernorm", "eps": 1e-5})
'''


def _json(report) -> str:
    return json.dumps(report.as_dict(), sort_keys=True)


def _count_parts(monkeypatch) -> list[str]:
    made: list[str] = []
    real = api._family_part

    def counted(engine, family, *args):
        made.append(family.name)
        return real(engine, family, *args)

    monkeypatch.setattr(api, "_family_part", counted)
    return made


def test_a_part_read_back_is_the_part_the_check_makes(tmp_path, monkeypatch):
    fresh = _json(check_all(["norm", "masks"], ONE, "cpu", ["float32"]))
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    made = _count_parts(monkeypatch)
    cold = _json(check_all(["norm", "masks"], ONE, "cpu", ["float32"]))
    warm = _json(check_all(["norm", "masks"], ONE, "cpu", ["float32"]))
    assert fresh == cold == warm
    assert made == ["norm", "masks"]  # the second check read both parts back
    assert len(list((tmp_path / "cache").glob("*.pkl"))) == 2
    check_all(["norm"], ONE, "cpu", ["float32"], extras=False)  # other settings: a part of its own
    assert made == ["norm", "masks", "norm"]


def test_a_changed_variant_file_is_checked_again(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    made = _count_parts(monkeypatch)
    user = tmp_path / "my_norm.py"
    results = []
    for eps in ("self.eps", "1e-2"):  # right, then an eps of its own: a mistake the check must see
        user.write_text(NORM.replace("EPS", eps))
        with scratch():
            load_file(user)
            report = check_all(["norm"], ONE, "cpu", ["float32"], variants=["norm/cached_norm"])
        results.append(all(s.ok for s in report.specs if s.variant == "cached_norm"))
    assert made == ["norm", "norm"] and results == [True, False]


@pytest.mark.parametrize("under", [False, True])
def test_a_folder_that_cannot_hold_the_cache_changes_nothing(tmp_path, monkeypatch, under):
    blocker = tmp_path / "cache"
    blocker.write_text("not a folder")  # the cache's path (or its parent) is a user's file
    monkeypatch.setenv(CACHE_ENV, str(blocker / "sub" if under else blocker))
    report = check_all(["masks"], ONE, "cpu", ["float32"])
    assert report.specs and not report.failures
    assert blocker.read_text() == "not a folder" and list(tmp_path.iterdir()) == [blocker]


def test_two_processes_needing_one_part_at_once_compute_it_once(tmp_path, monkeypatch):
    """The second waits on the key's lock while the first computes, then reads its part."""
    import fcntl
    import threading
    import time

    from harness.check.check_cache import cached_part

    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    computed: list[str] = []
    held: list[bool] = []
    second: list[object] = []
    started = threading.Event()

    def compute():
        computed.append("first")
        with (tmp_path / ".k.lock").open("a") as other:  # a lock taken elsewhere meanwhile is refused
            try:
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held.append(False)
            except BlockingIOError:
                held.append(True)
        started.set()
        time.sleep(0.5)
        return {"part": 1}

    def waiting():
        started.wait()
        second.append(cached_part("k", lambda: computed.append("second") or {"part": 2}))

    t = threading.Thread(target=waiting)
    t.start()
    assert cached_part("k", compute) == {"part": 1}
    t.join()
    assert held == [True] and computed == ["first"] and second == [{"part": 1}]
