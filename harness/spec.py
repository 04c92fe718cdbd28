"""Every variant against its spec: the float64 oracle built from its own declared traits.

For each variant, config of the matrix, applicable case and dtype:

- **float64 decides semantics**: output and every gradient (each input the family takes
  gradients for, each canonical parameter the variant represents) against the oracle,
  within ``harness.precision``'s float64 bound. A gradient the variant does not produce
  (a detached output, a parameter left out of the graph) is "different", named.
- **lower dtypes decide precision**: the variant's error against the oracle, compared with
  the family reference's error in the same dtype (``harness.precision``).
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
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable, Mapping

import torch

from . import precision as P
from .compare import (
    Checker, OpRecorder, PairResult, PathResult, Run, applicable, cast_inputs, dtype_of, fill_overflow,
    run_variant, unique_grad_inputs,
)
from .config import Config
from .errors import ConfigError, HarnessError
from .families import Family, get_family
from .porting import zero_unrepresented
from .registry import Variant, reference_of, variants_of
from .seeding import build

SPEC_RANK = {"equivalent": 0, "less precise": 1, "different": 2, "error": 3}
# Gradcheck runs on a tiny config per variant: the first one it supports.
GRADCHECK_CONFIGS = (
    Config(d_model=8, heads=2, d_ff=32, batch=2, tgt_len=3, src_len=4),
    Config(d_model=16, heads=8, d_ff=64, batch=2, tgt_len=3, src_len=4),
)
DROPOUT_P = 0.5
# Dtypes where "less precise" is reported but is not a contradiction unless --strict-precision:
# CPU half-precision kernels upcast differently by design (measured: nn.TransformerEncoderLayer
# with norm_first=True has 72x the float16 gradient error of the definition evaluated in
# float16, on one config), so a 2x rule there would flag PyTorch's own modules.
LENIENT_DTYPES = ("bfloat16", "float16")
DRAW_OPS = ("bernoulli_", "bernoulli", "native_dropout", "_fused_dropout")


@dataclass
class TensorCheck:
    name: str
    verdict: str
    err: float
    ref_err: float | None
    allowed: float
    ratio: float
    note: str = ""


@dataclass
class SpecResult:
    family: str
    variant: str
    config: str
    case: str
    dtype: str
    device: str
    verdict: str          # equivalent | less precise | different | error
    expected: str         # equivalent | less precise | error
    ok: bool
    err: float            # the worst tensor's max |variant - oracle|
    ref_err: float        # the reference's on that tensor (NaN in float64)
    ratio: float          # err over the baseline error (the ulp floor when the baseline is exact)
    worst: str            # which tensor ("output", "grad:q.weight", ...)
    reference: str
    path: str
    note: str = ""
    tensors: list[TensorCheck] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class GradcheckResult:
    family: str
    variant: str
    config: str
    case: str
    ok: bool
    note: str

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class DropoutResult:
    family: str
    variant: str
    check: str            # "eval: output unchanged (p=...)" | "train: draws per call (p=...)"
    expected: str
    measured: str
    ok: bool

    def as_dict(self) -> dict:
        return asdict(self)


def worst_spec(verdicts: Iterable[str]) -> str:
    return max(verdicts, key=SPEC_RANK.__getitem__, default="equivalent")


def expected_names(family: Family, oracle: Run, checker: Checker, variant: Variant) -> list[str]:
    """Tensors a variant must produce: the output, the family's gradient inputs, and the
    gradient of every canonical parameter it represents (not the ``Zero()`` ones)."""
    zero = {f"grad:{n}" for n in checker.zero_names(variant)}
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
        self.checkers = {name: Checker(cfg, device, record=i == 0)
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
        zero = checker.zero_names(variant) | (checker.zero_names(ref) if ref else {})
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
            same_function = ref is not None and family.semantic_traits(ref.traits) == family.semantic_traits(variant.traits)
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

    def check_variant(self, variant: Variant, dtypes: Iterable[str]) -> list[SpecResult]:
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
            base = dict(family=family_name, a=a.id, b=b.id, case=case, dtype=dtype_name, device=self.device, config=config,
                        path_a=sa.path, path_b=sb.path, noise_ratio=math.nan, grad_noise_ratio=math.nan)
            if sa.verdict == "error" or sb.verdict == "error":
                note = "; ".join(f"{s.variant}: {s.note}" for s in (sa, sb) if s.verdict == "error")
                both_expected = sa.ok and sb.ok
                out.append(PairResult(**base, verdict="error", expected="error" if both_expected else "equivalent",
                                      reason=reason, ok=both_expected, max_abs=math.nan, max_rel=math.nan,
                                      grad_verdict="error", grad_max_abs=math.nan, worst_grad="", note=note))
                continue
            zero = checker.zero_names(a) | checker.zero_names(b)
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
                                      grad_verdict=verdict, grad_max_abs=m_grad if measured else (0.0 if same else math.nan),
                                      worst_grad=m_worst if measured else "", note=self._spec_note(sa, sb)))
                continue
            if biggest <= tol64:
                verdict, note = "not exercised", f"the declared difference does not show on case {case!r} of config {config!r}"
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
    def _gap(oa: Run, ob: Run, checker: Checker, a: Variant, b: Variant) -> tuple[float, float, str]:
        """Largest |x_a - x_b| on the output and on the gradients both represent (two oracles,
        or two runs on the same weights)."""
        skip = {f"grad:{n}" for n in checker.zero_names(a) | checker.zero_names(b)}
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

    def _digest(self, checker: Checker, variant: Variant, case: str, dtype: torch.dtype) -> str | None:
        """A hash of every tensor of the variant's run (for 'identical'), on the weights its
        own spec ran with; None when it did not run."""
        family = get_family(variant.family)
        ref = reference_of(family.name)
        zero = checker.zero_names(variant) | (checker.zero_names(ref) if ref and not ref.supports(checker.cfg) else {})
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


# -- gradcheck ---------------------------------------------------------------------------------------

def gradcheck_variant(variant: Variant) -> GradcheckResult | None:
    """``torch.autograd.gradcheck`` (float64, fast mode) of the variant's whole call,
    inputs and every parameter together, on the first tiny config it supports and its
    family's first applicable case whose rows all see a key."""
    family = get_family(variant.family)
    if not family.differentiable:
        return None
    cfg = next((c for c in GRADCHECK_CONFIGS if not variant.supports(c)), None)
    if cfg is None:
        return None
    cases = [c.name for c in family.cases if applicable(variant, c.name)
             and c.name not in ("fully_masked", "left_pad")]
    if not cases:
        return None
    case = cases[0]
    name = f"D={cfg.d_model} H={cfg.heads}"
    try:
        module, portmap = build(variant, cfg, dtype=torch.float64)
        if portmap is not None:
            portmap.load(zero_unrepresented(family.canonical_weights(cfg), portmap.zero_names()))
        inputs = cast_inputs(family.inputs(case, cfg), torch.float64, "cpu", family.grad_inputs)
        leaves = unique_grad_inputs(family, inputs)
        params = dict(module.named_parameters()) if isinstance(module, torch.nn.Module) else {}
        names = list(leaves) + [f"param:{n}" for n in params]
        tensors = [leaves[n] for n in leaves] + [p.detach().clone().requires_grad_(True) for p in params.values()]

        def fn(*args):
            values = dict(zip(names, args))
            call_inputs = dict(inputs)
            by_id = {id(inputs[n]): values[n] for n in leaves}
            for key, value in inputs.items():
                if isinstance(value, torch.Tensor) and id(value) in by_id:
                    call_inputs[key] = by_id[id(value)]
            new_params = {n.removeprefix("param:"): v for n, v in values.items() if n.startswith("param:")}
            with torch.nn.utils.stateless._reparametrize_module(module, new_params):
                return variant.call(module, call_inputs)

        ok = torch.autograd.gradcheck(fn, tuple(tensors), fast_mode=True, raise_exception=False,
                                      check_undefined_grad=False)
        note = "" if ok else "the backward disagrees with finite differences of the forward"
    except HarnessError:
        raise
    except Exception as exc:
        ok, note = False, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
    return GradcheckResult(family.name, variant.id, name, case, bool(ok), note)


