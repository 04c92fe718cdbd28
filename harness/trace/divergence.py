"""Tracing two variants side by side: the rows of unit values, where they first diverge,
and which element of which row."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import torch
from torch import nn
from torch.utils._python_dispatch import _disable_current_modes

from harness.base.boundary import describe
from harness.base.config import Config
from harness.base.errors import HarnessError
from harness.base.failures import harness_traceback
from harness.base.verdicts import Verdict
from harness.check.mismatch import mismatch
from harness.check.precision import DEFAULT_TOLERANCE
from harness.check.runs import OpRecorder, backward_grads, cast_inputs
from harness.check.tensors import NOISE_MULTIPLE, compare_tensors
from harness.families.base import Family
from harness.porting.portmap import PortMap
from harness.registry import Variant, build
from harness.trace.diff_result import DivergenceKind, FirstDivergence, TraceRow, Where
from harness.trace.recording import (
    Observed,
    ParamOps,
    Trace,
    _clone,
    _dispatch_projection,
    _entry_paths,
    _first_tensor,
    _members,
    _projection_of,
    canonical_units,
    owner_module,
)


class _UnitHooks:
    """Forward hooks on the canonical sub-modules: each unit's first input and output
    recorded (``units``), and replaced where ``patch`` says (``unit`` for the output,
    ``unit:in`` for the input)."""

    def __init__(self, owners: Mapping[str, str | None], patch: Mapping[str, torch.Tensor], counter: list[int]):
        self.owners, self.patch, self.counter = owners, patch, counter
        self.units: dict[str, Observed] = {}

    def pre_hook(self, unit):
        def hook(mod, args, kwargs):
            self.counter[0] += 1
            obs = self.units.get(unit)
            if obs is None:
                obs = self.units[unit] = Observed(unit, self.counter[0], f"module {self.owners[unit]}", hooked=True)
                obs.inp = _clone(_first_tensor((args, kwargs)))
            obs.calls += 1
            key = f"{unit}:in"
            if key in self.patch and obs.calls == 1 and args and isinstance(args[0], torch.Tensor):
                with _disable_current_modes():
                    new = self.patch[key].to(args[0].dtype).to(args[0].device).reshape(args[0].shape)
                return (new, *args[1:]), kwargs
            return None
        return hook

    def post_hook(self, unit):
        def hook(mod, args, kwargs, out):
            obs = self.units[unit]
            if obs.calls == 1:
                obs.out = _clone(_first_tensor(out))
                first = _first_tensor(out)
                if unit in self.patch and first is not None:
                    with _disable_current_modes():
                        new = self.patch[unit].to(first.dtype).to(first.device).reshape(first.shape)
                    if isinstance(out, torch.Tensor):
                        return new
                    if isinstance(out, tuple) and out[0] is first:
                        return (new, *out[1:])
            return None
        return hook

    def install(self, modules: Mapping[str, nn.Module], observe: bool) -> list:
        handles = []
        for unit, owner in self.owners.items():
            if owner and owner in modules and (observe or unit in self.patch or f"{unit}:in" in self.patch):
                m = modules[owner]
                handles.append(m.register_forward_pre_hook(self.pre_hook(unit), with_kwargs=True))
                handles.append(m.register_forward_hook(self.post_hook(unit), with_kwargs=True))
        return handles


def _units_from_dispatch(units: dict[str, Observed], owners: Mapping[str, str | None], portmap: PortMap,
                         mode: ParamOps, inputs: Mapping[str, Any], *, out, others: Mapping[str, Observed] | None,
                         last_index: int) -> None:
    """The projections no hook saw (a fused path with no sub-module): their values read from
    the dispatched ops that used their parameters."""
    batch = _batch_of(inputs)
    final = _first_tensor(out)
    for unit in owners:
        if _projection_of(unit) is None:
            continue
        obs = units.get(unit)
        other = others.get(unit) if others else None
        first = min((u.index for u in mode.uses
                     if any(p in _member_paths(portmap, unit) for p, *_ in u.uses)), default=last_index)
        order = None
        if obs is None or obs.out is None:
            like = other.out if other else None
            if _projection_of(unit) == "o":  # o's output is its attention's output
                parent = units.get(unit.rsplit(".", 1)[0]) if "." in unit else None
                like = parent.out if parent is not None else (_clone(final) if "." not in unit else like)
            t, how, order = _dispatch_projection(unit, portmap, mode.uses, batch, False, other=like)
            if t is not None:
                obs = units.setdefault(unit, Observed(unit, first, how))
                obs.out = t
        if _projection_of(unit) == "o" and (obs is None or obs.inp is None):
            t, how, _ = _dispatch_projection(unit, portmap, mode.uses, batch, True,
                                             other=other.inp if other else None, order=order)
            if t is not None:
                if obs is None:
                    obs = units[unit] = Observed(unit, first, how)
                obs.inp = t


def trace_variant(
    variant: Variant, cfg: Config, inputs64: Mapping[str, Any], weights64: Mapping[str, torch.Tensor],
    dtype: torch.dtype, *, device: str = "cpu", patch: Mapping[str, torch.Tensor] | None = None,
    backward: bool = True, others: Mapping[str, Observed] | None = None, observe: bool = True,
) -> Trace:
    """Run once with hooks on every canonical sub-module; ``patch`` replaces the output
    (or, for ``unit:in``, the input) of those sub-modules with the given tensors."""
    family = variant.family_spec
    try:
        module, portmap = build(variant, cfg, dtype=dtype, device=device, weights=weights64)
    except HarnessError:
        raise
    except Exception as exc:  # the variant's constructor failing is a finding: its error, traced no further
        return Trace(variant.id, {}, None, {}, [], "-", f"building it: {describe(exc)}",
                     traceback=harness_traceback(exc))
    inputs = cast_inputs(inputs64, dtype, device, family.grad_inputs if backward else ())
    counter = [0]
    owners = {u: owner_module(portmap, u) for u in canonical_units(family, cfg, variant.traits)} if portmap else {}
    hooks = _UnitHooks(owners, dict(patch or {}), counter)
    handles = hooks.install(dict(module.named_modules()) if isinstance(module, nn.Module) else {}, observe)
    mode = ParamOps(dict(portmap.params) if portmap else {}, counter)
    error, failed = None, None
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
        error, failed = describe(exc), harness_traceback(exc)
    finally:
        for h in handles:
            h.remove()
    units = hooks.units
    if portmap is not None and error is None and observe:
        _units_from_dispatch(units, owners, portmap, mode, inputs, out=out, others=others, last_index=counter[0])
    _label_sources(units, inputs)
    tensors: dict[str, torch.Tensor] = {}
    if isinstance(out, torch.Tensor):
        out = family.specified(inputs, out)
        tensors["output"] = out.detach().to("cpu", torch.float64 if out.is_floating_point() else out.dtype)
        if backward and family.differentiable and out.requires_grad:
            tensors.update(backward_grads(family, cfg, out, inputs, portmap))
    elif error is None:
        error = f"adapter returned {type(out).__name__}, not a tensor"
    rec = OpRecorder()
    rec.ops = mode.ops
    return Trace(variant.id, units, tensors.get("output"), tensors, mode.ops, rec.path(), error, traceback=failed)


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
        if obs.inp is None or not obs.hooked:
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

def agrees(verdict: Verdict | str | None) -> bool:
    """Whether a row's verdict agrees; "-" (one side unobserved) and None never do."""
    return verdict not in (None, "-") and Verdict(verdict).agrees


