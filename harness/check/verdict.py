"""The decision: one spec's verdict from its evidence (``decide``), pure. ``Evidence`` holds
what ``harness.check.spec.SpecChecker`` read from the run cache: the variant's run, the oracle
of its own traits, the precision baselines, the float64 spec of a lower dtype. Nothing here
runs a module or writes into a run.

- **float64 decides semantics**: each tensor within ``harness.check.rules.float64_check``'s bound.
- **lower dtypes decide precision**: each tensor's error against the baselines'
  (``harness.check.rules._lower_check``); a kernel that runs only in its own dtypes is
  decided there (``harness.check.own_dtype``).
- A declared path finding (``traits['path_findings']``) turns a failure into a finding: the
  result's ``finding``, written first in its note.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Iterable, TypedDict

import torch

from harness.base.config import Config
from harness.base.dtypes import dtype_of
from harness.base.verdicts import Verdict
from harness.check import precision as P
from harness.check.left_out import left_out_note
from harness.check.own_dtype import own_dtype_checks
from harness.check.results import SpecResult, TensorCheck
from harness.check.rules import _lower_check, float64_check
from harness.check.runs import Run, fill_overflow
from harness.check.settings import CheckSettings
from harness.families.base import Family, PathFinding, declared_path_finding
from harness.porting.portmap import Fills
from harness.registry import Variant

# Cases with rows that see no key at all: PyTorch's own inference fast paths define those
# rows otherwise (nested tensors zero the padded rows, where the autograd path gives NaN or
# the mean of V), so there the no-grad eval run is compared with the autograd run (``paths``)
# but not held to the spec.
NO_KEY_CASES = ("fully_masked", "left_pad", "causal_short", "window_short")
# Regimes outside the one the precision rule was calibrated on (unit-scale inputs, short T, S):
# activations scaled (logits in the hundreds, where the logits' own rounding dominates) or
# sequences over one 64-wide key block. There each implementation's maximum error is one
# draw of that noise: measured on PyTorch's own modules in float32 (largest-error statistic,
# before the RMS one), nn.MultiheadAttention 2.2x and an eager LLaMA attention 2.1-4.1x; with the
# RMS one, GPT-NeoX's attention on self@large still reaches 3.29x (1 of 2,384). So float32 is judged
# there as the half dtypes are: "less precise" reported, and "different" (a contradiction)
# beyond an assert_close tolerance at the tensor's scale and 10x the baseline's error; a
# NaN/inf the oracle does not have (a softmax overflowing) is "different" as everywhere.
# Precision is not semantics: that tolerance is bfloat16's in float32 (an error below ~1.6%
# of the tensor's scale is float32's rounding amplified by the regime: softmax written as
# exp(s - logsumexp(s)) has 37x the baseline's error at logits of std ~140), the dtype's own
# in a half dtype, and float32's own only under --strict-precision.
CALIBRATED_LENGTH = 64  # longest T or S inside the calibrated regime (one 64-wide key block)
# How a declared path finding is written at the start of its result's note.
PATH_FINDING = "declared path finding"
INFERENCE_CHECK = "output (no-grad eval)"
# the note of a precision check where the float64 semantics already differ (or err)
SEMANTICS_DIFFER = "semantics already differ in float64"


def outside_calibration(cfg: Config) -> bool:
    """Whether ``cfg`` (a case's config) lies outside the precision rule's calibrated regime."""
    return cfg.scale != 1.0 or max(cfg.tgt_len, cfg.src_len) > CALIBRATED_LENGTH


def worst_spec(verdicts: Iterable[str]) -> Verdict:
    return Verdict.worst(verdicts, default=Verdict.EQUIVALENT)


@dataclass(frozen=True)
class Evidence:
    """What one spec's verdict is decided from. The fields after ``oracle`` are read only when
    the run gave tensors to judge (no error, a floating output of a differentiable family)."""

    variant: Variant
    config: str
    case: str
    dtype_name: str
    cfg: Config               # the config's
    reference: str            # the family reference's id where it runs on this case, else ""
    fills: Fills              # the canonical parameters read as constants
    run: Run                  # the variant's autograd run
    oracle: Run               # the float64 oracle of the variant's own traits
    names: tuple[str, ...] = ()        # the tensors judged: the output and its gradients
    baselines: tuple[Run, ...] = ()    # the definition in the run's (or declared internal) dtype; the reference's run
    truth: Run | None = None           # a kernel in its own dtype: the float64 oracle on the rounded inputs
    computed: Run | None = None        # ... and the oracle computed in that dtype
    inference: Run | None = None       # the no-grad eval run, where it is held to the same spec
    sem64: SpecResult | None = None    # a lower dtype: the float64 spec of the same cell
    left_out: tuple[str, ...] = field(default=())  # norm parameters the map leaves out undeclared

    @property
    def family(self) -> Family:
        return self.variant.family_spec

    @property
    def dtype(self) -> torch.dtype:
        return dtype_of(self.dtype_name)

    @property
    def internal(self) -> str | None:
        return self.variant.traits.get("internal_dtype")

    @property
    def exact(self) -> bool:
        """An exact function (a schedule, a mask): judged by its elements, no gradient."""
        return not self.family.differentiable or not self.run.tensors["output"].is_floating_point()


def decide(e: Evidence, s: CheckSettings) -> SpecResult:
    """One spec's verdict: the run's error row, an exact function's elements against the
    oracle's, or every tensor against the oracle by its dtype's rule."""
    if e.run.error:
        return _error_row(e, s)
    if e.exact:
        return _exact(e, s)
    return _judged(e, s, tensor_checks(e, s))


def with_changes(result: SpecResult, changed: list[str]) -> SpecResult:
    """``result`` with what the call changed (an input written in place, state kept from an
    earlier call, an output in another dtype): each contradicts any declaration, so the spec
    differs and no declared finding excuses it."""
    if not changed:
        return result
    note = "; ".join(dict.fromkeys([*changed, result.note] if result.note else changed))
    return dataclasses.replace(result, verdict=worst_spec([result.verdict, Verdict.DIFFERENT]), ok=False,
                               note=note, finding=None)


def _expected(e: Evidence, overflow: str | None) -> Verdict:
    if e.dtype == torch.float64:
        return Verdict.LESS_PRECISE if e.internal else Verdict.EQUIVALENT
    return Verdict.ERROR if overflow else Verdict.EQUIVALENT


def _finding(e: Evidence, s: CheckSettings) -> PathFinding | None:
    return declared_path_finding(e.variant.traits, e.case, e.config, s.device, e.dtype_name)


class _Cell(TypedDict):
    """The fields that say which spec a result is."""

    family: str
    variant: str
    config: str
    case: str
    dtype: str
    device: str
    reference: str
    path: str


def _cell(e: Evidence, s: CheckSettings) -> _Cell:
    return _Cell(family=e.family.name, variant=e.variant.id, config=e.config, case=e.case, dtype=e.dtype_name,
                 device=s.device, reference=e.reference, path=e.run.path or "-")


def _error_row(e: Evidence, s: CheckSettings) -> SpecResult:
    """The run raised: expected where the declared fill overflows the dtype, or where a path
    finding is declared for this cell."""
    overflow, finding = fill_overflow(e.variant, e.dtype), _finding(e, s)
    expected = _expected(e, overflow)
    declared = overflow if expected == Verdict.ERROR else (str(finding) if finding else None)
    note = (f"{PATH_FINDING}: {finding}; " if finding else "") + (e.run.error or "")
    return SpecResult(**_cell(e, s), verdict=Verdict.ERROR, expected=expected, ok=bool(declared), err=math.nan,
                      ref_err=math.nan, ratio=math.nan, worst="", note=note, declared=declared or "", finding=finding,
                      traceback=e.run.traceback)


def _exact(e: Evidence, s: CheckSettings) -> SpecResult:
    """The output element by element; in floating point within its dtype's tolerance, not
    bitwise (1/sqrt(d) applied last moves the last ulp)."""
    a, o = e.run.tensors["output"].cpu(), e.oracle.tensors["output"]
    if a.is_floating_point() and o.is_floating_point():
        rtol, atol = P.DEFAULT_TOLERANCE[e.dtype]
        same = a.shape == o.shape and torch.equal(a.isnan(), o.isnan()) and P.within(a, o.to(a.dtype), rtol, atol)
        bad = 0 if same else (a.numel() if a.shape != o.shape else
                              int(((a - o).abs() > atol + rtol * o.abs()).sum()))
    else:
        same = torch.equal(a, o.to(a.dtype))
        bad = 0 if same else int((a != o).sum())
    note = "" if same else f"{bad} element(s) differ from the oracle"
    return SpecResult(**_cell(e, s), verdict=Verdict.EQUIVALENT if same else Verdict.DIFFERENT,
                      expected=Verdict.EQUIVALENT, ok=same, err=float(bad), ref_err=math.nan, ratio=math.nan,
                      worst="output", note=note)


def tensor_checks(e: Evidence, s: CheckSettings) -> list[TensorCheck]:
    """Every tensor judged, by the rule of the run's dtype, and the no-grad eval run's output."""
    if e.variant.own_dtype_semantics:  # a kernel that runs only in its own dtypes: decided there
        return own_dtype_checks(e.run, e.truth, e.computed, list(e.names), e.dtype, e.inference)
    checks = _float64_checks(e, s) if e.dtype == torch.float64 else _lower_checks(e, s)
    if e.inference is not None:
        checks.append(_inference_check(e, s))
    return checks


def _gradient_scale(oracle: Run) -> float:
    """The floor of a gradient is taken at the scale of all the gradients: one that is
    analytically zero (k.bias; Q and K when T = 1) is rounding noise around 0 in every
    implementation, at the size of the terms that cancelled."""
    return max((float(t.abs().max()) for n, t in oracle.tensors.items()
                if n != "output" and t.numel() and torch.isfinite(t).all()), default=0.0)


def _loose(e: Evidence, s: CheckSettings) -> bool:
    """A lower dtype outside the calibrated regime, judged as the half dtypes are."""
    return bool(s.lenient) and e.dtype != torch.float64 and outside_calibration(e.family.case_config(e.case, e.cfg))


def _float64_checks(e: Evidence, s: CheckSettings) -> list[TensorCheck]:
    """Semantics: each tensor against the oracle; a declared internal dtype's baseline is the
    definition computed in it, the yardstick of its rounding."""
    inner = e.baselines[0] if e.baselines else None
    scale = _gradient_scale(e.oracle)
    return [float64_check(n, e.run.tensors.get(n), e.oracle.tensors[n], e.internal,
                          scale=0.0 if n == "output" else scale,
                          baseline=inner.tensors.get(n) if inner else None, factor=s.factor) for n in e.names]


def _lower_checks(e: Evidence, s: CheckSettings) -> list[TensorCheck]:
    """Precision: each tensor's error against the baselines'; where float64 already differs
    (or errs), every tensor that is not equivalent differs."""
    scale, loose, o = _gradient_scale(e.oracle), _loose(e, s), e.oracle.tensors
    checks = [_lower_check(n, e.run.tensors.get(n), o[n], [(b.tensors[n], o[n]) for b in e.baselines if n in b.tensors],
                           e.dtype, factor=s.factor, scale=0.0 if n == "output" else scale, half_rule=loose,
                           strict=s.strict) for n in e.names]
    sem64 = e.sem64
    if sem64 is None or sem64.verdict not in (Verdict.DIFFERENT, Verdict.ERROR):
        return checks
    return [TensorCheck(c.name, Verdict.DIFFERENT if c.verdict != Verdict.EQUIVALENT
                        or sem64.verdict == Verdict.DIFFERENT else c.verdict,
                        c.err, c.ref_err, c.allowed, c.ratio, SEMANTICS_DIFFER) for c in checks]


def _inference_check(e: Evidence, s: CheckSettings) -> TensorCheck:
    """The no-grad eval run's output against the same oracle and baselines as the autograd
    run's output (a fast path that only runs under no_grad is judged too)."""
    inf = e.inference
    assert inf is not None  # read only where the evidence holds it
    if inf.error:
        return TensorCheck(INFERENCE_CHECK, Verdict.ERROR, math.nan, None, 0.0, math.inf, f"no-grad eval: {inf.error}")
    o, got = e.oracle.tensors["output"], inf.tensors.get("output")
    if e.dtype == torch.float64:
        inner = next((b.tensors["output"] for b in e.baselines if "output" in b.tensors), None)
        return float64_check(INFERENCE_CHECK, got, o, e.internal, baseline=inner, factor=s.factor)
    pairs = [(b.tensors["output"], o) for b in e.baselines if "output" in b.tensors]
    return _lower_check(INFERENCE_CHECK, got, o, pairs, e.dtype, factor=s.factor, scale=0.0,
                        half_rule=_loose(e, s), strict=s.strict)


def _judged(e: Evidence, s: CheckSettings, checks: list[TensorCheck]) -> SpecResult:
    """The worst tensor's verdict against the one expected; a failure in a cell with a
    declared path finding is that finding, not a contradiction."""
    verdict = worst_spec(c.verdict for c in checks)
    bad = max(checks, key=lambda c: (c.verdict.rank, c.ratio))
    overflow = fill_overflow(e.variant, e.dtype)
    expected = _expected(e, overflow)
    ok = (verdict == expected or (expected == Verdict.LESS_PRECISE and verdict == Verdict.EQUIVALENT)
          or (verdict == Verdict.LESS_PRECISE and expected == Verdict.EQUIVALENT
              and (e.dtype_name in s.lenient or _loose(e, s))))
    finding = None if ok else _finding(e, s)
    notes = ([f"{PATH_FINDING}: {finding}"] if finding else []) + _notes(e, checks, verdict, overflow)
    return SpecResult(**_cell(e, s), verdict=verdict, expected=expected, ok=ok or finding is not None, err=bad.err,
                      ref_err=math.nan if bad.ref_err is None else bad.ref_err, ratio=bad.ratio, worst=bad.name,
                      note="; ".join(dict.fromkeys(notes)), tensors=checks, declared=str(finding) if finding else "",
                      finding=finding)


def _notes(e: Evidence, checks: list[TensorCheck], verdict: Verdict, overflow: str | None) -> list[str]:
    """What the note says, in order: an error expected and not raised, parameters left out,
    no backward on this device, a detached output, then each tensor that is not equivalent."""
    notes = [f"expected an error: {overflow}"] if verdict == Verdict.EQUIVALENT and overflow else []
    notes += [left_out_note(list(e.left_out))] if e.left_out else []
    notes += [x for x in (e.run.forward_only, e.run.note) if x]
    return notes + [c.note for c in checks if (c.verdict != Verdict.EQUIVALENT or c.shown) and c.note]
