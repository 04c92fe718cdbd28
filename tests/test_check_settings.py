"""The check's plumbing: its settings one frozen value, the verdict three hops from the
``check`` command and decided by a pure function, the sweep's settings one frozen value."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import math
import textwrap

import pytest

import harness.check as check_package
from harness.base.config import Config
from harness.bench.sweep import SweepSettings, log_stamp
from harness.check import api, spec
from harness.check.api import check_all
from harness.check.runs import RunCache
from harness.check.settings import CheckSettings, PairMode
from harness.check.spec import SpecChecker
from harness.check.verdict import decide
from harness.registry import get_variant, load_packs

TINY = {"tiny": Config(d_model=8, heads=2, batch=2, tgt_len=3, src_len=4, d_ff=16)}


def _same(a, b) -> bool:
    """Equal field for field, NaN equal to NaN (as the JSON comparison of a whole check)."""
    return repr(a) == repr(b)


def test_the_settings_are_one_frozen_hashable_value_built_from_a_callers_keywords():
    s = CheckSettings.of(device="cpu", dtypes=["bfloat16"], pairs="all", variants=["norm/torch_layernorm"])
    assert s.dtypes == ("bfloat16",) and s.pairs is PairMode.ALL and s.variants == frozenset({"norm/torch_layernorm"})
    assert hash(s) == hash(CheckSettings("cpu", ("bfloat16",), pairs=PairMode.ALL,
                                         variants=frozenset({"norm/torch_layernorm"})))
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.factor = 1.0  # type: ignore[misc]
    assert CheckSettings.of(dtypes=[]).dtypes == ("float32",)      # as check_all(..., []) always read
    assert CheckSettings(strict=True).lenient == () and CheckSettings().lenient == ("bfloat16", "float16")
    with pytest.raises(TypeError, match="precision"):
        CheckSettings.of(precision=2.0)                            # a misspelt keyword is refused, not ignored
    with pytest.raises(ValueError):
        CheckSettings(pairs="some")                                # type: ignore[arg-type]


def test_the_keyword_form_and_one_settings_object_check_alike():
    load_packs()
    keys = ["norm/annotated_preln"]  # and the family reference, run as the baseline
    by_keywords = check_all(["norm"], TINY, "cpu", ["float32"], extras=False, variants=keys)
    by_settings = check_all(["norm"], TINY, settings=CheckSettings(dtypes=("float32",), extras=False,
                                                                   variants=frozenset(keys)))
    assert by_keywords.specs and _same(by_keywords.as_dict(), by_settings.as_dict())


def test_the_decision_reads_no_run_and_writes_none(monkeypatch):
    """``decide`` is pure: with the run cache unreachable it decides the same verdict from the
    same evidence, and the evidence's runs are left as they were."""
    load_packs()
    v = get_variant("norm", "annotated_preln")
    engine = SpecChecker(TINY)
    case = v.family_spec.cases[0].name
    for dtype in ("float64", "float32"):
        e = engine.evidence(v, "tiny", case, dtype)
        assert e is not None
        before = repr(e)

        def unreachable(*args, **kwargs):
            raise AssertionError("the decision read the run cache")

        with monkeypatch.context() as m:
            m.setattr(RunCache, "run", unreachable)
            m.setattr(RunCache, "oracle", unreachable)
            first, again = decide(e, engine.settings), decide(e, engine.settings)
        assert _same(first, again) and repr(e) == before
        assert first.ok and not math.isnan(first.err)


def _calls(fn) -> set[str]:
    """The names ``fn``'s body calls (``f(...)`` and ``x.f(...)``)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    return {n.func.id if isinstance(n.func, ast.Name) else n.func.attr
            for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, (ast.Name, ast.Attribute))}


def test_the_verdict_is_three_hops_from_the_check_command_as_the_package_says():
    from harness.cli.check import cmd_check

    read_first = check_package.__doc__ or ""
    for name in ("api.check_all", "spec.SpecChecker.check", "verdict.decide"):
        assert name in read_first
    assert "check_all" in _calls(cmd_check)            # hop 1
    assert "_family_part" in _calls(api.check_all)     # a family at a time
    assert "check" in _calls(api._family_part)         # hop 2: each cell's spec
    assert "decide" in _calls(spec.SpecChecker.check)  # hop 3: the decision


def test_the_sweep_settings_are_one_frozen_value_and_stamp_the_log_as_they_did():
    s = SweepSettings(min_time=0.1, rounds=3, threads=2, memory=False, variant_files=["pack.py"], profile="quick")
    assert s.variant_files == ("pack.py",) and hash(s) == hash(dataclasses.replace(s))
    stamp = log_stamp("cpu", s)
    assert list(stamp) == ["code", "torch", "device", "cpu", "profile", "min_time", "rounds", "threads", "memory"]
    assert (stamp["min_time"], stamp["rounds"], stamp["threads"], stamp["memory"], stamp["profile"]) == (
        0.1, 3, 2, False, "quick")
