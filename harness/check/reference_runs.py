"""One side of a judged pair (the reference or the candidate: an ``nn.Module`` class, a module,
or a function) built and called on one regime's inputs in one dtype, forward and backward;
every tensor returned in float64 on the CPU under its name (``output``, ``output[1]``,
``grad:x``, ``grad:proj.weight``). ``call`` is the one place the user's forward runs."""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch
from torch import nn

from harness.base.boundary import describe, user_code
from harness.base.hack_guard import guarded_call
from harness.base.hacks import HackFinding
from harness.base.seeding import seed_everything
from harness.check.reference_inputs import map_tensors
from harness.check.reference_layouts import Layout, strided, views_into_one_buffer
from harness.check.reference_weights import WeightLink
from harness.check.runs import changed_inputs, snapshot


def _dt(d: torch.dtype) -> str:
    return str(d).replace("torch.", "")


@dataclass
class Built:
    """A side ready to call: ``fn`` (the module itself, or the function) and its module."""

    fn: Callable
    module: nn.Module | None


def is_module_class(what: Any) -> bool:
    return isinstance(what, type) and issubclass(what, nn.Module)


def build(what: Any, init: tuple, dtype: torch.dtype, seed: int, who: str, device: str = "cpu") -> Built:
    """``what`` made ready in ``dtype``: a class built on ``init`` after ``seed`` (KernelBench
    seeds before each construction), a module copied, a function as it is."""
    if is_module_class(what) or (isinstance(what, type) and callable(what)):
        seed_everything(seed)
        with user_code("build", who=who):
            made = what(*init)
    elif isinstance(what, nn.Module):
        made = copy.deepcopy(what)
    elif callable(what):
        return Built(what, None)
    else:
        raise TypeError(f"the {who} is a {type(what).__name__}: give an nn.Module class, a module or a function")
    if isinstance(made, nn.Module):
        made.to(device=device, dtype=dtype)
        return Built(made, made)
    return Built(made, None)


