"""Map search, the traits: which declared semantics a module may have, tried with its map.

A module found by ``map`` is compared with the family's float64 oracle, not with one
registered variant, so a module computing other semantics than the reference (RoPE, K/V
heads tiled, RMSNorm's gain 1 + w) is found with its traits. The trait sets tried are the
reference's, then those that change one of its semantic traits, then two,
each over the values the family's oracle knows (numbers: the module's own ``eps``, common
epsilons, RoPE fractions 1, 1/2 and 1/4). Trait sets whose oracle gives the same output on
the first case as an earlier one are dropped (the earlier has fewer changes).

Agreement in float64: within float64's bound (equivalent), or within float32's (the module
computes part of its work in float32 whatever its input dtype, as Hugging Face's rotary
tables and RMSNorm do: declared ``internal_dtype: "float32"``).
"""

from __future__ import annotations

import itertools
from typing import Any, Iterator

import torch

from harness.base.dtypes import dtype_of
from harness.base.errors import SpecError
from harness.base.verdicts import Verdict
from harness.check import precision as P
from harness.check.rules import float64_check
from harness.check.runs import RunCache, run_variant
from harness.families import conventions
from harness.families.base import REQUIRED, Family
from harness.families.no_key_rows import ByDtype
from harness.porting.portmap import absent_fills
from harness.registry import Variant

MAX_CHANGES = 2
MAX_TRAIT_SETS = 400
NUMBERS = {"eps": (1e-5, 1e-6, 1e-12, 1e-8), "rope_fraction": (1.0, 0.5, 0.25)}
WINDOWS = ("none", "as called")
EPS_ATTRS = ("eps", "variance_epsilon", "epsilon", "layer_norm_eps", "rms_norm_eps")


def _own_eps(module: torch.nn.Module) -> float | None:
    values = [getattr(module, name, None) for name in EPS_ATTRS]
    return next((v for v in values if isinstance(v, float)), None)


def module_eps(module: torch.nn.Module) -> float | None:
    """The epsilon a norm module keeps (``eps``, HF's ``variance_epsilon``), if one; else the one
    its sub-modules all keep (an attention's QK-norms: Qwen3's ``q_norm`` and ``k_norm``)."""
    own = _own_eps(module)
    if own is not None:
        return own
    inner = {_own_eps(m) for m in module.modules() if m is not module} - {None}
    return inner.pop() if len(inner) == 1 else None


def module_numbers(module: torch.nn.Module, family: str = "attention") -> dict[str, Any]:
    """Values an attention module keeps that the family declares as traits: its score scale
    when it is not 1/sqrt(head_dim) (HF's ``scaling``: Gemma 2's query_pre_attn_scalar ** -0.5)
    and each convention's (``Convention.read_module``: Gemma 2's logit soft-cap, gpt-oss's
    sinks), read from the module or its config: the search starts from them instead of the
    reference's."""
    out: dict[str, Any] = {}
    scaling, head_dim = getattr(module, "scaling", None), getattr(module, "head_dim", None)
    if isinstance(scaling, float) and isinstance(head_dim, int) and head_dim > 0 \
            and abs(scaling - head_dim ** -0.5) > 1e-12 * scaling:
        out["score_scale"] = scaling
    out.update(conventions.module_values(module, family))
    return out


def _values(family: Family, name: str, base: Any, eps: float | None) -> list[Any]:
    spec = family.traits[name]
    values = list(spec.values)
    if spec.number:
        values += [v for v in ((eps,) if name == "eps" and eps is not None else ()) + NUMBERS.get(name, ())]
    if name == "window":
        values += list(WINDOWS)
    out = [base] + [v for v in dict.fromkeys(values) if v != base]
    return out