# -- dropout -----------------------------------------------------------------------------------------

def expected_draws(variant: Variant, cfg: Config) -> int:
    sites = variant.traits.get("dropout_sites", ())
    return sum(cfg.heads if site.endswith("(per head)") else 1 for site in sites)


def dropout_checks(variant: Variant, cfg: Config) -> list[DropoutResult]:
    """Built with dropout p (``cfg.dropout``, or 0.5 when it is 0): eval mode gives the
    dropout-0 output and draws nothing; train mode draws once per declared site."""
    family = get_family(variant.family)
    if not family.differentiable or variant.supports(cfg):
        return []
    case = next((c.name for c in family.cases if applicable(variant, c.name)), None)
    if case is None:
        return []
    p = cfg.dropout if cfg.dropout > 0 else DROPOUT_P  # --set dropout=p chooses it
    cfg = cfg.replace(dropout=0.0)
    dropped = cfg.replace(dropout=p)
    weights = family.canonical_weights(cfg)
    inputs = family.inputs(case, cfg)
    out = []

    def forward(c: Config, train: bool) -> tuple[torch.Tensor | None, list[str], str]:
        try:
            module, portmap = build(variant, c, dtype=torch.float64)
            if portmap is not None:
                portmap.load(zero_unrepresented(weights, portmap.zero_names()))
            if train and isinstance(module, torch.nn.Module):
                module.train()
            recorder = OpRecorder()
            with torch.no_grad(), recorder:
                y = variant.call(module, cast_inputs(inputs, torch.float64, "cpu"))
            return y, recorder.ops, ""
        except HarnessError:
            raise
        except Exception as exc:
            return None, [], f"{type(exc).__name__}: {exc}"[:200]

    base, _, err0 = forward(cfg, False)
    evald, eval_ops, err1 = forward(dropped, False)
    if base is None or evald is None:
        out.append(DropoutResult(family.name, variant.id, "eval: output unchanged", "unchanged",
                                 err0 or err1, False))
    else:
        # Both runs are seeded alike, so a dropout that acts in eval mode may draw the same
        # mask twice: a random draw in eval mode is itself the failure.
        draws = sum(op in DRAW_OPS for op in eval_ops)
        same = P.gap(evald, base.to(torch.float64)).comparable and P.within(evald, base.to(torch.float64), 0.0, 0.0)
        measured = ("unchanged" if same else f"changed by {P.gap(evald, base).max_abs:.3g}") + (
            f", {draws} random draw(s) in eval mode" if draws else "")
        out.append(DropoutResult(family.name, variant.id, f"eval: output unchanged (p={p:g})", "unchanged",
                                 measured, same and not draws))
    _, train_ops, err2 = forward(dropped, True)
    want = expected_draws(variant, cfg)
    if err2:
        out.append(DropoutResult(family.name, variant.id, f"train: draws per call (p={p:g})", str(want), err2, False))
    else:
        draws = sum(op in DRAW_OPS for op in train_ops)
        out.append(DropoutResult(family.name, variant.id, f"train: draws per call (p={p:g})", str(want), str(draws),
                                 draws == want))
    return out


