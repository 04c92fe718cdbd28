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
import dataclasses
import math
from typing import Iterable, Mapping

import torch

from harness.base.boundary import UserCodeError, describe, failure_text, variant_failure
from harness.base.config import Config
from harness.base.dtypes import dtype_of
from harness.base.errors import ConfigError, PortingError
from harness.base.verdicts import Verdict
from harness.check import precision as P
from harness.check.left_out import left_out_note, undeclared_absent
from harness.check.own_dtype import own_dtype_checks
from harness.check.results import SpecResult, TensorCheck
from harness.check.rules import HALF_DIFFERENT_FACTOR, HALF_DTYPES, _lower_check, float64_check  # noqa: F401
from harness.check.runs import (
    Run,
    RunCache,
    applicable,
    fill_overflow,
)
from harness.families.base import Family, declared_path_finding
from harness.families.catalog import FAMILIES
from harness.registry import Variant, reference_of

# Dtypes where "less precise" is reported but is not a contradiction unless --strict-precision:
# CPU half-precision kernels upcast differently by design (measured: nn.TransformerEncoderLayer
# with norm_first=True has 72x the float16 gradient error of the definition evaluated in
# float16, on one config), so a 2x rule there would flag PyTorch's own modules.
LENIENT_DTYPES = ("bfloat16", "float16")
# Cases with rows that see no key at all: PyTorch's own inference fast paths define those
# rows otherwise (nested tensors zero the padded rows, where the autograd path gives NaN or
# the mean of V), so there the no-grad eval run is compared with the autograd run (``paths``)
# but not held to the spec.
NO_KEY_CASES = ("fully_masked", "left_pad")
# Regimes outside the one the precision rule was calibrated on (unit-scale inputs, short T, S):
# activations scaled (logits in the hundreds, where the logits' own rounding dominates) or
# sequences over one 64-wide key block. There each implementation's maximum error is one
# draw of that noise: measured on PyTorch's own modules in float32 (largest-error statistic,
# before the RMS one), nn.MultiheadAttention 2.2x and an eager LLaMA attention 2.1-4.1x; with the
# RMS one, GPT-NeoX's attention on self@large still reaches 3.29x (1 of 2,384). So float32 is judged
# there as the half dtypes are: "less precise" reported, and "different" (a contradiction)
# beyond an assert_close tolerance at the tensor's scale and 10x the baseline's error; a
# NaN/inf the oracle does not have (a softmax overflowing) is "different" as everywhere.
# Precision is not semantics: that tolerance is bfloat16's in float32 (an error below ~1.6%
# of the tensor's scale is float32's rounding amplified by the regime: softmax written as
# exp(s - logsumexp(s)) has 37x the baseline's error at logits of std ~140), the dtype's own
# in a half dtype, and float32's own only under --strict-precision.
CALIBRATED_LENGTH = 64  # longest T or S inside the calibrated regime (one 64-wide key block)


def outside_calibration(cfg: Config) -> bool:
    """Whether ``cfg`` (a case's config) lies outside the precision rule's calibrated regime."""
    return cfg.scale != 1.0 or max(cfg.tgt_len, cfg.src_len) > CALIBRATED_LENGTH


# The note a spec carries when a declared per-case path finding (traits['path_findings'])
# turns its failure into a finding.
PATH_FINDING = "declared path finding"


def worst_spec(verdicts: Iterable[str]) -> str:
    return Verdict.worst(verdicts, default=Verdict.EQUIVALENT)


