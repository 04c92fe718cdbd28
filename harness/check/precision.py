"""Precision: how close to the float64 oracle a result must be, per dtype.

Two separate questions, two rules:

- **Semantics, in float64.** A variant computes its declared function when its float64
  result lies within ``|a - o| <= FLOAT64_ATOL + FLOAT64_RTOL * |o|`` of the oracle. Float64
  rounding on these sizes is ~1e-15; the bound leaves room for accumulation and still
  catches a real difference of 1e-8. A variant that declares ``internal_dtype``
  (part of its work in float32 whatever the input dtype) is held to that dtype's bound
  instead, and its verdict is "less precise", not "different".

- **Precision, in every lower dtype** (float32, bfloat16, float16). A variant's error
  against the float64 oracle of its own traits is compared with the family reference's
  error against *its* oracle, in the same dtype, on the same weights and inputs (the rule
  flash-attention's tests use): equivalent while ``rms <= factor * rms_ref + floor``, on the
  **root mean square** of the error (``Gap.rms``), ``factor`` = ``PRECISION_FACTOR`` by
  default (``--precision-factor``), ``floor`` = one unit in the last place of the dtype at the
  output's scale (an exact reference has error 0). Above that the verdict is "less precise
  (N x the reference's RMS error)". A variant's own imprecision never widens the tolerance
  of anything else.

  Why the RMS and not the largest error (the rule ``benchmarks/precision_calibration.py``
  calls "max"): on a tensor of a few
  dozen elements the largest error is one draw from the tail, so its ratio to the
  reference's swings with the shape; random (seed, shape) draws raised false alarms on
  PyTorch's own modules. ``benchmarks/precision_calibration.py`` measures both ratios'
  distributions and the false-alarm rates over 1,000 draws of the shapes users give
  (docs/verdict-calibration.md gives the figures).
  ``allowed`` stays on the largest error: it is what a pair of oracles can resolve.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from harness.base.defaults import FLOAT64_ATOL, FLOAT64_RTOL, PRECISION_FACTOR
from harness.check.mismatch import mismatch

# torch.testing.assert_close's default (rtol, atol) per dtype (its documentation's table):
# the bound for a variant that declares it computes in that dtype internally.
DEFAULT_TOLERANCE = {
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (FLOAT64_RTOL, FLOAT64_ATOL),
}


@dataclass
class Gap:
    """One tensor of a run against its oracle."""

    max_abs: float          # over elements where neither is NaN
    nan_mismatch: int       # elements NaN in one and not the other
    scale: float            # max |oracle|, for the ulp floor
    excess: float = math.inf  # max of |a - o| - rtol * |o| with the rtol of ``within64``
    rms: float = math.inf     # sqrt(mean |a - o|^2) over elements finite in both (the precision statistic)
    n: int = 0                # the elements it averages

    def within(self, atol: float) -> bool:
        """``|a - o| <= atol + FLOAT64_RTOL * |o|`` everywhere (NaN patterns aside)."""
        return self.excess <= atol

    @property
    def comparable(self) -> bool:
        return self.nan_mismatch == 0


def gap(a: torch.Tensor, oracle: torch.Tensor) -> Gap:
    """``a`` (any float dtype, on any device) against ``oracle`` (float64, CPU)."""
    if a.shape != oracle.shape:
        return Gap(math.inf, max(a.numel(), oracle.numel()), 0.0)
    if not a.is_floating_point():
        bad = int((a.cpu() != oracle.cpu()).sum())
        return Gap(0.0 if bad == 0 else math.inf, bad, 1.0, rms=0.0 if bad == 0 else math.inf, n=a.numel())
    a = a.detach().to("cpu", torch.float64)
    if bool(torch.isfinite(a).all()) and bool(torch.isfinite(oracle).all()):
        return _finite_gap(a.reshape(-1), oracle.reshape(-1))
    m = mismatch(a, oracle, rtol=FLOAT64_RTOL, atol=FLOAT64_ATOL, equal_inf=False)
    if not m.total:
        return Gap(0.0, m.nan_mismatch, 0.0, 0.0, 0.0)
    rms, n = rms_error(a, oracle)
    return Gap(m.max_abs, m.nan_mismatch, m.max_expected, m.excess, rms, n)


def _finite_gap(a: torch.Tensor, oracle: torch.Tensor) -> Gap:
    """``gap`` of two flat float64 tensors with no NaN or infinity: the same figures as the
    general path (the same operations on the same elements in the same order), in a third of
    its tensor operations; most of a check's 40,000 gaps take this path."""
    if not a.numel():
        return Gap(0.0, 0, 0.0, 0.0, 0.0)
    diff, scale = (a - oracle).abs(), oracle.abs()
    return Gap(float(diff.max()), 0, float(scale.max()), float((diff - FLOAT64_RTOL * scale).max()),
               float(diff.pow(2).mean().sqrt()), a.numel())