def trait_sets(family: Family, ref_traits: dict, module: torch.nn.Module, searched: set[str] | None = None
               ) -> Iterator[dict]:
    """The reference's semantic traits (its eps replaced by the module's own), then the sets
    changing 1 .. ``MAX_CHANGES`` of them; at most ``MAX_TRAIT_SETS``."""
    case_traits = {t for names in family.case_semantic.values() for t in names}
    eps = module_eps(module)
    base = {t: ref_traits.get(t, spec.default) for t, spec in family.traits.items()
            if t not in case_traits and (t in ref_traits or spec.default is not REQUIRED)}
    if eps is not None and "eps" in base:
        base["eps"] = eps
    base.update({t: v for t, v in module_numbers(module, family.name).items() if t in family.traits})
    names = [t for t in base if searched is None or t in searched]
    choices = {t: _values(family, t, base[t], eps)[1:] for t in names}
    yielded = 0
    for changes in range(0, MAX_CHANGES + 1):
        for combo in itertools.combinations(names, changes):
            for values in itertools.product(*(choices[t] for t in combo)):
                if yielded >= MAX_TRAIT_SETS:
                    return
                yielded += 1
                yield {**base, **dict(zip(combo, values))}


def search_fills(checker, variant):
    """Every canonical parameter a candidate's map reads as a constant, at that constant: the
    search compares a candidate before its traits are known (``RunCache.fills`` keeps a norm
    parameter left out without the traits saying so at its canonical value; the printed
    registration's check does that)."""
    return absent_fills(variant.map_for(checker.cfg))


def agreement(got: torch.Tensor, want: torch.Tensor) -> str | None:
    """"float64" when ``got`` is within float64's bound of ``want``, "float32" within
    float32's, else None."""
    if got.shape != want.shape:
        return None
    rtol, atol = P.DEFAULT_TOLERANCE[torch.float32]
    if not torch.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True):  # the quick refusal
        return None
    g = P.gap(got, want)
    if not g.comparable:
        return None
    if g.within(P.FLOAT64_ATOL):
        return "float64"
    return "float32" if P.within(got, want, rtol, atol) else None


def infer_case_traits(checker, family, variant, base, ref_traits, semantic_cases, *, uses_mask, case_ok):
    """The family's semantic traits: those of the trait set the module agrees with on the
    plain cases (``base``); on a case with traits of its own (a fully masked row), the values
    whose float64 oracle (``harness.families.oracles``) the module agrees with there. A case
    where none agrees (or that the call form cannot run) is left out of the module's cases
    (returned as undecided); its traits, which the oracle still reads elsewhere, are then
    the values its output alone agrees with, else the reference's, said in a note."""
    full = family.semantic_traits({**ref_traits, **base})
    traits: dict = {}
    notes, undecided = [], []
    allowed = ("float64", "float32") if variant.traits.get("internal_dtype") else ("float64",)
    for case in sorted(semantic_cases):
        names = family.case_semantic[case]
        fallback = {n: full[n] for n in names if n in full}
        if not uses_mask or not case_ok(case):
            traits.update(fallback)
            undecided.append(case)
            notes.append(f"{', '.join(names)}: '{case}' is not run with this call form; declared "
                         + ", ".join(f"{n} = {v!r}" for n, v in fallback.items()) + " (the reference's, not exercised)")
            continue
        zero = search_fills(checker, variant)
        run = checker.run(variant, case, zero, torch.float64)
        if run.error:
            notes.append(f"{', '.join(names)}: the module fails on '{case}' ({run.error}); declare them yourself")
            traits.update(fallback)
            undecided.append(case)
            continue
        options = [family.traits[n].values or (full.get(n),) for n in names]
        matches, on_output = [], []
        for combo in itertools.product(*options):
            spec = {**full, **dict(zip(names, combo))}
            try:
                oracle = checker.oracle(family, spec, case, zero, torch.float64)
            except (SpecError, RuntimeError):  # a combination no module can have, or an oracle that fails
                continue
            levels = {n: agreement(t, oracle.tensors[n]) for n, t in run.tensors.items() if n in oracle.tensors}
            if levels and all(lv in allowed for lv in levels.values()):
                matches.append(dict(zip(names, combo)))
            elif levels.get("output") in allowed:
                on_output.append(dict(zip(names, combo)))
        if not matches:
            nan = any(t.is_floating_point() and bool(t.isnan().any()) for t in run.tensors.values())
            pick = on_output[0] if on_output else fallback
            traits.update(pick)
            notes.append(f"{', '.join(names)}: on '{case}' no oracle of the known values agrees"
                         + (" (the module gives NaN there in float64)" if nan else "")
                         + f"; '{case}' is left out of its cases, declared "
                         + ", ".join(f"{n} = {v!r}" for n, v in pick.items())
                         + (" (its output alone agrees)" if on_output else " (the reference's)"))
            undecided.append(case)
            continue
        defaults = {n: family.traits[n].default for n in names}
        pick = max(matches, key=lambda m: sum(m[n] == defaults[n] for n in names))
        low = _float32_pick(checker, family, variant, case, zero, full, names, options, pick)
        by_dtype = low is not None and low != pick
        if by_dtype:  # the module's rows without keys differ in float32: declared per dtype
            pick = {n: pick[n] if low[n] == pick[n] else ByDtype(float64=pick[n], other=low[n]) for n in names}
        traits.update({n: v for n, v in pick.items() if n in ref_traits or v != defaults[n]})
        shown = ", ".join(f"{n} = {v!r}" for n, v in pick.items())
        notes.append(f"{shown}: on '{case}' the module agrees with that oracle"
                     + (" in float64 and in float32 (bfloat16 and float16 read as float32's, not run)"
                        if by_dtype else "")
                     + (f" (and {len(matches) - 1} other value set(s) it cannot tell apart)"
                        if len(matches) > 1 else ""))
    return traits, notes, undecided


