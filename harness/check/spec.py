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
import hashlib
import itertools
import math
from typing import Iterable, Mapping

import torch

from harness.base.config import Config
from harness.base.dtypes import dtype_of
from harness.base.errors import ConfigError
from harness.check import precision as P
from harness.check.results import PairResult, SpecResult, TensorCheck
from harness.check.runs import (
    Run,
    RunCache,
    applicable,
    fill_overflow,
)
from harness.families.base import Family
from harness.families.catalog import get_family
from harness.registry import Variant, reference_of, variants_of

SPEC_RANK = {"equivalent": 0, "less precise": 1, "different": 2, "error": 3}
# Dtypes where "less precise" is reported but is not a contradiction unless --strict-precision:
# CPU half-precision kernels upcast differently by design (measured: nn.TransformerEncoderLayer
# with norm_first=True has 72x the float16 gradient error of the definition evaluated in
# float16, on one config), so a 2x rule there would flag PyTorch's own modules.
LENIENT_DTYPES = ("bfloat16", "float16")


def worst_spec(verdicts: Iterable[str]) -> str:
    return max(verdicts, key=SPEC_RANK.__getitem__, default="equivalent")


def expected_names(family: Family, oracle: Run, checker: RunCache, variant: Variant) -> list[str]:
    """Tensors a variant must produce: the output, the family's gradient inputs, and the
    gradient of every canonical parameter it represents (not the ``Zero()`` ones)."""
    zero = {f"grad:{n}" for n in checker.fills(variant)}
    return [n for n in oracle.tensors if n not in zero]


def _float64_check(name: str, a: torch.Tensor | None, o: torch.Tensor, internal: str | None) -> TensorCheck:
    if a is None:
        return TensorCheck(name, "different", math.inf, None, 0.0, math.inf, f"{name} is missing")
    g = P.gap(a, o)
    if not g.comparable:
        return TensorCheck(name, "different", g.max_abs, None, 0.0, math.inf,
                           f"{name}: NaN in {g.nan_mismatch} element(s) where the oracle has none, or the reverse")
    allowed = P.FLOAT64_ATOL + P.FLOAT64_RTOL * g.scale
    ratio = g.max_abs / allowed
    if g.within(P.FLOAT64_ATOL):
        return TensorCheck(name, "equivalent", g.max_abs, None, allowed, ratio)
    lower = dtype_of(internal) if internal else torch.float32
    rtol, atol = P.DEFAULT_TOLERANCE[lower]
    if P.within(a, o, rtol, atol):
        why = (f"computes in {internal} internally (declared)" if internal else
               "within float32's tolerance but not float64's: part of the work runs below "
               "float64 (declare internal_dtype if it is meant to)")
        return TensorCheck(name, "less precise", g.max_abs, None, allowed, ratio, why)
    return TensorCheck(name, "different", g.max_abs, None, allowed, ratio)


