"""The verdict of one tensor against its oracle: ``float64_check`` (semantics, float64) and
``_lower_check`` (precision, a lower dtype), with the bounds they use
(``harness.check.precision``); ``harness.check.verdict`` applies them to every tensor of a run."""

from __future__ import annotations

import math

import torch

from harness.base.dtypes import dtype_of
from harness.base.verdicts import Verdict
from harness.check import precision as P
from harness.check.results import TensorCheck

# ... but not without bound: in a half dtype an output error beyond torch.testing.assert_close's
# tolerance for that dtype at the tensor's scale (the error a user's test would fail on)
# AND at least 10x the baseline's error (a rounding-order difference stays well under
# that on outputs) is "different", a contradiction. Outputs only: half-precision gradients
# of PyTorch's own pre-norm layers reach 72x the baseline's error, beyond that tolerance
# (nn.TransformerEncoderLayer(norm_first=True), one_head, float16).
HALF_DTYPES = (torch.bfloat16, torch.float16)
HALF_DIFFERENT_FACTOR = 10.0


def unproduced(name: str, oracle: torch.Tensor, check) -> TensorCheck:
    """A tensor the variant's run did not produce. The gradient of a parameter its forward
    never uses is zero (autograd leaves it None): where the oracle's gradient is zero too, to
    within the dtype's tolerance (``check`` of zeros), leaving the parameter out computes the
    same function (a key bias without RoPE: softmax is shift-invariant) and the verdict is
    equivalent, said in a note; anything else is missing: different."""
    if name.startswith("grad:"):
        zero = check(torch.zeros_like(oracle))
        if zero.verdict == Verdict.EQUIVALENT:
            zero.note = (f"{name.removeprefix('grad:')}: the oracle's gradient is 0 here, so leaving it "
                         f"unused computes the same function")
            zero.shown = True
            return zero
    return TensorCheck.missing(name)


def float64_check(name: str, a: torch.Tensor | None, o: torch.Tensor, internal: str | None,
                   scale: float = 0.0, baseline: torch.Tensor | None = None,
                   factor: float = P.PRECISION_FACTOR) -> TensorCheck:
    """``scale``: the scale the floor is taken at besides the tensor's own (all the gradients'
    for a gradient: one that is analytically zero, k.bias, is rounding noise at the size of
    the terms that cancelled; measured 1.2e-10 for nn.MultiheadAttention at T = 131, x25).

    ``baseline``: for a variant that declares ``internal_dtype``, the oracle computed in that
    dtype (the definition evaluated where the variant says it computes). Beyond that dtype's
    elementwise tolerance (large activations: float32 rotary tables at logits in the hundreds),
    an error still within ``factor`` times the baseline's RMS error (``harness.check.precision``)
    is that dtype's rounding, "less precise" as declared; beyond both, "different". Without a
    declaration, ``baseline`` is the definition computed in float32: an error within float32's
    tolerance is "less precise" only while its RMS is within ``factor`` times that baseline's
    (float32's rounding); a systematic difference that small (an eps of 1e-5 for 1e-12) is
    "different"."""
    if a is None:
        return unproduced(name, o, lambda z: float64_check(name, z, o, internal, scale, baseline, factor))
    if a.shape != o.shape:
        return TensorCheck.shape_differs(name, a.shape, o.shape)
    g = P.gap(a, o)
    if not g.comparable:
        return TensorCheck(name, Verdict.DIFFERENT, g.max_abs, None, 0.0, math.inf,
                           f"{name}: NaN in {g.nan_mismatch} element(s) where the oracle has none, or the reverse")
    allowed = P.FLOAT64_ATOL + P.FLOAT64_RTOL * max(g.scale, scale)
    ratio = g.max_abs / allowed
    if g.within(P.FLOAT64_ATOL + P.FLOAT64_RTOL * scale):
        return TensorCheck(name, Verdict.EQUIVALENT, g.max_abs, None, allowed, ratio)
    lower = dtype_of(internal) if internal else torch.float32
    rtol, atol = P.DEFAULT_TOLERANCE[lower]
    why = (f"computes in {internal} internally (declared)" if internal else
           "within float32's tolerance but not float64's: part of the work runs below "
           "float64 (declare internal_dtype if it is meant to)")
    within_tol = P.within(a, o, rtol, atol + rtol * scale)  # at the gradients' scale, as the float64 bound is
    if baseline is not None and (within_tol or internal):  # the dtype's rounding, or another function?
        bg = P.gap(baseline, o)
        if bg.comparable:
            at = max(g.scale, scale)
            rms_ratio = P.ratio_to_reference(g.rms, bg.rms, lower, at)
            limit = P.size_factor(factor, g.n)
            low = internal or "float32"
            computed = f"the definition computed in {low}"
            if rms_ratio > limit:  # an eps of 1e-5 for 1e-12: within the tolerance, not the dtype's rounding
                where = (f"within {low}'s tolerance, but" if within_tol
                         else f"beyond {low}'s tolerance, and")
                return TensorCheck(name, Verdict.DIFFERENT, g.max_abs, bg.max_abs, allowed, ratio,
                                   f"{name}: {where} its RMS error is {rms_ratio:.3g}x that of {computed} "
                                   f"(allowed {limit:.3g}x on {g.n} elements): not {low}'s "
                                   "rounding but another function", n=g.n)
            if not within_tol:  # beyond the tolerance (large activations), yet the declared dtype's rounding
                return TensorCheck(name, Verdict.LESS_PRECISE, g.max_abs, bg.max_abs, allowed, ratio,
                                   f"{why}: RMS error {rms_ratio:.3g}x that of {computed}",
                                   max_ratio=P.ratio_to_reference(g.max_abs, bg.max_abs, lower, at), n=g.n)
    if within_tol:
        return TensorCheck(name, Verdict.LESS_PRECISE, g.max_abs, None, allowed, ratio, why)
    return TensorCheck(name, Verdict.DIFFERENT, g.max_abs, None, allowed, ratio)


