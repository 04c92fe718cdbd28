"""How a benchmark case's shape is written, per family: ``B= H= T= d=`` for a family whose
inputs are heads already projected (the attention kernels), ``B= T= D=`` for the others.
The sweep, the ``bench`` summary and the report's tables all write it from here."""

from __future__ import annotations

# Families whose inputs are heads already projected, (B, H, T, d) with d = D / H
HEAD_SHAPED = ("attention_kernel",)


def shape_text(family: str, batch: int, seq: int, d_model: int, heads: int | float | None) -> str:
    """A case's shape as its family's inputs have it: ``B= H= T= d=`` for a kernel (d = D / H),
    else ``B= T= D=`` (also for a kernel row read back with no heads: NaN or None)."""
    try:
        h = int(heads)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        h = 0
    if family in HEAD_SHAPED and h > 0:
        return f"B={batch} H={h} T={seq} d={int(d_model) // h}"
    return f"B={batch} T={seq} D={d_model}"
