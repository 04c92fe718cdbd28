"""One tensor of a judged pair (``harness.check.reference.judge``) against its oracle, by the
rule of its dtype and regime (``Rule``: what the pair declares), and the line a failing one
gives. float64 decides semantics (``harness.check.rules.float64_check``); a lower dtype
decides precision against the baseline (``_lower_check``), or, for a candidate that does not
run in float64, in its own dtype (``harness.check.own_dtype``); a loose regime (scaled
inputs, an offset the reference is not invariant to) judges a lower dtype as a half one."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from harness.base.verdicts import Verdict
from harness.check.own_dtype import own_dtype_check
from harness.check.reference_inputs import Regime
from harness.check.reference_runs import SideRun
from harness.check.results import TensorCheck
from harness.check.rules import HALF_DTYPES, _lower_check, float64_check

F64 = torch.float64


@dataclass(frozen=True)
class Rule:
    """What a pair declares: ``internal``, the dtype the candidate computes in on purpose;
    ``own``, why its semantics are decided in its own dtype ("": float64); ``factor``, the
    precision factor."""

    internal: str | None
    own: str
    factor: float


def check(rule: Rule, regime: Regime, dtype: torch.dtype, name: str, cand: SideRun, truth: SideRun,
          baseline: SideRun | None, scale: float) -> TensorCheck:
    a, o = cand.tensors.get(name), truth.tensors[name]
    if a is not None and a.shape != o.shape:
        return TensorCheck.shape_differs(name, a.shape, o.shape)
    if a is not None and not o.is_floating_point():
        same = torch.equal(a, o.to(a.dtype))
        return TensorCheck(name, Verdict.EQUIVALENT if same else Verdict.DIFFERENT, 0.0 if same else math.inf,
                           None, 0.0, 0.0 if same else math.inf, "" if same else f"{name}: its elements differ")
    base = baseline.tensors.get(name) if baseline is not None else None
    if dtype == F64:
        return float64_check(name, a, o, rule.internal, scale=scale, baseline=base, factor=rule.factor)
    if rule.own and not regime.loose_for(name):  # scaled inputs: rounding amplified, judged as below (different beyond
        return own_dtype_check(name, a, o, base, dtype, scale=scale)  # an assert_close tolerance and 10x the baseline)
    pairs = [(base, o)] if base is not None else []
    return _lower_check(name, a, o, pairs, dtype, factor=rule.factor, scale=scale, half_rule=regime.loose_for(name))


def passes(rule: Rule, regime: Regime, dtype: torch.dtype, c: TensorCheck) -> bool:
    if c.verdict.agrees:
        return True
    if c.verdict != Verdict.LESS_PRECISE:
        return False
    if dtype == F64:
        return rule.internal is not None or c.name in regime.moved
    return dtype in HALF_DTYPES or regime.loose_for(c.name)


def line(c: TensorCheck) -> str:
    if c.note:
        return c.note if c.note.startswith(c.name) else f"{c.name}: {c.note}"
    return f"{c.name} max |err| {c.err:.3g} > bound {c.allowed:.3g}"
