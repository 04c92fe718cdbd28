"""A user's reference as the oracle: ``judge(reference, candidate, inputs)`` judges a candidate
(an ``nn.Module`` class, a module or a function) against a reference of the same kind, with no
family and no trait.

- The reference run in float64 is the definition; the reference run in each lower dtype (the
  dtype of the given inputs, float32 for KernelBench) is the precision baseline.
- The candidate's output and every gradient (of each floating input and of each reference
  parameter, read through the weight link) are judged by the harness's rules
  (``harness.check.rules``): float64 decides semantics, a lower dtype decides precision against
  the baseline; a candidate that does not run in float64 (a float32-only or half-only kernel)
  has its semantics decided in its own dtype (``harness.check.own_dtype``).
- The reference's weights go into the candidate by name, by a map or by creation order
  (``harness.check.reference_weights``); a mismatch is one line naming the tensor.
- Every regime of ``harness.check.reference_inputs.regimes`` is tried; each verdict says which
  it saw, and a failure names its regime: "wrong at scale x100 (float32): ...".
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping

import torch

from harness.base.boundary import UserCodeError, describe
from harness.base.defaults import Gradients
from harness.base.dtypes import dtype_of
from harness.base.errors import InputError
from harness.base.hacks import HackFinding, TorchSnapshot, snapshot_torch
from harness.base.verdicts import Verdict
from harness.check import reference_hacks as H
from harness.check import reference_offset as O
from harness.check import reference_runs as R
from harness.check import reference_tensor as T
from harness.check.precision import PRECISION_FACTOR
from harness.check.reference_family import family_check
from harness.check.reference_inputs import (
    Case,
    InputSource,
    Regime,
    RegimeKind,
    map_tensors,
    over_budget,
    regimes,
    tensors_of,
)
from harness.check.reference_result import SEMANTIC, Judgement, RegimeResult, lead_check
from harness.check.reference_weights import ParamMapLike, WeightLink, link
from harness.check.rules import HALF_DTYPES

F64 = torch.float64
WEIGHTS = "weights: "  # a failure that opens so: the weights do not pair, nothing else is tried


@dataclass
class _Pair:
    """What every regime of one judgement shares."""

    reference: Any
    candidate: Any
    source: InputSource
    dtypes: tuple[torch.dtype, ...]      # the lower dtypes judged (precision), after float64
    param_map: ParamMapLike | None
    internal: str | None
    gradients: Gradients
    device: str
    seed: int
    factor: float
    own: str = ""                        # why semantics are decided in the candidate's own dtype ("": float64)
    train: bool = False                  # the mode every regime but "other mode" runs in
    random_train: bool = False           # the reference is random in train mode (dropout)
    weights: str = ""
    notes: list[str] = field(default_factory=list)
    guard: bool = True                   # the hack defences run (harness.check.reference_hacks)
    hacks: list[HackFinding] = field(default_factory=list)
    footprint: tuple[tuple[int, int], ...] = ()  # (elements, dims) of the given inputs and reference's tensors


def judge(reference: Any, candidate: Any, inputs: Any, *, init_inputs: Any = (),
          param_map: ParamMapLike | None = None, dtypes: Iterable[str] | None = None,
          internal_dtype: str | None = None, gradients: Gradients | str = Gradients.REQUIRED,
          only: Iterable[str] | None = None, device: str = "cpu", seed: int = 0,
          factor: float = PRECISION_FACTOR, first_failure: bool = False,
          family: Mapping[str, Any] | None = None, hacks: bool = True,
          torch_snapshot: TorchSnapshot | None = None) -> Judgement:
    """``candidate`` against ``reference`` on ``inputs`` (a list of call arguments, a dict of
    keywords, or a function drawing them: ``get_inputs``) and every regime beyond them.

    ``init_inputs``: the constructor's arguments of a class (or a function returning them);
    ``param_map``: {reference parameter: entry into the candidate} where names differ (or a
    function of the constructor's arguments returning it);
    ``dtypes``: the lower dtypes judged (default: the given inputs' floating dtype);
    ``internal_dtype``: the candidate computes in this dtype on purpose ("less precise" in
    float64 is then its rounding, not a mistake); ``only``: the regimes (names or kinds) tried;
    ``first_failure``: stop at the first regime that shows another function; ``family``: the keywords of
    ``harness.register`` that describe the candidate in a family, whose own check then runs too
    (``harness.check.reference_family``).

    ``hacks``: the reward-hack defences run (``Judgement.hacks``; ``docs/hacks.md``): the
    candidate's calls on the given inputs under ``guarded_call``, the probes of
    ``harness.check.hack_probes`` beside the regimes, and torch's functions compared with
    ``torch_snapshot`` (take it with ``snapshot_torch()`` before importing the candidate; by
    default, when judge starts): where one was replaced, every side runs torch's own."""
    source = inputs if isinstance(inputs, InputSource) else InputSource(inputs, init_inputs)
    _, given = source.draw(seed)
    lower = tuple(dtype_of(d) for d in dtypes) if dtypes is not None else _given_dtypes(given)
    pair = _Pair(reference, candidate, source, tuple(d for d in lower if d != F64), param_map, internal_dtype,
                 Gradients(gradients), device, seed, factor, guard=hacks)
    snap = (torch_snapshot or snapshot_torch()) if hacks else None
    all_regimes, skipped = regimes(source, modes=_has_modes(pair), half=any(d in HALF_DTYPES for d in pair.dtypes))
    wanted = set(only) if only is not None else None
    results: list[RegimeResult] = []
    for regime in all_regimes:
        if wanted is not None and regime.name not in wanted and regime.kind.value not in wanted:
            continue
        with H.torch_own(pair.hacks, snap, look=regime.kind in (RegimeKind.GIVEN, RegimeKind.SEED)):
            got = _regime(pair, regime, skipped)
            if not got and regime.fallback is not None:
                got = _regime(pair, regime.fallback, skipped)
                if got and skipped and skipped[-1][0] == regime.name:
                    skipped[-1] = (regime.name, f"{skipped[-1][1]}; {regime.fallback} tried instead")
        results += got
        if regime.kind == RegimeKind.GIVEN and any(r.failure.startswith(WEIGHTS) for r in got):
            break  # the weights do not pair: no other regime can say more
        if first_failure and any(r.kind == SEMANTIC for r in got):
            break  # "less precise" alone does not stop: a later regime may show another function
    if hacks and not pair.hacks and not (first_failure and any(r.kind == SEMANTIC for r in results)):
        # the probes call again: a candidate the guard has named already is not probed
        with H.torch_own(pair.hacks, snap):
            pair.hacks += H.probes(reference, candidate, source, pair.dtypes[0] if pair.dtypes else F64,
                                   device=device, seed=seed, param_map=param_map)
        H.note_replaced(pair.hacks, snap)
    semantics = f"{R.dtype_name(pair.dtypes[0])}, its own dtype ({pair.own})" if pair.own else "float64"
    made = Judgement(results, skipped, pair.weights, semantics, pair.notes,
                     hacks=list({f.kind: f for f in reversed(pair.hacks)}.values())[::-1])  # the first of each kind
    if family is not None:
        made.family_report = family_check(candidate, family, device)
        made.family = [*made.family_report.specs, *made.family_report.gradchecks, *made.family_report.dropouts]
    return made


def _given_dtypes(inputs: Any) -> tuple[torch.dtype, ...]:
    floats = [t.dtype for t in tensors_of(inputs) if t.is_floating_point()]
    return (floats[0],) if floats else (torch.float32,)


def _has_modes(pair: _Pair) -> bool:
    return R.is_module_class(pair.reference) or isinstance(pair.reference, torch.nn.Module)


def _draw(pair: _Pair, regime: Regime, skipped: list) -> Case | None:
    try:
        return pair.source.case(regime)
    except (UserCodeError, InputError) as exc:
        if regime.kind == RegimeKind.GIVEN:
            raise InputError(f"the inputs cannot be drawn: {describe(exc)}") from None
        skipped.append((regime.name, f"the inputs cannot be drawn: {describe(exc)}"))
        return None


@dataclass
class _Sides:
    """Both sides built for one regime: {dtype: Built} each, and the weight link."""

    ref: dict[torch.dtype, R.Built]
    cand: dict[torch.dtype, R.Built]
    link: WeightLink
    error: str = ""  # the candidate could not be built or take the weights: the regime's failure


def _build(pair: _Pair, regime: Regime, case: Case, skipped: list) -> _Sides | None:
    """Each side built in float64 and every lower dtype, the reference's weights in the
    candidate; None where the reference itself cannot be built (the regime is left out)."""
    every = (F64, *pair.dtypes)
    try:
        ref = {d: R.build(pair.reference, case.init, d, pair.seed, "reference", pair.device) for d in every}
    except Exception as exc:
        if regime.kind == RegimeKind.GIVEN:
            raise InputError(f"the reference cannot be built: {describe(exc)}") from None
        skipped.append((regime.name, f"the reference cannot be built: {describe(exc)}"))
        return None
    if regime.redraw_weights:
        R.redraw_weights(ref, pair.seed + 17)
    try:
        cand = {d: R.build(pair.candidate, case.init, d, pair.seed, "candidate", pair.device) for d in every}
    except Exception as exc:
        return _Sides(ref, {}, WeightLink({}, {}, ""), f"the candidate cannot be built: {describe(exc)}")
    try:
        made = link(ref[F64].module, cand[F64].module, pair.param_map, case.init)
        for d in every:
            made.load(ref[d].module, cand[d].module)
    except Exception as exc:
        return _Sides(ref, cand, WeightLink({}, {}, ""), f"{WEIGHTS}{describe(exc)}")
    if regime.kind == RegimeKind.GIVEN:
        pair.weights = made.how
    return _Sides(ref, cand, made)


def _regime(pair: _Pair, regime: Regime, skipped: list) -> list[RegimeResult]:
    """One regime: a result per dtype judged (float64 first), or none where it is left out."""
    if regime.growth > 1 and (why := over_budget(pair.footprint, regime.growth)):
        skipped.append((regime.name, why))
        return []
    case = _draw(pair, regime, skipped)
    if case is None:
        return []
    sides = _build(pair, regime, case, skipped)
    if sides is None:
        return []
    if regime.kind == RegimeKind.GIVEN and not sides.error:
        _settle(pair, sides, case)
    if sides.error:
        given = regime.kind == RegimeKind.GIVEN and sides.error.startswith(WEIGHTS)
        line = sides.error if given else f"wrong at {regime}: {sides.error}"  # a map right at the given sizes only
        return [RegimeResult(regime, "float64", failure=line)]
    if regime.flip_mode and pair.random_train:
        return [_random_mode(pair, regime, sides, case)]
    if regime.between:
        return [_between(pair, regime, sides, case, d) for d in (pair.dtypes or (F64,))]
    return _judged(pair, regime, sides, case, skipped)


def _settle(pair: _Pair, sides: _Sides, case: Case) -> None:
    """On the given inputs: the mode every regime runs in (eval where the reference is random in
    train mode), where the candidate's semantics are decided (its own dtype where it does not
    run in float64), and what the inputs and the reference hold (the grown sizes' budget)."""
    module = sides.ref[F64].module
    held = [*tensors_of(case.inputs), *((*module.parameters(), *module.buffers()) if module is not None else ())]
    pair.footprint = tuple((t.numel(), t.dim()) for t in held)
    if module is not None:  # on copies of their own: a call in train mode moves running statistics
        pair.train = module.training
        a, b = (R.run(R.build(pair.reference, case.init, F64, pair.seed, "reference", pair.device), case.inputs, F64,
                      who="reference", grad=False, train=True, call_seed=s) for s in (1, 2))
        if not a.error and not b.error and any(not torch.equal(a.tensors[n], b.tensors.get(n, a.tensors[n]))
                                               for n in a.tensors):
            pair.random_train, pair.train = True, False
            pair.notes.append("the reference is random in train mode (dropout): judged in eval mode, and in "
                              "train mode by being random too")
    if not pair.dtypes:
        return
    c64 = R.run(sides.cand[F64], case.inputs, F64, who="candidate", grad=False, train=False)
    r64 = R.run(sides.ref[F64], case.inputs, F64, who="reference", grad=False, train=False)
    if c64.error:
        pair.own = f"it does not run in float64: {c64.error}"
    elif any(c64.dtypes.get(n) != r64.dtypes.get(n) for n in r64.dtypes):
        got = next(R.dtype_name(c64.dtypes[n]) for n in r64.dtypes if c64.dtypes.get(n) != r64.dtypes[n])
        pair.own = f"it answers float64 inputs in {got}"


def _rule(pair: _Pair) -> T.Rule:
    return T.Rule(pair.internal, pair.own, pair.factor)


def _grad(pair: _Pair, regime: Regime) -> bool:
    return regime.grad and pair.gradients != Gradients.NONE


def _run(pair: _Pair, side: R.Built, who: str, inputs: Any, dtype: torch.dtype, regime: Regime,
         sides: _Sides, *, train: bool | None = None, grad: bool | None = None, call_seed: int = 0,
         as_given: bool = False, guard_by: R.SideRun | None = None) -> R.SideRun:
    """One side's run in ``regime``; ``guard_by``: the reference's run just before, where the
    candidate's call is guarded (the given regime; its findings go into ``pair.hacks``)."""
    guard = H.guard_like(guard_by) if guard_by is not None and pair.guard else None
    ref_module = sides.ref[F64].module
    params = tuple(n for n, p in ref_module.named_parameters() if p.requires_grad) if ref_module is not None else ()
    return R.run(side, inputs, dtype, who=who, device=pair.device, grad=_grad(pair, regime) if grad is None else grad,
                 layout=regime.layout, train=pair.train ^ regime.flip_mode if train is None else train,
                 names=R.input_names(sides.ref[F64].fn, inputs), link=sides.link if who == "candidate" else None,
                 ref_params=params, cotangent_seed=pair.seed + regime.seed, call_seed=call_seed, as_given=as_given,
                 guard=guard)


def _judged(pair: _Pair, regime: Regime, sides: _Sides, case: Case, skipped: list) -> list[RegimeResult]:
    """The candidate against the definition (float64) and against the baseline in each lower dtype."""
    ref64 = _run(pair, sides.ref[F64], "reference", case.inputs, F64, regime, sides)
    if ref64.error:
        if regime.kind == RegimeKind.GIVEN:
            raise InputError(f"the reference raises on the given inputs: {ref64.error}")
        skipped.append((regime.name, f"the reference raises: {ref64.error}"))
        return []
    names = _names(pair, ref64)
    back = O.less(case.inputs, regime.offset) if regime.offset else None
    moved = O.moved(names, ref64, lambda grad: _run(pair, sides.ref[F64], "reference", back, F64, regime, sides,
                                                   grad=grad)) if regime.offset else []
    if moved:  # not shift invariant: every tensor judged as under scaled inputs
        regime = replace(regime, moved=frozenset(names))
    results = []
    watch = pair.guard and regime.kind in (RegimeKind.GIVEN, RegimeKind.NO_GRAD)  # with autograd, and without
    if not pair.own or not pair.dtypes:
        cand64 = _run(pair, sides.cand[F64], "candidate", case.inputs, F64, regime, sides,
                      guard_by=ref64 if watch else None)
        pair.hacks += H.screened(cand64, ref64)
        results.append(_float64(pair, regime, sides, case, names, cand64, ref64))
    for d in pair.dtypes:
        rounded = map_tensors(case.inputs, lambda x: x.to(d).to(x.dtype) if x.is_floating_point() else x)
        truth = ref64 if _exact_in(case.inputs, d) else _run(pair, sides.ref[F64], "reference", rounded, F64, regime,
                                                             sides)
        ref_d = _run(pair, sides.ref[d], "reference", case.inputs, d, regime, sides)
        cand_d = _run(pair, sides.cand[d], "candidate", case.inputs, d, regime, sides,
                      guard_by=ref_d if watch else None)
        pair.hacks += H.screened(cand_d, ref_d)
        if watch and not pair.internal and not cand_d.error and not ref_d.error:
            pair.hacks += H.precision_findings(cand_d, ref_d, truth, lambda h: _run(
                pair, sides.ref[F64], "reference", H.rounded(case.inputs, h), F64, regime, sides, grad=False))
        floor = functools.cache(functools.partial(_run, pair, sides.ref[F64], "reference", O.one_ulp_off(
            rounded, d, pair.seed + 29), F64, regime, sides)) if regime.offset and not moved else None  # where asked
        results.append(_decide(pair, regime, R.dtype_name(d), names, cand_d, truth, ref_d, truth, floor=floor))
    for r in results if moved else ():
        r.note = r.note or f"the offset moves {', '.join(moved)} (not shift invariant): judged as under scaled inputs"
    return results


def _float64(pair: _Pair, regime: Regime, sides: _Sides, case: Case, names: list[str], cand64: R.SideRun,
             ref64: R.SideRun) -> RegimeResult:
    """The float64 row; the reference run in the declared internal dtype (float32 where a row
    is less precise undeclared) is its baseline (``harness.check.rules.float64_check``)."""
    low = dtype_of(pair.internal) if pair.internal else torch.float32
    result = None if pair.internal else _decide(pair, regime, "float64", names, cand64, ref64, None, ref64)
    if low not in sides.ref or (result and not any(c.verdict == Verdict.LESS_PRECISE for c in result.checks)):
        return result or _decide(pair, regime, "float64", names, cand64, ref64, None, ref64)
    baseline = _run(pair, sides.ref[low], "reference", case.inputs, low, regime, sides)
    return _decide(pair, regime, "float64", names, cand64, ref64, baseline, ref64)


def _exact_in(inputs: Any, dtype: torch.dtype) -> bool:
    return all(torch.equal(t, t.to(dtype).to(t.dtype)) for t in tensors_of(inputs) if t.is_floating_point())


def _names(pair: _Pair, ref: R.SideRun) -> list[str]:
    return [n for n in ref.tensors if pair.gradients != Gradients.NONE or not n.startswith("grad:")]


def _decide(pair: _Pair, regime: Regime, dtype_label: str, names: list[str], cand: R.SideRun, truth: R.SideRun,
            baseline: R.SideRun | None, oracle: R.SideRun,
            floor: Callable[[], R.SideRun | None] | None = None) -> RegimeResult:
    """Every tensor of ``cand`` by the rule of its dtype; the regime's one failing line;
    ``floor``: the definition one ulp of the inputs off (``harness.check.reference_offset``)."""
    result = RegimeResult(regime, dtype_label)
    where = f"wrong at {regime} ({dtype_label})"
    if cand.error:
        result.failure = f"{where}: the candidate raises {cand.error}"
        return result
    if cand.detached and pair.gradients == Gradients.AUTO:
        names = [n for n in names if not n.startswith("grad:")]
        result.note = "forward only: the candidate's output carries no gradient"
    elif cand.detached and any(n.startswith("grad:") for n in names):
        result.failure = (f"{where}: the candidate's output carries no gradient (detached, or a kernel without "
                          "backward; gradients='auto' judges the output alone)")
        return result
    changed = [c for c in cand.changed if c not in (oracle.changed or [])]
    if changed:
        result.failure = f"{where}: {changed[0]}"
        return result
    dtype = F64 if dtype_label == "float64" else dtype_of(dtype_label)
    scale = max((float(t.abs().max()) for n, t in truth.tensors.items()
                 if n.startswith("grad:") and t.numel() and torch.isfinite(t).all()), default=0.0)
    for n in names:
        check = T.check(_rule(pair), regime, dtype, n, cand, truth, baseline, 0.0 if n.startswith("output") else scale)
        result.checks.append(O.within_input_rounding(check, cand, truth, floor, pair.factor))
    bad = lead_check([c for c in result.checks if not T.passes(_rule(pair), regime, dtype, c)])
    if bad is not None:
        result.failure, result.failed = f"{where}: {T.line(bad)}", bad
    elif dtype != F64 and baseline is not None:
        theirs = baseline.dtypes
        wrong = next((n for n in names if n in cand.dtypes and n in theirs and cand.dtypes[n] != theirs[n]), None)
        if wrong:
            result.failure = (f"{where}: {wrong} returned in {R.dtype_name(cand.dtypes[wrong])}, the reference's in "
                              f"{R.dtype_name(theirs[wrong])}")
    return result


def _random_mode(pair: _Pair, regime: Regime, sides: _Sides, case: Case) -> RegimeResult:
    """Train mode where the reference is random (dropout): the candidate must be random too."""
    d = pair.dtypes[0] if pair.dtypes else F64
    result = RegimeResult(regime, R.dtype_name(d), note="train mode: random in both")
    a, b = (_run(pair, sides.cand[d], "candidate", case.inputs, d, regime, sides, train=True, grad=False,
                 call_seed=s) for s in (1, 2))
    if a.error or b.error:
        result.failure = f"wrong at train mode ({R.dtype_name(d)}): the candidate raises {a.error or b.error}"
    elif all(torch.equal(a.tensors[n], b.tensors.get(n, a.tensors[n])) for n in a.tensors):
        result.failure = (f"wrong at train mode ({R.dtype_name(d)}): the reference is random there (dropout) and "
                          "the candidate gives the same output on every call")
    return result


def _between(pair: _Pair, regime: Regime, sides: _Sides, case: Case, d: torch.dtype) -> RegimeResult:
    """Three calls on one candidate instance: the inputs, other inputs, then the first call's
    tensors rewritten in place with third values; each output against the definition on the
    values it was given (a result kept by shape, by identity, from an earlier call or overwritten shows)."""
    label = R.dtype_name(d)
    result = RegimeResult(regime, label)
    values = (case.inputs, *case.others)
    truths = [_run(pair, sides.ref[F64], "reference", v, F64, regime, sides, grad=False) for v in values]
    bases = [_run(pair, sides.ref[d], "reference", v, d, regime, sides, grad=False) for v in values]
    first, other, third = (R.prepare(v, d, pair.device, False)[0] for v in values)
    kept = H.Kept(pair.guard)
    for given in (first, other, first):
        if len(kept.runs) == 2:
            with torch.no_grad():
                for t, new in zip(tensors_of(first), tensors_of(third)):
                    t.copy_(new)
        pair.hacks += kept.after(_run(pair, sides.cand[d], "candidate", given, d, regime, sides, grad=False,
                                      as_given=True))
    whats = ("first call", "a call on other inputs", "the first call's tensors rewritten in place")
    for what, truth, base, got in zip(whats, truths, bases, kept.runs):
        if truth.error:
            return RegimeResult(regime, label, note=f"left out: the reference raises {truth.error}")
        if got.error:
            result.failure = f"wrong at {regime} ({label}), {what}: the candidate raises {got.error}"
            return result
        for n in truth.tensors:
            check = T.check(_rule(pair), regime, d, n, got, truth, base, 0.0)
            check.name = f"{n} ({what})"
            result.checks.append(check)
    bad = lead_check([c for c in result.checks if not T.passes(_rule(pair), regime, d, c)])
    if bad is not None:
        result.failure, result.failed = f"wrong at {regime} ({label}): {T.line(bad)}", bad
    return result
