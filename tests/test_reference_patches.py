"""``harness.base.patches``: every change a candidate can make to the reference's own code (its
module, its classes, a function's code or defaults, a module it imports, the standard library,
``builtins``, the harness's functions and classes) is named, with its verb, and put back; an
unchanged snapshot, and a size set again to an equal value, raise nothing."""

from __future__ import annotations

import builtins
import math
import types

import harness.check.hack_probes as probes
from harness.base.hacks import HackKind
from harness.base.patches import patched_since, snapshot_reference
from harness.check.reference_result import Judgement

PROBLEM = '''
import math
import torch

size = 1000


def helper(x, scale=2.0):
    return x * scale


class Model(torch.nn.Module):
    def forward(self, x):
        return helper(x) / math.sqrt(size)
'''


def _problem() -> types.ModuleType:
    module = types.ModuleType("a_problem")
    exec(compile(PROBLEM, "a_problem.py", "exec"), module.__dict__)
    for value in vars(module).values():
        if isinstance(value, type):
            value.__module__ = "a_problem"
    return module


def _mine(self, x):
    return x


def test_an_unchanged_reference_and_an_equal_size_raise_nothing():
    module = _problem()
    snap = snapshot_reference([("p", module)])
    module.size = int("1000") + 0 * len(str(module.size))  # an equal value, another int object
    assert patched_since(snap) == []


def test_every_change_is_named_and_put_back():
    module = _problem()
    originals = (module.Model.forward, module.helper.__code__, module.helper.__defaults__, math.sqrt, builtins.max,
                 probes.agrees, Judgement.ok)
    snap = snapshot_reference([("p", module)])
    try:
        module.Model.forward = _mine
        module.Model.__call__ = _mine  # added: shadows nn.Module.__call__
        module.helper.__code__ = _mine.__code__.replace(co_name="fake")
        module.size = 7
        math.sqrt = lambda v: v
        builtins.max = min
        probes.agrees = lambda *a: True
        Judgement.ok = property(lambda self: True)
        found = patched_since(snap)
    finally:
        module.Model.forward, module.helper.__code__, module.helper.__defaults__, math.sqrt, builtins.max, \
            probes.agrees, Judgement.ok = originals
    said = [f.detail for f in found]
    assert {f.kind for f in found} == {HackKind.REFERENCE_PATCHED}
    for line in ("the candidate replaced p.Model.forward by _mine (test_reference_patches.py:",
                 "the candidate added p.Model.__call__ by _mine (",
                 "the candidate rewrote the code of p.helper with fake",
                 "the candidate replaced p.size by a int: the reference would run it",
                 "the candidate replaced math.sqrt by <lambda> (",
                 "the candidate replaced builtins.max by a builtin_function_or_method",
                 "the candidate replaced harness.check.hack_probes.agrees by <lambda> (",
                 "the candidate replaced harness.check.reference_result.Judgement.ok by <lambda> ("):
        assert any(s.startswith(line) for s in said), (line, said)
    judged = [s for s in said if s.startswith("the candidate replaced harness.")]
    assert len(judged) == 2 and all(s.endswith(": the judge would run it") for s in judged)
    assert module.Model.forward is originals[0] and "__call__" not in vars(module.Model)  # put back
    assert module.helper.__code__ is originals[1] and module.size == 1000 and math.sqrt is originals[3]
    assert builtins.max is originals[4] and probes.agrees is originals[5] and Judgement.ok is originals[6]
    assert patched_since(snap) == []


def test_defaults_changed_in_place_of_the_code_are_named():
    module = _problem()
    snap = snapshot_reference([("p", module)])
    module.helper.__defaults__ = (3.0,)
    [found] = patched_since(snap)
    assert found.detail == "the candidate changed the defaults of p.helper: the reference would run it"
    assert module.helper(1.0) == 2.0