# -- torch.compile ------------------------------------------------------------------------------------

COMPILED_FAMILIES = ("attention", "encoder_layer", "decoder_layer", "decoder_only_block", "ffn", "norm")


@dataclass
class CompiledResult:
    family: str
    variant: str
    config: str
    case: str
    dtype: str
    backend: str
    verdict: str          # identical | equivalent | less precise | different | error
    ok: bool
    graphs: int           # graphs Dynamo compiled for this call (0: it ran eager)
    graph_breaks: int
    err: float            # compiled vs oracle, worst tensor
    eager_err: float      # eager vs oracle, same tensor
    note: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def compiled_check(variant: Variant, checker: Checker, config: str, dtype_name: str = "float32",
                   backend: str = "inductor", factor: float = P.PRECISION_FACTOR) -> CompiledResult | None:
    """The variant under ``torch.compile`` against the same variant eager, forward and
    backward, on the first applicable case: both against the float64 oracle, the compiled
    error at most ``factor`` x the eager one (plus one ulp). Dynamo's counters must show a
    compiled graph: a "compiled" result that ran eager is a failure, not a pass."""
    from torch._dynamo.utils import counters

    family = get_family(variant.family)
    if not family.differentiable or variant.supports(checker.cfg):
        return None
    case = next((c.name for c in family.cases if applicable(variant, c.name)), None)
    if case is None:
        return None
    dtype = dtype_of(dtype_name)
    zero = checker.zero_names(variant)
    eager = checker.run(variant, case, zero, dtype)
    oracle = checker.oracle(family, variant.traits, case, zero, dtype)
    torch._dynamo.reset()
    graphs0, breaks0 = counters["stats"]["unique_graphs"], sum(counters["graph_break"].values())
    compiled = run_variant(variant, checker.cfg, checker.inputs(family, case), checker.weights(family, zero),
                           dtype, checker.device, record=False, compile_backend=backend)
    graphs = counters["stats"]["unique_graphs"] - graphs0
    breaks = sum(counters["graph_break"].values()) - breaks0
    base = dict(family=family.name, variant=variant.id, config=config, case=case, dtype=dtype_name,
                backend=backend, graphs=graphs, graph_breaks=breaks)
    if compiled.error or eager.error:
        return CompiledResult(**base, verdict="error", ok=False, err=math.nan, eager_err=math.nan,
                              note=compiled.error or eager.error or "")
    names = expected_names(family, oracle, checker, variant)
    same = all(name in compiled.tensors and torch.equal(compiled.tensors[name], eager.tensors[name])
               for name in names)
    checks = [_lower_check(n, compiled.tensors.get(n), oracle.tensors[n],
                           [(eager.tensors[n], oracle.tensors[n])] if n in eager.tensors else [],
                           dtype, factor, 0.0) for n in names]
    bad = max(checks, key=lambda c: (SPEC_RANK[c.verdict], c.ratio))
    verdict = "identical" if same else bad.verdict
    note = "" if graphs else "Dynamo compiled no graph: this ran eager"
    return CompiledResult(**base, verdict=verdict, ok=graphs > 0 and verdict in ("identical", "equivalent"),
                          err=bad.err, eager_err=math.nan if bad.ref_err is None else bad.ref_err,
                          note="; ".join(x for x in (note, bad.note) if x))


