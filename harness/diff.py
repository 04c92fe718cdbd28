"""Where two variants part ways, why, and what it costs: ``python -m harness diff``.

For one pair of a family, on one case and dtype:

- **traits** side by side, the differing ones marked (semantic ones decide verdicts);
- a **divergence trace** over the family's canonical sub-modules (the prefixes of its
  canonical parameters: ``self_attn``, ``self_attn.q``, ``ffn``, ``norm1``, ...), in
  execution order. A sub-module is observed with hooks on the module that owns exactly
  its mapped parameters; where no module does (a fused ``in_proj_weight``, a projection
  applied with ``F.linear`` inside ``nn.MultiheadAttention``), a ``TorchDispatchMode``
  records the aten ops that consume the canonical parameter's storage and the
  projection is read off their output (the rows of a fused weight become columns of
  its output). Inside attention the canonical intermediates are the projected q, k, v
  and the input of the output projection (``o:in``, the attention output before it);
- **attribution**: the first diverging sub-module's output in A is fed into B (a
  forward hook replaces B's) and B runs on; if B's output then agrees with A's, the
  whole difference comes from there, otherwise the next divergence is added;
- the aten ops each variant ran (``OpRecorder``), aligned side by side, and the kernel
  path taken with and without autograd;
- **where**: for the output and every gradient, the mismatch count, the worst element's
  index (batch, position, feature) and the kind of row it falls in (padded key, fully
  masked row, ...);
- **layout hints**: if transposing a square mapped weight, or reordering the chunks of
  a fused projection, makes the pair equivalent, the hint says so.

``first_divergence(family, a, b, case, cfg, dtype)`` gives the short form (a text of a
few lines and its data) that ``check`` and a failing equivalence test can print.
"""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from .compare import (
    DEFAULT_TOLERANCE, NOISE_MULTIPLE, OpRecorder, cast_inputs, compare_tensors, cotangent,
    dtype_of, unique_grad_inputs,
)
from .config import Config
from .errors import ConfigError, HarnessError
from .families import Family, get_family
from .porting import Absent, Chunk, Concat, Param, PortMap, Tied, Transposed, absent_fills, entry_code, zero_unrepresented
from .registry import Variant, get_variant
from .seeding import build

RANK = {"identical": 0, "equivalent": 1, "different": 2, "error": 3}
AGREE = ("identical", "equivalent")
PROJECTIONS = ("q", "k", "v", "o")


# -- the canonical sub-modules ---------------------------------------------------------------

def canonical_units(family: Family, cfg: Config) -> list[str]:
    """Every proper prefix of the canonical parameter names: ``self_attn``,
    ``self_attn.q``, ``ffn.w1``, ``norm1`` (the whole module is the output itself)."""
    units: list[str] = []
    for name in family.canonical_shapes(cfg):
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
    if isinstance(entry, Transposed):
        return _entry_paths(entry.inner)
    if isinstance(entry, Chunk):
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
    how: str                       # "module <path>" or "dispatcher: <op>"
    out: torch.Tensor | None = None
    inp: torch.Tensor | None = None
    source: str = ""               # what its input was: "input 'x'", "output of norm1", "computed"
    calls: int = 0


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
                         want_input: bool, other: torch.Tensor | None, order: str | None = None):
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


