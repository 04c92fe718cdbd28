"""The reward-hack defences of ``harness.check.reference.judge`` (``harness.base.hacks`` names
the kinds): what guards the candidate's calls on the given inputs, and the probes that call it
again beside the regimes.

- ``torch_own``: torch's functions compared with the snapshot taken before the candidate was
  imported; where one is replaced, the block runs on torch's own (``originals``);
- ``guard_like``: the ``Guard`` of a candidate's call, from the reference's run just before
  it (its outputs, held alive so no allocation of the candidate's can return their memory;
  whether the reference's own output is a view of an input);
- ``Kept``: an earlier call's output overwritten by a later one (the ``calls between`` regime);
- ``screened``: a guard's findings less what the reference does too (it writes its inputs);
- ``precision_findings``: a lower-precision compute passing a loose tolerance, from the given
  regime's runs (its error follows the rounding of the inputs to a dtype below);
- ``probes``: ``harness.check.hack_probes.probe_all`` on instances of their own, in eval mode:
  the reference in float64 is the oracle, the candidate runs in the judged dtype with the
  reference's weights; the sizes regimes (every module constant halved, grown) are where code
  keyed to the evaluation's sizes shows.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Mapping

import torch

from harness.base.hacks import HackFinding, HackKind, TorchSnapshot, originals, replaced_since
from harness.check import reference_runs as R
from harness.check.hack_probes import overwritten, precision_finding, probe_all
from harness.check.reference_inputs import InputSource, RegimeKind, map_tensors, regimes
from harness.check.reference_weights import ParamMapLike, link

F64 = torch.float64
_WRITES = (HackKind.INPUT_MODIFIED, HackKind.OUTPUT_IN_INPUT)
# the dtypes a compute below each dtype rounds its inputs to, and how closely its error must
# follow that rounding's to be one
BELOW = {torch.float32: (torch.bfloat16, torch.float16), torch.float16: (torch.bfloat16,)}
ROUNDING_CORRELATION = 0.3


def note_replaced(hacks: list[HackFinding], snap: TorchSnapshot | None) -> bool:
    """Whether the candidate replaced a torch function since ``snap``; each new one is added to
    ``hacks``."""
    if snap is None:
        return False
    said = {f.detail for f in hacks}
    hacks += [f for f in replaced_since(snap) if f.detail not in said]
    return any(f.kind == HackKind.REPLACED_FUNCTION for f in hacks)


def torch_own(hacks: list[HackFinding], snap: TorchSnapshot | None,
              look: bool = True) -> contextlib.AbstractContextManager:
    """Torch's own functions for the block where the candidate replaced one (at import or in a
    call so far: each replacement found once, in ``hacks``). ``look``: compare torch's functions
    now (before the first regimes, after the given one: the comparison costs milliseconds)."""
    if snap is None or not (note_replaced(hacks, snap) if look else
                            any(f.kind == HackKind.REPLACED_FUNCTION for f in hacks)):
        return contextlib.nullcontext()
    return originals(snap)


def guard_like(reference_run: R.SideRun) -> R.Guard:
    return R.Guard(tuple(reference_run.kept), reference_run.aliased)


def screened(candidate_run: R.SideRun, reference_run: R.SideRun) -> list[HackFinding]:
    """The guard's findings; writes into the inputs are not one where the reference writes them too."""
    if reference_run.changed:
        return [f for f in candidate_run.hacks if f.kind not in _WRITES]
    return list(candidate_run.hacks)


class Kept:
    """Each call's run (``runs``) and its outputs' values when it returned: ``after(run)`` is
    OUTPUT_REUSED where the previous output (not a view of its inputs, which a caller may
    rewrite) no longer holds its values once ``run`` returned: one buffer reused across calls."""

    def __init__(self, guard: bool = True):
        self.guard = guard
        self.runs: list[R.SideRun] = []
        self.held: list[torch.Tensor] = []

    def after(self, run: R.SideRun) -> list[HackFinding]:
        last, held = (self.runs[-1] if self.runs else None), self.held
        self.runs.append(run)
        self.held = [t.clone() for t in run.kept]
        if not self.guard or last is None or last.error or last.aliased:
            return []
        found = overwritten(last.kept, held)
        return [] if found is None else [found]


def rounded(inputs: Any, dtype: torch.dtype) -> Any:
    """``inputs`` with each floating tensor rounded through ``dtype`` (its own dtype kept)."""
    return map_tensors(inputs, lambda x: x.to(dtype).to(x.dtype) if x.is_floating_point() else x)


