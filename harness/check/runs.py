"""Runs: a variant built, ported and run forward and backward on one case, config and
dtype (every tensor returned in float64), the oracle's run on the same weights and inputs,
and the caches that keep a whole check linear in the number of variants.

The verdicts are made elsewhere, in readable pieces: ``harness.families.oracles`` (the spec each
variant is held to, built from its traits), ``harness.check.precision`` (how close, per dtype),
``harness.check.spec`` (each variant against its spec, gradcheck, dropout, the equivalence
classes and the pair matrix derived from them).

``compare_tensors`` compares two runs of one variant (autograd path against the no_grad
fast path) with a tolerance from each run's own float64 error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from harness.base.config import Config
from harness.base.dtypes import dtype_of
from harness.base.errors import HarnessError, InputError
from harness.base.kernels import PATH_MARKERS
from harness.base.verdicts import Verdict
from harness.check.results import PathResult
from harness.check.tensors import compare_tensors
from harness.families.base import Family
from harness.porting.portmap import Fills, PortMap, absent_fills, zero_unrepresented
from harness.registry import Variant, build


class OpRecorder(TorchDispatchMode):
    """Records the aten operators that run (to name the kernel path taken)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))

    def path(self) -> str:
        seen = []
        for op in self.ops:
            for marker in PATH_MARKERS:
                if op == marker.lstrip("_") or op == marker or op.endswith(marker):
                    if op not in seen:
                        seen.append(op)
        return "+".join(seen) if seen else "explicit ops"


# -- running one variant -------------------------------------------------------------------

@dataclass
class Run:
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)  # float64 CPU copies
    path: str = ""
    error: str | None = None
    note: str = ""  # e.g. an output that does not require grad (detached)


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


def cotangent(shape: torch.Size, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed + 2)
    return torch.randn(tuple(shape), generator=gen, dtype=torch.float64)


def backward_grads(family: Family, cfg: Config, out: torch.Tensor, inputs: Mapping[str, Any],
                   portmap: PortMap | None) -> dict[str, torch.Tensor]:
    """Backward of ``out`` against the seeded cotangent: the gradient of every grad input and
    of every mapped parameter, float64 on CPU, named ``grad:NAME`` (a variant's run and a
    trace collect the same tensors)."""
    (out * cotangent(out.shape, cfg.seed).to(out.device, out.dtype)).sum().backward()
    grads: dict[str, torch.Tensor] = {}
    for name, t in unique_grad_inputs(family, inputs).items():
        if t.grad is not None:
            grads[f"grad:{name}"] = t.grad.detach().to("cpu", torch.float64)
    if portmap is not None:
        for name in portmap.entries:
            g = portmap.read(name, grad=True)
            if g is not None:
                grads[f"grad:{name}"] = g.detach().to("cpu", torch.float64)
    return grads


def run_variant(
    variant: Variant,
    cfg: Config,
    inputs64: Mapping[str, Any],
    weights64: Mapping[str, torch.Tensor],
    dtype: torch.dtype,
    device: str = "cpu",
    *,
    backward: bool = True,
    record: bool = True,
    compile_backend: str | None = None,
) -> Run:
    """Build, port, run forward (and backward) once; every tensor returned in float64."""
    family = variant.family_spec
    run = Run()
    try:
        module, portmap = build(variant, cfg, dtype=dtype, device=device, weights=weights64)
        inputs = cast_inputs(inputs64, dtype, device, family.grad_inputs if backward else ())
        if compile_backend:  # outside any dispatch mode: Dynamo skips frames run under one
            out = variant.call(torch.compile(module, backend=compile_backend), inputs)
        elif record:  # a Python dispatch mode costs time on every op: only where the path is shown
            recorder = OpRecorder()
            with recorder:
                out = variant.call(module, inputs)
            run.path = recorder.path()
        else:
            out = variant.call(module, inputs)
    except HarnessError:
        raise
    except Exception as exc:  # a variant that fails on this case/dtype is a finding
        run.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return run
    if not isinstance(out, torch.Tensor):
        raise InputError(f"{variant.key}: adapter returned {type(out).__name__}, not a tensor")
    run.tensors["output"] = out.detach().to("cpu", torch.float64 if out.is_floating_point() else out.dtype)
    if backward and family.differentiable and not out.requires_grad:
        run.note = "the output does not require grad (detached?): no gradient reaches any input or parameter"
    if backward and family.differentiable and out.requires_grad:
        try:
            run.tensors.update(backward_grads(family, cfg, out, inputs, portmap))
        except HarnessError:
            raise
        except Exception as exc:  # a backward that fails (not implemented on this device) is a finding
            run.error = f"backward: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            return run
    return run


def oracle_run(family: Family, traits: Mapping[str, Any], cfg: Config, inputs64: Mapping[str, Any],
               weights64: Mapping[str, torch.Tensor], *, dtype: torch.dtype,
               compute: torch.dtype = torch.float64) -> Run:
    """The oracle's forward and backward on CPU in ``compute`` (float64 for the spec); every
    tensor returned in float64, named like a variant's run."""
    run = Run(path="oracle")
    weights = {n: t.detach().to(compute).clone().requires_grad_(family.differentiable)
               for n, t in weights64.items()}
    inputs = cast_inputs(inputs64, compute, "cpu", family.grad_inputs)
    out = family.oracle(traits, cfg, weights, inputs, dtype)
    as64 = lambda t: t.detach().to(torch.float64) if t.is_floating_point() else t.detach()  # noqa: E731
    run.tensors["output"] = as64(out)
    if family.differentiable and out.requires_grad:
        (out * cotangent(out.shape, cfg.seed).to(out.dtype)).sum().backward()
        for name, t in unique_grad_inputs(family, inputs).items():
            if t.grad is not None:
                run.tensors[f"grad:{name}"] = as64(t.grad)
        for name, w in weights.items():
            run.tensors[f"grad:{name}"] = as64(w.grad if w.grad is not None else torch.zeros_like(w))
    return run