def trace_variant(
    variant: Variant, cfg: Config, inputs64: Mapping[str, Any], weights64: Mapping[str, torch.Tensor],
    dtype: torch.dtype, *, device: str = "cpu", patch: Mapping[str, torch.Tensor] | None = None,
    backward: bool = True, others: Mapping[str, Observed] | None = None, observe: bool = True,
) -> Trace:
    """Run once with hooks on every canonical sub-module; ``patch`` replaces the output
    (or, for ``unit:in``, the input) of those sub-modules with the given tensors."""
    family = get_family(variant.family)
    module, portmap = build(variant, cfg, dtype=dtype, device=device, weights=weights64)
    inputs = cast_inputs(inputs64, dtype, device, family.grad_inputs if backward else ())
    counter = [0]
    units: dict[str, Observed] = {}
    handles = []
    owners = {u: owner_module(portmap, u) for u in canonical_units(family, cfg)} if portmap else {}
    modules = dict(module.named_modules()) if isinstance(module, nn.Module) else {}
    patch = dict(patch or {})

    def pre_hook(unit):
        def hook(mod, args, kwargs):
            counter[0] += 1
            obs = units.get(unit)
            if obs is None:
                obs = units[unit] = Observed(unit, counter[0], f"module {owners[unit]}")
                obs.inp = _clone(_first_tensor((args, kwargs)))
            obs.calls += 1
            key = f"{unit}:in"
            if key in patch and obs.calls == 1 and args and isinstance(args[0], torch.Tensor):
                with _disable_current_modes():
                    new = patch[key].to(args[0].dtype).to(args[0].device).reshape(args[0].shape)
                return (new, *args[1:]), kwargs
            return None
        return hook

    def post_hook(unit):
        def hook(mod, args, kwargs, out):
            obs = units[unit]
            if obs.calls == 1:
                obs.out = _clone(_first_tensor(out))
                first = _first_tensor(out)
                if unit in patch and first is not None:
                    with _disable_current_modes():
                        new = patch[unit].to(first.dtype).to(first.device).reshape(first.shape)
                    if isinstance(out, torch.Tensor):
                        return new
                    if isinstance(out, tuple) and out[0] is first:
                        return (new, *out[1:])
            return None
        return hook

    for unit, owner in owners.items():
        if owner and owner in modules and (observe or unit in patch or f"{unit}:in" in patch):
            m = modules[owner]
            handles.append(m.register_forward_pre_hook(pre_hook(unit), with_kwargs=True))
            handles.append(m.register_forward_hook(post_hook(unit), with_kwargs=True))
    params = dict(portmap.params) if portmap else {}
    mode = ParamOps(params, counter)
    error = None
    out = None
    try:
        if observe:
            with mode:
                out = variant.call(module, inputs)
        else:
            out = variant.call(module, inputs)
    except HarnessError:
        raise
    except Exception as exc:  # a variant failing on this case is a finding
        error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    finally:
        for h in handles:
            h.remove()
    batch = _batch_of(inputs)
    if portmap is not None and error is None and observe:
        final = _first_tensor(out)
        for unit in owners:
            if _projection_of(unit) is None:
                continue
            obs = units.get(unit)
            other = others.get(unit) if others else None
            first = min((u.index for u in mode.uses
                         if any(p in _member_paths(portmap, unit) for p, *_ in u.uses)), default=counter[0])
            order = None
            if obs is None or obs.out is None:
                like = other.out if other else None
                if _projection_of(unit) == "o":  # o's output is its attention's output
                    parent = units.get(unit.rsplit(".", 1)[0]) if "." in unit else None
                    like = parent.out if parent is not None else (_clone(final) if "." not in unit else like)
                t, how, order = _dispatch_projection(unit, portmap, mode.uses, batch, False, like)
                if t is not None:
                    obs = units.setdefault(unit, Observed(unit, first, how))
                    obs.out = t
            if _projection_of(unit) == "o" and (obs is None or obs.inp is None):
                t, how, _ = _dispatch_projection(unit, portmap, mode.uses, batch, True,
                                                 other.inp if other else None, order)
                if t is not None:
                    if obs is None:
                        obs = units[unit] = Observed(unit, first, how)
                    obs.inp = t
    _label_sources(units, inputs)
    tensors: dict[str, torch.Tensor] = {}
    if isinstance(out, torch.Tensor):
        tensors["output"] = out.detach().to("cpu", torch.float64 if out.is_floating_point() else out.dtype)
        if backward and family.differentiable and out.requires_grad:
            (out * cotangent(out.shape, cfg.seed).to(out.device, out.dtype)).sum().backward()
            for name, t in unique_grad_inputs(family, inputs).items():
                if t.grad is not None:
                    tensors[f"grad:{name}"] = t.grad.detach().to("cpu", torch.float64)
            if portmap is not None:
                for name in portmap.entries:
                    g = portmap.read(name, grad=True)
                    if g is not None:
                        tensors[f"grad:{name}"] = g.detach().to("cpu", torch.float64)
    elif error is None:
        error = f"adapter returned {type(out).__name__}, not a tensor"
    rec = OpRecorder()
    rec.ops = mode.ops
    return Trace(variant.id, units, tensors.get("output"), tensors, mode.ops, rec.path(), error)


def _member_paths(portmap: PortMap, unit: str) -> set[str]:
    return {p for n in _members(unit, portmap.entries) for p, _ in _entry_paths(portmap.entries[n])}


def _batch_of(inputs: Mapping[str, Any]) -> int:
    for v in inputs.values():
        if isinstance(v, torch.Tensor) and v.dim() >= 2:
            return v.shape[0]
    return 1


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise the same tensor, NaN where the other has NaN."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if not a.is_floating_point():
        return torch.equal(a, b)
    return bool(((a == b) | (a.isnan() & b.isnan())).all())


def _label_sources(units: dict[str, Observed], inputs: Mapping[str, Any]) -> None:
    """Name what each sub-module was fed: a family input, or another sub-module's output."""
    ordered = sorted(units.values(), key=lambda o: o.order)
    for obs in ordered:
        if obs.inp is None or not obs.how.startswith("module"):
            continue
        obs.source = "computed"
        for name, value in inputs.items():
            if isinstance(value, torch.Tensor) and _same(value.detach(), obs.inp):
                obs.source = f"input '{name}'"
                break
        else:
            for prev in ordered:
                if prev is obs or prev.out is None or obs.unit.startswith(prev.unit + "."):
                    continue
                if _same(prev.out, obs.inp):
                    obs.source = f"output of {prev.unit}"
                    break


# -- comparing traces -------------------------------------------------------------------------------

def _verdict(a, b, a64, b64, dtype):
    if a is None or b is None:
        return None
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    a64 = None if a64 is None else a64.detach().double().cpu()
    b64 = None if b64 is None else b64.detach().double().cpu()
    return compare_tensors(a, b, a64, b64, dtype)


