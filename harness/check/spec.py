"""Every variant against its spec: the float64 oracle built from its own declared traits.

For each variant, config of the matrix, applicable case and dtype:

- **float64 decides semantics**: output and every gradient (each input the family takes
  gradients for, each canonical parameter the variant represents) against the oracle,
  within ``harness.check.precision``'s float64 bound. A gradient the variant does not produce
  (a detached output, a parameter left out of the graph) is "different", named.
- **lower dtypes decide precision**: the variant's error against the oracle, compared with
  the family reference's error in the same dtype (``harness.check.precision``).
- **gradcheck**: ``torch.autograd.gradcheck`` in float64 on a tiny config checks the
  variant's backward against its own forward (a custom ``autograd.Function`` with a wrong
  backward is caught even when nothing else shares its bug).
- **dropout**: built with dropout > 0, in eval mode the output must not change; in train
  mode the random draws per call, counted at the dispatcher, must equal the declared
  ``dropout_sites`` (a site named "... (per head)" draws once per head).

Variants with equal semantic traits form an equivalence class; the pairwise matrix is
derived from the classes (linear in the number of variants): a pair inside a class is
identical (bitwise) or equivalent; a pair across classes is different, or "not
exercised" when the two oracles agree on that case (no padded row when B = 1), or "not
resolvable" in a dtype whose rounding is larger than the difference.
"""

from __future__ import annotations

import contextlib
import math
from typing import Iterable, Mapping

import torch

from harness.base.config import Config
from harness.base.dtypes import dtype_of
from harness.base.errors import ConfigError
from harness.base.verdicts import Verdict
from harness.check import precision as P
from harness.check.results import SpecResult, TensorCheck
from harness.check.runs import (
    Run,
    RunCache,
    applicable,
    fill_overflow,
)
from harness.families.base import Family
from harness.registry import Variant, reference_of

# Dtypes where "less precise" is reported but is not a contradiction unless --strict-precision:
# CPU half-precision kernels upcast differently by design (measured: nn.TransformerEncoderLayer
# with norm_first=True has 72x the float16 gradient error of the definition evaluated in
# float16, on one config), so a 2x rule there would flag PyTorch's own modules.
LENIENT_DTYPES = ("bfloat16", "float16")


def worst_spec(verdicts: Iterable[str]) -> str:
    return Verdict.worst(verdicts, default=Verdict.EQUIVALENT)


def expected_names(family: Family, oracle: Run, checker: RunCache, variant: Variant) -> list[str]:
    """Tensors a variant must produce: the output, the family's gradient inputs, and the
    gradient of every canonical parameter it represents (not the ``Zero()`` ones)."""
    zero = {f"grad:{n}" for n in checker.fills(variant)}
    return [n for n in oracle.tensors if n not in zero]


def _float64_check(name: str, a: torch.Tensor | None, o: torch.Tensor, internal: str | None) -> TensorCheck:
    if a is None:
        return TensorCheck(name, Verdict.DIFFERENT, math.inf, None, 0.0, math.inf, f"{name} is missing")
    g = P.gap(a, o)
    if not g.comparable:
        return TensorCheck(name, Verdict.DIFFERENT, g.max_abs, None, 0.0, math.inf,
                           f"{name}: NaN in {g.nan_mismatch} element(s) where the oracle has none, or the reverse")
    allowed = P.FLOAT64_ATOL + P.FLOAT64_RTOL * g.scale
    ratio = g.max_abs / allowed
    if g.within(P.FLOAT64_ATOL):
        return TensorCheck(name, Verdict.EQUIVALENT, g.max_abs, None, allowed, ratio)
    lower = dtype_of(internal) if internal else torch.float32
    rtol, atol = P.DEFAULT_TOLERANCE[lower]
    if P.within(a, o, rtol, atol):
        why = (f"computes in {internal} internally (declared)" if internal else
               "within float32's tolerance but not float64's: part of the work runs below "
               "float64 (declare internal_dtype if it is meant to)")
        return TensorCheck(name, Verdict.LESS_PRECISE, g.max_abs, None, allowed, ratio, why)
    return TensorCheck(name, Verdict.DIFFERENT, g.max_abs, None, allowed, ratio)