def _verdict(a, b, a64, b64, dtype):
    if a is None or b is None:
        return None
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    a64 = None if a64 is None else a64.detach().double().cpu()
    b64 = None if b64 is None else b64.detach().double().cpu()
    return compare_tensors(a, b, a64, b64, dtype)


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
    rows: list[TraceRow] = []
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
    first = next((i for i, r in enumerate(rows) if r.verdict != "-" and not agrees(r.verdict)), None)
    return mark_first(rows, first)


def mark_first(rows: list[TraceRow], first: int | None) -> list[TraceRow]:
    """``rows`` with row ``first`` (None: none) marked as the first divergence."""
    return [dataclasses.replace(r, first=i == first) for i, r in enumerate(rows)]


def locate(rows: list[TraceRow]) -> FirstDivergence | None:
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
        guess = ("(the inputs' roles swapped: in the module, or in its parameter map?)"
                 if sa.startswith("input ") and sb.startswith("input ") else "(a norm placed before vs after?)")
        return FirstDivergence(where, label, DivergenceKind.WIRING,
                               f"{where}: wiring differs at {first.unit}: A feeds it {sa}, B feeds it {sb} {guess}")
    if first.what == "in":
        parent = first.unit.rsplit(".", 1)[0] if "." in first.unit else ""
        inside = [r for r in rows[:index] if r.what == "out" and _projection_of(r.unit) in ("q", "k", "v")
                  and (r.unit.rsplit(".", 1)[0] if "." in r.unit else "") == parent]
        agreeing = [r.unit.rsplit(".", 1)[-1] for r in inside if agrees(r.verdict)]
        where = parent or "the attention"
        said = (f"{', '.join(agreeing)} agree, " if agreeing else "")
        return FirstDivergence(first.unit + ":in", label, DivergenceKind.COMPUTATION,
                               f"inside {where}: {said}the output before the output projection differs "
                               f"(scores, mask fill or softmax; max_abs {first.max_abs:.3g})")
    if agrees(first.input_verdict):
        return FirstDivergence(first.unit, label, DivergenceKind.COMPUTATION,
                               f"{label}: same input, different result (max_abs {first.max_abs:.3g})")
    if first.input_verdict == "-":
        return FirstDivergence(first.unit, label, DivergenceKind.UNKNOWN,
                               f"{label} differs (max_abs {first.max_abs:.3g}); its input is not observed on "
                               "both sides")
    before = [r.unit for r in rows[:index] if agrees(r.verdict) and r.what == "out"]
    step = f"the step between {before[-1]} (agrees) and {first.unit}" if before else f"a step before {first.unit}"
    return FirstDivergence(first.unit, label, DivergenceKind.INHERITED,
                           f"{label}: its input already differs: {step} (an activation, a residual, a mask, "
                           f"an unmapped op; max_abs {first.max_abs:.3g})")


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