@dataclass
class TraceRow:
    unit: str
    what: str            # "out" or "in" (o:in, the attention output before the output projection)
    how_a: str
    how_b: str
    source_a: str
    source_b: str
    verdict: str         # of this intermediate, A against B ("-" where one side is unobserved)
    max_abs: float
    input_verdict: str   # of the sub-module's input (where both inputs were observed)
    first: bool = False


def _row_label(unit: str, what: str) -> str:
    proj = _projection_of(unit)
    if what == "in":
        return f"{unit}:in (attention output before the output projection)"
    if proj in ("q", "k", "v"):
        return f"{unit} (projected {dict(q='query', k='key', v='value')[proj]})"
    return unit


def trace_rows(ta: Trace, tb: Trace, ta64: Trace, tb64: Trace, dtype: torch.dtype) -> list[TraceRow]:
    order = sorted(ta.units.values(), key=lambda o: o.order)
    names = [o.unit for o in order] + [u for u in sorted(tb.units, key=lambda u: tb.units[u].order)
                                       if u not in ta.units]
    rows = []
    for unit in names:
        oa, ob = ta.units.get(unit), tb.units.get(unit)
        a64, b64 = ta64.units.get(unit), tb64.units.get(unit)
        parts = (["in"] if _projection_of(unit) == "o" else []) + ["out"]
        for what in parts:
            pick = (lambda o: None if o is None else (o.inp if what == "in" else o.out))  # noqa: E731
            tv = _verdict(pick(oa), pick(ob), pick(a64), pick(b64), dtype)
            iv = None
            if what == "out" and oa is not None and ob is not None:
                iv = _verdict(oa.inp, ob.inp, a64.inp if a64 else None, b64.inp if b64 else None, dtype)
            rows.append(TraceRow(
                unit, what, oa.how if oa else "not observed", ob.how if ob else "not observed",
                oa.source if oa else "", ob.source if ob else "",
                tv.verdict if tv else "-", tv.max_abs if tv else math.nan, iv.verdict if iv else "-",
            ))
    for row in rows:
        if row.verdict not in AGREE and row.verdict != "-":
            row.first = True
            break
    return rows


def locate(rows: list[TraceRow]) -> dict | None:
    """The first divergence: where, and of what kind (wiring, computation, inherited)."""
    index = next((i for i, r in enumerate(rows) if r.first), None)
    if index is None:
        return None
    first = rows[index]
    label = _row_label(first.unit, first.what)
    sa, sb = first.source_a, first.source_b
    if first.what == "out" and sa and sb and sa != sb:
        named = sb if sb.startswith("output of") else sa if sa.startswith("output of") else ""
        where = named.removeprefix("output of ") or first.unit
        return {"unit": where, "row": label, "kind": "wiring",
                "text": f"{where}: wiring differs at {first.unit}: A feeds it {sa}, B feeds it {sb} "
                        "(a norm placed before vs after?)"}
    if first.what == "in":
        parent = first.unit.rsplit(".", 1)[0] if "." in first.unit else ""
        inside = [r for r in rows[:index] if r.what == "out" and _projection_of(r.unit) in ("q", "k", "v")
                  and (r.unit.rsplit(".", 1)[0] if "." in r.unit else "") == parent]
        agreeing = [r.unit.rsplit(".", 1)[-1] for r in inside if r.verdict in AGREE]
        where = parent or "the attention"
        said = (f"{', '.join(agreeing)} agree, " if agreeing else "")
        return {"unit": first.unit + ":in", "row": label, "kind": "computation",
                "text": f"inside {where}: {said}the output before the output projection differs "
                        f"(scores, mask fill or softmax; max_abs {first.max_abs:.3g})"}
    if first.input_verdict in AGREE:
        return {"unit": first.unit, "row": label, "kind": "computation",
                "text": f"{label}: same input, different result (max_abs {first.max_abs:.3g})"}
    if first.input_verdict == "-":
        return {"unit": first.unit, "row": label, "kind": "unknown",
                "text": f"{label} differs (max_abs {first.max_abs:.3g}); its input is not observed on both sides"}
    before = [r.unit for r in rows[:index] if r.verdict in AGREE and r.what == "out"]
    step = f"the step between {before[-1]} (agrees) and {first.unit}" if before else f"a step before {first.unit}"
    return {"unit": first.unit, "row": label, "kind": "inherited",
            "text": f"{label}: its input already differs: {step} (an activation, a residual, a mask, "
                    f"an unmapped op; max_abs {first.max_abs:.3g})"}


# -- where a difference lives --------------------------------------------------------------------

