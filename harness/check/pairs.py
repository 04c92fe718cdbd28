"""The pair matrix of one family: each pair's verdict derived from the equivalence classes
(equal semantic traits) and the two variants' spec results, or measured from the pair's own
runs (``--pairs all``)."""

from __future__ import annotations

import hashlib
import itertools
import math
from dataclasses import dataclass
from typing import Mapping

import torch

from harness.base.dtypes import dtype_of
from harness.base.verdicts import Verdict
from harness.check import precision as P
from harness.check.results import Cell, PairResult, SpecResult
from harness.check.runs import (
    Run,
    RunCache,
    applicable,
)
from harness.families.base import Family
from harness.families.catalog import get_family
from harness.porting.portmap import Fills
from harness.registry import Variant, reference_of, variants_of
from harness.registry.nearest import differing_traits


def derive_pairs(checkers: Mapping[str, RunCache], family_name: str, config: str, case: str, dtype_name: str, *,
                 specs: Mapping[Cell, SpecResult], device: str, measured: bool = False) -> list[PairResult]:
    """The pairwise verdicts of one family on one config, case and dtype, derived from
    the equivalence classes (variants with equal semantic traits) and the oracles
    (``derived_pair``); with ``measured`` (``--pairs all``), from every pair's own runs
    compared directly (``measured_pair``). A pair with an erring side is an error pair."""
    family, checker, dtype = get_family(family_name), checkers[config], dtype_of(dtype_name)
    cell = {v.id: Cell(family_name, v.id, config, case, dtype_name) for v in variants_of(family_name)}
    members = [v for v in variants_of(family_name)
               if applicable(v, case) and not v.refuses(checker.cfg, checker.device) and cell[v.id] in specs]
    digests = {} if measured else {v.id: _digest(checker, v, case, dtype) for v in members}
    classes = _Classes(family, checker, case, dtype)
    out = []
    for a, b in itertools.combinations(members, 2):
        sa, sb = specs[cell[a.id]], specs[cell[b.id]]
        if sa.verdict == Verdict.ERROR or sb.verdict == Verdict.ERROR:
            out.append(_error_pair(sa, sb, _reason(family, a, b, case), config, device))
            continue
        facts = classes.facts(a, b, sa, sb, config, device)
        out.append(measured_pair(facts, checker.run(a, case, facts.fills, dtype),
                                 checker.run(b, case, facts.fills, dtype), checker, a, b) if measured
                   else derived_pair(facts, digests[a.id], digests[b.id]))
    return out


@dataclass(frozen=True)
class PairFacts:
    """What both ways of judging a pair share: its two specs, the declared difference
    between them, and the gap between the two variants' oracles."""

    sa: SpecResult
    sb: SpecResult
    config: str
    device: str
    fills: Fills                # the canonical parameters either side reads as constants
    reason: str                 # the semantic traits that differ ("" for one class)
    out_gap: float              # the largest |oracle_a - oracle_b| on the output
    grad_gap: float             # ... and on the gradients both represent
    worst_grad: str
    tol64: float                # float64's tolerance at the output's scale

    @property
    def specs_ok(self) -> bool:
        return self.sa.ok and self.sb.ok

    @property
    def finding(self) -> bool:
        """A side differs here by a declared per-case path finding."""
        return self.sa.finding is not None or self.sb.finding is not None

    def pair(self, verdict: Verdict, expected: Verdict, ok: bool, max_abs: float, grad_verdict: Verdict,
             grad_max_abs: float, worst_grad: str, note: str) -> PairResult:
        sa, sb = self.sa, self.sb
        return PairResult(family=sa.family, a=sa.variant, b=sb.variant, case=sa.case, dtype=sa.dtype,
                          device=self.device, verdict=verdict, expected=expected, reason=self.reason, ok=ok,
                          max_abs=max_abs, max_rel=math.nan, noise_ratio=math.nan, grad_verdict=grad_verdict,
                          grad_max_abs=grad_max_abs, grad_noise_ratio=math.nan, worst_grad=worst_grad,
                          path_a=sa.path, path_b=sb.path, note=note, config=self.config)


