"""Runs, verdicts and the pairwise check.

Verdicts, for one tensor of two variants run on the same ported weights and inputs:
- identical:  bitwise equal (NaN where the other has NaN);
- equivalent: |a - b| <= max(atol, K * noise) + rtol * |b| elementwise, where (rtol, atol)
  are torch.testing.assert_close's defaults for the dtype (the floor) and ``noise`` is
  the rounding error measured, not guessed: the larger of each variant's own max error
  against the same variant run in float64 on the same weights and inputs;
- different:  otherwise (or NaN in one and not in the other);
- error:      a variant raised while running.

Each variant is measured against its own float64 run, not the family reference's: a
variant that computes something else (an unbiased std, say) would otherwise count its
semantic difference as "noise" and hide it. The measured error of a variant against the
family's reference is the max_abs of that pair.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Mapping

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .config import Config
from .errors import ConfigError, HarnessError, InputError
from .families import Family, get_family
from .porting import Zero, zero_unrepresented
from .registry import Variant, variants_of
from .seeding import build

# torch.testing.assert_close's default (rtol, atol) per dtype (its documentation's table).
DEFAULT_TOLERANCE = {
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
}
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
) -> Run:
    """Build, port, run forward (and backward) once; every tensor returned in float64."""
    family = get_family(variant.family)
    run = Run()
    try:
        module, portmap = build(variant, cfg, dtype=dtype, device=device, weights=weights64)
        inputs = cast_inputs(inputs64, dtype, device, family.grad_inputs if backward else ())
        recorder = OpRecorder()
        with recorder:
            out = variant.call(module, inputs)
        run.path = recorder.path()
    except HarnessError:
        raise
    except Exception as exc:  # a variant that fails on this case/dtype is a finding
        run.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return run
    if not isinstance(out, torch.Tensor):
        raise InputError(f"{variant.key}: adapter returned {type(out).__name__}, not a tensor")
    run.tensors["output"] = out.detach().to("cpu", torch.float64 if out.is_floating_point() else out.dtype)
    if backward and family.differentiable and out.requires_grad:
        (out * cotangent(out.shape, cfg.seed).to(out.device, out.dtype)).sum().backward()
        for name, t in unique_grad_inputs(family, inputs).items():
            if t.grad is not None:
                run.tensors[f"grad:{name}"] = t.grad.detach().to("cpu", torch.float64)
        if portmap is not None:
            for name in portmap.entries:
                g = portmap.read(name, grad=True)
                if g is not None:
                    run.tensors[f"grad:{name}"] = g.detach().to("cpu", torch.float64)
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


def expectation(family: Family, a: Variant, b: Variant, case: str, dtype: torch.dtype) -> tuple[str, str]:
    """The declared expectation for a pair: ('equivalent'|'different'|'error', reason)."""
    overflow = [r for r in (fill_overflow(a, dtype), fill_overflow(b, dtype)) if r]
    if overflow:
        return "error", "; ".join(overflow)
    reasons = []
    for trait in family.semantic_for(case):
        va, vb = a.traits.get(trait), b.traits.get(trait)
        if va != vb:
            reasons.append(f"{trait}: {va} vs {vb}")
    return ("different", "; ".join(reasons)) if reasons else ("equivalent", "")


def matches(verdict: str, expected: str) -> bool:
    if expected == "equivalent":
        return verdict in ("identical", "equivalent")
    return verdict == expected


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


def _pair_components(ra: Run, rb: Run, ra64: Run, rb64: Run, dtype) -> dict[str, TensorVerdict]:
    out = {}
    for name in ra.tensors:
        if name in rb.tensors:
            out[name] = compare_tensors(
                ra.tensors[name], rb.tensors[name],
                ra64.tensors.get(name), rb64.tensors.get(name), dtype,
            )
    return out


class Checker:
    """Compares every pair of a family's variants on every case; caches runs."""

    def __init__(self, cfg: Config, device: str = "cpu"):
        self.cfg = cfg
        self.device = device
        self._runs: dict[tuple, Run] = {}
        self._inputs: dict[tuple, dict] = {}
        self._weights: dict[str, dict] = {}

    def inputs(self, family: Family, case: str) -> dict:
        key = (family.name, case)
        if key not in self._inputs:
            self._inputs[key] = family.inputs(case, self.cfg)
        return self._inputs[key]

    def weights(self, family: Family, zero: frozenset[str]) -> dict[str, torch.Tensor]:
        if family.name not in self._weights:
            self._weights[family.name] = family.canonical_weights(self.cfg)
        return zero_unrepresented(self._weights[family.name], zero)

    def zero_names(self, variant: Variant) -> frozenset[str]:
        return frozenset(n for n, e in variant.map_for(self.cfg).items() if isinstance(e, Zero))

    def run(self, variant: Variant, case: str, zero: frozenset[str], dtype: torch.dtype,
            device: str | None = None, mode: str = "autograd") -> Run:
        device = device or self.device
        key = (variant.key, case, zero, dtype, device, mode)
        if key not in self._runs:
            family = get_family(variant.family)
            args = (variant, self.cfg, self.inputs(family, case), self.weights(family, zero), dtype, device)
            self._runs[key] = inference_run(*args) if mode == "inference" else run_variant(*args)
        return self._runs[key]

    def compare(self, a: Variant, b: Variant, case: str, dtype_name: str) -> PairResult | None:
        """Compare one pair on one case; None when the case does not apply to both."""
        family = get_family(a.family)
        if not (applicable(a, case) and applicable(b, case)):
            return None
        for v in (a, b):
            reason = v.supports(self.cfg)
            if reason:
                raise ConfigError(f"{v.key} cannot be built for this config: {reason}")
        dtype = dtype_of(dtype_name)
        zero = self.zero_names(a) | self.zero_names(b)
        ra, rb = self.run(a, case, zero, dtype), self.run(b, case, zero, dtype)
        expected, reason = expectation(family, a, b, case, dtype)
        base = dict(family=family.name, a=a.id, b=b.id, case=case, dtype=dtype_name,
                    device=self.device, expected=expected, reason=reason,
                    path_a=ra.path or "-", path_b=rb.path or "-")
        if ra.error or rb.error:
            note = "; ".join(f"{v.id}: {r.error}" for v, r in ((a, ra), (b, rb)) if r.error)
            return PairResult(**base, verdict="error", ok=expected == "error",
                              max_abs=math.nan, max_rel=math.nan, noise_ratio=math.nan,
                              grad_verdict="error", grad_max_abs=math.nan,
                              grad_noise_ratio=math.nan, worst_grad="", note=note)
        ra64 = self.run(a, case, zero, torch.float64, "cpu") if dtype != torch.float64 else ra
        rb64 = self.run(b, case, zero, torch.float64, "cpu") if dtype != torch.float64 else rb
        parts = _pair_components(ra, rb, ra64, rb64, dtype)
        fwd = parts["output"]
        grads = {k: v for k, v in parts.items() if k != "output"}
        grad_verdict = worst(v.verdict for v in grads.values())
        worst_grad = max(grads, key=lambda k: (RANK[grads[k].verdict], grads[k].max_abs), default="")
        verdict = worst([fwd.verdict, grad_verdict])
        return PairResult(
            **base, verdict=verdict, ok=matches(verdict, expected),
            max_abs=fwd.max_abs, max_rel=fwd.max_rel, noise_ratio=fwd.noise_ratio,
            grad_verdict=grad_verdict,
            grad_max_abs=max((v.max_abs for v in grads.values()), default=0.0),
            grad_noise_ratio=max((v.noise_ratio for v in grads.values() if v.verdict != "identical"),
                                 default=0.0),
            worst_grad=worst_grad.removeprefix("grad:"), note=fwd.note,
        )

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


