"""Attribution: feed A's sub-module output into B to tell which unit makes the difference."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from harness.base.verdicts import Verdict
from harness.check.mismatch import mismatch
from harness.check.precision import DEFAULT_TOLERANCE
from harness.check.tensors import NOISE_MULTIPLE, noise_of
from harness.trace.diff_result import Attribution, TraceRow
from harness.trace.divergence import agrees, trace_variant
from harness.trace.recording import Trace


def _noise(x: torch.Tensor | None, x64: torch.Tensor | None) -> float:
    if x is None or x64 is None or x64.shape != x.shape:
        return 0.0
    return noise_of(x.double(), x64.double())


def _agree(x: torch.Tensor, ref: torch.Tensor, noise: float, dtype: torch.dtype):
    """A verdict on ``x`` against ``ref`` with a noise floor measured elsewhere (a patched
    run has no float64 twin of its own)."""
    if x.shape != ref.shape or not torch.equal(x.isnan(), ref.isnan()):
        return SimpleNamespace(verdict=Verdict.DIFFERENT, mismatch=None)
    rtol, atol = DEFAULT_TOLERANCE[dtype]
    m = mismatch(x, ref, rtol=rtol, atol=max(atol, NOISE_MULTIPLE * noise))
    if not (m.ok and x.dtype == ref.dtype and x.device == ref.device):  # assert_close's check
        return SimpleNamespace(verdict=Verdict.DIFFERENT, mismatch=m)
    ok = ~x.isnan()
    return SimpleNamespace(verdict=Verdict.IDENTICAL if torch.equal(x[ok], ref[ok]) else Verdict.EQUIVALENT,
                           mismatch=m)


def _unit_value(trace: Trace, unit: str, what: str) -> torch.Tensor | None:
    obs = trace.units.get(unit)
    return None if obs is None else (obs.inp if what == "in" else obs.out)


def _feed_point(row: TraceRow, ta: Trace, tb: Trace) -> tuple[str, torch.Tensor] | None:
    """Where in B a diverging row can be fed A's value: the row's own sub-module when B
    observes it with hooks, else its nearest ancestor that B does (an attention module
    fed A's attention output, which is its output projection's output)."""
    unit = row.unit
    ob = tb.units.get(unit)
    if ob is not None and ob.hooked:
        value = _unit_value(ta, unit, row.what)
        return None if value is None else (f"{unit}:in" if row.what == "in" else unit, value)
    while "." in unit:
        unit = unit.rsplit(".", 1)[0]
        ob = tb.units.get(unit)
        if ob is not None and ob.hooked:
            value = _unit_value(ta, unit, "out")
            if value is None:
                value = _unit_value(ta, f"{unit}.o", "out")
            return None if value is None else (unit, value)
    return None


def attribute(va, vb, ta, ta64, tb, *, tb64, rows, cfg, inputs, weights, dtype, device) -> Attribution:
    """Feed A's first diverging sub-module output into B and run on; while B's output
    still differs, feed the next sub-module that still diverges in the fed run."""
    patches: dict[str, torch.Tensor] = {}
    ref = ta.tensors["output"]
    noise = max(_noise(ta.tensors["output"], ta64.tensors.get("output")),
                _noise(tb.tensors["output"], tb64.tensors.get("output")))
    current = {(r.unit, r.what): r.verdict for r in rows}
    observed = [r for r in rows if r.verdict != "-"]

    def covered(key: str) -> bool:
        unit = key.split(":")[0]
        return any(unit == p.split(":")[0] or unit.startswith(p.split(":")[0] + ".") for p in patches)

    for _ in range(len(observed)):
        point = None
        for r in observed:
            if agrees(current.get((r.unit, r.what))):
                continue
            point = _feed_point(r, ta, tb)
            if point is not None and not covered(point[0]):
                break
            point = None
        if point is None:
            break
        patches[point[0]] = point[1]
        tp = trace_variant(vb, cfg, inputs, weights, dtype, device=device, patch=patches, backward=False)
        if tp.output is None:
            break
        if _agree(tp.output, ref, noise, dtype).verdict.agrees:
            return Attribution(tuple(patches), agrees=True)
        for r in observed:  # what still diverges once fed (noise from the runs not fed)
            got, want = _unit_value(tp, r.unit, r.what), _unit_value(ta, r.unit, r.what)
            if got is None or want is None or got.shape != want.shape:
                continue
            unit_noise = max(_noise(want, _unit_value(ta64, r.unit, r.what)),
                             _noise(_unit_value(tb, r.unit, r.what), _unit_value(tb64, r.unit, r.what)))
            current[(r.unit, r.what)] = _agree(got.double(), want.double(), unit_noise, dtype).verdict
    return Attribution(tuple(patches), agrees=False)
