"""The conventions, each defined once (``core.Convention``): its trait in each family, its
oracle branch, its kernel option and the cases passing it, its regime cases, its named
mistakes, what ``map`` reads off a module. The attention families' vocabulary and cases,
the oracle, ``register_kernel``'s call, ``check``, ``explain``/``diff``, ``map`` and the
docs read them from ``CONVENTIONS``; adding one is one module here and its line below
(docs/add-a-convention.md)."""

from __future__ import annotations

from typing import Any, Mapping

import torch

from harness.families import reach
from harness.families.conventions import alibi, sinks, softcap
from harness.families.conventions.core import (
    SCORES,
    SOFTMAX,
    Context,
    Convention,
    KernelOption,
    OptionCase,
    Regime,
)
from harness.families.trait_spec import TraitSpec

CONVENTIONS: tuple[Convention, ...] = (
    softcap.SOFTCAP,
    sinks.SINKS,
    alibi.ALIBI,
)


def of_family(family: str) -> tuple[Convention, ...]:
    return tuple(c for c in CONVENTIONS if family in c.specs)


def trait_specs(family: str) -> dict[str, TraitSpec]:
    """The family's convention traits and their vocabulary, in ``CONVENTIONS``' order."""
    return {c.trait: c.specs[family] for c in of_family(family)}


def values(traits: Mapping[str, Any], family: str) -> tuple[tuple[str, Any], ...]:
    """(trait, value) of each of the family's conventions, its default where not declared."""
    return tuple((c.trait, traits.get(c.trait, c.specs[family].default)) for c in of_family(family))


def trait_params(family: str, traits: Mapping[str, Any], cfg: Any) -> dict:
    """The canonical parameters the declared values bring (``Convention.params``)."""
    out: dict = {}
    for c in of_family(family):
        if c.params is not None:
            out.update(c.params(traits.get(c.trait, c.specs[family].default), cfg))
    return out


def regimes(family: str) -> tuple[tuple[str, Regime], ...]:
    """(trait, regime) of each regime case the family's conventions add."""
    return tuple((c.trait, r) for c in of_family(family) for r in c.regimes.get(family, ()))


def option_cases(family: str) -> tuple[tuple[str, KernelOption, OptionCase], ...]:
    """(trait, kernel option, case) of each case the family's conventions add whose call
    passes the option (``Convention.cases``)."""
    return tuple((c.trait, c.kernel_option, case) for c in of_family(family) if c.kernel_option
                 for case in c.cases.get(family, ()))


def mistakes(family: str) -> list[tuple[str, str, Any]]:
    """(label, trait, make) of the family's named convention mistakes (``core.Mistake``)."""
    return [(label, c.trait, make) for c in of_family(family) for label, make in c.mistakes.get(family, ())]


def probes() -> dict[str, tuple[Any, ...]]:
    return {c.trait: c.probes for c in CONVENTIONS if c.probes}


def module_values(module: torch.nn.Module, family: str) -> dict[str, Any]:
    """The values of the family's conventions a library module keeps (``Convention.read_module``)."""
    out = {}
    for c in of_family(family):
        value = c.read_module(module) if c.read_module else None
        if value is not None:
            out[c.trait] = value
    return out


def kernel_options() -> tuple[KernelOption, ...]:
    """The call options kernels take conventions' values by, in ``CONVENTIONS``' order."""
    return tuple(c.kernel_option for c in CONVENTIONS if c.kernel_option)


def scores(traits: Mapping[str, Any], s: torch.Tensor, ctx: Context) -> torch.Tensor:
    """``s`` through the ``scores`` branch of each convention ``traits`` holds."""
    for c in CONVENTIONS:
        if c.step == SCORES and c.trait in traits:
            if c.reached is not None and reach.active() and (note := c.reached(traits[c.trait], s, ctx)):
                reach.note(note)
            s = c.oracle(traits[c.trait], s, ctx)
    return s


def reach_plan(family: str, trait: str, value: Any, worst: Any) -> Any:
    """The case the convention ``trait`` names to reach ``value`` in ``family`` (``Convention.reach_plan``), or None."""
    c = next((c for c in of_family(family) if c.trait == trait), None)
    return c.reach_plan(value, worst, family) if c is not None and c.reach_plan else None


def softmax(traits: Mapping[str, Any], s: torch.Tensor, ctx: Context) -> torch.Tensor:
    """The probabilities over the masked scores ``s``: the ``softmax`` branch of the
    convention ``traits`` declares one for, else the plain softmax over the keys."""
    for c in CONVENTIONS:
        if c.step == SOFTMAX and c.trait in traits:
            p = c.oracle(traits[c.trait], s, ctx)
            if p is not None:
                return p
    return torch.softmax(s, dim=-1)