def expected_names(family: Family, oracle: Run, checker: RunCache, variant: Variant) -> list[str]:
    """Tensors a variant must produce: the output, the family's gradient inputs, and the
    gradient of every canonical parameter it represents (not the ``Zero()`` ones)."""
    zero = {f"grad:{n}" for n in checker.fills(variant)}
    return [n for n in oracle.tensors if n not in zero]


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
        self.strict = strict
        # The kernel path is recorded on the first config only (a dispatch mode costs time).
        self.checkers = {name: RunCache(cfg, device, record=i == 0)
                         for i, (name, cfg) in enumerate(self.configs.items())}
        for family in FAMILIES.values():  # a family's own extra configs (the attention family's GQA)
            for name, cfg in family.configs_of(self.configs).items():
                self.checkers.setdefault(name, RunCache(cfg, device, record=False))
        self._specs: dict[tuple, SpecResult | None] = {}

    # -- one variant -------------------------------------------------------------------------
    def check(self, variant: Variant, config: str, case: str, dtype_name: str) -> SpecResult | None:
        """``variant`` against its oracle on one config, case and dtype; None when the case
        does not apply or the variant cannot be built for the config."""
        key = (variant.key, config, case, dtype_name)
        if key not in self._specs:
            try:
                self._specs[key] = self._check(variant, config, case, dtype_name)
            except Exception as exc:  # this spec's error row, the run goes on
                if not variant_failure(exc):  # the user's input (a NaN, a bad config): one line, as ever
                    raise
                self._specs[key] = self._failed(variant, config, case, dtype_name, exc)
        return self._specs[key]

    def _failed(self, variant: Variant, config: str, case: str, dtype_name: str, exc: Exception) -> SpecResult:
        """The error row of a spec whose check raised outside the variant's own run (its oracle,
        its baseline, the comparison): named as the harness's failure, a contradiction."""
        ref = reference_of(variant.family)
        note = failure_text(exc) if isinstance(exc, (UserCodeError, PortingError)) else (  # a variant's code, or ours
            f"the check itself failed (the harness's error, not the variant's; please report it): {describe(exc)}")
        return SpecResult(family=variant.family, variant=variant.id, config=config, case=case, dtype=dtype_name,
                          device=self.device, verdict=Verdict.ERROR, expected=Verdict.EQUIVALENT, ok=False,
                          err=math.nan, ref_err=math.nan, ratio=math.nan, worst="", reference=ref.id if ref else "",
                          path="-", note=note[:400])

    def _check(self, variant: Variant, config: str, case: str, dtype_name: str) -> SpecResult | None:
        result = self._judge(variant, config, case, dtype_name)
        if result is None:
            return None
        checker = self.checkers[config]
        dtype, zero = dtype_of(dtype_name), self._zero(variant, case, checker)
        changed = list(checker.run(variant, case, zero, dtype).changed)
        stateful = ""
        if config == next(iter(self.checkers)) and dtype == torch.float64 and result.verdict != Verdict.ERROR:
            stateful = call_order_dependence(variant, case, zero, checker)
        if variant.family_spec.differentiable:
            inference = checker.run(variant, case, zero, dtype, mode="inference")
            changed += [c + " (no-grad eval)" for c in inference.changed]
        if not changed and not stateful:
            return result
        # inputs are read-only, and a call does not depend on the calls before it: either
        # contradicts any declaration
        note = "; ".join(dict.fromkeys([x for x in (stateful, *changed, result.note) if x]))
        if stateful and result.ok:  # the case's own run holds: the earlier calls are the difference
            result = dataclasses.replace(result, worst="output", err=math.nan, ratio=math.nan)
        return dataclasses.replace(result, verdict=worst_spec([result.verdict, Verdict.DIFFERENT]), ok=False,
                                   note=note, depends_on_earlier_calls=bool(stateful))

    def _zero(self, variant: Variant, case: str, checker: RunCache):
        ref = reference_of(variant.family)
        if ref is not None and (ref.refuses(checker.cfg, checker.device) or not applicable(ref, case)):
            ref = None
        return checker.fills(variant) | (checker.fills(ref) if ref else {})

    def _judge(self, variant: Variant, config: str, case: str, dtype_name: str) -> SpecResult | None:
        checker = self.checkers[config]
        family = variant.family_spec
        if (not applicable(variant, case) or variant.refuses(checker.cfg, checker.device)
                or variant.dtype_reason(dtype_name)):
            return None
        dtype = dtype_of(dtype_name)
        ref = reference_of(family.name)
        if ref is not None and (ref.refuses(checker.cfg, checker.device) or not applicable(ref, case)):
            ref = None
        zero = checker.fills(variant) | (checker.fills(ref) if ref else {})
        run = checker.run(variant, case, zero, dtype)
        oracle = checker.oracle(family, variant.traits, case, zero, dtype)
        overflow = fill_overflow(variant, dtype)
        internal = variant.traits.get("internal_dtype")
        loose = (bool(self.lenient) and dtype != torch.float64
                 and outside_calibration(family.case_config(case, checker.cfg)))
        if dtype == torch.float64:
            expected = Verdict.LESS_PRECISE if internal else Verdict.EQUIVALENT
        else:
            expected = Verdict.ERROR if overflow else Verdict.EQUIVALENT
        base = dict(family=family.name, variant=variant.id, config=config, case=case, dtype=dtype_name,
                    device=self.device, expected=expected, reference=ref.id if ref else "",
                    path=run.path or "-")
        out, want = run.tensors.get("output"), oracle.tensors["output"]
        if not run.error and out is not None and out.shape != want.shape:  # an adapter's mistake, named
            run.error = (f"output shape {tuple(out.shape)} where the oracle's is {tuple(want.shape)} "
                         "(the variant's forward or call adapter returns another shape)")
        if run.error:
            finding = declared_path_finding(variant.traits, case, config, self.device, dtype_name)
            declared = overflow if expected == Verdict.ERROR else finding
            return SpecResult(**base, verdict=Verdict.ERROR, ok=bool(declared),
                              err=math.nan, ref_err=math.nan, ratio=math.nan, worst="",
                              note=(f"{PATH_FINDING}: {finding}; " if finding else "") + run.error,
                              declared=declared or "")
        if not family.differentiable or not run.tensors["output"].is_floating_point():
            a, o = run.tensors["output"].cpu(), oracle.tensors["output"]
            if a.is_floating_point() and o.is_floating_point():
                # an exact function (a schedule) in floating point: its dtype's tolerance,
                # not bitwise (1/sqrt(d) applied last moves the last ulp)
                rtol, atol = P.DEFAULT_TOLERANCE[dtype]
                same = (a.shape == o.shape and torch.equal(a.isnan(), o.isnan())
                        and P.within(a, o.to(a.dtype), rtol, atol))
                bad = 0 if same else (a.numel() if a.shape != o.shape else
                                      int(((a - o).abs() > atol + rtol * o.abs()).sum()))
            else:
                same = torch.equal(a, o.to(a.dtype))
                bad = 0 if same else int((a != o).sum())
            verdict = Verdict.EQUIVALENT if same else Verdict.DIFFERENT
            return SpecResult(**{**base, "expected": Verdict.EQUIVALENT}, verdict=verdict, ok=same,
                              err=float(bad), ref_err=math.nan, ratio=math.nan, worst="output",
                              note="" if same else f"{bad} element(s) differ from the oracle")
        names = expected_names(family, oracle, checker, variant)
        if run.forward_only:  # no backward on this device: the output alone is judged, said
            names = [n for n in names if n == "output"]
        checks: list[TensorCheck] = []
        baselines: list[Run] = []
        # The floor of a gradient is taken at the scale of all the gradients: one that is
        # analytically zero (k.bias; Q and K when T = 1) is rounding noise around 0 in every
        # implementation, at the size of the terms that cancelled.
        grad_scale = max((float(t.abs().max()) for n, t in oracle.tensors.items()
                          if n != "output" and t.numel() and torch.isfinite(t).all()), default=0.0)
        inferred = family.differentiable and family.base_case(case) not in NO_KEY_CASES  # the same spec
        if variant.own_dtype_semantics:  # a kernel that runs only in its own dtypes: decided there
            truth = checker.oracle(family, variant.traits, case, zero, dtype, rounded=dtype)
            checks = own_dtype_checks(run, truth, checker.oracle(family, variant.traits, case, zero, dtype,
                                                                 compute=dtype), names, dtype,
                                      checker.run(variant, case, zero, dtype, mode="inference") if inferred else None)
            inferred = False
        elif dtype == torch.float64:
            # a declared internal dtype: the definition computed in it, the yardstick of its rounding
            inner = (checker.oracle(family, variant.traits, case, zero, dtype, compute=dtype_of(internal))
                     if internal else None)
            if inner is not None:
                baselines = [inner]
            for name in names:
                checks.append(float64_check(name, run.tensors.get(name), oracle.tensors[name], internal,
                                             scale=0.0 if name == "output" else grad_scale,
                                             baseline=inner.tensors.get(name) if inner else None,
                                             factor=self.factor))
        else:
            sem64 = self.check(variant, config, case, "float64")
            baselines = [checker.oracle(family, variant.traits, case, zero, dtype, compute=dtype)]
            if internal and torch.finfo(dtype_of(internal)).eps < torch.finfo(dtype).eps:
                # the variant says it computes in a finer dtype inside: its baseline does too, on
                # inputs and weights rounded to the call's dtype (a float16-statistics norm that
                # declares a float32 upcast is held to the upcast, not to float16's overflow)
                baselines = [checker.oracle(family, variant.traits, case, zero, dtype, compute=dtype_of(internal),
                                            through=dtype)]
            same_function = (ref is not None
                             and family.semantic_traits(ref.traits) == family.semantic_traits(variant.traits))
            if same_function:
                ref_run = checker.run(ref, case, zero, dtype)
                if not ref_run.error:
                    baselines.append(ref_run)
            for name in names:
                checks.append(_lower_check(
                    name, run.tensors.get(name), oracle.tensors[name],
                    [(b.tensors[name], oracle.tensors[name]) for b in baselines if name in b.tensors],
                    dtype, factor=self.factor, scale=0.0 if name == "output" else grad_scale, half_rule=loose,
                    strict=self.strict))
            if sem64 is not None and sem64.verdict in (Verdict.DIFFERENT, Verdict.ERROR):
                checks = [TensorCheck(c.name, Verdict.DIFFERENT if c.verdict != Verdict.EQUIVALENT
                                      or sem64.verdict == Verdict.DIFFERENT else c.verdict,
                                      c.err, c.ref_err, c.allowed, c.ratio,
                                      "semantics already differ in float64") for c in checks]
        if inferred:  # the no-grad eval path: the same spec
            checks.append(self._inference_check(variant, config, case, dtype, zero, oracle, internal, baselines,
                                                loose))
        verdict = worst_spec(c.verdict for c in checks)
        bad = max(checks, key=lambda c: (c.verdict.rank, c.ratio))
        notes = [c.note for c in checks if c.verdict != Verdict.EQUIVALENT and c.note]
        if run.note:
            notes.insert(0, run.note)
        if run.forward_only:
            notes.insert(0, run.forward_only)
        left_out = undeclared_absent(family, variant.traits, variant.map_for(checker.cfg), checker.cfg)
        if left_out:
            notes.insert(0, left_out_note(left_out))
        if verdict == Verdict.EQUIVALENT and overflow:
            notes.insert(0, f"expected an error: {overflow}")
        ok = (verdict == expected or (expected == Verdict.LESS_PRECISE and verdict == Verdict.EQUIVALENT)
              or (verdict == Verdict.LESS_PRECISE and expected == Verdict.EQUIVALENT
                  and (dtype_name in self.lenient or loose)))
        finding = declared_path_finding(variant.traits, case, config, self.device, dtype_name)
        declared = ""
        if finding and not ok:  # a declared per-case path finding: reported, not a contradiction
            ok, declared = True, finding
            notes.insert(0, f"{PATH_FINDING}: {finding}")
        return SpecResult(**base, verdict=verdict, ok=ok, err=bad.err,
                          ref_err=math.nan if bad.ref_err is None else bad.ref_err, ratio=bad.ratio,
                          worst=bad.name, note="; ".join(dict.fromkeys(notes)), tensors=checks, declared=declared)

    def _inference_check(self, variant, config, case, dtype, zero, oracle, internal,
                         baselines, loose=False) -> TensorCheck:
        """The no-grad eval run's output against the same oracle and baselines as the
        autograd run's output (a fast path that only runs under no_grad is judged too)."""
        name = "output (no-grad eval)"
        inf = self.checkers[config].run(variant, case, zero, dtype, mode="inference")
        if inf.error:
            return TensorCheck(name, Verdict.ERROR, math.nan, None, 0.0, math.inf, f"no-grad eval: {inf.error}")
        o = oracle.tensors["output"]
        if dtype == torch.float64:
            inner = next((b.tensors["output"] for b in baselines if "output" in b.tensors), None)
            return float64_check(name, inf.tensors.get("output"), o, internal, baseline=inner, factor=self.factor)
        pairs = [(b.tensors["output"], o) for b in baselines if "output" in b.tensors]
        return _lower_check(name, inf.tensors.get("output"), o, pairs, dtype, factor=self.factor, scale=0.0,
                            half_rule=loose, strict=self.strict)

    def check_specs(self, variant: Variant, dtypes: Iterable[str]) -> list[SpecResult]:
        family = variant.family_spec
        out = []
        with one_thread():
            self._check_all(variant, family, dtypes, out)
        return out

    def _check_all(self, variant, family, dtypes, out) -> None:
        configs = family.configs_of(self.configs)
        wanted = family.dtypes or ["float64", *[d for d in dtypes if d != "float64"]]
        if variant.own_dtype_semantics:  # semantics in each of its own dtypes, whatever was asked
            wanted = list(variant.dtypes)
        for dtype_name in wanted:
            for config in configs:
                for case in family.cases:
                    result = self.check(variant, config, case.name, dtype_name)
                    if result is not None:
                        out.append(result)


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


