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
from harness.base.verdicts import Verdict
from harness.check.runs import RunCache, applicable
from harness.check.spec import expected_names, float64_check
from harness.families import kernel_oracle as K
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
    out.append(("the softcap ignored", "softcap", lambda traits, inputs: (
        {**traits, "softcap": 0} if K.resolve(traits["softcap"], inputs["softcap"]) else None)))
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


def explain_kernel(variant: Variant, failing: Iterable[tuple[Config, str]]) -> str:
    """One line naming the mistake of ``variant`` over its failing (config, case) pairs
    (float64): the single convention change that fits them all, or that none does."""
    family = variant.family_spec
    declared = family.semantic_traits(variant.traits)
    failing = list(failing)
    if not failing:
        return ""
    checkers = {id(cfg): RunCache(cfg, record=False) for cfg, _ in failing}
    fits = []
    for label, trait, make in MODULE_CANDIDATES.get(family.name) or candidates():
        ok = True
        for cfg, case in failing:
            checker = checkers[id(cfg)]
            zero = checker.fills(variant)
            traits = make(declared, checker.inputs(family, case))
            run = checker.run(variant, case, zero, torch.float64) if traits is not None else None
            if traits is None or run.error:
                ok = False
                break
            oracle = checker.oracle(family, traits, case, zero, torch.float64)
            if not _meets(run, oracle, expected_names(family, oracle, checker, variant)):
                ok = False
                break
        if ok:
            fits.append(f"{label} (declared {trait}={declared[trait]!r})")
    cases = ", ".join(dict.fromkeys(case for _, case in failing))
    if fits:
        return f"reads as {' or '.join(fits)} on every failing case ({cases})"
    return (f"no single convention read another way explains it on {cases}: a computation "
            f"mistake, not a convention")


def failing_cases(report, variant_id: str, configs: Mapping[str, Config],
                  family: str = "attention_kernel") -> list[tuple[Config, str]]:
    """The (config, case) pairs where ``variant_id`` of ``family`` is different in float64
    (a config the family adds to the matrix, the attention family's GQA one, included)."""
    every = get_family(family).configs_of(configs) | dict(configs)
    return [(every[s.config], s.case) for s in report.specs
            if s.family == family and s.variant == variant_id and s.dtype == "float64"
            and not s.ok and s.verdict == Verdict.DIFFERENT and s.config in every]



def own_failing_cases(variant: Variant, cfg: Config) -> list[tuple[Config, str]]:
    """The cases of ``cfg`` where ``variant``'s own float64 run misses the oracle of the
    traits it declares (what ``check`` calls different in float64), without a report."""
    family = variant.family_spec
    if variant.supports(cfg):
        return []
    checker, declared = RunCache(cfg, record=False), family.semantic_traits(variant.traits)
    zero = checker.fills(variant)
    out = []
    for case in (c.name for c in family.cases if applicable(variant, c.name)):
        run = checker.run(variant, case, zero, torch.float64)
        if run.error:
            continue
        oracle = checker.oracle(family, declared, case, zero, torch.float64)
        if not _meets(run, oracle, expected_names(family, oracle, checker, variant)):
            out.append((cfg, case))
    return out


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
    conventions (empty for others, or when no float64 case fails)."""
    if family != "attention_kernel" and family not in MODULE_CANDIDATES:
        return ""
    failing = failing_cases(report, variant_id, configs, family)
    if family != "attention_kernel" and not failing:
        return ""
    explained = explain_kernel(get_variant(family, variant_id), failing)
    if family != "attention_kernel" and explained.startswith("no single"):
        return ""  # a module's computation bug: the first divergence below says where
    return explained