def row_kind(family: Family, inputs: Mapping[str, Any], tensor: str, index: tuple[int, ...]) -> str:
    """What kind of row an element falls in, from the case's masks."""
    name = tensor.removeprefix("grad:")
    if len(index) != 3:
        return "parameter" if tensor.startswith("grad:") else "element"
    b, pos = index[0], index[1]
    mask = inputs.get("mask")
    if family.name == "attention" and isinstance(mask, torch.Tensor):
        if name in ("key", "value"):
            if not bool(mask[b, :, pos].any()):
                return "padded key (no query attends to it)"
            return "key"
        seen = int(mask[b, pos].sum())
        if seen == 0:
            return "fully masked row (sees no key)"
        if seen < mask.shape[-1]:
            return f"row that sees {seen} of {mask.shape[-1]} keys"
        return "row that sees every key"
    pad = inputs.get("pad")
    if isinstance(pad, torch.Tensor):
        if family.name == "decoder_only_block" and not bool(pad[b, : pos + 1].any()):
            return "fully masked row (left padding: sees no key)"
        return "padded position" if not bool(pad[b, pos]) else "real token"
    tgt = inputs.get("tgt_mask")
    if isinstance(tgt, torch.Tensor) and name == "x":
        return "fully masked row (sees no key)" if not bool(tgt[b, pos].any()) else "target row"
    src = inputs.get("src_pad")
    if isinstance(src, torch.Tensor) and name == "memory":
        return "padded source position" if not bool(src[b, pos]) else "source position"
    return "row"


@dataclass
class Where:
    tensor: str
    verdict: str
    max_abs: float
    mismatches: int
    numel: int
    worst_index: tuple[int, ...]
    worst_a: float
    worst_b: float
    row_kind: str
    rows: dict[str, int]   # mismatching elements per kind of row


def where_differs(family: Family, inputs, name, a, b, a64, b64, dtype) -> Where | None:
    tv = compare_tensors(a, b, a64, b64, dtype)
    if a.shape != b.shape:
        return Where(name, tv.verdict, tv.max_abs, a.numel(), a.numel(), (), math.nan, math.nan, tv.note, {})
    rtol, atol = DEFAULT_TOLERANCE[dtype]
    tol = max(atol, NOISE_MULTIPLE * tv.noise) + rtol * b.abs()
    nan_a, nan_b = a.isnan(), b.isnan()
    gap = (a - b).abs()
    bad = (nan_a != nan_b) | (~nan_a & ~nan_b & (gap > tol))
    score = torch.where(nan_a != nan_b, torch.full_like(gap, math.inf), torch.nan_to_num(gap, nan=0.0))
    flat = int(score.flatten().argmax()) if score.numel() else 0
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), a.shape)) if a.numel() else ()
    kinds: dict[str, int] = {}
    if a.dim() == 3:  # (batch, position, feature): count by the kind of row
        for b_, pos in bad.any(-1).nonzero().tolist():
            k = row_kind(family, inputs, name, (b_, pos, 0))
            kinds[k] = kinds.get(k, 0) + int(bad[b_, pos].sum())
    return Where(name, tv.verdict, tv.max_abs, int(bad.sum()), a.numel(), index,
                 float(a.flatten()[flat]) if a.numel() else math.nan,
                 float(b.flatten()[flat]) if b.numel() else math.nan,
                 row_kind(family, inputs, name, index), kinds)


# -- aligned ops --------------------------------------------------------------------------------------