def input_names(fn: Callable, inputs: Any) -> list[str]:
    """A name per input: the keyword, or the forward's parameter name, or ``input[i]``."""
    if isinstance(inputs, Mapping):
        return [str(k) for k in inputs]
    target = fn.forward if isinstance(fn, nn.Module) else fn
    try:
        params = [p.name for p in inspect.signature(target).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    return [params[i] if i < len(params) else f"input[{i}]" for i in range(len(inputs))]


def flatten(out: Any, name: str = "output") -> dict[str, Any]:
    """Every tensor of an output, by name: ``output``; ``output[0]``...; ``output[key]``."""
    if isinstance(out, torch.Tensor):
        return {name: out}
    if isinstance(out, (list, tuple)):
        items: dict[str, Any] = {}
        for i, v in enumerate(out):
            items.update(flatten(v, f"{name}[{i}]"))
        return items
    if isinstance(out, Mapping):
        items = {}
        for k, v in out.items():
            items.update(flatten(v, f"{name}[{k}]"))
        return items
    return {name: out}


def call(fn: Callable, inputs: Any, who: str) -> Any:
    """The one call into a side's forward (``run`` wraps it in ``guarded_call`` where asked)."""
    with user_code("call", who=who):
        return fn(**inputs) if isinstance(inputs, Mapping) else fn(*inputs)


@dataclass
class SideRun:
    """A side's run: ``tensors`` in float64 on the CPU; ``dtypes`` each output's dtype as
    returned; ``error`` one line where it raised; ``detached``: its output carried no gradient;
    ``changed``: inputs it changed in place; ``aliased``: an output shares an input's storage;
    ``kept``: its outputs as returned (detached), held so no later allocation can reuse their
    memory; ``hacks``: what ``guarded_call`` found, where the run was guarded."""

    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    dtypes: dict[str, torch.dtype] = field(default_factory=dict)
    error: str = ""
    detached: bool = False
    changed: list[str] = field(default_factory=list)
    aliased: bool = False
    kept: list[torch.Tensor] = field(default_factory=list)
    hacks: list[HackFinding] = field(default_factory=list)


@dataclass(frozen=True)
class Guard:
    """A candidate's call watched by ``guarded_call``: ``like``, the reference's outputs (alive);
    ``allow_views``: the reference's output is a view of an input too."""

    like: tuple[torch.Tensor, ...] = ()
    allow_views: bool = False


def _guarded(fn: Callable, prepared: Any, who: str, guard: Guard) -> tuple[Any, list[HackFinding]]:
    if isinstance(prepared, Mapping):
        return guarded_call(lambda **kw: call(fn, kw, who), (), prepared, like=guard.like,
                            allow_views=guard.allow_views)
    return guarded_call(lambda *a: call(fn, list(a), who), list(prepared), like=guard.like,
                        allow_views=guard.allow_views)


def _storages(values: list[Any]) -> set[int]:
    out = set()
    for v in values:
        if isinstance(v, torch.Tensor) and v.device.type != "meta":
            try:
                out.add(v.untyped_storage().data_ptr())
            except (RuntimeError, NotImplementedError):
                pass
    return out - {0}


def prepare(inputs: Any, dtype: torch.dtype, device: str, grad: bool,
            layout: Layout = Layout.GIVEN) -> tuple[Any, dict[str, Any]]:
    """``inputs`` cast to ``dtype`` on ``device`` (floating tensors; others copied); the tensors
    whose ``.grad`` is read, by position; laid out as ``layout`` says (``Layout.VIEWS``: views
    into one buffer, each keeping its gradient)."""
    leaves: dict[int, torch.Tensor] = {}

    def one(x: torch.Tensor) -> torch.Tensor:
        if x.is_floating_point():
            t = x.detach().to(device=device, dtype=dtype, copy=True)
            if grad and layout != Layout.VIEWS:
                t.requires_grad_(True)
            leaves[id(x)] = t
        else:
            t = x.detach().to(device=device, copy=True)
        return strided(t) if layout == Layout.STRIDED else t

    prepared = map_tensors(inputs, one)
    if layout == Layout.VIEWS:
        views = views_into_one_buffer(list(prepared.values()) if isinstance(prepared, Mapping) else prepared, grad)
        prepared = map_tensors(prepared, lambda t: views[id(t)])
        leaves = {k: views[id(t)] for k, t in leaves.items()}
    originals = list(inputs.values()) if isinstance(inputs, Mapping) else list(inputs)
    return prepared, {str(i): leaves[id(v)] for i, v in enumerate(originals)
                      if isinstance(v, torch.Tensor) and id(v) in leaves}


def cotangents(shapes: Mapping[str, tuple[int, ...]], seed: int) -> dict[str, torch.Tensor]:
    """One seeded cotangent per output, drawn in float32 (exact in float64 and float32)."""
    gen = torch.Generator().manual_seed(seed + 7)
    return {n: torch.randn(s, generator=gen, dtype=torch.float32).to(torch.float64) for n, s in shapes.items()}


def _f64(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu", torch.float64) if t.is_floating_point() else t.detach().cpu()


def run(side: Built, inputs: Any, dtype: torch.dtype, *, who: str, device: str = "cpu", grad: bool = True,
        layout: Layout = Layout.GIVEN, train: bool = False, names: list[str] | None = None,
        link: WeightLink | None = None, ref_params: tuple[str, ...] = (), cotangent_seed: int = 0,
        call_seed: int = 0, as_given: bool = False, guard: Guard | None = None) -> SideRun:
    """``side`` called once on ``inputs`` in ``dtype``; with ``grad``, backward against a
    cotangent seeded by ``cotangent_seed`` (``cotangents``) and every gradient read: the inputs'
    (``names``), the parameters' (the reference's own, ``ref_params``; the candidate's through
    ``link``, by the reference's names).
    ``as_given``: ``inputs`` are already prepared (the same tensor objects reach the call);
    ``guard``: the call runs under ``guarded_call`` (its findings in ``hacks``)."""
    result = SideRun()
    module = side.module
    if module is not None:
        module.train(train)
        module.zero_grad(set_to_none=True)
    prepared, leaves = (inputs, {}) if as_given else prepare(inputs, dtype, device, grad, layout)
    values = list(prepared.values()) if isinstance(prepared, Mapping) else list(prepared)
    labels = names or [f"input[{i}]" for i in range(len(values))]
    snap = snapshot({labels[i] if i < len(labels) else str(i): v for i, v in enumerate(values)})
    seed_everything(call_seed)
    try:
        with torch.enable_grad() if grad else torch.no_grad():
            if guard is None:
                out = call(side.fn, prepared, who)
            else:
                out, result.hacks = _guarded(side.fn, prepared, who, guard)
    except Exception as exc:  # the side's failure is its row: UserCodeError and anything else
        result.error = describe(exc)
        return result
    result.changed = changed_inputs(snap)
    outs = flatten(out)
    result.aliased = bool(_storages(list(outs.values())) & _storages(values))
    result.kept = [t.detach() for t in outs.values() if isinstance(t, torch.Tensor)]
    for n, t in outs.items():
        if not isinstance(t, torch.Tensor):
            result.error = f"{n} is a {type(t).__name__}, not a tensor"
            return result
        result.tensors[n], result.dtypes[n] = _f64(t), t.dtype
    if grad:
        shapes = {n: tuple(t.shape) for n, t in outs.items() if t.is_floating_point()}
        _backward(result, outs, leaves, names or [], module, link, ref_params, cotangents(shapes, cotangent_seed), who)
    return result


def _backward(result: SideRun, outs: dict[str, torch.Tensor], leaves: dict[str, torch.Tensor], names: list[str],
              module: nn.Module | None, link: WeightLink | None, ref_params: tuple[str, ...],
              cotangent: Mapping[str, torch.Tensor], who: str) -> None:
    terms = [(t * cotangent[n].to(t.device, t.dtype)).sum() for n, t in outs.items()
             if n in cotangent and t.is_floating_point() and t.requires_grad and tuple(t.shape) == cotangent[n].shape]
    if not terms:
        result.detached = any(t.is_floating_point() for t in outs.values())
        return
    try:
        with user_code("backward", who=who):
            torch.stack(terms).sum().backward()
    except Exception as exc:
        result.error = f"backward: {describe(exc)}"
        return
    for i, leaf in leaves.items():
        if leaf.grad is not None:
            result.tensors[f"grad:{names[int(i)]}"] = _f64(leaf.grad)
    if module is None:
        return
    if link is not None:
        grads = link.grads(module)
    else:
        params = dict(module.named_parameters())
        grads = {n: params[n].grad for n in ref_params if n in params}
    for n, g in grads.items():
        if g is not None:
            result.tensors[f"grad:{n}"] = _f64(g)


def dtype_name(d: torch.dtype) -> str:
    return _dt(d)


def redraw_weights(ref: dict[torch.dtype, Built], seed: int) -> None:
    """Every floating parameter of the reference moved by a seeded draw at its own spread (0.5
    where it has none: a gain of ones, a bias of zeros), the same values in every dtype."""
    gen = torch.Generator().manual_seed(seed)
    modules = {d: b.module for d, b in ref.items() if b.module is not None}
    if torch.float64 not in modules:
        return
    with torch.no_grad():
        for name, p in modules[torch.float64].named_parameters():
            if not p.is_floating_point() or not p.numel():
                continue
            spread = float(p.std()) if p.numel() > 1 and float(p.std()) > 0 else 0.5
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32).to(torch.float64) * spread
            new = (p.detach().cpu() + noise).to(torch.float32)  # representable in float32
            for m in modules.values():
                dict(m.named_parameters())[name].copy_(new)