# -- the whole check ----------------------------------------------------------------------------------

@dataclass
class CheckReport:
    configs: dict[str, Config]
    dtypes: list[str]
    specs: list[SpecResult] = field(default_factory=list)
    pairs: list[PairResult] = field(default_factory=list)
    paths: list[PathResult] = field(default_factory=list)
    gradchecks: list[GradcheckResult] = field(default_factory=list)
    dropouts: list[DropoutResult] = field(default_factory=list)
    compiled: list[CompiledResult] = field(default_factory=list)
    skipped: list[tuple[str, str, str, str]] = field(default_factory=list)  # family, variant, config, why

    @property
    def failures(self) -> list:
        """Everything that contradicts a declaration."""
        return ([s for s in self.specs if not s.ok] + [g for g in self.gradchecks if not g.ok]
                + [d for d in self.dropouts if not d.ok] + [c for c in self.compiled if not c.ok])

    def as_dict(self) -> dict:
        return {
            "configs": {n: {**asdict(c), "d_k": c.d_k} for n, c in self.configs.items()},
            "dtypes": self.dtypes,
            "specs": [s.as_dict() for s in self.specs],
            "pairs": [p.as_dict() for p in self.pairs],
            "paths": [p.as_dict() for p in self.paths],
            "gradchecks": [g.as_dict() for g in self.gradchecks],
            "dropouts": [d.as_dict() for d in self.dropouts],
            "compiled": [c.as_dict() for c in self.compiled],
            "skipped": [dict(zip(("family", "variant", "config", "why"), s)) for s in self.skipped],
            "contradictions": len(self.failures),
        }