def _lower_check(name: str, a: torch.Tensor | None, o: torch.Tensor, baselines: list[tuple[torch.Tensor, torch.Tensor]],
                 dtype: torch.dtype, *, factor: float, scale: float) -> TensorCheck:
    """``baselines``: (result in ``dtype``, its float64 oracle) pairs computing the same
    function as the variant: the oracle evaluated in ``dtype``, and the family reference
    when it shares the variant's semantics. The largest of their errors is the baseline."""
    if a is None:
        return TensorCheck(name, Verdict.DIFFERENT, math.inf, None, 0.0, math.inf, f"{name} is missing")
    g = P.gap(a, o)
    errs = [bg.max_abs for b, bo in baselines if (bg := P.gap(b, bo)).comparable]
    ref_err = max(errs) if errs else None
    if not g.comparable:
        return TensorCheck(name, Verdict.DIFFERENT, g.max_abs, ref_err, 0.0, math.inf,
                           f"{name}: NaN/inf pattern differs from the oracle in {g.nan_mismatch} element(s)")
    allowed = P.allowance(dtype, ref_err, max(g.scale, scale), factor)
    ratio = P.ratio_to_reference(g.max_abs, ref_err, dtype, max(g.scale, scale))
    verdict = Verdict.EQUIVALENT if g.max_abs <= allowed else Verdict.LESS_PRECISE
    note = "" if ref_err is not None else "no reference error in this dtype: held to the ulp floor"
    return TensorCheck(name, verdict, g.max_abs, ref_err, allowed, ratio, note)