def _lower_check(name: str, a: torch.Tensor | None, o: torch.Tensor, baselines: list[tuple[torch.Tensor, torch.Tensor]],
                 dtype: torch.dtype, factor: float, scale: float) -> TensorCheck:
    """``baselines``: (result in ``dtype``, its float64 oracle) pairs computing the same
    function as the variant: the oracle evaluated in ``dtype``, and the family reference
    when it shares the variant's semantics. The largest of their errors is the baseline."""
    if a is None:
        return TensorCheck(name, "different", math.inf, None, 0.0, math.inf, f"{name} is missing")
    g = P.gap(a, o)
    errs = [bg.max_abs for b, bo in baselines if (bg := P.gap(b, bo)).comparable]
    ref_err = max(errs) if errs else None
    if not g.comparable:
        return TensorCheck(name, "different", g.max_abs, ref_err, 0.0, math.inf,
                           f"{name}: NaN/inf pattern differs from the oracle in {g.nan_mismatch} element(s)")
    allowed = P.allowance(dtype, ref_err, max(g.scale, scale), factor)
    ratio = P.ratio_to_reference(g.max_abs, ref_err, dtype, max(g.scale, scale))
    verdict = "equivalent" if g.max_abs <= allowed else "less precise"
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
        family = get_family(variant.family)
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
            expected = "less precise" if internal else "equivalent"
        else:
            expected = "error" if overflow else "equivalent"
        base = dict(family=family.name, variant=variant.id, config=config, case=case, dtype=dtype_name,
                    device=self.device, expected=expected, reference=ref.id if ref else "",
                    path=run.path or "-")
        if run.error:
            return SpecResult(**base, verdict="error", ok=expected == "error", err=math.nan,
                              ref_err=math.nan, ratio=math.nan, worst="", note=run.error)
        if not family.differentiable or not run.tensors["output"].is_floating_point():
            same = torch.equal(run.tensors["output"].cpu(), oracle.tensors["output"].to(run.tensors["output"].dtype))
            verdict = "equivalent" if same else "different"
            bad = 0 if same else int((run.tensors["output"].cpu() != oracle.tensors["output"]).sum())
            return SpecResult(**{**base, "expected": "equivalent"}, verdict=verdict, ok=same,
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
                    dtype, self.factor, 0.0 if name == "output" else grad_scale))
            if sem64 is not None and sem64.verdict in ("different", "error"):
                checks = [TensorCheck(c.name, "different" if c.verdict != "equivalent" or sem64.verdict == "different"
                                      else c.verdict, c.err, c.ref_err, c.allowed, c.ratio,
                                      "semantics already differ in float64") for c in checks]
        verdict = worst_spec(c.verdict for c in checks)
        bad = max(checks, key=lambda c: (SPEC_RANK[c.verdict], c.ratio))
        notes = [c.note for c in checks if c.verdict != "equivalent" and c.note]
        if run.note:
            notes.insert(0, run.note)
        if verdict == "equivalent" and overflow:
            notes.insert(0, f"expected an error: {overflow}")
        ok = (verdict == expected or (expected == "less precise" and verdict == "equivalent")
              or (verdict == "less precise" and expected == "equivalent" and dtype_name in self.lenient))
        return SpecResult(**base, verdict=verdict, ok=ok, err=bad.err,
                          ref_err=math.nan if bad.ref_err is None else bad.ref_err, ratio=bad.ratio,
                          worst=bad.name, note="; ".join(dict.fromkeys(notes)), tensors=checks)

    def check_specs(self, variant: Variant, dtypes: Iterable[str]) -> list[SpecResult]:
        family = get_family(variant.family)
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
    def pairs(self, family_name: str, config: str, case: str, dtype_name: str,
              specs: Mapping[tuple, SpecResult], measured: bool = False) -> list[PairResult]:
        """The pairwise verdicts of one family on one config, case and dtype, derived from
        the equivalence classes (variants with equal semantic traits) and the oracles; with
        ``measured`` (``--pairs all``), from every pair's own runs compared directly."""
        family = get_family(family_name)
        checker = self.checkers[config]
        dtype = dtype_of(dtype_name)
        members = [v for v in variants_of(family_name)
                   if applicable(v, case) and not v.supports(checker.cfg)
                   and (v.id, config, case, dtype_name) in specs]
        out = []
        digests = {} if measured else {v.id: self._digest(checker, v, case, dtype) for v in members}
        gaps: dict[tuple, tuple[float, float, str]] = {}
        scales: dict[int, float] = {}
        for a, b in itertools.combinations(members, 2):
            sa, sb = specs[(a.id, config, case, dtype_name)], specs[(b.id, config, case, dtype_name)]
            sem_a, sem_b = family.semantic_traits(a.traits), family.semantic_traits(b.traits)
            differing = [t for t in family.traits if sem_a.get(t) != sem_b.get(t)]
            in_case = [t for t in differing if t in family.semantic_for(case)]
            reason = "; ".join(f"{t}: {sem_a.get(t)} vs {sem_b.get(t)}" for t in (in_case or differing))
            base = dict(family=family_name, a=a.id, b=b.id, case=case, dtype=dtype_name, device=self.device,
                        config=config,
                        path_a=sa.path, path_b=sb.path, noise_ratio=math.nan, grad_noise_ratio=math.nan)
            if sa.verdict == "error" or sb.verdict == "error":
                note = "; ".join(f"{s.variant}: {s.note}" for s in (sa, sb) if s.verdict == "error")
                both_expected = sa.ok and sb.ok
                out.append(PairResult(**base, verdict="error", expected="error" if both_expected else "equivalent",
                                      reason=reason, ok=both_expected, max_abs=math.nan, max_rel=math.nan,
                                      grad_verdict="error", grad_max_abs=math.nan, worst_grad="", note=note))
                continue
            zero = checker.fills(a) | checker.fills(b)
            oa = checker.oracle(family, a.traits, case, zero, dtype)
            ob = checker.oracle(family, b.traits, case, zero, dtype)
            key = (id(oa), id(ob), zero)  # one gap per pair of classes, not per pair of variants
            if key not in gaps:
                gaps[key] = self._gap(oa, ob, checker, a, b) if differing else (0.0, 0.0, "")
            out_gap, grad_gap, worst_grad = gaps[key]
            if id(oa) not in scales:
                scales[id(oa)] = self._scale(oa)
            tol64 = P.FLOAT64_ATOL + P.FLOAT64_RTOL * max(1.0, scales[id(oa)])
            biggest = max(out_gap, grad_gap)
            # Traits this case does not read make no difference here, unless the oracles
            # say otherwise (then the family's case_semantic is incomplete, and it shows).
            if differing and not in_case and biggest <= tol64:
                reason = ""
            specs_ok = sa.ok and sb.ok
            allowed = self._allowed(sa) + self._allowed(sb)
            if measured:  # the pair's own runs, on the same weights, against each other
                ra, rb = checker.run(a, case, zero, dtype), checker.run(b, case, zero, dtype)
                m_out, m_grad, m_worst = self._gap(ra, rb, checker, a, b)
                same = m_out == 0.0 and m_grad == 0.0
                close = max(m_out, m_grad) <= allowed
            if not reason:  # one class: the same declared function
                if not measured:
                    same = digests[a.id] is not None and digests[a.id] == digests[b.id]
                    close = specs_ok
                verdict = "identical" if same else ("equivalent" if close else "different")
                out.append(PairResult(**base, verdict=verdict, expected="equivalent", reason="",
                                      ok=specs_ok and verdict != "different",
                                      max_abs=m_out if measured else (0.0 if same else math.nan), max_rel=math.nan,
                                      grad_verdict=verdict,
                                      grad_max_abs=m_grad if measured else (0.0 if same else math.nan),
                                      worst_grad=m_worst if measured else "", note=self._spec_note(sa, sb)))
                continue
            if biggest <= tol64:
                verdict = "not exercised"
                note = f"the declared difference does not show on case {case!r} of config {config!r}"
            elif dtype != torch.float64 and not P.resolvable(biggest, dtype, self._allowed(sa), self._allowed(sb)):
                verdict, note = "not resolvable", (f"the declared difference ({biggest:.2g}) is below "
                                                   f"{dtype_name}'s resolution here")
            else:
                verdict, note = "different", ""
            if measured and verdict == "different" and max(m_out, m_grad) <= allowed:
                verdict, note = "equivalent", "the declared difference did not show in the measured runs"
            out.append(PairResult(**base, verdict=verdict, expected="different", reason=reason,
                                  ok=specs_ok and verdict != "equivalent",
                                  max_abs=m_out if measured else out_gap, max_rel=math.nan,
                                  grad_verdict="different" if grad_gap > tol64 else "equivalent",
                                  grad_max_abs=m_grad if measured else grad_gap,
                                  worst_grad=m_worst if measured else worst_grad,
                                  note="; ".join(x for x in (note, self._spec_note(sa, sb)) if x)))
        return out

    @staticmethod
    def _spec_note(sa: SpecResult, sb: SpecResult) -> str:
        return "; ".join(f"{s.variant} fails its spec ({s.verdict})" for s in (sa, sb) if not s.ok)

    @staticmethod
    def _allowed(spec: SpecResult) -> float:
        return max((c.allowed for c in spec.tensors), default=0.0)

    @staticmethod
    def _scale(run: Run) -> float:
        out = run.tensors["output"]
        finite = out[torch.isfinite(out)] if out.is_floating_point() else out.float()
        return float(finite.abs().max()) if finite.numel() else 0.0

    @staticmethod
    def _gap(oa: Run, ob: Run, checker: RunCache, a: Variant, b: Variant) -> tuple[float, float, str]:
        """Largest |x_a - x_b| on the output and on the gradients both represent (two oracles,
        or two runs on the same weights)."""
        skip = {f"grad:{n}" for n in checker.fills(a) | checker.fills(b)}
        out_gap, grad_gap, worst = 0.0, 0.0, ""
        for name, ta in oa.tensors.items():
            if name in skip or name not in ob.tensors:
                continue
            tb = ob.tensors[name]
            if not ta.is_floating_point():
                g = 0.0 if torch.equal(ta, tb) else math.inf
            else:
                nan_a, nan_b = ta.isnan(), tb.isnan()
                if not torch.equal(nan_a, nan_b):
                    g = math.inf
                else:
                    d = (ta[~nan_a] - tb[~nan_b]).abs()
                    g = float(d.max()) if d.numel() else 0.0
            if name == "output":
                out_gap = g
            elif g > grad_gap:
                grad_gap, worst = g, name.removeprefix("grad:")
        return out_gap, grad_gap, worst

    def _digest(self, checker: RunCache, variant: Variant, case: str, dtype: torch.dtype) -> str | None:
        """A hash of every tensor of the variant's run (for 'identical'), on the weights its
        own spec ran with; None when it did not run."""
        family = get_family(variant.family)
        ref = reference_of(family.name)
        zero = checker.fills(variant) | (checker.fills(ref) if ref and not ref.supports(checker.cfg) else {})
        run = checker.run(variant, case, zero, dtype)
        if run.error:
            return None
        h = hashlib.sha1(repr(sorted(zero)).encode())
        for name in sorted(run.tensors):
            h.update(name.encode())
            h.update(run.tensors[name].contiguous().numpy().tobytes())
        return h.hexdigest()


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
