"""How a regime lays its inputs out in memory, the same values in each (``Layout``): as drawn,
non-contiguous (``strided``), or as views into one buffer at non-zero storage offsets
(``views_into_one_buffer``: what ``qkv.unbind(0)`` or ``qkv.split(d)`` of a fused projection
give). ``harness.check.reference_runs.prepare`` applies them."""

from __future__ import annotations

import enum
from typing import Sequence

import torch

VIEW_ALIGN = 16  # each view starts on a multiple of 16 elements, the first at 16


class Layout(str, enum.Enum):
    """How a regime's inputs are laid out in memory (the same values in each)."""

    GIVEN = "given"                   # each its own contiguous tensor, as drawn
    STRIDED = "non-contiguous"        # ``strided``: the last two dims' strides swapped
    VIEWS = "views into one buffer"   # ``views_into_one_buffer``: slices of one buffer at non-zero offsets

    def __str__(self) -> str:
        return self.value


def strided(x: torch.Tensor) -> torch.Tensor:
    """The same values in a non-contiguous layout: the last two dims' strides swapped, or every
    other element of a buffer twice the size (a 1-D tensor)."""
    if x.dim() >= 2 and x.shape[-1] > 1 and x.shape[-2] > 1:
        return x.transpose(-1, -2).contiguous().transpose(-1, -2)
    if x.numel() > 1:
        flat = x.reshape(-1)
        buffer = torch.empty(flat.numel() * 2, dtype=x.dtype, device=x.device)
        return buffer[::2].copy_(flat).view(*x.shape) if x.dim() == 1 else x
    return x


def views_into_one_buffer(tensors: Sequence[torch.Tensor], grad: bool) -> dict[int, torch.Tensor]:
    """{id(tensor): the same values as a contiguous view into one buffer per dtype and device, at a
    non-zero storage offset} (what ``qkv.unbind(0)`` or ``qkv.split(d)`` of a fused projection
    give: k and v start past offset 0). Each view starts on a multiple of ``VIEW_ALIGN`` elements,
    the first at ``VIEW_ALIGN``; the rest of the buffer holds NaN (0 for other dtypes), so a
    kernel that reads from the storage's start reads them. With ``grad``, the floating buffers
    require grad and each view keeps its gradient (``retain_grad``)."""
    groups: dict[tuple[torch.dtype, torch.device], list[torch.Tensor]] = {}
    for t in {id(t): t for t in tensors}.values():
        groups.setdefault((t.dtype, t.device), []).append(t)
    out: dict[int, torch.Tensor] = {}
    for (dtype, device), members in groups.items():
        starts, at = [], VIEW_ALIGN
        for t in members:
            starts.append(at)
            at += -(-max(t.numel(), 1) // VIEW_ALIGN) * VIEW_ALIGN
        fill = float("nan") if dtype.is_floating_point or dtype.is_complex else 0
        buffer = torch.full((at,), fill, dtype=dtype, device=device)
        with torch.no_grad():
            for t, s in zip(members, starts):
                buffer[s:s + t.numel()].copy_(t.detach().reshape(-1))
        keeps = grad and dtype.is_floating_point
        buffer.requires_grad_(keeps)
        for t, s in zip(members, starts):
            view = buffer[s:s + t.numel()].view(t.shape)
            if keeps:
                view.retain_grad()
            out[id(t)] = view
    return out