def check_all(families: Iterable[str], configs: Mapping[str, Config], device: str = "cpu",
              dtypes: Iterable[str] | None = None, *, factor: float = P.PRECISION_FACTOR,
              strict: bool = False, pairs: str = "derived", extras: bool = True,
              variants: Iterable[str] | None = None, progress: Callable[[str], None] | None = None,
              compile_backend: str | None = None) -> CheckReport:
    """Every variant of ``families`` against its spec on every config, case and dtype (float64
    always, for semantics), then the pairwise matrix, the kernel paths, gradcheck and the
    dropout checks; with ``compile_backend``, each variant of the attention and layer
    families under ``torch.compile`` against itself eager. ``variants`` (keys
    ``family/id``) limits which variants are checked; the family references are run
    anyway, as the precision baseline."""
    dtypes = list(dtypes or ["float32"])
    report = CheckReport(dict(configs), ["float64", *[d for d in dtypes if d != "float64"]])
    engine = SpecChecker(configs, device, factor=factor, strict=strict)
    wanted = set(variants) if variants is not None else None
    with one_thread():
        for family_name in families:
            _check_family(report, engine, family_name, configs, dtypes, wanted, pairs, extras, progress)
            if compile_backend and family_name in COMPILED_FAMILIES:
                first = next(iter(configs))
                for v in variants_of(family_name):
                    if wanted is None or v.key in wanted:
                        c = compiled_check(v, engine.checkers[first], first, "float32", compile_backend, factor)
                        if c is not None:
                            report.compiled.append(c)
    return report


def _check_family(report: CheckReport, engine: SpecChecker, family_name: str, configs, dtypes,
                  wanted, pairs: str, extras: bool, progress) -> None:
    family = get_family(family_name)
    configs = family.configs_of(configs)
    if not configs:
        return
    first = next(iter(configs))
    members = [v for v in variants_of(family_name) if wanted is None or v.key in wanted]
    for v in members:
        if progress:
            progress(v.key)
        for config, cfg in configs.items():
            why = v.supports(cfg)
            if why:
                report.skipped.append((family_name, v.id, config, why))
        report.specs += engine.check_variant(v, dtypes)
    index = {(s.variant, s.config, s.case, s.dtype): s for s in report.specs if s.family == family_name}
    for dtype_name in family.dtypes or report.dtypes:
        for config in configs:
            for case in family.cases:
                report.pairs += [p for p in engine.pairs(family_name, config, case.name, dtype_name, index,
                                                         measured=pairs == "all")
                                 if wanted is None or f"{family_name}/{p.a}" in wanted
                                 or f"{family_name}/{p.b}" in wanted]
    if not extras:
        return
    checker = engine.checkers[first]
    for v in members:
        for case in family.cases:
            for dtype_name in family.dtypes or dtypes:
                p = checker.compare_paths(v, case.name, dtype_name)
                if p is not None:
                    report.paths.append(p)
        g = gradcheck_variant(v)
        if g is not None:
            report.gradchecks.append(g)
        report.dropouts += dropout_checks(v, engine.configs[first])