class _Classes:
    """The oracles' gaps of one family on one config, case and dtype: one per pair of
    classes (and fills), not per pair of variants."""

    def __init__(self, family: Family, checker: RunCache, case: str, dtype: torch.dtype):
        self.family, self.checker, self.case, self.dtype = family, checker, case, dtype
        self.gaps: dict[tuple, tuple[float, float, str]] = {}
        self.scales: dict[int, float] = {}

    def facts(self, a: Variant, b: Variant, sa: SpecResult, sb: SpecResult, config: str, device: str) -> PairFacts:
        checker, family = self.checker, self.family
        zero = checker.fills(a) | checker.fills(b)
        oa = checker.oracle(family, a.traits, self.case, zero, self.dtype)
        ob = checker.oracle(family, b.traits, self.case, zero, self.dtype)
        differing, in_case = _differing(family, a, b, self.case)
        key = (id(oa), id(ob), zero)
        if key not in self.gaps:
            self.gaps[key] = _gap(oa, ob, checker, a, b) if differing else (0.0, 0.0, "")
        out_gap, grad_gap, worst_grad = self.gaps[key]
        if id(oa) not in self.scales:
            self.scales[id(oa)] = _scale(oa)
        tol64 = P.FLOAT64_ATOL + P.FLOAT64_RTOL * max(1.0, self.scales[id(oa)])
        # Traits this case does not read make no difference here, unless the oracles
        # say otherwise (then the family's case_semantic is incomplete, and it shows).
        blank = differing and not in_case and max(out_gap, grad_gap) <= tol64
        return PairFacts(sa, sb, config, device, zero, "" if blank else _reason(family, a, b, self.case),
                         out_gap, grad_gap, worst_grad, tol64)


def derived_pair(f: PairFacts, digest_a: str | None, digest_b: str | None) -> PairResult:
    """One class: identical when the two runs hash alike, equivalent when both specs hold
    (and no side is a declared finding here). Two classes: what the oracles' gap says."""
    if not f.reason:
        same = digest_a is not None and digest_a == digest_b
        close = f.specs_ok and not f.finding
        verdict = Verdict.IDENTICAL if same else (Verdict.EQUIVALENT if close else Verdict.DIFFERENT)
        gap = 0.0 if same else math.nan
        return f.pair(verdict, Verdict.EQUIVALENT, f.specs_ok and (verdict != Verdict.DIFFERENT or f.finding),
                      gap, verdict, gap, "", _spec_note(f.sa, f.sb))
    verdict, note = _across(f)
    return f.pair(verdict, Verdict.DIFFERENT, f.specs_ok and verdict != Verdict.EQUIVALENT, f.out_gap,
                  _grad_verdict(f), f.grad_gap, f.worst_grad, "; ".join(x for x in (note, _spec_note(f.sa, f.sb)) if x))


def measured_pair(f: PairFacts, ra: Run, rb: Run, checker: RunCache, a: Variant, b: Variant) -> PairResult:
    """The pair's own runs, on the same weights, against each other: one class is
    equivalent within what both specs accept (or, where a side computes below float64 by
    declaration, at that dtype's tolerance); two classes differ unless the runs agree."""
    m_out, m_grad, m_worst = _gap(ra, rb, checker, a, b)
    allowed = _accepted(f.sa) + _accepted(f.sb)
    close = max(m_out, m_grad) <= allowed
    if not f.reason:
        lower = _declared_lower(a, b, f.sa, f.sb)
        if not close and f.specs_ok and lower and _within_lower(ra, rb, checker, a, b, lower):
            close = True  # one computes below float64 by declaration: judged at that dtype's tolerance
        same = m_out == 0.0 and m_grad == 0.0
        verdict = Verdict.IDENTICAL if same else (Verdict.EQUIVALENT if close else Verdict.DIFFERENT)
        return f.pair(verdict, Verdict.EQUIVALENT, f.specs_ok and (verdict != Verdict.DIFFERENT or f.finding),
                      m_out, verdict, m_grad, m_worst, _spec_note(f.sa, f.sb))
    verdict, note = _across(f)
    if verdict == Verdict.DIFFERENT and close:
        verdict, note = Verdict.EQUIVALENT, "the declared difference did not show in the measured runs"
    return f.pair(verdict, Verdict.DIFFERENT, f.specs_ok and verdict != Verdict.EQUIVALENT, m_out,
                  _grad_verdict(f), m_grad, m_worst, "; ".join(x for x in (note, _spec_note(f.sa, f.sb)) if x))


