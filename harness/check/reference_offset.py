"""The offset regimes of ``harness.check.reference.judge`` (``offset +100``, ``offset +1000``:
every floating input shifted by a large mean, the same spread around it), judged where they
mean something. Where the reference is shift invariant (a LayerNorm, a softmax: ``moved``
finds nothing its float64 run moves when the offset is taken off) the regime tests
cancellation and is judged strictly: a one-pass variance E[x^2] - E[x]^2 in float32 loses
its digits there. An error within what one ulp of the inputs at the offset causes in the
definition itself (``one_ulp_off``, ``within_input_rounding``: a softmax through
``x - logsumexp(x)`` rounds x - c at 1000) is that rounding, not a mistake. Where the
reference is not shift invariant (a linear layer, attention's logits of 1e4), its rounding is
amplified as under scaled inputs, and the regime is judged as they are."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Callable

import torch

from harness.base.verdicts import Verdict
from harness.check.precision import gap, size_factor
from harness.check.reference_inputs import map_tensors
from harness.check.reference_runs import SideRun
from harness.check.results import TensorCheck
from harness.check.rules import float64_check


def less(inputs: Any, offset: float) -> Any:
    """``inputs`` with ``offset`` taken off every floating tensor."""
    return map_tensors(inputs, lambda x: x - offset if x.is_floating_point() else x)


def moved(names: list[str], ref64: SideRun, run_back: Callable[[bool], SideRun]) -> list[str]:
    """The tensors of ``ref64`` (the reference in float64 at the offset) that ``run_back(grad)``
    (the same on the inputs less the offset) does not reproduce to float64's bound: the outputs
    first, the gradients only where none moved (every name where that run fails)."""
    out: list[str] = []
    for grad in (False, True) if any(n.startswith("grad:") for n in names) else (False,):
        other = run_back(grad)
        if other.error:
            return names
        out = [n for n in sorted(names) if (grad or not n.startswith("grad:")) and (
            n not in other.tensors or not float64_check(n, other.tensors[n], ref64.tensors[n], None).verdict.agrees)]
        if out:
            break
    return out


def one_ulp_off(rounded: Any, dtype: torch.dtype, seed: int) -> Any:
    """The inputs (already rounded to ``dtype``), each element moved one ulp of ``dtype`` up or
    down at random (seeded)."""
    gen = torch.Generator().manual_seed(seed)

    def one(x: torch.Tensor) -> torch.Tensor:
        if not x.is_floating_point():
            return x
        low = x.to(dtype)
        up = torch.rand(x.shape, generator=gen) < 0.5
        inf = torch.full_like(low, math.inf)
        return torch.where(up, torch.nextafter(low, inf), torch.nextafter(low, -inf)).to(x.dtype)

    return map_tensors(rounded, one)


def within_input_rounding(c: TensorCheck, cand: SideRun, truth: SideRun, floor: Callable[[], SideRun | None] | None,
                          factor: float) -> TensorCheck:
    """``c`` equivalent, said, where it fails and its RMS error is within ``factor`` (by size) of
    how far one ulp of the inputs moves the definition (``floor()``: run only where asked)."""
    a = cand.tensors.get(c.name)
    if floor is None or a is None or c.verdict not in (Verdict.LESS_PRECISE, Verdict.DIFFERENT):
        return c
    run = floor()
    f = run.tensors.get(c.name) if run is not None and not run.error else None
    if f is None:
        return c
    g, fg = gap(a, truth.tensors[c.name]), gap(f, truth.tensors[c.name])
    limit = size_factor(factor, g.n)
    if not (g.comparable and fg.comparable) or g.rms > limit * fg.rms:
        return c
    return replace(c, verdict=Verdict.EQUIVALENT, shown=True,
                   note=f"{c.name}: RMS error {g.rms:.3g}, within {limit:.3g}x of how far one ulp of the inputs "
                        f"moves it ({fg.rms:.3g}): their rounding at the offset")