def inference_run(variant: Variant, cfg: Config, inputs64, weights64, dtype, device="cpu") -> Run:
    """Forward only, under torch.no_grad() in eval mode: where torch's fused fast paths run."""
    with torch.no_grad():
        return run_variant(variant, cfg, inputs64, weights64, dtype, device, backward=False)


# -- comparing tensors ---------------------------------------------------------------------------


def fill_overflow(variant: Variant, dtype: torch.dtype) -> str | None:
    """A finite fill value the dtype cannot hold makes masked_fill raise (-1e9 in float16)."""
    fill = variant.traits.get("fill")
    if isinstance(fill, (int, float)) and math.isfinite(fill) and dtype.is_floating_point:
        if abs(fill) > torch.finfo(dtype).max:
            return f"{variant.id}: fill {fill:g} overflows {str(dtype).replace('torch.', '')}"
    return None


# -- the pairwise check ---------------------------------------------------------------------------------


class RunCache:
    """The runs of one config on one device, cached: each case's inputs, the canonical
    weights, and each (variant, case, fills, dtype, mode) run. The spec, pair and trace
    checks read their runs from here; it compares nothing itself."""

    def __init__(self, cfg: Config, device: str = "cpu", record: bool = True):
        self.cfg = cfg
        self.device = device
        self.record = record  # record the kernel path of each run (costs time per op)
        self._runs: dict[tuple, Run] = {}
        self._inputs: dict[tuple, dict] = {}
        self._weights: dict[str, dict] = {}

    def inputs(self, family: Family, case: str) -> dict:
        key = (family.name, case)
        if key not in self._inputs:
            self._inputs[key] = family.inputs(case, self.cfg)
        return self._inputs[key]

    def weights(self, family: Family, zero: Fills) -> dict[str, torch.Tensor]:
        if family.name not in self._weights:
            self._weights[family.name] = family.canonical_weights(self.cfg)
        return zero_unrepresented(self._weights[family.name], zero)

    def fills(self, variant: Variant) -> Fills:
        """The canonical parameters ``variant`` does not have, each with the value it reads as
        (zero for a missing bias, one for a missing norm's weight)."""
        return absent_fills(variant.map_for(self.cfg))

    def oracle(self, family: Family, traits: Mapping[str, Any], case: str, zero: Fills,
               dtype: torch.dtype, compute: torch.dtype = torch.float64) -> Run:
        """The family's oracle built from ``traits``, on the same weights and inputs as the
        variants' runs; ``dtype`` is the dtype of the run it is compared with, ``compute``
        the dtype it computes in (float64: the spec; ``dtype``: the definition's own
        rounding in that dtype, the precision baseline)."""
        semantic = family.semantic_traits(traits)
        key = ("oracle", family.name, tuple(sorted(semantic.items(), key=lambda kv: kv[0])), case, zero,
               dtype, compute)
        if key not in self._runs:
            self._runs[key] = oracle_run(family, semantic, self.cfg, self.inputs(family, case),
                                         self.weights(family, zero), dtype=dtype, compute=compute)
        return self._runs[key]

    def run(self, variant: Variant, case: str, zero: Fills, dtype: torch.dtype,
            device: str | None = None, mode: str = "autograd") -> Run:
        device = device or self.device
        key = (variant.key, case, zero, dtype, device, mode)
        if key not in self._runs:
            family = variant.family_spec
            args = (variant, self.cfg, self.inputs(family, case), self.weights(family, zero), dtype, device)
            self._runs[key] = (inference_run(*args) if mode == "inference"
                               else run_variant(*args, record=self.record))
        return self._runs[key]

    def compare_paths(self, variant: Variant, case: str, dtype_name: str) -> PathResult | None:
        family = variant.family_spec
        if not family.differentiable or not applicable(variant, case) or variant.supports(self.cfg):
            return None
        dtype = dtype_of(dtype_name)
        zero = self.fills(variant)
        grad_run = self.run(variant, case, zero, dtype)
        inf_run = self.run(variant, case, zero, dtype, mode="inference")
        if grad_run.error or inf_run.error:
            verdict, max_abs = Verdict.ERROR, math.nan
        else:
            f64 = self.run(variant, case, zero, torch.float64, "cpu")
            tv = compare_tensors(grad_run.tensors["output"], inf_run.tensors["output"],
                                 f64.tensors.get("output"), f64.tensors.get("output"), dtype)
            verdict, max_abs = tv.verdict, tv.max_abs
        return PathResult(family.name, variant.id, case, dtype_name, self.device,
                          grad_run.path or "-", inf_run.path or "-", verdict, max_abs)


def applicable(variant: Variant, case: str) -> bool:
    """Whether a family case applies to a variant (``traits["cases"]`` limits it)."""
    cases = variant.traits.get("cases")
    return cases is None or case in cases