def _across(f: PairFacts) -> tuple[Verdict, str]:
    """Two classes, by the oracles' gap: the difference does not show on this case, is below
    the dtype's resolution, or is there."""
    biggest, dtype, case, dt = max(f.out_gap, f.grad_gap), dtype_of(f.sa.dtype), f.sa.case, f.sa.dtype
    if biggest <= f.tol64:
        return Verdict.NOT_EXERCISED, f"the declared difference does not show on case {case!r} of config {f.config!r}"
    if dtype != torch.float64 and not P.resolvable(biggest, dtype, _allowed(f.sa), _allowed(f.sb)):
        return Verdict.NOT_RESOLVABLE, f"the declared difference ({biggest:.2g}) is below {dt}'s resolution here"
    return Verdict.DIFFERENT, ""


def _grad_verdict(f: PairFacts) -> Verdict:
    return Verdict.DIFFERENT if f.grad_gap > f.tol64 else Verdict.EQUIVALENT


def _differing(family: Family, a: Variant, b: Variant, case: str) -> tuple[list[str], list[str]]:
    """The semantic traits on which ``a`` and ``b`` differ, and those of them ``case`` reads."""
    differing = list(differing_traits(a, b))
    return differing, [t for t in differing if t in family.semantic_for(case)]


def _reason(family: Family, a: Variant, b: Variant, case: str) -> str:
    sem_a, sem_b = family.semantic_traits(a.traits), family.semantic_traits(b.traits)
    differing, in_case = _differing(family, a, b, case)
    return "; ".join(f"{t}: {sem_a.get(t)} vs {sem_b.get(t)}" for t in (in_case or differing))


def _error_pair(sa: SpecResult, sb: SpecResult, reason: str, config: str, device: str) -> PairResult:
    """A side errs: expected where both sides' errors are (a declared fill overflow, a
    declared path finding), each side's note and declaration said."""
    erring = [s for s in (sa, sb) if s.verdict == Verdict.ERROR]
    both_expected = sa.ok and sb.ok
    declared = "; ".join(s.declared for s in erring if s.declared)
    return PairResult(family=sa.family, a=sa.variant, b=sb.variant, case=sa.case, dtype=sa.dtype, device=device,
                      verdict=Verdict.ERROR, expected=Verdict.ERROR if both_expected else Verdict.EQUIVALENT,
                      reason=reason, ok=both_expected, max_abs=math.nan, max_rel=math.nan, noise_ratio=math.nan,
                      grad_verdict=Verdict.ERROR, grad_max_abs=math.nan, grad_noise_ratio=math.nan, worst_grad="",
                      path_a=sa.path, path_b=sb.path, note="; ".join(f"{s.variant}: {s.note}" for s in erring),
                      config=config, declared=declared if both_expected else "")


def _declared_lower(a: Variant, b: Variant, sa: SpecResult, sb: SpecResult) -> torch.dtype | None:
    """The dtype a pair is measured at when a side is less precise by declaration (its
    ``internal_dtype``; float32 for a less precise spec that declares none): None when
    neither is."""
    lower = [dtype_of(v.traits.get("internal_dtype") or "float32") for v, s in ((a, sa), (b, sb))
             if s.verdict == Verdict.LESS_PRECISE]
    return max(lower, key=lambda d: torch.finfo(d).eps) if lower else None


