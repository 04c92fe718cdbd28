"""Where a port first leaves the class its checkpoint belongs to, on the checkpoint's weights:
``diff``'s divergence trace (``harness.trace.divergence``) over the family's canonical
sub-modules, each side loaded with what it runs on in ``parity`` (the port's tensors that
the checkpoint does not hold at the port's init), on the real token sequences.
"""

from __future__ import annotations

import torch

from harness.check.tensors import compare_tensors
from harness.systems.checkpoint_sides import Comparison, canonical_weights, inputs_of
from harness.trace.diff_result import DivergenceKind, FirstDivergence, TraceRow
from harness.trace.divergence import agrees, locate, mark_first, trace_rows, trace_variant


def first_divergence(comparison: Comparison, tokens: torch.Tensor) -> FirstDivergence | None:
    """``locate``'s answer (unit, row, kind, text) for the reference against the port, in the
    comparison's dtype with float64 runs for the noise; None when every unit agrees."""
    c = comparison
    inputs = inputs_of(c.family, tokens)
    ref, port = c.reference, c.port
    w_ref, w_port = canonical_weights(c, ref, torch.float64), canonical_weights(c, port, torch.float64)
    ta64 = trace_variant(ref.variant, c.cfg, inputs, w_ref, torch.float64, backward=False)
    tb64 = trace_variant(port.variant, c.cfg, inputs, w_port, torch.float64, backward=False, others=ta64.units)
    ta = trace_variant(ref.variant, c.cfg, inputs, w_ref, c.dtype, backward=False, others=ta64.units)
    tb = trace_variant(port.variant, c.cfg, inputs, w_port, c.dtype, backward=False, others=ta.units)
    for t in (ta, tb, ta64, tb64):
        if t.error:
            return FirstDivergence("", "", DivergenceKind.ERROR, f"{t.variant}: {t.error}")
    rows = innermost(trace_rows(ta, tb, ta64, tb64, c.dtype))
    found = locate(rows)
    if found is None and not compare_tensors(ta.output, tb.output, ta64.output, tb64.output, c.dtype).verdict.agrees:
        last = next((r.unit for r in reversed(rows) if agrees(r.verdict)), "")
        said = f" (the last: {last})" if last else ""
        found = FirstDivergence("output", "output", DivergenceKind.COMPUTATION,
                                f"every sub-module observed on both sides agrees{said}; the outputs differ after "
                                "them: the output head")
    return found


def innermost(rows: list[TraceRow]) -> list[TraceRow]:
    """``rows`` with the first divergence moved from a unit into the first of its
    sub-units that diverges, as deep as one does (a model's rows start with a whole
    layer, whose own output differs whenever anything inside it does)."""
    first = next((i for i, r in enumerate(rows) if r.first), None)
    if first is None:
        return rows
    unit = rows[first].unit
    while True:
        inner = next((i for i, r in enumerate(rows) if i > first and r.unit.startswith(unit + ".")
                      and r.verdict != "-" and not agrees(r.verdict)), None)
        if inner is None:
            break
        first, unit = inner, rows[inner].unit
    return mark_first(rows, first)