def rms_error(a: torch.Tensor, oracle: torch.Tensor) -> tuple[float, int]:
    """Root mean square of ``a - oracle`` over the elements finite in both (0 when none),
    and how many elements that is."""
    both = torch.isfinite(a) & torch.isfinite(oracle)
    n = int(both.sum())
    if not n:
        return 0.0, 0
    return float((a[both] - oracle[both]).pow(2).mean().sqrt()), n


# The ratio of two RMS errors over n elements fluctuates by about exp(+-1/sqrt(n)) (the log
# of a root mean square of n roughly independent terms has sd ~ 1/sqrt(2n); a ratio of two,
# 1/sqrt(n)), and more where a few elements carry the error (a gradient through a LayerNorm
# over 4 features). Below ~80 elements that noise exceeds the factor, so the allowance is the
# larger of the factor and exp(SIZE_Z / sqrt(n)): measured with
# benchmarks/precision_calibration.py over the shapes users give (docs/verdict-calibration.md),
# nn.TransformerEncoderLayer(norm_first=True) at D = 4, H = 1, B = 1, T = 9 reaches 3.7x on
# its 36-element input gradient; 9 allows 4.5x there, and the factor alone from 81 elements.
SIZE_Z = 9.0


def size_factor(factor: float, n: int) -> float:
    """The ratio allowed on a tensor of ``n`` elements: ``factor``, or more where the RMS of so
    few elements is itself that noisy."""
    return max(factor, math.exp(SIZE_Z / math.sqrt(max(n, 1))))


def within(a: torch.Tensor, oracle: torch.Tensor, rtol: float, atol: float) -> bool:
    """Elementwise ``|a - o| <= atol + rtol * |o|`` where neither is NaN (NaN patterns
    are compared separately)."""
    return mismatch(a.detach().to("cpu", torch.float64), oracle, rtol=rtol, atol=atol, equal_inf=False).mismatched == 0


def ulp_floor(dtype: torch.dtype, scale: float) -> float:
    """One unit in the last place of ``dtype`` at the output's scale."""
    return torch.finfo(dtype).eps * max(scale, 1.0)


def allowance(dtype: torch.dtype, ref_err: float | None, scale: float, factor: float = PRECISION_FACTOR) -> float:
    """The largest error a variant may have in ``dtype`` and still be 'equivalent'."""
    floor = ulp_floor(dtype, scale)
    return factor * (ref_err or 0.0) + floor


def ratio_to_reference(err: float, ref_err: float | None, dtype: torch.dtype, scale: float) -> float:
    """How many times the reference's error (the ulp floor when the reference is exact)."""
    base = max(ref_err or 0.0, ulp_floor(dtype, scale))
    return err / base if base > 0 else (math.inf if err > 0 else 0.0)


def resolvable(difference: float, dtype: torch.dtype, allowed_a: float, allowed_b: float) -> bool:
    """Whether a difference between two oracles can show through ``dtype``'s rounding."""
    if dtype == torch.float64:
        return True
    return difference > allowed_a + allowed_b
