"""Runs: a variant built, ported and run forward and backward on one case, config and
dtype (every tensor returned in float64), the oracle's run on the same weights and inputs,
and the caches that keep a whole check linear in the number of variants.

The verdicts are made elsewhere: ``harness.check.verdict`` (each variant against its spec,
from the runs ``harness.check.spec`` reads here), ``harness.check.pairs`` (the pair matrix),
``harness.check.extras`` (gradcheck, dropout, torch.compile). ``RunCache.compare_paths``
compares two runs of one variant (autograd against the no_grad fast path) with
``harness.check.tensors.compare_tensors``, a tolerance from each run's own float64 error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import torch

from harness.base.boundary import check_output, describe, user_code, variant_failure
from harness.base.config import Config
from harness.base.dtypes import dtype_of
from harness.base.errors import HarnessError, PortingError
from harness.base.failures import harness_traceback
from harness.base.verdicts import Verdict
from harness.check.call_inputs import cast_inputs, changed_inputs, snapshot, unique_grad_inputs
from harness.check.left_out import undeclared_absent
from harness.check.recorder import OpRecorder
from harness.check.results import PathResult
from harness.check.run_keys import Mode, OracleKey, RunKey, frozen_fills
from harness.check.tensors import compare_tensors
from harness.families import reach
from harness.families.base import Family
from harness.families.no_key_rows import traits_at_dtype
from harness.porting.portmap import Fills, PortMap, absent_fills, zero_unrepresented
from harness.registry import Variant, applicable, build, variant_files

# -- running one variant -------------------------------------------------------------------

@dataclass
class Run:
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)  # float64 CPU copies
    path: str = ""
    error: str | None = None
    note: str = ""  # e.g. an output that does not require grad (detached)
    changed: list[str] = field(default_factory=list)  # inputs the call changed in place, each named (or
    # the output's dtype, when it is not the call's): contradictions of any declaration
    forward_only: str = ""  # why no gradient was taken: the backward is not implemented on this device
    traceback: str | None = None  # where ``error`` is the harness's own failure: its whole traceback
    reaches: tuple = ()  # the oracle's float64 spec run: what it reached of each trait (harness.families.reach)


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


def _not_implemented(exc: BaseException) -> bool:
    """Whether ``exc`` (or what the user's code raised inside it) is a NotImplementedError."""
    return isinstance(getattr(exc, "original", None) or exc, NotImplementedError)


def _no_backward(device: str, exc: BaseException) -> str:
    exc = getattr(exc, "original", None) or exc
    first = str(exc).splitlines()[0] if str(exc) else ""
    return f"forward only: no backward on {device} (NotImplementedError: {first})"[:300]


def _forward_only(variant, cfg, inputs64, weights64, dtype, device, exc, **kw) -> Run:
    """A variant whose code has no backward on this device (flex_attention refuses inputs that
    require grad on the CPU): its forward under no_grad, judged alone, the reason kept."""
    with torch.no_grad():
        run = run_variant(variant, cfg, inputs64, weights64, dtype, device, backward=False, **kw)
    if not run.error:
        run.forward_only = _no_backward(device, exc)
    return run


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
        snap = snapshot(inputs)
        if compile_backend:  # outside any dispatch mode: Dynamo skips frames run under one
            out = variant.call(torch.compile(module, backend=compile_backend), inputs)
        elif record:  # a Python dispatch mode costs time on every op: only where the path is shown
            recorder = OpRecorder()
            with recorder:
                out = variant.call(module, inputs)
            run.path = recorder.path()
        else:
            out = variant.call(module, inputs)
    except PortingError as exc:  # this variant's weights cannot be ported: its error row, the run goes on
        run.error = f"PortingError: {exc}"
        return run
    except HarnessError:
        raise
    except Exception as exc:  # a variant that fails on this case/dtype is a finding (UserCodeError included)
        if backward and family.differentiable and _not_implemented(exc):  # no backward on this device
            return _forward_only(variant, cfg, inputs64, weights64, dtype, device, exc, record=record,
                                 compile_backend=compile_backend)
        run.error, run.traceback = describe(exc), harness_traceback(exc)
        return run
    # its answer: a tensor on the call's device, floating where the family's output has a gradient
    if problem := check_output(out, device=device, floating=family.differentiable):
        run.error = problem
        return run
    run.changed, out = changed_inputs(snap), family.specified(inputs, out)
    if out.is_floating_point() and out.dtype != dtype:  # a bfloat16 call answered in float32 (a cast dropped)
        run.changed.append(f"output returned in {str(out.dtype).replace('torch.', '')}, "
                           f"not the call's {str(dtype).replace('torch.', '')}")
    run.tensors["output"] = out.detach().to("cpu", torch.float64 if out.is_floating_point() else out.dtype)
    if backward and family.differentiable and not out.requires_grad:
        run.note = "the output does not require grad (detached?): no gradient reaches any input or parameter"
    if backward and family.differentiable and out.requires_grad:
        try:
            with user_code("backward", files=variant_files(variant), who=variant.key):
                run.tensors.update(backward_grads(family, cfg, out, inputs, portmap))
        except HarnessError:
            raise
        except Exception as exc:  # a backward that fails is a finding; none on this device: forward only
            if _not_implemented(exc):
                run.forward_only = _no_backward(device, exc)
                return run
            run.error = describe(exc, variant_files(variant))
            return run
    return run


def oracle_run(family: Family, traits: Mapping[str, Any], cfg: Config, inputs64: Mapping[str, Any],
               weights64: Mapping[str, torch.Tensor], *, dtype: torch.dtype,
               compute: torch.dtype = torch.float64, rounded: torch.dtype | None = None,
               through: torch.dtype | None = None) -> Run:
    """The oracle's forward and backward on CPU in ``compute`` (float64 for the spec); every
    tensor returned in float64, named like a variant's run. ``rounded``: the inputs, weights
    and the backward's cotangent rounded to that dtype first (what a kernel running only in
    that dtype receives), then computed in ``compute``. ``through``: the same, and the
    results rounded to that dtype too (a variant that computes in float32 inside a bfloat16
    call: its inputs and results are bfloat16's)."""
    run = Run(path="oracle")
    first = rounded or through or compute
    weights = {n: t.detach().to(first).to(compute).clone().requires_grad_(family.differentiable)
               for n, t in weights64.items()}
    inputs = cast_inputs(cast_inputs(inputs64, first, "cpu") if first != compute else inputs64, compute, "cpu",
                         family.grad_inputs)
    via = (lambda t: t.to(through)) if through is not None else (lambda t: t)  # noqa: E731
    oracle = family.oracle
    assert oracle is not None, f"family {family.name} has no oracle"  # a family whose variants are checked has one
    with reach.recording(compute == torch.float64 and first == compute and through is None) as notes:  # the spec's
        out = family.specified(inputs, oracle(traits_at_dtype(traits, dtype), cfg, weights, inputs, dtype))
    run.reaches = tuple(notes)
    as64 = lambda t: via(t.detach()).to(torch.float64) if t.is_floating_point() else t.detach()  # noqa: E731
    run.tensors["output"] = as64(out)
    if family.differentiable and out.requires_grad:
        (out * cotangent(out.shape, cfg.seed).to(first).to(out.dtype)).sum().backward()
        for name, t in unique_grad_inputs(family, inputs).items():
            if t.grad is not None:
                run.tensors[f"grad:{name}"] = as64(t.grad)
        for name, w in weights.items():
            run.tensors[f"grad:{name}"] = as64(w.grad if w.grad is not None else torch.zeros_like(w))
    return run


def inference_run(variant: Variant, cfg: Config, inputs64, weights64, dtype, device="cpu",
                  record: bool = True) -> Run:
    """Forward only, under torch.no_grad() in eval mode: where torch's fused fast paths run."""
    with torch.no_grad():
        return run_variant(variant, cfg, inputs64, weights64, dtype, device, backward=False, record=record)


# -- declared fills ---------------------------------------------------------------------------


def fill_overflow(variant: Variant, dtype: torch.dtype) -> str | None:
    """A finite fill value the dtype cannot hold makes masked_fill raise (-1e9 in float16)."""
    fill = variant.traits.get("fill")
    if isinstance(fill, (int, float)) and math.isfinite(fill) and dtype.is_floating_point:
        if abs(fill) > torch.finfo(dtype).max:
            return f"{variant.id}: fill {fill:g} overflows {str(dtype).replace('torch.', '')}"
    return None


# -- the cache of runs ---------------------------------------------------------------------------------


# The config fields a built module's shapes follow: a regime case that changes one (ALiBi's
# H = 6) is run on modules and weights built for its own config (``RunCache.of_case``).
SHAPE_FIELDS = ("d_model", "heads", "kv_heads", "head_dim", "d_ff", "vocab")


def shaped_config(family: Family, case: str, cfg: Config) -> Config:
    """The config a variant is built for on ``case``: ``cfg``, or the case's own config where
    that changes a ``SHAPE_FIELDS`` field (inputs and weights follow it)."""
    changed = family.case_config(case, cfg)
    return cfg if all(getattr(changed, f) == getattr(cfg, f) for f in SHAPE_FIELDS) else changed


class RunCache:
    """The runs of one config on one device, cached: each case's inputs, the canonical
    weights, and each (variant, case, fills, dtype, mode) run. The spec, pair and trace
    checks read their runs from here; it compares nothing itself. A regime case that
    changes the model's shape is run by the cache of its own config (``of_case``)."""

    def __init__(self, cfg: Config, device: str = "cpu", record: bool = True):
        self.cfg = cfg
        self.device = device
        self.record = record  # record the kernel path of each run (costs time per op)
        self._runs: dict[RunKey | OracleKey, Run] = {}
        self._inputs: dict[tuple, dict] = {}
        self._weights: dict[tuple, dict] = {}
        self._shaped: dict[Config, RunCache] = {}

    def of_case(self, family: Family, case: str) -> "RunCache":
        """This cache, or, for a case whose config changes a ``SHAPE_FIELDS`` field, the cache
        of that config: its modules are built, and its weights drawn, at the case's shapes."""
        cfg = shaped_config(family, case, self.cfg)
        if cfg is self.cfg:
            return self
        if cfg not in self._shaped:
            self._shaped[cfg] = RunCache(cfg, self.device, self.record)
        return self._shaped[cfg]

    def inputs(self, family: Family, case: str) -> dict:
        if (own := self.of_case(family, case)) is not self:
            return own.inputs(family, case)
        key = (family.name, case)
        if key not in self._inputs:
            self._inputs[key] = family.inputs(case, self.cfg)
        return self._inputs[key]

    def weights(self, family: Family, zero: Fills, traits: Mapping[str, Any] | None = None) -> dict[str, torch.Tensor]:
        key = (family.name, tuple(family.params_for(self.cfg, traits).items()))  # the traits' parameters
        if key not in self._weights:
            self._weights[key] = family.canonical_weights(self.cfg, traits=traits)
        return zero_unrepresented(self._weights[key], zero)

    def variant_weights(self, variant: Variant, zero: Fills) -> dict[str, torch.Tensor]:
        """The weights ported into ``variant``: ``zero`` filled, and every parameter its map
        reads as a constant at that constant (a norm gain left out undeclared included: the
        oracle keeps that one's canonical value, and the difference shows)."""
        entries = self._map(variant)
        absent = absent_fills(entries) if entries is not None else Fills()
        return self.weights(variant.family_spec, Fills(zero) | absent, variant.traits)

    def _map(self, variant: Variant):
        """The variant's map, or None where its map fails (that is its run's error row)."""
        try:
            return variant.map_for(self.cfg)
        except Exception as exc:
            if not variant_failure(exc):
                raise
            return None

    def fills(self, variant: Variant) -> Fills:
        """The canonical parameters ``variant`` does not have, each with the value it reads as
        (zero for a missing bias, one for a missing norm's weight). A norm parameter left out
        without the traits saying so is not among them: the oracle keeps its canonical value
        (``harness.check.left_out``)."""
        entries = self._map(variant)
        if entries is None:
            return Fills()
        fills = absent_fills(entries)
        undeclared = undeclared_absent(variant.family_spec, variant.traits, entries, self.cfg)
        return Fills({n: v for n, v in fills.items() if n not in undeclared}) if undeclared else fills

    def oracle(self, family: Family, traits: Mapping[str, Any], case: str, zero: Fills,
               dtype: torch.dtype, compute: torch.dtype = torch.float64, rounded: torch.dtype | None = None,
               through: torch.dtype | None = None) -> Run:
        """The family's oracle built from ``traits``, on the same weights and inputs as the
        variants' runs; ``dtype`` is the dtype of the run it is compared with, ``compute``
        the dtype it computes in (float64: the spec; ``dtype``: the definition's own
        rounding in that dtype, the precision baseline); ``rounded``: inputs rounded to that
        dtype first (the truth a kernel running only in that dtype is held to); ``through``:
        inputs and results rounded to that dtype (a declared ``internal_dtype``'s baseline)."""
        if (own := self.of_case(family, case)) is not self:
            return own.oracle(family, traits, case, zero, dtype, compute, rounded, through)
        semantic = family.semantic_traits(traits)
        key = OracleKey(family.name, tuple(sorted(semantic.items(), key=lambda kv: kv[0])), case,
                        frozen_fills(zero), dtype, compute, rounded, through)
        if key not in self._runs:
            self._runs[key] = oracle_run(family, semantic, self.cfg, self.inputs(family, case),
                                         self.weights(family, zero, traits), dtype=dtype, compute=compute,
                                         rounded=rounded, through=through)
        return self._runs[key]

    def run(self, variant: Variant, case: str, zero: Fills, dtype: torch.dtype,
            device: str | None = None, mode: Mode = Mode.AUTOGRAD) -> Run:
        if (own := self.of_case(variant.family_spec, case)) is not self:
            return own.run(variant, case, zero, dtype, device, mode)
        device = device or self.device
        key = RunKey(variant.key, case, frozen_fills(zero), dtype, device, mode)
        if key not in self._runs:
            family = variant.family_spec
            args = (variant, self.cfg, self.inputs(family, case), self.variant_weights(variant, zero), dtype, device)
            # a kernel under torch.compile is not recorded: a dispatch mode makes Dynamo run it eager
            record = self.record and not variant.traits.get("compiled")
            self._runs[key] = (inference_run(*args, record=record) if mode == Mode.INFERENCE
                               else run_variant(*args, record=record))
        return self._runs[key]

    def warmups(self) -> list[Config]:
        """The configs of the calls made before the checked one, in order: every size
        smaller (another length, batch and key length), then the same sizes on another seed
        (another padding, other values). State kept from the first call shows on the last."""
        c = self.cfg
        shorter = c.replace(batch=max(1, c.batch - 1), tgt_len=max(1, c.tgt_len - 2),
                            src_len=max(1, c.src_len - 2), seed=c.seed + 101)
        return [x for x in (shorter, c.replace(seed=c.seed + 202)) if x != c]

    def sequence(self, variant: Variant, case: str, zero: Fills) -> tuple[Run, str]:
        """One build called on ``warmups()``' inputs, then on this case's inputs (float64, no-grad
        eval, as the fresh build's inference run it is compared with), and the sequence in words."""
        family = variant.family_spec
        if (own := self.of_case(family, case)) is not self:
            return own.sequence(variant, case, zero)
        key = RunKey(variant.key, case, frozen_fills(zero), torch.float64, self.device, Mode.SEQUENCE)
        calls = [w for w in self.warmups() if not variant.refuses(w, self.device)]
        said = ", then ".join(f"B={w.batch} T={w.tgt_len} S={w.src_len} seed {w.seed}" for w in calls)
        if key not in self._runs:
            run = Run()
            try:
                with torch.no_grad():
                    module, _ = build(variant, self.cfg, dtype=torch.float64, device=self.device,
                                      weights=self.variant_weights(variant, zero))
                    for w in calls:
                        variant.call(module, cast_inputs(family.inputs(case, w), torch.float64, self.device))
                    inputs = cast_inputs(self.inputs(family, case), torch.float64, self.device)
                    out = family.specified(inputs, variant.call(module, inputs))
                run.tensors["output"] = out.detach().to("cpu", torch.float64 if out.is_floating_point() else out.dtype)
            except PortingError as exc:
                run.error = f"PortingError: {exc}"
            except HarnessError:
                raise
            except Exception as exc:  # a module that cannot be called twice is a finding
                run.error, run.traceback = describe(exc), harness_traceback(exc)
            self._runs[key] = run
        return self._runs[key], said

    def compare_paths(self, variant: Variant, case: str, dtype_name: str) -> PathResult | None:
        family = variant.family_spec
        if (own := self.of_case(family, case)) is not self:
            return own.compare_paths(variant, case, dtype_name)
        if (not family.differentiable or not applicable(variant, case)
                or variant.refuses(self.cfg, self.device, family.base_case(case)) or variant.dtype_reason(dtype_name)):
            return None
        dtype = dtype_of(dtype_name)
        zero = self.fills(variant)
        grad_run = self.run(variant, case, zero, dtype)
        inf_run = self.run(variant, case, zero, dtype, mode=Mode.INFERENCE)
        if grad_run.error or inf_run.error:
            verdict, max_abs = Verdict.ERROR, math.nan
        else:  # the rounding noise measured against its float64 run (the oracle's, for a half-only kernel)
            f64 = (self.oracle(family, variant.traits, case, zero, dtype, rounded=dtype)
                   if variant.dtype_reason("float64") else self.run(variant, case, zero, torch.float64, "cpu"))
            tv = compare_tensors(grad_run.tensors["output"], inf_run.tensors["output"],
                                 f64.tensors.get("output"), f64.tensors.get("output"), dtype)
            verdict, max_abs = tv.verdict, tv.max_abs
        return PathResult(family.name, variant.id, case, dtype_name, self.device,
                          grad_run.path or "-", inf_run.path or "-", verdict, max_abs)


