"""What one instrumented call tells besides time: the kernel path (profiler), FLOPs executed
and dense, the tensor peak and the bytes saved for backward."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import warnings
from dataclasses import dataclass
from typing import Callable, Iterable

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode

from harness.base.kernels import PATH_OPS
from harness.bench.flops import FlopCount
from harness.bench.measured import FlopBasis
from harness.bench.timing import LiveStorages, _storage_key, tensor_peak


@contextlib.contextmanager
def _quiet_stderr():
    """The profiler's C++ side prints a start and a stop line on fd 2: not for the user."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def kernel_path(fn: Callable[[], object]) -> list[dict]:
    """The path-telling operators of one call, in order, nested ones included, with their
    input shapes and scalar arguments (``is_causal`` of a flash kernel)."""
    return instrumented(fn, "cpu").ops


@functools.cache
def _causal_and_mask_index(name: str) -> tuple[int, int | None] | None:
    """Where a fused attention forward takes ``is_causal`` and its mask (``attn_mask`` /
    ``attn_bias``), from the operator's schema; None for other operators."""
    if "attention" not in name or "backward" in name:
        return None
    op = getattr(torch.ops.aten, name.removeprefix("aten::"), None)
    if op is None:
        return None
    names = [a.name for a in op.default._schema.arguments]
    if "is_causal" not in names:
        return None
    mask = next((i for i, n in enumerate(names) if n in ("attn_mask", "attn_bias")), None)
    return names.index("is_causal"), mask


def _path_ops(events) -> list[dict]:
    seen: dict[tuple, dict] = {}
    for ev in events:
        if ev.name not in PATH_OPS or (ev.cpu_parent is not None and ev.cpu_parent.name == ev.name):
            continue  # a dispatch mode re-dispatches an op: the profiler sees it once per mode
        shapes = [list(s) for s in (ev.input_shapes or []) if s]
        concrete = list(getattr(ev, "concrete_inputs", None) or [])
        entry = {"op": ev.name.removeprefix("aten::"), "shapes": shapes[:2],
                 "parent": ev.cpu_parent.name.removeprefix("aten::") if ev.cpu_parent else ""}
        where = _causal_and_mask_index(ev.name)
        if where is not None:
            causal_at, mask_at = where
            value = concrete[causal_at] if len(concrete) > causal_at else None
            entry["is_causal"] = bool(value) if value not in ("", None) else None
            shapes_in = ev.input_shapes or []
            entry["mask"] = mask_at is not None and len(shapes_in) > mask_at and bool(shapes_in[mask_at])
        key = (entry["op"], str(entry["shapes"]), entry.get("is_causal"))
        seen.setdefault(key, {**entry, "count": 0})["count"] += 1
    return list(seen.values())


@dataclass
class Static:
    """What one instrumented call tells besides time."""

    ops: list[dict]
    flops: int
    flops_dense: int
    flops_basis: FlopBasis
    peak_bytes: int
    largest: tuple[int, tuple, str]
    saved_bytes: int | None


def instrumented(fn: Callable[[], object], device: str, resident: Iterable[torch.Tensor] | None = None) -> Static:
    """One call of ``fn`` under the profiler (path), the FLOP counter (executed and dense),
    the live-storage tracker (tensor peak) and, when ``resident`` is given, the saved-tensor
    hooks (bytes saved for backward): one call instead of four."""
    fc = FlopCount()
    skip = {_storage_key(t) for t in resident or ()}
    saved: dict[tuple, int] = {}

    def pack(t: torch.Tensor):
        key = _storage_key(t)
        if key not in skip and key not in saved:
            saved[key] = t.untyped_storage().nbytes()
        return t

    cuda = device.startswith("cuda")
    hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t) if resident is not None \
        else contextlib.nullcontext()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*global hooks on modules.*")
        with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            with FlopCounterMode(display=False, custom_mapping=fc.mapping()) as counter, hooks:
                if cuda:
                    peak, largest = tensor_peak(fn, device)
                else:
                    with LiveStorages() as tracker:
                        fn()
                    peak, largest = tracker.peak, tracker.largest
    executed = int(counter.get_total_flops())
    basis = FlopBasis.DENSE_EQUIVALENT if fc.dense_only else FlopBasis.EXECUTED
    return Static(_path_ops(prof.events()), executed, executed + fc.dense_extra, basis, peak, largest,
                  sum(saved.values()) if resident is not None else None)


def path_name(ops: list[dict]) -> str:
    """A short name: the fused kernels that ran, else 'explicit ops'."""
    fused = [o["op"] for o in ops if not o["op"].startswith(("_softmax", "masked_fill"))]
    names = list(dict.fromkeys(fused))
    return "+".join(names) if names else "explicit ops"


def count_flops(fn: Callable[[], object]) -> tuple[int, int]:
    """(executed, dense-equivalent) FLOPs of one call of ``fn``."""
    st = instrumented(fn, "cpu")
    return st.flops, st.flops_dense


def saved_bytes(forward: Callable[[], object], resident: Iterable[torch.Tensor]) -> int:
    """Bytes of the unique storages autograd saves for backward during ``forward()``,
    not counting storages of ``resident`` tensors (parameters, inputs)."""
    return instrumented(forward, "cpu", list(resident)).saved_bytes or 0


def peak_bytes(fn: Callable[[], object], device: str) -> int:
    """Peak bytes of one call: the live-storage tracker alone on CPU (the profiler and FLOP
    counter of ``instrumented`` give the same figure at several times the cost)."""
    return tensor_peak(fn, device)[0]