def where_differs(family: Family, inputs, name, a, b, *, a64, b64, dtype) -> Where:
    """Where ``a`` and ``b`` differ, on the one comparison core (``check.mismatch``) under
    the pair's bound (the dtype's rtol, atol raised to the float64 noise multiple): how many
    elements mismatch, the worst one, and per kind of row how many mismatch in it."""
    tv = compare_tensors(a, b, a64, b64, dtype)
    if a.shape != b.shape:
        return Where(name, tv.verdict, tv.max_abs, a.numel(), a.numel(), (), math.nan, math.nan, tv.note, {})
    if not (a.is_floating_point() and b.is_floating_point()):  # masks, tokens: compared as numbers
        a, b = a.to(torch.float64), b.to(torch.float64)
    rtol, atol = DEFAULT_TOLERANCE[dtype]
    m = mismatch(a, b, rtol=rtol, atol=max(atol, NOISE_MULTIPLE * tv.noise))
    bad, index = m.mask, m.worst_index
    kinds: dict[str, int] = {}
    if a.dim() == 3:  # (batch, position, feature): count by the kind of row
        for b_, pos in bad.any(-1).nonzero().tolist():
            k = row_kind(family, inputs, name, (b_, pos, 0))
            kinds[k] = kinds.get(k, 0) + int(bad[b_, pos].sum())
    return Where(name, tv.verdict, tv.max_abs, int(bad.sum()), a.numel(), index,
                 float(a[index]) if a.numel() else math.nan,
                 float(b[index]) if b.numel() else math.nan,
                 row_kind(family, inputs, name, index), kinds)