def _float32_pick(checker, family, variant, case, zero, full, names, options, pick) -> dict | None:
    """The values of ``names`` whose oracle the module agrees with on ``case`` in float32 (the
    float64 ``pick`` when it is among them), or None where none does or the run fails: one more
    run, which tells a row whose value depends on the dtype (a finfo.min bias that becomes -inf
    in a float32 softmax only in float64)."""
    run = checker.run(variant, case, zero, torch.float32)
    if run.error:
        return None
    found = []
    for combo in itertools.product(*options):
        spec = {**full, **dict(zip(names, combo))}
        try:
            oracle = checker.oracle(family, spec, case, zero, torch.float32)
        except (SpecError, RuntimeError):
            continue
        levels = [agreement(t, oracle.tensors[n]) for n, t in run.tensors.items() if n in oracle.tensors]
        if levels and all(lv in ("float64", "float32") for lv in levels):
            found.append(dict(zip(names, combo)))
    same = [m for m in found if m == {n: pick[n] for n in names}]
    return (same or found or [None])[0]


def verify_case(checker: RunCache, variant: Variant, spec: dict, case: str) -> bool:
    """Output and every gradient within float64's bound of the oracle of ``spec``; for a module
    that declares ``internal_dtype``, within that dtype's tolerance or as close as the spec
    check allows it (``harness.check.verdict``: its RMS error against the definition computed
    in that dtype)."""
    family = variant.family_spec
    zero = search_fills(checker, variant)
    oracle = checker.oracle(family, spec, case, zero, torch.float64)
    run = run_variant(variant, checker.cfg, checker.inputs(family, case), checker.weights(family, zero, spec),
                      torch.float64, record=False)
    if run.error or oracle.error:
        return False
    internal = variant.traits.get("internal_dtype")
    allowed = ("float64", "float32") if internal else ("float64",)
    inner = None
    for name, t in run.tensors.items():
        if name not in oracle.tensors or agreement(t, oracle.tensors[name]) in allowed:
            continue
        if not internal:
            return False
        if inner is None:
            inner = checker.oracle(family, spec, case, zero, torch.float64, compute=dtype_of(internal))
        if float64_check(name, t, oracle.tensors[name], internal,
                         baseline=inner.tensors.get(name)).verdict != Verdict.LESS_PRECISE:
            return False
    return True
