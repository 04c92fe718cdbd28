"""Names an attention kernel's mistake (and the LLaMA-era mistakes of the attention and norm
families: RoPE layout, K/V grouping, window, gain, eps): which single convention, read another way, makes the
kernel's own float64 run meet the oracle on every case where its declared conventions fail.

The candidates are the family's trait vocabulary (another causal diagonal, another GQA
grouping, another row without keys), what the call passed changed by one (the window's left
or right count +-1, the softcap dropped, the scale left out or taken as 1/d), each turned
into the traits of an oracle per failing case. A kernel that no single change explains has a
computation bug, not a convention: that is said too.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

import torch

from harness.base.config import Config
from harness.base.dtypes import dtype_of
from harness.base.errors import SpecError, UnknownName
from harness.base.masks import one_key_at_most
from harness.base.verdicts import Verdict
from harness.check.own_dtype import gradient_scale, own_dtype_check
from harness.check.runs import RunCache, applicable
from harness.check.spec import expected_names, float64_check
from harness.families import conventions
from harness.families import kernel_oracle as K
from harness.families.base import REQUIRED
from harness.families.catalog import get_family
from harness.registry import Variant, get_variant


def _set(name: str, value: Any) -> Callable[[dict, Mapping[str, Any]], dict | None]:
    return lambda traits, inputs: {**traits, name: value} if traits.get(name) != value else None


def _window(dl: int, dr: int):
    def make(traits, inputs):
        window = K.resolve(traits["window"], inputs["window"])
        if window is None or window[0] + dl < 0 or window[1] + dr < 0:
            return None
        return {**traits, "window": (window[0] + dl, window[1] + dr)}
    return make


def _scale(label: str, of_d: Callable[[int], float]):
    return label, "scale", lambda traits, inputs: (
        {**traits, "scale": of_d(inputs["q"].shape[-1])} if traits["scale"] == K.DEFAULT_SCALE else None)


def candidates() -> list[tuple[str, str, Callable]]:
    """(label, the trait it reads another way, (declared traits, case inputs) -> traits or None)."""
    out = [(f"causal={c!r}", "causal", _set("causal", c)) for c in K.CAUSAL]
    out += [(f"gqa_grouping={g!r}", "gqa_grouping", _set("gqa_grouping", g)) for g in K.GQA_GROUPINGS]
    out += [(f"window left {dl:+d}" if dl else f"window right {dr:+d}", "window", _window(dl, dr))
            for dl, dr in ((1, 0), (-1, 0), (0, 1), (0, -1))]
    out += conventions.mistakes("attention_kernel")    # the softcap ignored, ...
    out += [_scale("no scale (1)", lambda d: 1.0), _scale("scale 1/d", lambda d: 1.0 / d)]
    out += [(f"fully_masked_row={r!r}, fully_masked_grad={g!r}", "fully_masked_row",
             lambda traits, inputs, r=r, g=g: {**traits, "fully_masked_row": r, "fully_masked_grad": g}
             if (traits["fully_masked_row"], traits["fully_masked_grad"]) != (r, g) else None)
            for r in K.DEAD_ROWS for g in K.DEAD_GRADS]
    return out


def _module_window(dl: int):
    def make(traits, inputs):
        window = K.resolve(traits.get("window", "none"), inputs.get("window"))
        if not isinstance(window, tuple) or window[0] + dl < 0:
            return None
        return {**traits, "window": (window[0] + dl, window[1])}
    return make


def _rope_swapped(traits, inputs):
    other = {"half-split": "interleaved", "interleaved": "half-split"}.get(traits.get("rope", "none"))
    return None if other is None else {**traits, "rope": other}


def _eps(value: float):
    return lambda traits, inputs: (
        {**traits, "eps": value} if isinstance(traits.get("eps"), (int, float)) and traits["eps"] != value else None)


# The LLaMA-era mistakes of module families, each named as a reviewer would say it.
MODULE_CANDIDATES: dict[str, list[tuple[str, str, Callable]]] = {
    "attention": [
        ("q/k rows look permuted: interleaved vs half-split RoPE", "rope", _rope_swapped),
        ("K/V heads grouped tile vs repeat_interleave", "gqa_grouping", _set("gqa_grouping", "tiled")),
        ("K/V heads grouped repeat_interleave vs tile", "gqa_grouping", _set("gqa_grouping", "consecutive")),
        ("window off by one (one key more)", "window", _module_window(1)),
        ("window off by one (one key less)", "window", _module_window(-1)),
        *conventions.mistakes("attention"),             # a sink missing, in the numerator, shared by the heads
    ],
    "norm": [
        ("norm gain 1+w vs w", "gain", _set("gain", "1+w")),
        ("norm gain w vs 1+w", "gain", _set("gain", "w")),
        *[(f"eps differs: {e:g}", "eps", _eps(e)) for e in (1e-5, 1e-6, 1e-8, 1e-12)],
    ],
}


def _meets(run, oracle, names: Iterable[str]) -> bool:

    return all(float64_check(n, run.tensors.get(n), oracle.tensors[n], None).verdict == Verdict.EQUIVALENT
               for n in names)


def judged_dtype(variant: Variant, dtype: str | None = None) -> torch.dtype:
    """The dtype a variant's semantics are decided in: float64, or (a kernel that runs only in
    half precision) ``dtype`` when it is one of its own, else the first it declares."""
    own = variant.semantic_dtypes()
    return dtype_of(dtype if dtype in own else own[0])


def meets_spec(variant: Variant, checker: RunCache, case: str, traits: Mapping[str, Any],
               dtype: torch.dtype = torch.float64, internal: str | None = None) -> bool | None:
    """Whether ``variant``'s run in ``dtype`` meets the oracle of ``traits`` on ``case``, by the
    rule that decides its semantics there (float64's bound, or ``harness.check.own_dtype``'s);
    None when it does not run. A combination no oracle builds raises ``SpecError``.
    ``internal``: float64 judged as for a variant declaring that ``internal_dtype``."""
    family = variant.family_spec
    zero = checker.fills(variant)
    run = checker.run(variant, case, zero, dtype)
    if run.error:
        return None
    if dtype == torch.float64:
        oracle = checker.oracle(family, traits, case, zero, torch.float64)
        names = expected_names(family, oracle, checker, variant)
        if internal:
            inner = checker.oracle(family, traits, case, zero, torch.float64, compute=dtype_of(internal))
            return all(float64_check(n, run.tensors.get(n), oracle.tensors[n], internal,
                                     baseline=inner.tensors.get(n)).verdict in (Verdict.EQUIVALENT,
                                                                                Verdict.LESS_PRECISE)
                       for n in names)
        return _meets(run, oracle, names)
    truth = checker.oracle(family, traits, case, zero, dtype, rounded=dtype)
    ref = checker.oracle(family, traits, case, zero, dtype, compute=dtype)
    scale = gradient_scale(truth.tensors)
    return all(own_dtype_check(n, run.tensors.get(n), truth.tensors[n], ref.tensors.get(n), dtype,
                               scale=0.0 if n == "output" else scale).verdict
               == Verdict.EQUIVALENT for n in expected_names(family, truth, checker, variant))


# The values probed for a numeric trait (no vocabulary to enumerate): the ones a module
# computes when it leaves the step out (no 1/sqrt(d) on the scores, no softcap, every dim rotated).
NUMERIC_PROBES: dict[str, tuple[float, ...]] = {"score_scale": (1.0,), "rope_fraction": (1.0,),
                                                **conventions.probes()}   # the softcap's 0, ...


def hidden_by_one_key(variant: Variant, cfg: Config, case: str) -> bool:
    """Whether ``variant`` meets its declared oracle on ``case`` of ``cfg`` once each query
    keeps one key only (the first it may attend; the case's mask otherwise as it is): a
    mistake there is in the scores or their softmax (a scale, a temperature), which a shape
    with one key per query (T = 1 self-attention) cannot show, so its holding there is no
    other path. False where the case has no mask, or the variant does not run."""
    family = variant.family_spec
    checker = RunCache(cfg, record=False)
    inputs = dict(checker.inputs(family, case))
    mask = inputs.get("mask")
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or one_key_at_most(mask):
        return False
    inputs["mask"] = mask & (mask.cumsum(-1) == 1)
    checker._inputs[family.name, case] = inputs
    try:
        return bool(meets_spec(variant, checker, case, family.semantic_traits(variant.traits), judged_dtype(variant)))
    except SpecError:
        return False


def _left_out(family, variant: Variant) -> list[tuple[str, str, Callable]]:
    """Each other value of every trait the family gives a default and a vocabulary (``rope``,
    ``gqa_grouping``, ``gain`` ...), and the ``NUMERIC_PROBES`` of its numeric traits: a
    correct module whose registration left the trait out, or declared another value, fits
    the oracle of the value it computes."""
    out = []
    for name, spec in family.traits.items():
        values = spec.values or NUMERIC_PROBES.get(name, ())
        if spec.default is REQUIRED or not values:
            continue
        for value in values:
            label = f"{name}={value:g}" if isinstance(value, float) else f"{name}={value!r}"
            out.append((label, name, _set(name, value)))
    return out


def convention_fits(variant: Variant, failing: list[tuple[Config, str]], dtype: str | None = None) -> list[str]:
    """The single conventions, read another way, that make ``variant``'s own run meet the
    oracle on every (config, case) of ``failing`` (float64, or its own dtype for a kernel that
    runs only in half precision: ``judged_dtype``): the family's named mistakes, then each
    other value of a trait with a default (a trait left out), each as '<label> (declared ...)'.
    A reading is offered only where it meets what the declared traits miss: none when a
    fresh build meets its declaration on one of ``failing`` (``reproduced``)."""
    family = variant.family_spec
    judged = judged_dtype(variant, dtype)
    declared = family.semantic_traits(variant.traits)
    checkers = {id(cfg): RunCache(cfg, record=False) for cfg, _ in failing}
    if not failing or any(meets_spec(variant, checkers[id(cfg)], case, declared, judged)
                          for cfg, case in failing):
        return []  # a fresh build's run meets its declaration there: no reading fits better
    named = MODULE_CANDIDATES.get(family.name) or candidates()
    left_out = _left_out(family, variant) if family.name in MODULE_CANDIDATES else []
    fits, tried = [], set()
    for label, trait, make in named + left_out:
        generic = (label, trait, make) in left_out
        ok = True
        for index, (cfg, case) in enumerate(failing):
            checker = checkers[id(cfg)]
            traits = make(declared, checker.inputs(family, case))
            if index == 0 and traits is not None:  # a left-out value a named mistake already tried
                seen = repr(sorted(traits.items(), key=lambda kv: kv[0]))
                traits = None if seen in tried else traits
                tried.add(seen)
            try:
                ok = traits is not None and bool(meets_spec(variant, checker, case, traits, judged))
            except SpecError:  # a combination no oracle builds (an additive mask's row of zeros)
                ok = False
            if not ok:
                break
        if ok:
            said = (f"{trait} left out of the traits, read as {declared.get(trait)!r}"
                    if generic and trait not in variant.traits else f"declared {trait}={declared[trait]!r}")
            fits.append(f"{label} ({said})")
    if not variant.traits.get("internal_dtype") and judged == torch.float64 and all(
            meets_spec(variant, checkers[id(cfg)], case, declared, internal=INNER_PROBE) for cfg, case in failing):
        fits.append(f"internal_dtype={INNER_PROBE!r} (left out of the traits: part of the work runs in "
                    f"{INNER_PROBE}, and the definition computed in {INNER_PROBE} errs as much)")
    return fits


# The dtype a module computing partly below float64 is probed with (RoPE tables, a norm's
# statistics in float32 inside a float64 call): ``internal_dtype`` left out.
INNER_PROBE = "float32"


def mistake_line(fits: list[str], failing: list[tuple[Config, str]]) -> str:
    """The one line naming a mistake from ``convention_fits``' answer."""
    cases = ", ".join(dict.fromkeys(case for _, case in failing))
    if fits:
        return f"reads as {' or '.join(fits)} on every failing case ({cases})"
    return (f"no single convention read another way explains it on {cases}: a computation "
            f"mistake, not a convention")


def explain_kernel(variant: Variant, failing: Iterable[tuple[Config, str]], dtype: str | None = None) -> str:
    """One line naming the mistake of ``variant`` over its failing (config, case) pairs
    (float64, or its own dtype): the single convention change that fits them all, or that
    none does."""
    failing = list(failing)
    if not failing:
        return ""
    return mistake_line(convention_fits(variant, failing, dtype), failing)


def failing_cases(report, variant_id: str, configs: Mapping[str, Config],
                  family: str = "attention_kernel") -> list[tuple[Config, str]]:
    """The (config, case) pairs where ``variant_id`` of ``family`` is different in float64
    (a config the family adds to the matrix, the attention family's GQA one, included),
    less those whose output depends on the calls before it (``SpecResult.depends_on_earlier_calls``:
    no convention explains state kept between calls; ``stateful_cases`` names them)."""
    every = get_family(family).configs_of(configs) | dict(configs)
    judged = _judged_name(report, family, variant_id)
    return [(every[s.config], s.case) for s in report.specs
            if s.family == family and s.variant == variant_id and s.dtype == judged
            and not s.ok and s.verdict == Verdict.DIFFERENT and s.config in every
            and not s.depends_on_earlier_calls]


def stateful_cases(report, variant_id: str, family: str) -> list[str]:
    """The cases where ``variant_id``'s output depends on the calls before it."""
    return list(dict.fromkeys(s.case for s in report.specs if s.family == family and s.variant == variant_id
                              and s.depends_on_earlier_calls))


def _failing_dtype(report, family: str, variant_id: str) -> str | None:
    """The first dtype a variant's spec is different in (its own dtype, for a half-only kernel)."""
    return next((s.dtype for s in report.specs if s.family == family and s.variant == variant_id
                 and not s.ok and s.verdict == Verdict.DIFFERENT), None)


def _judged_name(report, family: str, variant_id: str) -> str:
    """The dtype whose failing specs name the mistake: float64, or a half-only kernel's own."""
    try:
        variant = get_variant(family, variant_id)
    except UnknownName:  # a report read after its variant left the registry
        return "float64"
    return str(judged_dtype(variant, _failing_dtype(report, family, variant_id))).replace("torch.", "")



def own_failing_cases(variant: Variant, cfg: Config) -> list[tuple[Config, str]]:
    """The cases of ``cfg`` where ``variant``'s own run (float64, or its own dtype) misses the
    oracle of the traits it declares (what ``check`` calls different there), without a report."""
    family = variant.family_spec
    if variant.refuses(cfg, "cpu"):
        return []
    checker, declared = RunCache(cfg, record=False), family.semantic_traits(variant.traits)
    judged = judged_dtype(variant)
    return [(cfg, case) for case in (c.name for c in family.cases if applicable(variant, c.name))
            if meets_spec(variant, checker, case, declared, judged) is False]


def name_mistakes(family: str, variants: Iterable[Variant], cfg: Config) -> dict[str, str]:
    """For ``diff``: each variant's mistake, named as ``check`` names it, over the cases of
    ``cfg`` where it misses its own declared oracle in float64 (a variant that meets its
    spec everywhere, or a module family's computation bug, has no line)."""
    if family != "attention_kernel" and family not in MODULE_CANDIDATES:
        return {}
    out = {}
    for variant in variants:
        failing = own_failing_cases(variant, cfg)
        if not failing:
            continue
        line = explain_kernel(variant, failing)
        if family == "attention_kernel" or not line.startswith("no single"):
            out[variant.id] = line
    return out


def explain_mistake(family: str, variant_id: str, report, configs: Mapping[str, Config]) -> str:
    """One line naming a failing variant's mistake, for the families whose conventions are
    enumerable traits: attention kernels, and the attention and norm families' LLaMA-era
    conventions and left-out traits (empty for others, when no float64 case fails, or for a
    module's computation bug: the first divergence says where)."""
    fits = mistake_fits(family, variant_id, report, configs)
    if fits is None:
        return ""
    failing, found = fits
    if family != "attention_kernel" and not found:
        return ""
    return mistake_line(found, failing)


def mistake_fits(family: str, variant_id: str, report, configs: Mapping[str, Config]
                 ) -> tuple[list[tuple[Config, str]], list[str]] | None:
    """(the failing float64 (config, case) pairs, the conventions that fit them all) of a
    variant of a family with named mistakes; None where nothing is probed."""
    if family != "attention_kernel" and family not in MODULE_CANDIDATES:
        return None
    failing = failing_cases(report, variant_id, configs, family)
    if not failing:
        return None
    try:
        variant = get_variant(family, variant_id)
    except UnknownName:  # a report read after its variant left the registry: nothing to probe
        return None
    return failing, convention_fits(variant, failing, _failing_dtype(report, family, variant_id))
