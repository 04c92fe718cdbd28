"""Every variant against its spec: the float64 oracle built from its own declared traits.
``SpecChecker.check`` reads a cell's evidence from the run cache and hands it to
``harness.check.verdict.decide``, which decides.

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
from typing import Iterable, Iterator, Mapping

import torch

from harness.base.boundary import UserCodeError, describe, failure_text, variant_failure
from harness.base.config import Config
from harness.base.dtypes import dtype_of
from harness.base.errors import ConfigError, PortingError
from harness.base.failures import harness_traceback
from harness.base.verdicts import Verdict
from harness.check import precision as P
from harness.check.left_out import undeclared_absent
from harness.check.results import Cell, SpecResult
from harness.check.rules import HALF_DIFFERENT_FACTOR, HALF_DTYPES, _lower_check, float64_check  # noqa: F401
from harness.check.run_keys import Mode
from harness.check.runs import Run, RunCache, applicable
from harness.check.settings import LENIENT_DTYPES, CheckSettings  # noqa: F401
from harness.check.verdict import (  # noqa: F401  (the decision's constants, read here by their old names)
    CALIBRATED_LENGTH,
    NO_KEY_CASES,
    PATH_FINDING,
    Evidence,
    decide,
    outside_calibration,
    with_changes,
    worst_spec,
)
from harness.families.base import Family
from harness.families.catalog import FAMILIES
from harness.porting.portmap import Fills
from harness.registry import Variant, reference_of


def expected_names(family: Family, oracle: Run, checker: RunCache, variant: Variant) -> list[str]:
    """Tensors a variant must produce: the output, the family's gradient inputs, and the
    gradient of every canonical parameter it represents (not the ``Zero()`` ones)."""
    zero = {f"grad:{n}" for n in checker.fills(variant)}
    return [n for n in oracle.tensors if n not in zero]


class SpecChecker:
    """Checks variants against their oracles over a config matrix; caches every run and spec."""

    def __init__(self, configs: Mapping[str, Config], device: str = "cpu",
                 factor: float = P.PRECISION_FACTOR, strict: bool = False):
        if not configs:
            raise ConfigError("no config to check")
        self.configs = dict(configs)
        self.device = device
        self.settings = CheckSettings(device=device, factor=factor, strict=strict)
        # The kernel path is recorded on the first config only (a dispatch mode costs time).
        self.checkers = {name: RunCache(cfg, device, record=i == 0)
                         for i, (name, cfg) in enumerate(self.configs.items())}
        for family in FAMILIES.values():  # a family's own extra configs (the attention family's GQA)
            for name, cfg in family.configs_of(self.configs).items():
                self.checkers.setdefault(name, RunCache(cfg, device, record=False))
        self._specs: dict[Cell, SpecResult | None] = {}

    # -- one variant -------------------------------------------------------------------------
    def check(self, variant: Variant, config: str, case: str, dtype_name: str) -> SpecResult | None:
        """``variant`` against its oracle on one config, case and dtype; None when the case
        does not apply or the variant cannot be built for the config. The evidence read from
        the run cache (``evidence``), the verdict decided from it (``harness.check.verdict.decide``),
        then what the call changed folded in (``changes``)."""
        key = Cell(variant.family, variant.id, config, case, dtype_name)
        if key in self._specs:
            return self._specs[key]
        try:
            e = self.evidence(variant, config, case, dtype_name)
            if e is None:
                self._specs[key] = None
            else:
                result = decide(e, self.settings)
                if (result.verdict == Verdict.LESS_PRECISE and e.dtype == torch.float64 and not e.internal
                        and not e.variant.own_dtype_semantics and not e.baselines):
                    e = self.with_float32_definition(e)  # float32's rounding, or a small other function?
                    result = decide(e, self.settings)
                stateful = self.state_kept(e, result)
                changed = with_changes(result, [*([stateful] if stateful else []), *self.changes(e, result)])
                if stateful:  # where the case's own run holds, the earlier calls are the difference
                    changed = dataclasses.replace(changed, depends_on_earlier_calls=True)
                    if result.ok:
                        changed = dataclasses.replace(changed, worst="output", err=math.nan, ratio=math.nan)
                if e.dtype == torch.float64 and e.oracle.reaches:  # what the case reached of the declaration
                    changed = dataclasses.replace(changed, reaches=e.oracle.reaches)
                self._specs[key] = changed
        except Exception as exc:  # this spec's error row, the run goes on
            if not variant_failure(exc):  # the user's input (a NaN, a bad config): one line, as ever
                raise
            self._specs[key] = self.failed(variant, config, case, dtype_name, exc)
        return self._specs[key]

    def cells(self, variant: Variant, dtypes: Iterable[str]) -> Iterator[tuple[str, str, str]]:
        """(config, case, dtype) of every spec of ``variant``: float64 and ``dtypes`` (a kernel
        that runs only in its own dtypes: those, whatever was asked), each config, each case."""
        family = variant.family_spec
        wanted = family.dtypes or ["float64", *[d for d in dtypes if d != "float64"]]
        for dtype_name in (list(variant.dtypes) if variant.own_dtype_semantics else wanted):
            for config in family.configs_of(self.configs):
                for case in family.cases:
                    yield config, case.name, dtype_name

    def check_specs(self, variant: Variant, dtypes: Iterable[str]) -> list[SpecResult]:
        """Every spec of ``variant`` (``cells``) that applies."""
        with one_thread():
            return [r for cell in self.cells(variant, dtypes) if (r := self.check(variant, *cell)) is not None]

    def failed(self, variant: Variant, config: str, case: str, dtype_name: str, exc: Exception) -> SpecResult:
        """The error row of a spec whose check raised outside the variant's own run (its oracle,
        its baseline, the comparison): named as the harness's failure, a contradiction."""
        ref = reference_of(variant.family)
        note = failure_text(exc) if isinstance(exc, (UserCodeError, PortingError)) else (  # a variant's code, or ours
            f"the check itself failed (the harness's error, not the variant's; please report it): {describe(exc)}")
        return SpecResult(family=variant.family, variant=variant.id, config=config, case=case, dtype=dtype_name,
                          device=self.device, verdict=Verdict.ERROR, expected=Verdict.EQUIVALENT, ok=False,
                          err=math.nan, ref_err=math.nan, ratio=math.nan, worst="", reference=ref.id if ref else "",
                          path="-", note=note[:400], traceback=harness_traceback(exc))

    # -- the evidence, read from the run cache -------------------------------------------------
    def evidence(self, variant: Variant, config: str, case: str, dtype_name: str) -> Evidence | None:
        """What the verdict of one cell is decided from; None where the case does not apply or
        the variant cannot be built for the config or dtype."""
        checker = self.checkers[config]
        if (not applicable(variant, case) or variant.dtype_reason(dtype_name)
                or variant.refuses(checker.cfg, checker.device, variant.family_spec.base_case(case))):
            return None
        ref, dtype = self._reference(variant, case, checker), dtype_of(dtype_name)
        zero = checker.fills(variant) | (checker.fills(ref) if ref else {})
        run = checker.run(variant, case, zero, dtype)
        oracle = checker.oracle(variant.family_spec, variant.traits, case, zero, dtype)
        name_shape_error(run, oracle)
        e = Evidence(variant, config, case, dtype_name, checker.cfg, ref.id if ref else "", zero, run, oracle)
        return e if run.error or e.exact else self._measured(e, checker, ref)

    def _measured(self, e: Evidence, checker: RunCache, ref: Variant | None) -> Evidence:
        """``e`` with what its tensors are judged against: the oracle's tensors it must have,
        the baselines of its dtype, the no-grad eval run, parameters left out undeclared."""
        family, v, dtype, zero = e.family, e.variant, e.dtype, e.fills
        names = [n for n in expected_names(family, e.oracle, checker, v) if not e.run.forward_only or n == "output"]
        truth = computed = sem64 = None
        baselines: tuple[Run, ...] = ()
        if v.own_dtype_semantics:  # a kernel that runs only in its own dtypes: decided there
            truth = checker.oracle(family, v.traits, e.case, zero, dtype, rounded=dtype)
            computed = checker.oracle(family, v.traits, e.case, zero, dtype, compute=dtype)
        elif dtype == torch.float64 and e.internal:  # the definition computed in the declared internal dtype
            baselines = (checker.oracle(family, v.traits, e.case, zero, dtype, compute=dtype_of(e.internal)),)
        elif dtype != torch.float64:
            sem64, baselines = self._lower_baselines(e, checker, ref)
        inferred = family.differentiable and family.base_case(e.case) not in NO_KEY_CASES  # the same spec
        inference = checker.run(v, e.case, zero, dtype, mode=Mode.INFERENCE) if inferred else None
        left_out = undeclared_absent(family, v.traits, v.map_for(checker.cfg), checker.cfg)
        return dataclasses.replace(e, names=tuple(names), baselines=baselines, truth=truth, computed=computed,
                                   inference=inference, sem64=sem64, left_out=tuple(left_out))

    def with_float32_definition(self, e: Evidence) -> Evidence:
        """``e`` (float64, undeclared) with the definition computed in float32 as its baseline: an
        error within float32's tolerance is that dtype's rounding only while it is as small as
        the definition's own in float32 (``harness.check.rules.float64_check``)."""
        oracle = self.checkers[e.config].oracle(e.family, e.variant.traits, e.case, e.fills, e.dtype,
                                                compute=torch.float32)
        return dataclasses.replace(e, baselines=(oracle,))

    def _lower_baselines(self, e: Evidence, checker: RunCache, ref: Variant | None
                         ) -> tuple[SpecResult | None, tuple[Run, ...]]:
        """A lower dtype's float64 spec, and its baselines: the definition computed in the
        dtype (in a finer declared internal dtype, on inputs and weights rounded to the call's:
        a float16-statistics norm that declares a float32 upcast is held to the upcast), and
        the family reference's run where it computes the same function."""
        family, v, dtype, zero = e.family, e.variant, e.dtype, e.fills
        sem64 = self.check(v, e.config, e.case, "float64")
        baselines = [checker.oracle(family, v.traits, e.case, zero, dtype, compute=dtype)]
        if e.internal and torch.finfo(dtype_of(e.internal)).eps < torch.finfo(dtype).eps:
            baselines = [checker.oracle(family, v.traits, e.case, zero, dtype, compute=dtype_of(e.internal),
                                        through=dtype)]
        if ref is not None and family.semantic_traits(ref.traits) == family.semantic_traits(v.traits):
            ref_run = checker.run(ref, e.case, zero, dtype)
            if not ref_run.error:
                baselines.append(ref_run)
        return sem64, tuple(baselines)

    def state_kept(self, e: Evidence, result: SpecResult) -> str:
        """(float64, first config) how the output depends on an earlier call, or ''."""
        if e.config == next(iter(self.checkers)) and e.dtype == torch.float64 and result.verdict != Verdict.ERROR:
            return call_order_dependence(e.variant, e.case, e.fills, self.checkers[e.config])
        return ""

    def changes(self, e: Evidence, result: SpecResult) -> list[str]:
        """What the call changed: its inputs written in place, its output's dtype; the no-grad
        eval call's too."""
        checker, v, dtype = self.checkers[e.config], e.variant, e.dtype
        changed = list(checker.run(v, e.case, e.fills, dtype).changed)
        if e.family.differentiable:
            inference = checker.run(v, e.case, e.fills, dtype, mode=Mode.INFERENCE)
            changed += [c + " (no-grad eval)" for c in inference.changed]
        return changed

    @staticmethod
    def _reference(variant: Variant, case: str, checker: RunCache) -> Variant | None:
        """The family reference, where it runs on this case and config."""
        ref = reference_of(variant.family)
        if ref is not None and (ref.refuses(checker.cfg, checker.device) or not applicable(ref, case)):
            return None
        return ref

    def _zero(self, variant: Variant, case: str, checker: RunCache) -> Fills:
        ref = self._reference(variant, case, checker)
        return checker.fills(variant) | (checker.fills(ref) if ref else {})


def name_shape_error(run: Run, oracle: Run) -> None:
    """An output of another shape than the oracle's is the run's error (an adapter's mistake,
    named), written into the cached run: the pair matrix and the path comparison read it too."""
    out, want = run.tensors.get("output"), oracle.tensors["output"]
    if not run.error and out is not None and out.shape != want.shape:
        run.error = (f"output shape {tuple(out.shape)} where the oracle's is {tuple(want.shape)} "
                     "(the variant's forward or call adapter returns another shape)")


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


def call_order_dependence(variant: Variant, case: str, zero: Fills, checker: RunCache) -> str:
    """'' when a build called first on other inputs (``RunCache.warmups``), then on this
    case's, gives what a fresh build's call on this case gives (both float64, no-grad eval);
    else ``STATE_KEPT`` and how it shows (an error, another shape, a difference): state kept
    across calls (a table or mask cached at the first length)."""
    seq, said = checker.sequence(variant, case, zero)
    fresh = checker.run(variant, case, zero, torch.float64, mode=Mode.INFERENCE)
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