STATE_KEPT = "output depends on earlier calls (state kept between calls)"


def call_order_dependence(variant: Variant, case: str, zero, checker: RunCache) -> str:
    """'' when a build called first on other inputs (``RunCache.warmups``), then on this
    case's, gives what a fresh build's call on this case gives (both float64, no-grad eval);
    else ``STATE_KEPT`` and how it shows (an error, another shape, a difference): state kept
    across calls (a table or mask cached at the first length)."""
    seq, said = checker.sequence(variant, case, zero)
    fresh = checker.run(variant, case, zero, torch.float64, mode="inference")
    if not said or fresh.error:
        return ""
    head = f"{STATE_KEPT}: called first on {said}, then on these inputs"
    if seq.error:
        return f"{head}: {seq.error}"
    a, b = seq.tensors["output"], fresh.tensors["output"]
    if a.shape != b.shape:
        return f"{head}: output of shape {tuple(a.shape)}, a fresh build's {tuple(b.shape)}"
    if not a.is_floating_point():
        bad = int((a != b).sum())
        return f"{head}: {bad} element(s) differ from a fresh build's" if bad else ""
    c = float64_check("output", a, b, None)
    if c.verdict == Verdict.EQUIVALENT:
        return ""
    return f"{head}: output differs from a fresh build's by {c.err:.3g}"
