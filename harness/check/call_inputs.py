"""A call's inputs as a run takes them: cast to the run's dtype and device (tensors shared
between names stay shared), snapshotted before the call and compared after it (an input
changed in place is a finding), and the distinct tensors a gradient is taken for.
``harness.check.runs`` runs variants on them."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import torch

from harness.base.errors import InputError
from harness.families.base import Family


def snapshot(inputs: Mapping[str, Any]) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """(names, tensor, copy) of every distinct input tensor: inputs are read-only, and a
    call that changes one (a mask flipped in place, a target filled) is told by the copy."""
    names: dict[int, list[str]] = {}
    tensors: dict[int, torch.Tensor] = {}
    for name, value in inputs.items():
        if isinstance(value, torch.Tensor):
            names.setdefault(id(value), []).append(name)
            tensors[id(value)] = value
    return [(" = ".join(names[i]), t, t.detach().clone()) for i, t in tensors.items()]


def changed_inputs(snap) -> list[str]:
    """One line per input the call changed in place: its name(s) and how many elements."""
    out = []
    for name, t, before in snap:
        now = t.detach()
        if now.shape != before.shape or now.dtype != before.dtype:
            out.append(f"input '{name}' changed in place by the call (now {tuple(now.shape)} {now.dtype})")
        elif not torch.equal(now, before):
            same = (now == before) | (now.isnan() & before.isnan()) if now.is_floating_point() else now == before
            out.append(f"input '{name}' changed in place by the call ({int((~same).sum())} of "
                       f"{now.numel()} element(s))")
    return out


def cast_inputs(
    inputs: Mapping[str, Any], dtype: torch.dtype, device: str, grad: Iterable[str] = ()
) -> dict[str, Any]:
    """Cast float inputs to ``dtype`` on ``device``; tensors shared between names (query is
    key is value in self-attention) stay shared; ``grad`` names become leaves."""
    grad = set(grad)
    memo: dict[int, torch.Tensor] = {}
    out: dict[str, Any] = {}
    for name, value in inputs.items():
        if not isinstance(value, torch.Tensor):
            out[name] = value
            continue
        if id(value) not in memo:
            if value.is_floating_point():
                if torch.isnan(value).any():
                    raise InputError(f"input '{name}' contains NaN")
                t = value.detach().to(device=device, dtype=dtype, copy=True)
                if name in grad:
                    t.requires_grad_(True)
            else:
                t = value.detach().to(device=device, copy=True)
            memo[id(value)] = t
        out[name] = memo[id(value)]
    return out


def unique_grad_inputs(family: Family, inputs: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    seen: dict[int, str] = {}
    for name in family.grad_inputs:
        t = inputs.get(name)
        if isinstance(t, torch.Tensor) and id(t) not in seen:
            seen[id(t)] = name
    return {name: inputs[name] for name in seen.values()}