class SpecChecker:
    """Checks variants against their oracles over a config matrix; caches every run."""

    def __init__(self, configs: Mapping[str, Config], device: str = "cpu",
                 factor: float = P.PRECISION_FACTOR, strict: bool = False):
        if not configs:
            raise ConfigError("no config to check")
        self.configs = dict(configs)
        self.device = device
        self.factor = factor
        self.lenient = () if strict else LENIENT_DTYPES
        # The kernel path is recorded on the first config only (a dispatch mode costs time).
        self.checkers = {name: RunCache(cfg, device, record=i == 0)
                         for i, (name, cfg) in enumerate(self.configs.items())}
        self._specs: dict[tuple, SpecResult | None] = {}

    # -- one variant -------------------------------------------------------------------------
    def check(self, variant: Variant, config: str, case: str, dtype_name: str) -> SpecResult | None:
        """``variant`` against its oracle on one config, case and dtype; None when the case
        does not apply or the variant cannot be built for the config."""
        key = (variant.key, config, case, dtype_name)
        if key not in self._specs:
            self._specs[key] = self._check(variant, config, case, dtype_name)
        return self._specs[key]

    def _check(self, variant: Variant, config: str, case: str, dtype_name: str) -> SpecResult | None:
        checker = self.checkers[config]
        family = variant.family_spec
        if not applicable(variant, case) or variant.supports(checker.cfg):
            return None
        dtype = dtype_of(dtype_name)
        ref = reference_of(family.name)
        if ref is not None and (ref.supports(checker.cfg) or not applicable(ref, case)):
            ref = None
        zero = checker.fills(variant) | (checker.fills(ref) if ref else {})
        run = checker.run(variant, case, zero, dtype)
        oracle = checker.oracle(family, variant.traits, case, zero, dtype)
        overflow = fill_overflow(variant, dtype)
        internal = variant.traits.get("internal_dtype")
        if dtype == torch.float64:
            expected = Verdict.LESS_PRECISE if internal else Verdict.EQUIVALENT
        else:
            expected = Verdict.ERROR if overflow else Verdict.EQUIVALENT
        base = dict(family=family.name, variant=variant.id, config=config, case=case, dtype=dtype_name,
                    device=self.device, expected=expected, reference=ref.id if ref else "",
                    path=run.path or "-")
        if run.error:
            return SpecResult(**base, verdict=Verdict.ERROR, ok=expected == Verdict.ERROR, err=math.nan,
                              ref_err=math.nan, ratio=math.nan, worst="", note=run.error)
        if not family.differentiable or not run.tensors["output"].is_floating_point():
            same = torch.equal(run.tensors["output"].cpu(), oracle.tensors["output"].to(run.tensors["output"].dtype))
            verdict = Verdict.EQUIVALENT if same else Verdict.DIFFERENT
            bad = 0 if same else int((run.tensors["output"].cpu() != oracle.tensors["output"]).sum())
            return SpecResult(**{**base, "expected": Verdict.EQUIVALENT}, verdict=verdict, ok=same,
                              err=float(bad), ref_err=math.nan, ratio=math.nan, worst="output",
                              note="" if same else f"{bad} element(s) differ from the oracle")
        names = expected_names(family, oracle, checker, variant)
        checks: list[TensorCheck] = []
        if dtype == torch.float64:
            for name in names:
                checks.append(_float64_check(name, run.tensors.get(name), oracle.tensors[name], internal))
        else:
            sem64 = self.check(variant, config, case, "float64")
            baselines = [checker.oracle(family, variant.traits, case, zero, dtype, compute=dtype)]
            same_function = (ref is not None
                             and family.semantic_traits(ref.traits) == family.semantic_traits(variant.traits))
            if same_function:
                ref_run = checker.run(ref, case, zero, dtype)
                if not ref_run.error:
                    baselines.append(ref_run)
            # The ulp floor of a gradient is taken at the scale of all the gradients: one that
            # is analytically zero (k.bias; Q and K when T = 1) is rounding noise around 0
            # in every implementation, at the size of the terms that cancelled.
            grad_scale = max((float(t.abs().max()) for n, t in oracle.tensors.items()
                              if n != "output" and t.numel() and torch.isfinite(t).all()), default=0.0)
            for name in names:
                checks.append(_lower_check(
                    name, run.tensors.get(name), oracle.tensors[name],
                    [(b.tensors[name], oracle.tensors[name]) for b in baselines if name in b.tensors],
                    dtype, factor=self.factor, scale=0.0 if name == "output" else grad_scale))
            if sem64 is not None and sem64.verdict in (Verdict.DIFFERENT, Verdict.ERROR):
                checks = [TensorCheck(c.name, Verdict.DIFFERENT if c.verdict != Verdict.EQUIVALENT
                                      or sem64.verdict == Verdict.DIFFERENT else c.verdict,
                                      c.err, c.ref_err, c.allowed, c.ratio,
                                      "semantics already differ in float64") for c in checks]
        verdict = worst_spec(c.verdict for c in checks)
        bad = max(checks, key=lambda c: (c.verdict.rank, c.ratio))
        notes = [c.note for c in checks if c.verdict != Verdict.EQUIVALENT and c.note]
        if run.note:
            notes.insert(0, run.note)
        if verdict == Verdict.EQUIVALENT and overflow:
            notes.insert(0, f"expected an error: {overflow}")
        ok = (verdict == expected or (expected == Verdict.LESS_PRECISE and verdict == Verdict.EQUIVALENT)
              or (verdict == Verdict.LESS_PRECISE and expected == Verdict.EQUIVALENT and dtype_name in self.lenient))
        return SpecResult(**base, verdict=verdict, ok=ok, err=bad.err,
                          ref_err=math.nan if bad.ref_err is None else bad.ref_err, ratio=bad.ratio,
                          worst=bad.name, note="; ".join(dict.fromkeys(notes)), tensors=checks)

    def check_specs(self, variant: Variant, dtypes: Iterable[str]) -> list[SpecResult]:
        family = variant.family_spec
        out = []
        with one_thread():
            self._check_all(variant, family, dtypes, out)
        return out

    def _check_all(self, variant, family, dtypes, out) -> None:
        configs = family.configs_of(self.configs)
        for dtype_name in family.dtypes or ["float64", *[d for d in dtypes if d != "float64"]]:
            for config in configs:
                for case in family.cases:
                    result = self.check(variant, config, case.name, dtype_name)
                    if result is not None:
                        out.append(result)

    # -- classes and pairs -------------------------------------------------------------------------


@contextlib.contextmanager
def one_thread():
    """The check's tensors are tiny: one intra-op thread is faster, and on a loaded machine
    several threads spin against each other (measured: 5x slower at load 9 on 2 cores)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
