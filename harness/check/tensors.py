"""Tensor comparison: a verdict (identical, equivalent, different) for one tensor against
another with the float64 noise between them."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

import torch

from harness.base.verdicts import Verdict
from harness.check.mismatch import Mismatch, mismatch
from harness.check.precision import DEFAULT_TOLERANCE

# "A small multiple" of the measured rounding error. Measured on the default config in
# float32: equivalent pairs reach noise ratios of at most 1.8 (forward and gradients);
# the smallest semantic difference, LayerNorm eps 1e-5 vs 1e-6, reaches over 1100.
NOISE_MULTIPLE = 8.0


@dataclass
class TensorVerdict:
    verdict: Verdict
    max_abs: float
    max_rel: float
    noise: float
    noise_ratio: float
    note: str = ""
    mismatch: Mismatch | None = None  # the core's result under the tolerance the verdict used

    def __post_init__(self) -> None:
        self.verdict = Verdict(self.verdict)


def noise_of(x: torch.Tensor | None, x64: torch.Tensor | None) -> float:
    """Max |x - x64| where neither is NaN: a result's rounding error against its float64 run
    (0.0 when there is no float64 run of the same shape)."""
    if x is None or x64 is None or x64.shape != x.shape:
        return 0.0
    return mismatch(x, x64).max_abs


def compare_tensors(
    a: torch.Tensor,
    b: torch.Tensor,
    a64: torch.Tensor | None,
    b64: torch.Tensor | None,
    dtype: torch.dtype,
) -> TensorVerdict:
    """Verdict on two results; ``a64``/``b64`` are the same variants run in float64."""
    if a.shape != b.shape:
        return TensorVerdict(Verdict.DIFFERENT, math.inf, math.inf, 0.0, math.inf,
                             f"shapes {tuple(a.shape)} vs {tuple(b.shape)}")
    if a.is_floating_point() != b.is_floating_point():  # a bool or integer answer where the other is floating
        kinds = f"{str(a.dtype).replace('torch.', '')} vs {str(b.dtype).replace('torch.', '')}"
        return TensorVerdict(Verdict.DIFFERENT, math.inf, math.inf, 0.0, math.inf, f"dtypes {kinds}")
    if not a.is_floating_point():
        same = torch.equal(a, b)
        mismatches = int((a != b).sum())
        return TensorVerdict(Verdict.IDENTICAL if same else Verdict.DIFFERENT, float(mismatches), 0.0, 0.0,
                             0.0, "" if same else f"{mismatches} elements differ")
    nan_a, nan_b = a.isnan(), b.isnan()
    if not torch.equal(nan_a, nan_b):
        return TensorVerdict(Verdict.DIFFERENT, math.inf, math.inf, 0.0, math.inf,
                             f"NaN in {int(nan_a.sum())} vs {int(nan_b.sum())} elements")
    ok = ~nan_a
    if torch.equal(a[ok], b[ok]):
        return TensorVerdict(Verdict.IDENTICAL, 0.0, 0.0, 0.0, 0.0)
    noise = max(noise_of(a, a64), noise_of(b, b64))
    rtol, atol = DEFAULT_TOLERANCE[dtype]
    m = mismatch(a, b, rtol=rtol, atol=max(atol, NOISE_MULTIPLE * noise))
    # assert_close's check, as before: same dtype and device, every element close.
    close = m.ok and a.dtype == b.dtype and a.device == b.device
    verdict = Verdict.EQUIVALENT if close else Verdict.DIFFERENT
    # No higher precision to measure float64 against: its ratio is not applicable (NaN).
    ratio = m.max_abs / noise if noise > 0 else math.nan
    return TensorVerdict(verdict, m.max_abs, m.max_rel, noise, ratio, mismatch=m)


def worst(verdicts: Iterable[str]) -> Verdict:
    return Verdict.worst(verdicts, default=Verdict.IDENTICAL)
