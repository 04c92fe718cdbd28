"""Runs: a variant built, ported and run forward and backward on one case, config and
dtype (every tensor returned in float64), the oracle's run on the same weights and inputs,
and the caches that keep a whole check linear in the number of variants.

The verdicts are made elsewhere, in readable pieces: ``harness.oracles`` (the spec each
variant is held to, built from its traits), ``harness.precision`` (how close, per dtype),
``harness.spec`` (each variant against its spec, gradcheck, dropout, the equivalence
classes and the pair matrix derived from them).

``compare_tensors`` compares two runs of one variant (autograd path against the no_grad
fast path) with a tolerance from each run's own float64 error.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .config import Config
from .errors import HarnessError, InputError
from .families import Family, get_family
from .porting import Fills, absent_fills, zero_unrepresented
from .precision import DEFAULT_TOLERANCE
from .registry import Variant, variants_of
from .seeding import build

# "A small multiple" of the measured rounding error. Measured on the default config in
# float32: equivalent pairs reach noise ratios of at most 1.8 (forward and gradients);
# the smallest semantic difference, LayerNorm eps 1e-5 vs 1e-6, reaches over 1100.
NOISE_MULTIPLE = 8.0
RANK = {"identical": 0, "equivalent": 1, "different": 2, "error": 3}
DTYPES = {
    "float16": torch.float16, "bfloat16": torch.bfloat16,
    "float32": torch.float32, "float64": torch.float64, "bool": torch.bool,
}
CPU_DTYPES = ("float32", "float64")
CUDA_DTYPES = ("float32", "bfloat16", "float16")

# Operators that tell which kernel path a torch module took.
PATH_MARKERS = (
    "_native_multi_head_attention",
    "_transformer_encoder_layer_fwd",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_attention_math",
    "_masked_softmax",
)


def dtype_of(name: str) -> torch.dtype:
    from .errors import UnknownName

    if name not in DTYPES:
        raise UnknownName(f"unknown dtype '{name}'; dtypes: {sorted(DTYPES)}")
    return DTYPES[name]


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
    family = get_family(variant.family)
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
            (out * cotangent(out.shape, cfg.seed).to(out.device, out.dtype)).sum().backward()
        except HarnessError:
            raise
        except Exception as exc:  # a backward that fails (not implemented on this device) is a finding
            run.error = f"backward: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            return run
        for name, t in unique_grad_inputs(family, inputs).items():
            if t.grad is not None:
                run.tensors[f"grad:{name}"] = t.grad.detach().to("cpu", torch.float64)
        if portmap is not None:
            for name in portmap.entries:
                g = portmap.read(name, grad=True)
                if g is not None:
                    run.tensors[f"grad:{name}"] = g.detach().to("cpu", torch.float64)
    return run


def oracle_run(family: Family, traits: Mapping[str, Any], cfg: Config, inputs64: Mapping[str, Any],
               weights64: Mapping[str, torch.Tensor], dtype: torch.dtype,
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

@dataclass
class TensorVerdict:
    verdict: str
    max_abs: float
    max_rel: float
    noise: float
    noise_ratio: float
    note: str = ""


def _max(t: torch.Tensor) -> float:
    return float(t.max()) if t.numel() else 0.0


def compare_tensors(
    a: torch.Tensor,
    b: torch.Tensor,
    a64: torch.Tensor | None,
    b64: torch.Tensor | None,
    dtype: torch.dtype,
) -> TensorVerdict:
    """Verdict on two results; ``a64``/``b64`` are the same variants run in float64."""
    if a.shape != b.shape:
        return TensorVerdict("different", math.inf, math.inf, 0.0, math.inf,
                             f"shapes {tuple(a.shape)} vs {tuple(b.shape)}")
    if not a.is_floating_point():
        same = torch.equal(a, b)
        mismatches = int((a != b).sum())
        return TensorVerdict("identical" if same else "different", float(mismatches), 0.0, 0.0,
                             0.0, "" if same else f"{mismatches} elements differ")
    nan_a, nan_b = a.isnan(), b.isnan()
    if not torch.equal(nan_a, nan_b):
        return TensorVerdict("different", math.inf, math.inf, 0.0, math.inf,
                             f"NaN in {int(nan_a.sum())} vs {int(nan_b.sum())} elements")
    ok = ~nan_a
    af, bf = a[ok], b[ok]
    if torch.equal(af, bf):
        return TensorVerdict("identical", 0.0, 0.0, 0.0, 0.0)
    diff = (af - bf).abs()
    max_abs = _max(diff)
    max_rel = _max(diff / bf.abs().clamp_min(torch.finfo(torch.float64).tiny))
    noise = 0.0
    for x, x64 in ((a, a64), (b, b64)):
        if x64 is not None and x64.shape == x.shape:
            both = ~x.isnan() & ~x64.isnan()
            noise = max(noise, _max((x[both] - x64[both]).abs()))
    rtol, atol = DEFAULT_TOLERANCE[dtype]
    try:
        torch.testing.assert_close(af, bf, rtol=rtol, atol=max(atol, NOISE_MULTIPLE * noise))
        verdict = "equivalent"
    except AssertionError:
        verdict = "different"
    # No higher precision to measure float64 against: its ratio is not applicable (NaN).
    ratio = max_abs / noise if noise > 0 else math.nan
    return TensorVerdict(verdict, max_abs, max_rel, noise, ratio)


def worst(verdicts: Iterable[str]) -> str:
    return max(verdicts, key=RANK.__getitem__, default="identical")


# -- expectations ------------------------------------------------------------------------------------

def fill_overflow(variant: Variant, dtype: torch.dtype) -> str | None:
    """A finite fill value the dtype cannot hold makes masked_fill raise (-1e9 in float16)."""
    fill = variant.traits.get("fill")
    if isinstance(fill, (int, float)) and math.isfinite(fill) and dtype.is_floating_point:
        if abs(fill) > torch.finfo(dtype).max:
            return f"{variant.id}: fill {fill:g} overflows {str(dtype).replace('torch.', '')}"
    return None


# -- the pairwise check ---------------------------------------------------------------------------------

@dataclass
class PairResult:
    family: str
    a: str
    b: str
    case: str
    dtype: str
    device: str
    verdict: str
    expected: str
    reason: str
    ok: bool
    max_abs: float
    max_rel: float
    noise_ratio: float
    grad_verdict: str
    grad_max_abs: float
    grad_noise_ratio: float
    worst_grad: str
    path_a: str
    path_b: str
    note: str = ""
    config: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class PathResult:
    """Per variant and case: the autograd path against the no_grad (inference) path."""

    family: str
    variant: str
    case: str
    dtype: str
    device: str
    path_autograd: str
    path_inference: str
    verdict: str
    max_abs: float

    def as_dict(self) -> dict:
        return asdict(self)


class Checker:
    """Compares every pair of a family's variants on every case; caches runs."""

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

    def zero_names(self, variant: Variant) -> Fills:
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
                                         self.weights(family, zero), dtype, compute)
        return self._runs[key]

    def run(self, variant: Variant, case: str, zero: Fills, dtype: torch.dtype,
            device: str | None = None, mode: str = "autograd") -> Run:
        device = device or self.device
        key = (variant.key, case, zero, dtype, device, mode)
        if key not in self._runs:
            family = get_family(variant.family)
            args = (variant, self.cfg, self.inputs(family, case), self.weights(family, zero), dtype, device)
            self._runs[key] = (inference_run(*args) if mode == "inference"
                               else run_variant(*args, record=self.record))
        return self._runs[key]

    def compare_paths(self, variant: Variant, case: str, dtype_name: str) -> PathResult | None:
        family = get_family(variant.family)
        if not family.differentiable or not applicable(variant, case) or variant.supports(self.cfg):
            return None
        dtype = dtype_of(dtype_name)
        zero = self.zero_names(variant)
        grad_run = self.run(variant, case, zero, dtype)
        inf_run = self.run(variant, case, zero, dtype, mode="inference")
        if grad_run.error or inf_run.error:
            verdict, max_abs = "error", math.nan
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


def skipped_variants(family_name: str, cfg: Config) -> list[tuple[str, str]]:
    return [(v.id, r) for v in variants_of(family_name) if (r := v.supports(cfg))]


def check_variant(variant: Variant, configs: Mapping[str, Config] | None = None,
                  dtypes: Iterable[str] = ("float32",), device: str = "cpu") -> list:
    """One variant against its spec over the config matrix (float64 for semantics, ``dtypes``
    for precision), plus gradcheck and the dropout checks. Returns every result; each has
    ``.ok``. (``harness.spec.check_all`` does whole families and the pair matrix.)"""
    from .config import CONFIG_MATRIX
    from .spec import check_all

    report = check_all([variant.family], configs or CONFIG_MATRIX, device, list(dtypes),
                       variants=[variant.key])
    return [*report.specs, *report.gradchecks, *report.dropouts]

