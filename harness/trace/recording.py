"""Recording a variant's canonical units: which sub-module or dispatched op produced each
unit's value (hooks where the module has one, the dispatcher where a fused path has none)."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from harness.base.config import Config
from harness.families.base import Family
from harness.porting.entries import (
    Absent,
    Chunk,
    Concat,
    Offset,
    Param,
    PerHeadChunk,
    RopePermuted,
    Tied,
    Transposed,
)
from harness.porting.portmap import PortMap

PROJECTIONS = ("q", "k", "v", "o")


# -- the canonical sub-modules ---------------------------------------------------------------

def canonical_units(family: Family, cfg: Config, traits: Mapping[str, Any] | None = None) -> list[str]:
    """Every proper prefix of the canonical parameter names (of a variant declaring
    ``traits``): ``self_attn``, ``self_attn.q``, ``ffn.w1``, ``norm1`` (the whole module is
    the output itself)."""
    units: list[str] = []
    for name in family.canonical_shapes(cfg, traits):
        parts = name.split(".")[:-1]
        for i in range(1, len(parts) + 1):
            unit = ".".join(parts[:i])
            if unit not in units:
                units.append(unit)
    return units


def _entry_paths(entry) -> list[tuple[str, bool]]:
    """(module parameter path, whole parameter?) for every region of a map entry."""
    if isinstance(entry, (Absent, Tied)):  # no module parameter of its own
        return []
    if isinstance(entry, (Transposed, RopePermuted, Offset)):
        return _entry_paths(entry.inner)
    if isinstance(entry, (Chunk, PerHeadChunk)):
        return [(entry.path, False)]
    if isinstance(entry, Concat):
        return [(p, True) for p in entry.paths]
    return [(entry.path, True)]


def _members(unit: str, names) -> list[str]:
    return [n for n in names if n.startswith(unit + ".")]


def owner_module(portmap: PortMap, unit: str) -> str | None:
    """The module that owns exactly the parameters mapped under ``unit`` (None when
    none does: the unit shares a fused parameter, or its parameters are scattered)."""
    members = set(_members(unit, portmap.entries))
    mine = {path for n in members for path, _ in _entry_paths(portmap.entries[n])}
    theirs = {path for n, e in portmap.entries.items() if n not in members for path, _ in _entry_paths(e)}
    if not mine or mine & theirs:
        return None
    prefixes = [p.rsplit(".", 1)[0] if "." in p else "" for p in mine]
    owner = prefixes[0]
    for p in prefixes[1:]:
        while owner and not (p == owner or p.startswith(owner + ".")):
            owner = owner.rsplit(".", 1)[0] if "." in owner else ""
    if not owner:
        return None  # the root owns the whole family, not one unit
    inside = {p for p in portmap.params if p.startswith(owner + ".")}
    return None if inside & theirs else owner


# -- recording a run ----------------------------------------------------------------------------

def _first_tensor(value) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)):
        for v in value:
            t = _first_tensor(v)
            if t is not None:
                return t
    if isinstance(value, dict):
        return _first_tensor(list(value.values()))
    return None


def _clone(t: torch.Tensor | None) -> torch.Tensor | None:
    """A copy taken outside any dispatch mode (so the op log shows the variant's ops only)."""
    if t is None or not isinstance(t, torch.Tensor) or t.is_nested:
        return None
    with _disable_current_modes():
        return t.detach().clone()


@dataclass
class OpUse:
    """One aten op that consumed (a view of) a mapped parameter."""

    index: int
    op: str
    uses: list[tuple[str, int, tuple, tuple]]  # (param path, offset, shape, stride) of the view
    out: torch.Tensor | None
    data: list[torch.Tensor]                   # tensor args that are not parameter views


class ParamOps(TorchDispatchMode):
    """Records the ops whose arguments are views of a module's mapped parameters, and
    every op's name (the kernel path)."""

    def __init__(self, params: Mapping[str, torch.Tensor], counter: list[int]):
        super().__init__()
        self.counter = counter
        self.by_ptr: dict[int, tuple[str, torch.Tensor]] = {}
        for path, p in params.items():
            self.by_ptr[p.untyped_storage().data_ptr()] = (path, p)
        self.uses: list[OpUse] = []
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func.overloadpacket.__name__
        self.ops.append(name)
        self.counter[0] += 1
        flat = [a for a in itertools.chain(args, kwargs.values())
                for a in (a if isinstance(a, (list, tuple)) else [a])]
        tensors = [a for a in flat if isinstance(a, torch.Tensor)]
        uses, data = [], []
        in_ptrs = set()
        for t in tensors:
            ptr = _storage_ptr(t)
            if ptr is None:
                continue
            in_ptrs.add(ptr)
            if ptr in self.by_ptr:
                path, p = self.by_ptr[ptr]
                uses.append((path, t.storage_offset() - p.storage_offset(), tuple(t.shape), tuple(t.stride())))
            else:
                data.append(t)
        first = _first_tensor(out)
        is_view = False
        if first is not None:
            ptr = _storage_ptr(first)
            is_view = ptr is None or ptr in in_ptrs  # no storage of its own: not a new value
        if uses and not is_view:
            self.uses.append(OpUse(self.counter[0], name, uses, _clone(first),
                                   [_clone(d) for d in data if d.is_floating_point()]))
        return out


def _storage_ptr(t: torch.Tensor) -> int | None:
    """The address of the storage ``t`` lives in; None where it has none to read (a wrapper
    subclass or sparse tensor raises there). Such a tensor is matched to no parameter, and an
    op output without storage is not recorded as a projection's value; the module hooks of
    ``trace_variant`` still observe the unit."""
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return None


@dataclass
class Observed:
    unit: str
    order: int
    how: str                       # "module <path>" or "dispatcher: <op>", as shown
    out: torch.Tensor | None = None
    inp: torch.Tensor | None = None
    source: str = ""               # what its input was: "input 'x'", "output of norm1", "computed"
    calls: int = 0
    hooked: bool = False           # observed by hooks on its own module (which can be fed), not at the dispatcher


@dataclass
class Trace:
    variant: str
    units: dict[str, Observed]
    output: torch.Tensor | None
    tensors: dict[str, torch.Tensor]   # output and gradients, float64 CPU copies
    ops: list[str]
    path: str
    error: str | None = None
    shapes: dict[str, tuple] = field(default_factory=dict)
    traceback: str | None = None   # where ``error`` is the harness's own failure: its whole traceback


def _projection_of(unit: str) -> str | None:
    last = unit.rsplit(".", 1)[-1]
    return last if last in PROJECTIONS else None


def _to_rows(t: torch.Tensor, batch: int, width: int, other: torch.Tensor | None,
             order: str | None = None) -> tuple[torch.Tensor | None, str]:
    """A projection's output as (B, L, width), and the row order it was stored in ("BL"
    or "LB": ``nn.MultiheadAttention`` works in (L, B, D)). A 3-D tensor tells by its
    shape; a flattened one takes ``order`` if given, else the order that matches
    ``other`` (a tensor it should equal) best."""
    if t.numel() % (batch * width):
        return None, ""
    length = t.numel() // (batch * width)
    flat = t.reshape(-1, width)
    cands = {"BL": flat.reshape(batch, length, width),
             "LB": flat.reshape(length, batch, width).transpose(0, 1)}
    if order in cands:
        return cands[order], order
    if t.dim() == 3 and batch != length:
        return (cands["BL"], "BL") if t.shape[0] == batch else (cands["LB"], "LB")
    if other is None or other.shape != cands["BL"].shape:
        return cands["BL"], "BL"

    def gap(x):
        d = (x.double() - other.double()).abs()
        return float(d[~d.isnan()].max()) if (~d.isnan()).any() else math.inf
    return min(cands.items(), key=lambda kv: gap(kv[1]))[::-1]


def _out_range(entry, params: Mapping[str, torch.Tensor]):
    """(param path, dim of output features in the stored param, start, stop) of a
    projection's weight or bias entry; None for what cannot be sliced that way."""
    transposed = isinstance(entry, Transposed)
    inner = entry.inner if transposed else entry
    if isinstance(inner, Param):
        p = params[inner.path]
        od = (1 if transposed else 0) if p.dim() == 2 else 0
        return [(inner.path, od, 0, p.shape[od])]
    if isinstance(inner, Chunk):
        p = params[inner.path]
        step = p.shape[inner.dim] // inner.chunks
        od = (1 if transposed else 0) if p.dim() == 2 else 0
        if inner.dim != od:
            return None
        return [(inner.path, od, inner.index * step, (inner.index + 1) * step)]
    if isinstance(inner, Concat):
        out = []
        for path in inner.paths:
            p = params[path]
            od = (1 if transposed else 0) if p.dim() == 2 else 0
            out.append((path, od, 0, p.shape[od]))
        return out
    return None


def _view_range(p: torch.Tensor, od: int, offset: int, shape: tuple, stride: tuple):
    """The range of output features a view of ``p`` covers, or None."""
    s = p.stride(od)
    start = (offset // s) % p.shape[od]
    width = None
    for size, st in zip(shape, stride):
        if st == s and size > 1:
            width = size
    if width is None:
        width = 1 if len(shape) else p.shape[od]
    return start, start + width


def _dispatch_projection(unit: str, portmap: PortMap, uses: list[OpUse], batch: int,
                         want_input: bool, *, other: torch.Tensor | None, order: str | None = None):
    """A projection read off the ops that consumed its parameters (fused paths)."""
    weight = portmap.entries.get(f"{unit}.weight")
    bias = portmap.entries.get(f"{unit}.bias")
    if weight is None or isinstance(weight, Absent):
        return None, "", ""
    ranges = []
    for entry in (weight, bias):
        if entry is not None and not isinstance(entry, Absent):
            r = _out_range(entry, portmap.params)
            if r is None:
                return None, "", ""
            ranges += r
    pieces, how = [], []
    w_ranges = _out_range(weight, portmap.params)
    for path, od, start, stop in w_ranges:
        related = {(path, od, start, stop)} | {
            r for r in ranges if r[0] != path and (r[3] - r[2]) == (stop - start)}
        best = None
        for use in uses:
            for upath, off, shape, stride in use.uses:
                for rp, rod, rs, re_ in related:
                    if upath != rp:
                        continue
                    p = portmap.params[rp]
                    if p.dim() == 2 and len(shape) == 1:
                        continue
                    vs, ve = _view_range(p, rod, off, shape, stride)
                    if vs <= rs and re_ <= ve and use.out is not None and use.out.shape[-1] == ve - vs:
                        if want_input:
                            if best is None and rp == path:
                                best = (use, vs, ve)
                        else:
                            best = (use, vs, ve)
        if best is None:
            return None, "", ""
        use, vs, ve = best
        if want_input:
            data = [d for d in use.data if d is not None and d.dim() >= 2]
            if not data:
                return None, "", ""
            pieces.append(data[-1])
        else:
            pieces.append(use.out[..., start - vs:stop - vs])
        how.append(use.op)
    if want_input:
        t = pieces[0]
        width = t.shape[-1]
    else:
        t = torch.cat([p.reshape(-1, p.shape[-1]) if p.dim() != 3 else p for p in pieces], dim=-1) \
            if len(pieces) > 1 else pieces[0]
        width = t.shape[-1]
    rows, order = _to_rows(t, batch, width, other, order)
    return rows, "dispatcher: " + "+".join(dict.fromkeys(how)), order