def _within_lower(ra: Run, rb: Run, checker: RunCache, a: Variant, b: Variant, lower: torch.dtype) -> bool:
    """Every tensor both runs have agrees at ``lower``'s assert_close tolerance (same NaNs)."""
    rtol, atol = P.DEFAULT_TOLERANCE[lower]
    skip = {f"grad:{n}" for n in checker.fills(a) | checker.fills(b)}
    return all(P.within(ta, rb.tensors[n].to(torch.float64), rtol, atol)
               and torch.equal(ta.isnan(), rb.tensors[n].isnan())
               for n, ta in ra.tensors.items()
               if n not in skip and n in rb.tensors and ta.is_floating_point())


def _spec_note(sa: SpecResult, sb: SpecResult) -> str:
    return "; ".join(f"{s.variant} fails its spec ({s.verdict})" for s in (sa, sb) if not s.ok)

def _allowed(spec: SpecResult) -> float:
    return max((c.allowed for c in spec.tensors), default=0.0)

def _accepted(spec: SpecResult) -> float:
    """The largest gap to the oracle a spec accepts: its allowance, or, less precise by
    declaration and holding, its own measured error (judged against the definition computed
    in the declared dtype): two runs each that close to one oracle are that close together."""
    accepted = _allowed(spec)
    if spec.ok and spec.verdict == Verdict.LESS_PRECISE:
        accepted = max([accepted] + [c.err for c in spec.tensors if math.isfinite(c.err)])
    return accepted

def _scale(run: Run) -> float:
    out = run.tensors["output"]
    finite = out[torch.isfinite(out)] if out.is_floating_point() else out.float()
    return float(finite.abs().max()) if finite.numel() else 0.0

def _gap(oa: Run, ob: Run, checker: RunCache, a: Variant, b: Variant) -> tuple[float, float, str]:
    """Largest |x_a - x_b| on the output and on the gradients both represent (two oracles,
    or two runs on the same weights)."""
    skip = {f"grad:{n}" for n in checker.fills(a) | checker.fills(b)}
    out_gap, grad_gap, worst = 0.0, 0.0, ""
    for name, ta in oa.tensors.items():
        if name in skip or name not in ob.tensors:
            continue
        tb = ob.tensors[name]
        if not ta.is_floating_point():
            g = 0.0 if torch.equal(ta, tb) else math.inf
        elif ta.shape == tb.shape and ta.numel() and not math.isnan(fast := float((ta - tb).abs().max())):
            g = fast  # no NaN in either (max propagates NaN): the general path's figure, in one pass
        else:
            nan_a, nan_b = ta.isnan(), tb.isnan()
            if not torch.equal(nan_a, nan_b):
                g = math.inf
            else:
                d = (ta[~nan_a] - tb[~nan_b]).abs()
                g = float(d.max()) if d.numel() else 0.0
        if name == "output":
            out_gap = g
        elif g > grad_gap:
            grad_gap, worst = g, name.removeprefix("grad:")
    return out_gap, grad_gap, worst

def _digest(checker: RunCache, variant: Variant, case: str, dtype: torch.dtype) -> str | None:
    """A hash of every tensor of the variant's run (for 'identical'), on the weights its
    own spec ran with; None when it did not run."""
    family = variant.family_spec
    ref = reference_of(family.name)
    zero = checker.fills(variant) | (checker.fills(ref) if ref and not ref.refuses(checker.cfg, checker.device) else {})
    run = checker.run(variant, case, zero, dtype)
    if run.error:
        return None
    h = hashlib.sha1(repr(sorted(zero)).encode())
    for name in sorted(run.tensors):
        h.update(name.encode())
        h.update(run.tensors[name].contiguous().numpy().tobytes())
    return h.hexdigest()
