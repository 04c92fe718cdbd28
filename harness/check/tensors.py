"""Tensor comparison: a verdict (identical, equivalent, different) for one tensor against
another with the float64 noise between them."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

import torch

from harness.base.verdicts import RANK
from harness.check.precision import DEFAULT_TOLERANCE

# "A small multiple" of the measured rounding error. Measured on the default config in
# float32: equivalent pairs reach noise ratios of at most 1.8 (forward and gradients);
# the smallest semantic difference, LayerNorm eps 1e-5 vs 1e-6, reaches over 1100.
NOISE_MULTIPLE = 8.0


@dataclass
class TensorVerdict:
    verdict: str
    max_abs: float
    max_rel: float
    noise: float
    noise_ratio: float
    note: str = ""


def _max(t: torch.Tensor) -> float:
    return float(t.max()) if t.numel() else 0.0


def compare_tensors(
    a: torch.Tensor,
    b: torch.Tensor,
    a64: torch.Tensor | None,
    b64: torch.Tensor | None,
    dtype: torch.dtype,
) -> TensorVerdict:
    """Verdict on two results; ``a64``/``b64`` are the same variants run in float64."""
    if a.shape != b.shape:
        return TensorVerdict("different", math.inf, math.inf, 0.0, math.inf,
                             f"shapes {tuple(a.shape)} vs {tuple(b.shape)}")
    if not a.is_floating_point():
        same = torch.equal(a, b)
        mismatches = int((a != b).sum())
        return TensorVerdict("identical" if same else "different", float(mismatches), 0.0, 0.0,
                             0.0, "" if same else f"{mismatches} elements differ")
    nan_a, nan_b = a.isnan(), b.isnan()
    if not torch.equal(nan_a, nan_b):
        return TensorVerdict("different", math.inf, math.inf, 0.0, math.inf,
                             f"NaN in {int(nan_a.sum())} vs {int(nan_b.sum())} elements")
    ok = ~nan_a
    af, bf = a[ok], b[ok]
    if torch.equal(af, bf):
        return TensorVerdict("identical", 0.0, 0.0, 0.0, 0.0)
    diff = (af - bf).abs()
    max_abs = _max(diff)
    max_rel = _max(diff / bf.abs().clamp_min(torch.finfo(torch.float64).tiny))
    noise = 0.0
    for x, x64 in ((a, a64), (b, b64)):
        if x64 is not None and x64.shape == x.shape:
            both = ~x.isnan() & ~x64.isnan()
            noise = max(noise, _max((x[both] - x64[both]).abs()))
    rtol, atol = DEFAULT_TOLERANCE[dtype]
    try:
        torch.testing.assert_close(af, bf, rtol=rtol, atol=max(atol, NOISE_MULTIPLE * noise))
        verdict = "equivalent"
    except AssertionError:
        verdict = "different"
    # No higher precision to measure float64 against: its ratio is not applicable (NaN).
    ratio = max_abs / noise if noise > 0 else math.nan
    return TensorVerdict(verdict, max_abs, max_rel, noise, ratio)


def worst(verdicts: Iterable[str]) -> str:
    return max(verdicts, key=RANK.__getitem__, default="identical")


# -- expectations ------------------------------------------------------------------------------------