def align_ops(ops_a: list[str], ops_b: list[str]) -> list[tuple[str, str, str]]:
    """(tag, A's ops, B's ops) blocks: runs of equal ops collapsed to a count."""
    out = []
    matcher = difflib.SequenceMatcher(None, ops_a, ops_b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            out.append(("=", f"{i2 - i1} ops the same ({', '.join(dict.fromkeys(ops_a[i1:i2]))})", ""))
        else:
            out.append(("≠", " ".join(ops_a[i1:i2]) or "-", " ".join(ops_b[j1:j2]) or "-"))
    return out


# -- layout hints ----------------------------------------------------------------------------------------

def _square_weights(family: Family, cfg: Config) -> list[str]:
    return [n for n, s in family.canonical_shapes(cfg).items() if len(s) == 2 and s[0] == s[1]]


def _fused_groups(variant: Variant, cfg: Config) -> list[tuple[str, list[str]]]:
    """Canonical units whose weights are chunks of one parameter, by that parameter."""
    groups: dict[str, list[tuple[int, str]]] = {}
    for name, entry in variant.map_for(cfg).items():
        inner = entry.inner if isinstance(entry, Transposed) else entry
        if isinstance(inner, Chunk) and name.endswith(".weight"):
            groups.setdefault(inner.path, []).append((inner.index, name.removesuffix(".weight")))
    return [(p, [u for _, u in sorted(v)]) for p, v in groups.items() if len(v) > 1]


def _linear_owned(variant: Variant, cfg: Config, family: Family) -> bool:
    """Whether every square weight of ``variant`` lives in an ``nn.Linear`` (as its
    ``weight``, untransposed)."""
    try:
        module, portmap = build(variant, cfg, dtype=torch.float64)
    except HarnessError:
        return False
    if portmap is None:
        return False
    mods = dict(module.named_modules())
    for n in _square_weights(family, cfg):
        entry = portmap.entries.get(n)
        if isinstance(entry, Absent) or entry is None:
            continue
        if isinstance(entry, Transposed):
            return False
        for path, _ in _entry_paths(entry):
            owner, _, leaf = path.rpartition(".")
            if leaf != "weight" or not isinstance(mods.get(owner), nn.Linear):
                return False
    return True


def layout_hints(family: Family, a: Variant, b: Variant, case: str, cfg: Config,
                 weights: Mapping[str, torch.Tensor]) -> tuple[list[str], int]:
    """Hints whose fix makes the pair equivalent in float64 on ``case``; and the number of
    candidate layouts tried."""
    inputs = family.inputs(case, cfg)
    dtype = torch.float64

    def output(v, w):
        t = trace_variant(v, cfg, inputs, w, dtype, backward=False, observe=False)
        return t.output

    base = {v.id: output(v, weights) for v in (a, b)}
    tried = 0
    hints = []
    # A weight an nn.Linear owns is (out, in) by construction: suspect the other side first.
    subjects = sorted(((b, a), (a, b)), key=lambda so: _linear_owned(so[0], cfg, family))
    for subject, other in subjects:
        ref = base[other.id]
        if ref is None:
            continue

        def fixes(w) -> bool:
            nonlocal tried
            tried += 1
            try:
                got = output(subject, w)
            except HarnessError:
                return False
            return got is not None and compare_tensors(got, ref, None, None, dtype).verdict in AGREE

        square = [n for n in _square_weights(family, cfg)
                  if not isinstance(subject.map_for(cfg).get(n), Absent)]
        for n in square:
            if fixes({**weights, n: weights[n].t().contiguous()}):
                entry = subject.map_for(cfg)[n]
                fix = entry.inner if isinstance(entry, Transposed) else Transposed(entry)
                hints.append(f"{subject.id}: {n} looks transposed: a Conv1D (in, out) layout? "
                             f"map it as {entry_code(fix)}")
        if not hints and len(square) > 1:
            if fixes({**weights, **{n: weights[n].t().contiguous() for n in square}}):
                hints.append(f"{subject.id}: every square weight ({', '.join(square)}) looks transposed: "
                             "a Conv1D (in, out) layout? map them with Transposed(...)")
        for path, group in _fused_groups(subject, cfg):
            for perm in itertools.permutations(group):
                if list(perm) == group:
                    continue
                w = dict(weights)
                for slot, actual in zip(group, perm):
                    for leaf in ("weight", "bias"):
                        if f"{slot}.{leaf}" in w:
                            w[f"{slot}.{leaf}"] = weights[f"{actual}.{leaf}"]
                if fixes(w):
                    hints.append(f"{subject.id}: the chunks of {path} look like "
                                 f"({', '.join(p.rsplit('.', 1)[-1] for p in perm)}) in that order; its map "
                                 f"says ({', '.join(g.rsplit('.', 1)[-1] for g in group)})")
        if hints:
            break
    return hints, tried


# -- the whole diff ------------------------------------------------------------------------------------------

@dataclass
class Divergence:
    """The short explanation of one pair on one case: ``text`` to print, ``data`` as JSON."""

    text: str
    data: dict

    def __str__(self) -> str:
        return self.text


def _variant(family: str, v) -> Variant:
    return v if isinstance(v, Variant) else get_variant(family, v)


def _fmt(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return f"{x:.3g}" if x else "0"


def _value(x) -> str:
    """An element's value: NaN shown as NaN (in a max_abs column NaN means 'not applicable')."""
    return "NaN" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.6g}"


def diff_pair(family: str, a, b, case: str, cfg: Config, dtype: str = "float32", *,
              device: str = "cpu", hints: bool = True, attribution: bool = True) -> dict:
    """Everything ``diff`` prints, as data (see the module docstring)."""
    started = time.perf_counter()
    fam = get_family(family)
    va, vb = _variant(family, a), _variant(family, b)
    fam.case(case)
    for v in (va, vb):
        reason = v.supports(cfg)
        if reason:
            raise ConfigError(f"{v.key} cannot be built for this config: {reason}")
    dt = dtype_of(dtype)
    zero = absent_fills(va.map_for(cfg)) | absent_fills(vb.map_for(cfg))
    weights = zero_unrepresented(fam.canonical_weights(cfg), zero)
    inputs = fam.inputs(case, cfg)
    ta64 = trace_variant(va, cfg, inputs, weights, torch.float64, device="cpu")
    tb64 = trace_variant(vb, cfg, inputs, weights, torch.float64, device="cpu", others=ta64.units)
    if dt == torch.float64 and device == "cpu":
        ta, tb = ta64, tb64
    else:
        ta = trace_variant(va, cfg, inputs, weights, dt, device=device, others=ta64.units)
        tb = trace_variant(vb, cfg, inputs, weights, dt, device=device, others=ta.units)
    expected, reason = declared(fam, va, vb, case)
    out: dict[str, Any] = {
        "family": family, "a": va.id, "b": vb.id, "case": case, "dtype": dtype, "device": device,
        "expected": expected, "declared_reason": reason,
        "traits": traits_side_by_side(fam, va, vb),
        "errors": {v.id: t.error for v, t in ((va, ta), (vb, tb)) if t.error},
        "paths": {va.id: ta.path, vb.id: tb.path},
    }
    if ta.error or tb.error:
        out.update(verdict="error", trace=[], first=None, attribution=None, where=[], ops=[], hints=[])
        out["seconds"] = time.perf_counter() - started
        return out
    where = []
    for name in ta.tensors:
        if name in tb.tensors:
            w = where_differs(fam, inputs, name, ta.tensors[name], tb.tensors[name],
                              ta64.tensors.get(name), tb64.tensors.get(name), dt)
            where.append(w)
    verdict = max((w.verdict for w in where), key=RANK.__getitem__, default="identical")
    worst = max(where, key=lambda w: (RANK[w.verdict], w.max_abs if not math.isnan(w.max_abs) else -1), default=None)
    rows = trace_rows(ta, tb, ta64, tb64, dt)
    first = locate(rows)
    attrib = None
    if attribution and first is not None and where and where[0].verdict not in AGREE:
        attrib = attribute(va, vb, ta, ta64, tb, tb64, rows, cfg, inputs, weights, dt, device)
        if not attrib["patched"]:  # B has no sub-module to feed (a fused root): feed B into A
            swapped = [dataclasses.replace(r, how_a=r.how_b, how_b=r.how_a, source_a=r.source_b,
                                           source_b=r.source_a) for r in rows]
            back = attribute(vb, va, tb, tb64, ta, ta64, swapped, cfg, inputs, weights, dt, device)
            if back["patched"]:
                attrib = {**back, "reversed": True,
                          "text": back["text"].replace("A's", "B's", 1).replace("into B, B's output agrees with A's",
                                                                               "into A, A's output agrees with B's")
                          .replace("fed into B,", "fed into A,")}
    hint_list, tried = ([], 0)
    if hints and verdict not in AGREE and verdict != "error":
        hint_list, tried = layout_hints(fam, va, vb, case, cfg, weights)
    ops_inf = {}
    for v in (va, vb):
        rec = OpRecorder()
        with torch.no_grad():
            module, _ = build(v, cfg, dtype=dt, device=device, weights=weights)
            with rec:
                try:
                    v.call(module, cast_inputs(inputs, dt, device))
                except Exception:  # noqa: BLE001  (a failing no_grad path is shown as such)
                    pass
        ops_inf[v.id] = rec.path()
    out.update(
        verdict=verdict,
        worst=None if worst is None else worst.tensor,
        trace=[asdict(r) for r in rows], first=first, attribution=attrib,
        where=[asdict(w) for w in where], ops=align_ops(ta.ops, tb.ops),
        op_counts={va.id: len(ta.ops), vb.id: len(tb.ops)},
        paths_no_grad=ops_inf, hints=hint_list, hint_candidates=tried,
    )
    out["seconds"] = time.perf_counter() - started
    return out


def _noise(x: torch.Tensor | None, x64: torch.Tensor | None) -> float:
    if x is None or x64 is None or x64.shape != x.shape:
        return 0.0
    x, x64 = x.double(), x64.double()
    both = ~x.isnan() & ~x64.isnan()
    return float((x[both] - x64[both]).abs().max()) if both.any() else 0.0


def _agree(x: torch.Tensor, ref: torch.Tensor, noise: float, dtype: torch.dtype):
    """A verdict on ``x`` against ``ref`` with a noise floor measured elsewhere (a patched
    run has no float64 twin of its own)."""
    from types import SimpleNamespace

    if x.shape != ref.shape or not torch.equal(x.isnan(), ref.isnan()):
        return SimpleNamespace(verdict="different")
    ok = ~x.isnan()
    rtol, atol = DEFAULT_TOLERANCE[dtype]
    try:
        torch.testing.assert_close(x[ok], ref[ok], rtol=rtol, atol=max(atol, NOISE_MULTIPLE * noise))
        return SimpleNamespace(verdict="identical" if torch.equal(x[ok], ref[ok]) else "equivalent")
    except AssertionError:
        return SimpleNamespace(verdict="different")


def _unit_value(trace: Trace, unit: str, what: str) -> torch.Tensor | None:
    obs = trace.units.get(unit)
    return None if obs is None else (obs.inp if what == "in" else obs.out)


def _feed_point(row: TraceRow, ta: Trace, tb: Trace) -> tuple[str, torch.Tensor] | None:
    """Where in B a diverging row can be fed A's value: the row's own sub-module when B
    observes it with hooks, else its nearest ancestor that B does (an attention module
    fed A's attention output, which is its output projection's output)."""
    unit = row.unit
    ob = tb.units.get(unit)
    if ob is not None and ob.how.startswith("module"):
        value = _unit_value(ta, unit, row.what)
        return None if value is None else (f"{unit}:in" if row.what == "in" else unit, value)
    while "." in unit:
        unit = unit.rsplit(".", 1)[0]
        ob = tb.units.get(unit)
        if ob is not None and ob.how.startswith("module"):
            value = _unit_value(ta, unit, "out")
            if value is None:
                value = _unit_value(ta, f"{unit}.o", "out")
            return None if value is None else (unit, value)
    return None


def attribute(va, vb, ta, ta64, tb, tb64, rows, cfg, inputs, weights, dtype, device) -> dict:
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
            if current.get((r.unit, r.what)) in AGREE:
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
        if _agree(tp.output, ref, noise, dtype).verdict in AGREE:
            names = " + ".join(patches)
            return {"patched": list(patches), "agrees": True,
                    "text": f"with A's {names} fed into B, B's output agrees with A's: the whole "
                            f"difference comes from {'there' if len(patches) == 1 else 'those'}"}
        for r in observed:  # what still diverges once fed (noise from the runs not fed)
            got, want = _unit_value(tp, r.unit, r.what), _unit_value(ta, r.unit, r.what)
            if got is None or want is None or got.shape != want.shape:
                continue
            unit_noise = max(_noise(want, _unit_value(ta64, r.unit, r.what)),
                             _noise(_unit_value(tb, r.unit, r.what), _unit_value(tb64, r.unit, r.what)))
            current[(r.unit, r.what)] = _agree(got.double(), want.double(), unit_noise, dtype).verdict
    return {"patched": list(patches), "agrees": False,
            "text": ("no sub-module of B to feed (none observed as a module)" if not patches else
                     f"with A's {' + '.join(patches)} fed into B, the outputs still differ: the difference "
                     "is not inside the traced sub-modules alone (their order or wiring differs)")}


def declared(family: Family, a: Variant, b: Variant, case: str) -> tuple[str, str]:
    """What the pair declares on ``case``: ('equivalent', '') or ('different', the
    differing semantic traits)."""
    sa, sb = family.semantic_traits(a.traits), family.semantic_traits(b.traits)
    reasons = [f"{t}: {sa.get(t)} vs {sb.get(t)}" for t in family.semantic_for(case) if sa.get(t) != sb.get(t)]
    return ("different", "; ".join(reasons)) if reasons else ("equivalent", "")


def traits_side_by_side(family: Family, a: Variant, b: Variant) -> list[dict]:
    semantic = set(family.traits)
    keys = list(dict.fromkeys([*a.traits, *b.traits]))
    return [{"trait": k, "a": a.traits.get(k, ""), "b": b.traits.get(k, ""),
             "differs": a.traits.get(k) != b.traits.get(k), "semantic": k in semantic}
            for k in keys if k != "cases"]


def first_divergence(family: str, a, b, case: str, cfg: Config | None = None, dtype: str = "float32",
                     device: str = "cpu", *, hints: bool = True) -> Divergence:
    """The short answer to "where and why do A and B differ on this case": the first
    diverging sub-module, the attribution, the worst tensor with its index and row kind,
    and any layout hint. ``text`` is a few lines for a table cell or an assertion message;
    ``data`` is the full ``diff_pair`` result. ``a``/``b`` are ids or ``Variant``s.
    Costs a few traced runs (about 1-5 s on a 2-core CPU); ``hints=False`` skips the
    layout search."""
    cfg = cfg or Config()
    d = diff_pair(family, a, b, case, cfg, dtype, device=device, hints=hints)
    return Divergence(summary_text(d), d)


def explain_variant(family: str, variant, case: str, cfg: Config | None = None, dtype: str = "float32",
                    device: str = "cpu", *, hints: bool = True) -> Divergence | None:
    """For a variant that fails its spec: ``first_divergence`` against a registered peer
    that declares the same semantic traits (the family reference when it does, else the
    first such variant), so the trace shows where the variant leaves the function it
    declares. None when no other variant declares those traits."""
    from .compare import applicable
    from .registry import variants_of

    cfg = cfg or Config()
    fam = get_family(family)
    v = _variant(family, variant)
    mine = fam.semantic_traits(v.traits)
    peers = [p for p in variants_of(family) if p.key != v.key and not p.supports(cfg)
             and applicable(p, case) and fam.semantic_traits(p.traits) == mine]
    if not peers:
        return None
    peer = next((p for p in peers if p.reference), peers[0])
    return first_divergence(family, peer, v, case, cfg, dtype, device, hints=hints)


def explain(result, cfg: Config | None = None, *, hints: bool = True) -> Divergence:
    """``first_divergence`` for one ``PairResult`` of ``check`` (its family, pair, case,
    dtype and device)."""
    return first_divergence(result.family, result.a, result.b, result.case, cfg, result.dtype,
                            result.device, hints=hints)


def summary_text(d: dict) -> str:
    if d.get("errors"):
        return "error: " + "; ".join(f"{k}: {v}" for k, v in d["errors"].items())
    lines = []
    worst = next((w for w in d["where"] if w["tensor"] == d.get("worst")), None)
    if d["verdict"] in AGREE:
        lines.append(f"{d['a']} and {d['b']} agree on {d['case']} ({d['verdict']})")
    elif d["first"]:
        lines.append(f"first divergence: {d['first']['text']}")
    elif not d["trace"]:
        lines.append("no canonical sub-module to trace: the difference is the module's own computation")
    else:
        lines.append("every traced sub-module agrees: the difference is in ops outside them "
                     "(a residual, a norm or step the family does not map)")
    if d.get("attribution"):
        lines.append(d["attribution"]["text"])
    if worst is not None and worst["verdict"] not in AGREE:
        idx = ", ".join(map(str, worst["worst_index"]))
        lines.append(f"worst tensor {worst['tensor']}: {worst['mismatches']}/{worst['numel']} elements "
                     f"differ, worst at [{idx}] ({worst['row_kind']}): {_value(worst['worst_a'])} vs "
                     f"{_value(worst['worst_b'])}")
    lines += [f"hint: {h}" for h in d.get("hints", [])]
    return "\n".join(lines)


# -- printing -----------------------------------------------------------------------------------------------------

def render(d: dict) -> str:
    from tabulate import tabulate

    out = [f"== diff {d['family']}: {d['a']} (A) vs {d['b']} (B), case {d['case']}, {d['dtype']} on {d['device']}",
           f"verdict: {d['verdict']}; declared: {d['expected']}" + (f" ({d['declared_reason']})" if d['declared_reason'] else "")]
    out.append("\n-- traits (* differs, S semantic)")
    out.append(tabulate([[("*" if t["differs"] else "") + ("S" if t["semantic"] else ""), t["trait"], t["a"], t["b"]]
                         for t in d["traits"]], headers=["", "trait", d["a"], d["b"]], tablefmt="simple"))
    if d.get("errors"):
        out.append("\nerror: " + "; ".join(f"{k}: {v}" for k, v in d["errors"].items()))
        return "\n".join(out)
    out.append("\n-- divergence trace (A's execution order; > first divergence)")
    out.append(tabulate(
        [[">" if r["first"] else "", _row_label(r["unit"], r["what"]), r["verdict"], _fmt(r["max_abs"]),
          r["input_verdict"], r["source_a"] or "-", r["source_b"] or "-",
          r["how_a"] if r["how_a"] == r["how_b"] else f"{r['how_a']} | {r['how_b']}"]
         for r in d["trace"]],
        headers=["", "sub-module", "verdict", "max_abs", "input", "A fed from", "B fed from", "observed by"],
        tablefmt="simple"))
    if d["first"]:
        out.append(f"first divergence: {d['first']['text']}")
    if d.get("attribution"):
        out.append(f"attribution: {d['attribution']['text']}")
    out.append("\n-- where (mismatching elements, worst index (batch, position, feature), row kind)")
    out.append(tabulate(
        [[w["tensor"], w["verdict"], _fmt(w["max_abs"]), f"{w['mismatches']}/{w['numel']}",
          ", ".join(map(str, w["worst_index"])), w["row_kind"],
          "; ".join(f"{k}: {n}" for k, n in w["rows"].items())]
         for w in d["where"] if w["verdict"] not in AGREE] or [["(every tensor agrees)", "", "", "", "", "", ""]],
        headers=["tensor", "verdict", "max_abs", "mismatches", "worst at", "row kind", "mismatches by row kind"],
        tablefmt="simple"))
    if d.get("hints") or d.get("hint_candidates"):
        out.append(f"\n-- layout hints ({d['hint_candidates']} candidate layouts tried in float64)")
        out += [f"hint: {h}" for h in d["hints"]] or ["(no transposed or reordered weight makes them agree)"]
    out.append(f"\n-- aten ops, aligned ({d['a']}: {d['op_counts'][d['a']]} ops, {d['b']}: {d['op_counts'][d['b']]} ops)")
    out.append(tabulate([[tag, x, y] for tag, x, y in d["ops"]], headers=["", d["a"], d["b"]],
                        tablefmt="simple", maxcolwidths=[None, 60, 60]))
    out.append("\nkernel path: " + "; ".join(
        f"{v}: autograd {d['paths'][v]}, no_grad {d['paths_no_grad'][v]}" for v in (d["a"], d["b"])))
    out.append(f"({d['seconds']:.1f} s)")
    return "\n".join(out)


def quick_verdict(checker, a: Variant, b: Variant, case: str, dtype: torch.dtype) -> str:
    """The pair's verdict on one case: output and every gradient, each variant's own
    float64 run as its noise floor (what ``diff`` itself judges with)."""
    zero = checker.zero_names(a) | checker.zero_names(b)
    ra, rb = checker.run(a, case, zero, dtype), checker.run(b, case, zero, dtype)
    if ra.error or rb.error:
        return "error"
    ra64, rb64 = checker.run(a, case, zero, torch.float64), checker.run(b, case, zero, torch.float64)
    verdicts = [compare_tensors(ra.tensors[n], rb.tensors[n], ra64.tensors.get(n), rb64.tensors.get(n), dtype).verdict
                for n in ra.tensors if n in rb.tensors]
    return max(verdicts, key=RANK.__getitem__, default="identical")


def pick_case(family: str, a, b, cfg: Config, dtype: str) -> tuple[str, list[tuple[str, str]]]:
    """The first case on which the pair is not equivalent (else the first case), with
    every case's verdict."""
    from .compare import Checker, applicable

    fam = get_family(family)
    va, vb = _variant(family, a), _variant(family, b)
    for v in (va, vb):
        reason = v.supports(cfg)
        if reason:
            raise ConfigError(f"{v.key} cannot be built for this config: {reason}")
    checker = Checker(cfg, record=False)
    dt = dtype_of(dtype)
    verdicts = [(c.name, quick_verdict(checker, va, vb, c.name, dt)) for c in fam.cases
                if applicable(va, c.name) and applicable(vb, c.name)]
    if not verdicts:
        raise ConfigError(f"no case of {family} applies to both {va.id} and {vb.id}")
    chosen = next((c for c, v in verdicts if v not in AGREE), verdicts[0][0])
    return chosen, verdicts