def common_cases(a: Variant, b: Variant) -> list[str]:
    return [c.name for c in get_family(a.family).cases if applicable(a, c.name) and applicable(b, c.name)]


def check_family(
    family_name: str,
    cfg: Config,
    dtypes: Iterable[str],
    device: str = "cpu",
    checker: Checker | None = None,
    on_result: Callable[[PairResult], None] | None = None,
) -> tuple[list[PairResult], list[PathResult]]:
    """Every pair of the family on every case and dtype, plus each variant's paths."""
    family = get_family(family_name)
    checker = checker or Checker(cfg, device)
    results: list[PairResult] = []
    paths: list[PathResult] = []
    usable = [v for v in variants_of(family_name) if not v.supports(cfg)]
    for dtype_name in family.dtypes or dtypes:
        for case in family.cases:
            for a, b in itertools.combinations(usable, 2):
                res = checker.compare(a, b, case.name, dtype_name)
                if res is not None:
                    results.append(res)
                    if on_result:
                        on_result(res)
            for v in usable:
                p = checker.compare_paths(v, case.name, dtype_name)
                if p is not None:
                    paths.append(p)
    return results, paths


def skipped_variants(family_name: str, cfg: Config) -> list[tuple[str, str]]:
    return [(v.id, r) for v in variants_of(family_name) if (r := v.supports(cfg))]

