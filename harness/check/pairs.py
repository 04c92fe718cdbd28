"""The pair matrix of one family: each pair's verdict derived from the equivalence classes
(equal semantic traits) and the two variants' spec results, or measured from the pair's own
runs (``--pairs all``)."""

from __future__ import annotations

import hashlib
import itertools
import math
from typing import Mapping

import torch

from harness.base.dtypes import dtype_of
from harness.base.verdicts import Verdict
from harness.check import precision as P
from harness.check.results import PairResult, SpecResult
from harness.check.runs import (
    Run,
    RunCache,
    applicable,
)
from harness.check.spec import PATH_FINDING
from harness.families.catalog import get_family
from harness.registry import Variant, reference_of, variants_of
from harness.registry.nearest import differing_traits


def derive_pairs(checkers: Mapping[str, RunCache], family_name: str, config: str, case: str, dtype_name: str, *,
                 specs: Mapping[tuple, SpecResult], device: str, measured: bool = False) -> list[PairResult]:
    """The pairwise verdicts of one family on one config, case and dtype, derived from
    the equivalence classes (variants with equal semantic traits) and the oracles; with
    ``measured`` (``--pairs all``), from every pair's own runs compared directly."""
    family = get_family(family_name)
    checker = checkers[config]
    dtype = dtype_of(dtype_name)
    members = [v for v in variants_of(family_name)
               if applicable(v, case) and not v.refuses(checker.cfg, checker.device)
               and (v.id, config, case, dtype_name) in specs]
    out = []
    digests = {} if measured else {v.id: _digest(checker, v, case, dtype) for v in members}
    gaps: dict[tuple, tuple[float, float, str]] = {}
    scales: dict[int, float] = {}
    for a, b in itertools.combinations(members, 2):
        sa, sb = specs[(a.id, config, case, dtype_name)], specs[(b.id, config, case, dtype_name)]
        sem_a, sem_b = family.semantic_traits(a.traits), family.semantic_traits(b.traits)
        differing = differing_traits(a, b)
        in_case = [t for t in differing if t in family.semantic_for(case)]
        reason = "; ".join(f"{t}: {sem_a.get(t)} vs {sem_b.get(t)}" for t in (in_case or differing))
        base = dict(family=family_name, a=a.id, b=b.id, case=case, dtype=dtype_name, device=device,
                    config=config,
                    path_a=sa.path, path_b=sb.path, noise_ratio=math.nan, grad_noise_ratio=math.nan)
        if sa.verdict == Verdict.ERROR or sb.verdict == Verdict.ERROR:
            note = "; ".join(f"{s.variant}: {s.note}" for s in (sa, sb) if s.verdict == Verdict.ERROR)
            both_expected = sa.ok and sb.ok
            expected = Verdict.ERROR if both_expected else Verdict.EQUIVALENT
            declared = "; ".join(s.declared for s in (sa, sb) if s.verdict == Verdict.ERROR and s.declared)
            out.append(PairResult(**base, verdict=Verdict.ERROR, expected=expected,
                                  reason=reason, ok=both_expected, max_abs=math.nan, max_rel=math.nan,
                                  grad_verdict=Verdict.ERROR, grad_max_abs=math.nan, worst_grad="", note=note,
                                  declared=declared if both_expected else ""))
            continue
        zero = checker.fills(a) | checker.fills(b)
        oa = checker.oracle(family, a.traits, case, zero, dtype)
        ob = checker.oracle(family, b.traits, case, zero, dtype)
        key = (id(oa), id(ob), zero)  # one gap per pair of classes, not per pair of variants
        if key not in gaps:
            gaps[key] = _gap(oa, ob, checker, a, b) if differing else (0.0, 0.0, "")
        out_gap, grad_gap, worst_grad = gaps[key]
        if id(oa) not in scales:
            scales[id(oa)] = _scale(oa)
        tol64 = P.FLOAT64_ATOL + P.FLOAT64_RTOL * max(1.0, scales[id(oa)])
        biggest = max(out_gap, grad_gap)
        # Traits this case does not read make no difference here, unless the oracles
        # say otherwise (then the family's case_semantic is incomplete, and it shows).
        if differing and not in_case and biggest <= tol64:
            reason = ""
        specs_ok = sa.ok and sb.ok
        allowed = _allowed(sa) + _allowed(sb)
        if measured:  # the pair's own runs, on the same weights, against each other
            ra, rb = checker.run(a, case, zero, dtype), checker.run(b, case, zero, dtype)
            m_out, m_grad, m_worst = _gap(ra, rb, checker, a, b)
            same = m_out == 0.0 and m_grad == 0.0
            close = max(m_out, m_grad) <= allowed
            declared_lower = _declared_lower(a, b, sa, sb)
            if not close and specs_ok and declared_lower and _within_lower(ra, rb, checker, a, b, declared_lower):
                close = True  # one computes below float64 by declaration: judged at that dtype's tolerance
        # a declared per-case path finding: the variant differs here by declaration
        finding = any(s.note.startswith(PATH_FINDING) for s in (sa, sb))
        if not reason:  # one class: the same declared function
            if not measured:
                same = digests[a.id] is not None and digests[a.id] == digests[b.id]
                close = specs_ok and not finding
            verdict = Verdict.IDENTICAL if same else (Verdict.EQUIVALENT if close else Verdict.DIFFERENT)
            out.append(PairResult(**base, verdict=verdict, expected=Verdict.EQUIVALENT, reason="",
                                  ok=specs_ok and (verdict != Verdict.DIFFERENT or finding),
                                  max_abs=m_out if measured else (0.0 if same else math.nan), max_rel=math.nan,
                                  grad_verdict=verdict,
                                  grad_max_abs=m_grad if measured else (0.0 if same else math.nan),
                                  worst_grad=m_worst if measured else "", note=_spec_note(sa, sb)))
            continue
        if biggest <= tol64:
            verdict = Verdict.NOT_EXERCISED
            note = f"the declared difference does not show on case {case!r} of config {config!r}"
        elif dtype != torch.float64 and not P.resolvable(biggest, dtype, _allowed(sa), _allowed(sb)):
            verdict, note = Verdict.NOT_RESOLVABLE, (f"the declared difference ({biggest:.2g}) is below "
                                               f"{dtype_name}'s resolution here")
        else:
            verdict, note = Verdict.DIFFERENT, ""
        if measured and verdict == Verdict.DIFFERENT and max(m_out, m_grad) <= allowed:
            verdict, note = Verdict.EQUIVALENT, "the declared difference did not show in the measured runs"
        out.append(PairResult(**base, verdict=verdict, expected=Verdict.DIFFERENT, reason=reason,
                              ok=specs_ok and verdict != Verdict.EQUIVALENT,
                              max_abs=m_out if measured else out_gap, max_rel=math.nan,
                              grad_verdict=Verdict.DIFFERENT if grad_gap > tol64 else Verdict.EQUIVALENT,
                              grad_max_abs=m_grad if measured else grad_gap,
                              worst_grad=m_worst if measured else worst_grad,
                              note="; ".join(x for x in (note, _spec_note(sa, sb)) if x)))
    return out

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
