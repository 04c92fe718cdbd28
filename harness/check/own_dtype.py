"""Semantics in a kernel's own dtype: the rule for variants that run only in half precision
(they declare ``dtypes`` without float64: SDPA's flash, efficient and cuDNN backends,
flex_attention compiled, a Triton kernel).

Such a kernel cannot be held to the float64 oracle within float64's bound, so its semantics
are decided in each dtype it declares by the rule of flash-attention's tests
(``tests/test_flash_attn.py``; FlexAttention's ``test_flex_attention.py`` has the same form on
the mean error): its error against the float64 oracle, computed on the inputs (and the
backward's cotangent) rounded to the dtype first, is at most ``FACTOR`` times the error of a
reference computed in that same dtype, plus a small absolute term::

    max|kernel - oracle64(rounded)| <= FACTOR * max|oracle_in_dtype - oracle64(rounded)| + atol

on the output and on every gradient (and on the no-grad eval run's output). The reference in
the dtype is the oracle's own code run in the dtype, with the upcasts a careful
implementation makes: PyTorch's matmul and softmax on half tensors accumulate in float32 and
round once. ``atol = ATOL_SCALE * eps * (max|o| + 0.3)``: flash-attention's absolute term
(``2 * max|(o + 0.3) - 0.3 - o|``, evaluated in the dtype, which is zero for a tensor whose
few values happen to round exactly) made deterministic and scaled.

``FACTOR``, ``ATOL_SCALE`` and ``STATISTIC`` were chosen with
``benchmarks/own_dtype_calibration.py`` (figures in docs/half-precision-kernels.md): no false
alarm in 40 random draws of correct kernels (17,280 tensors, float16 and bfloat16; the largest
factor needed 3.51), every convention mistake caught wherever the shapes show it, a rounding
bug caught on some shapes.
"""

from __future__ import annotations

import math

import torch

from harness.base.verdicts import Verdict
from harness.check import precision as P
from harness.check.results import TensorCheck
from harness.check.rules import unproduced

# flash-attention uses 2 on the output and on the gradients (4 with a softcap); measured here,
# 2 raises false alarms in 11 of 40 draws, 4 in none (docs/half-precision-kernels.md).
FACTOR = 4.0
# The absolute term in units of eps * (max|o| + 0.3) (``rounding_atol``).
ATOL_SCALE = 0.25
# The error statistic: the largest (flash-attention's), the mean (FlexAttention's) or the
# root mean square (the harness's precision rule's).
STATISTIC = "max"
STATISTIC_NAMES = {"max": "largest", "mean": "mean", "rms": "RMS"}


def rounding_atol(truth: torch.Tensor, dtype: torch.dtype, scale: float = 0.0) -> float:
    """The absolute term, ``ATOL_SCALE * eps * (max|o| + 0.3)``: ``eps * (max|o| + 0.3)``
    bounds flash-attention's ``2 * max|(o + 0.3) - 0.3 - o|`` (evaluated in the dtype, that one
    is zero for a tensor whose few values happen to round exactly). ``scale``: taken with the
    oracle's magnitude (for a gradient, the largest of all the gradients': one that is
    analytically zero, dQ and dK where each query has one key, is rounding noise at the size of
    the terms that cancelled)."""
    finite = truth[torch.isfinite(truth)]
    top = max(float(finite.abs().max()) if finite.numel() else 0.0, scale)
    return ATOL_SCALE * torch.finfo(dtype).eps * (top + 0.3)


def gradient_scale(tensors: dict[str, torch.Tensor]) -> float:
    """The largest finite magnitude over the gradients (``grad:*``) of a run."""
    return max((float(t[torch.isfinite(t)].abs().max()) for n, t in tensors.items()
                if n.startswith("grad:") and torch.isfinite(t).any()), default=0.0)


def error(a: torch.Tensor, truth: torch.Tensor, statistic: str = STATISTIC) -> float:
    """The error statistic of ``a`` against ``truth`` over the elements finite in both: the
    largest, the mean or the root mean square absolute difference."""
    a = a.detach().to("cpu", torch.float64)
    ok = torch.isfinite(a) & torch.isfinite(truth)
    d = (a[ok] - truth[ok]).abs()
    if not d.numel():
        return 0.0
    if statistic == "max":
        return float(d.max())
    if statistic == "mean":
        return float(d.mean())
    return float(d.pow(2).mean().sqrt())


def own_dtype_check(name: str, a: torch.Tensor | None, truth: torch.Tensor, reference: torch.Tensor | None,
                    dtype: torch.dtype, factor: float = FACTOR, scale: float = 0.0) -> TensorCheck:
    """One tensor of a run in its own ``dtype``: ``a`` against ``truth`` (the float64 oracle on
    the rounded inputs), the allowance from ``reference`` (the oracle computed in ``dtype``);
    ``scale``: see ``rounding_atol``."""
    if a is None:
        return unproduced(name, truth, lambda z: own_dtype_check(name, z.to(dtype), truth, reference, dtype,
                                                                 factor, scale))
    g = P.gap(a, truth)
    if not g.comparable:
        return TensorCheck.pattern_differs(name, g.max_abs, None, g.nan_mismatch)
    err = error(a, truth)
    ref_err = error(reference, truth) if reference is not None and P.gap(reference, truth).comparable else 0.0
    atol = rounding_atol(truth, dtype, scale)
    allowed = factor * ref_err + atol
    ratio = err / ref_err if ref_err > 0 else (math.inf if err > atol else 0.0)
    if err <= allowed:
        return TensorCheck(name, Verdict.EQUIVALENT, err, ref_err, allowed, ratio, n=g.n)
    dt, what = str(dtype).replace("torch.", ""), STATISTIC_NAMES[STATISTIC]
    return TensorCheck(name, Verdict.DIFFERENT, err, ref_err, allowed, ratio,
                       f"{name}: {what} error {err:.3g} is {ratio:.3g}x the {dt} reference's {ref_err:.3g} "
                       f"(allowed {factor:g}x + {atol:.2g})", n=g.n)


def own_dtype_checks(run, truth, reference, names, dtype: torch.dtype, inference=None) -> list[TensorCheck]:
    """Every tensor of a run in its own ``dtype`` (``names``: the output and the gradients)
    against ``truth`` (the float64 oracle on the rounded inputs) by the rule, the allowance
    from ``reference`` (the oracle computed in ``dtype``); ``inference``: the no-grad eval
    run, its output held to the same rule."""
    scale = gradient_scale(truth.tensors)
    checks = [own_dtype_check(n, run.tensors.get(n), truth.tensors[n], reference.tensors.get(n), dtype,
                              scale=0.0 if n == "output" else scale) for n in names]
    if inference is not None:
        name = "output (no-grad eval)"
        checks.append(TensorCheck(name, Verdict.ERROR, math.nan, None, 0.0, math.inf,
                                  f"no-grad eval: {inference.error}") if inference.error else
                      own_dtype_check(name, inference.tensors.get("output"), truth.tensors["output"],
                                      reference.tensors.get("output"), dtype))
    return checks