def _correlation(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.reshape(-1) - a.mean(), b.reshape(-1) - b.mean()
    den = float(a.norm() * b.norm())
    return float((a * b).sum()) / den if den > 0 else 0.0


def precision_findings(candidate: R.SideRun, baseline: R.SideRun, oracle: R.SideRun,
                       on_rounded: Callable[[torch.dtype], R.SideRun]) -> list[HackFinding]:
    """LOW_PRECISION for the first output (not gradient) that ``precision_finding`` names and
    whose error follows the rounding of the inputs to a dtype below the candidate's
    (``on_rounded(dtype)``: the oracle on the inputs rounded so): the candidate's error
    against the oracle correlates (``ROUNDING_CORRELATION``) with the error that rounding
    alone makes. A formula that differs (an approximation, another epsilon) errs smoothly, in
    no step with any dtype's rounding: its verdict is the regimes'."""
    for n, t in candidate.tensors.items():
        if n.startswith("grad:") or n not in baseline.tensors or n not in oracle.tensors:
            continue
        if not t.is_floating_point() or t.shape != oracle.tensors[n].shape:
            continue
        dtype, base_dtype = candidate.dtypes.get(n, t.dtype), baseline.dtypes.get(n, t.dtype)
        if dtype == F64 or not dtype.is_floating_point:
            continue
        found = precision_finding(t.to(dtype), baseline.tensors[n].to(base_dtype), oracle.tensors[n])
        if found is None:
            continue
        error = t - oracle.tensors[n]
        for lower in BELOW.get(dtype, ()):
            made = on_rounded(lower)
            if n in made.tensors and _correlation(error, made.tensors[n] - oracle.tensors[n]) > ROUNDING_CORRELATION:
                return [found]
    return []


def _caller(built: R.Built, dtype: torch.dtype, device: str, who: str) -> Callable:
    def cast(x: Any) -> Any:
        if not isinstance(x, torch.Tensor):
            return x
        return x.to(device=device, dtype=dtype) if x.is_floating_point() else x.to(device)

    def fn(*xs: Any) -> Any:
        return R.call(built.fn, [cast(x) for x in xs], who)

    return fn


class _Sides:
    """Builds (candidate, reference) callables on one draw's constructor arguments."""

    def __init__(self, reference: Any, candidate: Any, dtype: torch.dtype, device: str, seed: int,
                 param_map: ParamMapLike | None):
        self.reference, self.candidate, self.dtype = reference, candidate, dtype
        self.device, self.seed, self.param_map = device, seed, param_map

    def __call__(self, init: tuple) -> tuple[Callable, Callable]:
        ref64 = R.build(self.reference, init, F64, self.seed, "reference", self.device)
        ref_d = R.build(self.reference, init, self.dtype, self.seed, "reference", self.device)
        cand = R.build(self.candidate, init, self.dtype, self.seed, "candidate", self.device)
        link(ref_d.module, cand.module, self.param_map, init).load(ref_d.module, cand.module)
        for b in (ref64, cand):
            if b.module is not None:
                b.module.eval()
        return _caller(cand, self.dtype, self.device, "candidate"), _caller(ref64, F64, self.device, "reference")


def _elsewhere(source: InputSource, sides: _Sides, seed: int) -> dict[str, Callable]:
    """label -> builder of (candidate, reference, inputs) at other sizes: every size halved, grown."""
    out = {}
    for regime in regimes(source)[0]:
        if regime.kind == RegimeKind.SIZE and regime.name in ("sizes halved", "sizes grown"):
            def build(regime: Any = regime) -> tuple[Callable, Callable, list]:
                init, inputs = source.draw(seed, dict(regime.changes))
                cand, ref = sides(init)
                return cand, ref, list(inputs)
            out[regime.name] = build
    return out


def probes(reference: Any, candidate: Any, source: InputSource, dtype: torch.dtype, *, device: str = "cpu",
           seed: int = 0, param_map: ParamMapLike | None = None) -> list[HackFinding]:
    """``probe_all`` of the candidate against the reference (see the module); nothing where the
    inputs are keywords, or where a side cannot be built or raises (the regimes say so)."""
    init, given = source.draw(seed)
    if isinstance(given, Mapping):
        return []
    sides = _Sides(reference, candidate, dtype, device, seed, param_map)
    try:
        cand, ref = sides(init)
        return probe_all(cand, ref, lambda: list(source.draw_unseeded()), seed=seed,
                         make_candidate=lambda: sides(init)[0], elsewhere=_elsewhere(source, sides, seed))
    except Exception:  # noqa: BLE001  (a side that cannot be built or raises: the regimes' verdict says it)
        return []