def _lower_check(name: str, a: torch.Tensor | None, o: torch.Tensor, baselines: list[tuple[torch.Tensor, torch.Tensor]],
                 dtype: torch.dtype, *, factor: float, scale: float, half_rule: bool = False,
                 strict: bool = False) -> TensorCheck:
    """``baselines``: (result in ``dtype``, its float64 oracle) pairs computing the same
    function as the variant: the oracle evaluated in ``dtype``, and the family reference
    when it shares the variant's semantics. The largest of their errors is the baseline."""
    if a is None:
        return unproduced(name, o, lambda z: _lower_check(name, z.to(dtype), o, baselines, dtype, factor=factor,
                                                          scale=scale, half_rule=half_rule, strict=strict))
    if a.shape != o.shape:
        return TensorCheck.shape_differs(name, a.shape, o.shape)
    g = P.gap(a, o)
    gaps = [bg for b, bo in baselines if (bg := P.gap(b, bo)).comparable]
    ref_err = max(bg.max_abs for bg in gaps) if gaps else None
    ref_rms = max(bg.rms for bg in gaps) if gaps else None
    if not g.comparable:
        return TensorCheck.pattern_differs(name, g.max_abs, ref_err, g.nan_mismatch)
    at = max(g.scale, scale)
    allowed = P.allowance(dtype, ref_err, at, factor)  # on the largest error: what a pair can resolve
    # the decision: the RMS error against the baseline's (stable across shapes, where the
    # largest error of a small tensor is not; harness.check.precision)
    ratio = P.ratio_to_reference(g.rms, ref_rms, dtype, at)
    limit = P.size_factor(factor, g.n)
    verdict = Verdict.EQUIVALENT if ratio <= limit else Verdict.LESS_PRECISE
    note = "" if ref_err is not None else "no reference error in this dtype: held to the ulp floor"
    if verdict == Verdict.LESS_PRECISE and ref_err is not None:
        note = f"{name}: RMS error {ratio:.3g}x the baseline's (allowed {limit:.3g}x on {g.n} elements)"
    if (verdict == Verdict.LESS_PRECISE and (dtype in HALF_DTYPES or half_rule) and ref_err is not None
            and name.startswith("output")):
        # the bound of "different": the dtype's own tolerance in a half dtype or when asked
        # (--strict-precision); in float32, the coarsest dtype's (bfloat16): below it, an error
        # of a variant whose float64 semantics hold is float32's rounding, amplified by the
        # regime (exp(s - logsumexp(s)) at logits in the hundreds), not another function
        rtol, atol = P.DEFAULT_TOLERANCE[dtype if dtype in HALF_DTYPES or strict else torch.bfloat16]
        tolerance = atol + rtol * max(g.scale, scale)
        if g.max_abs > tolerance and g.max_abs >= HALF_DIFFERENT_FACTOR * ref_err:
            verdict = Verdict.DIFFERENT
            note = (f"{name}: beyond {str(dtype).replace('torch.', '')}'s assert_close tolerance at the tensor's "
                    f"scale ({tolerance:.3g}) and {g.max_abs / max(ref_err, 1e-300):.3g}x the baseline's error")
    return TensorCheck(name, verdict, g.max_abs, ref_err, allowed, ratio, note,
                       max_ratio=P.ratio_to_reference(g.max_abs, ref_err, dtype, at), n=g.n)
