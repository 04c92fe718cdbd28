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

from harness.check import precision as P
from harness.families.base import REQUIRED, Family

MAX_CHANGES = 2
MAX_TRAIT_SETS = 400
NUMBERS = {"eps": (1e-5, 1e-6, 1e-12, 1e-8), "rope_fraction": (1.0, 0.5, 0.25)}
WINDOWS = ("none", "as called")
EPS_ATTRS = ("eps", "variance_epsilon", "epsilon", "layer_norm_eps", "rms_norm_eps")


def module_eps(module: torch.nn.Module) -> float | None:
    """The epsilon a norm module keeps (``eps``, HF's ``variance_epsilon``), if one."""
    for name in EPS_ATTRS:
        value = getattr(module, name, None)
        if isinstance(value, float):
            return value
    return None


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
