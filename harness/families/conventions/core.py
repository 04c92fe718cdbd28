"""The ``Convention`` type: one attention convention defined once, read by every site that
knows conventions (``harness.families.conventions`` lists them).

A convention is a semantic trait of one or more families (its name and vocabulary in each),
the step of the float64 oracle it changes (``oracle``, at ``step``), the canonical parameters
a declared value brings, the cases that exercise it (by name), the regime cases it adds
(drawn from a family's case by name), the mistakes ``explain`` and ``diff`` name for it, the
values ``map``'s search reads off a library module, and the call option a kernel takes it by.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch

from harness.base.errors import SpecError
from harness.families.trait_spec import TraitSpec

Tensor = torch.Tensor
AS_CALLED = "as called"

# The oracle steps a convention may change, in the order the oracle takes them:
# ``scores``: s (B, H, T, S) -> s, after the scale and before the mask (a soft cap, a bias);
# ``softmax``: the masked scores (-inf where a key is not allowed) -> the probabilities
# (B, H, T, S), or None for the plain softmax over the keys (attention sinks: logits that
# join every row's denominator). At most one declared value replaces the softmax.
SCORES, SOFTMAX = "scores", "softmax"
STEPS = (SCORES, SOFTMAX)


@dataclass(frozen=True)
class Context:
    """What an oracle branch may read besides the scores: the call's inputs (a kernel's
    options among them) and the canonical parameters of the module, prefix removed (none for
    a kernel)."""

    inputs: Mapping[str, Any]
    params: Mapping[str, Tensor] = field(default_factory=dict)

    def option(self, name: str | None, value: Any) -> Any:
        """``value``, or the call's ``name`` option where ``value`` is ``as called``."""
        return self.inputs.get(name) if value == AS_CALLED and name else value

    def param(self, name: str, trait: str, value: Any) -> Tensor:
        if name not in self.params:
            raise SpecError(f"{trait}={value!r} reads the canonical parameter {name!r}, which the weights lack")
        return self.params[name]


@dataclass(frozen=True)
class Regime:
    """A case a convention adds to a family: the family's case ``base`` (by name) on the config
    changed by ``changes``, named ``base@label`` (``harness.families.base.regime_case``)."""

    base: str
    label: str
    note: str
    changes: Mapping[str, Any]


# (label, (declared traits, a case's inputs) -> the traits the mistake reads as, or None where
# it does not apply): one mistake a reviewer would name, tried by ``explain`` and ``diff``.
Mistake = tuple[str, Callable[[dict, Mapping[str, Any]], "dict | None"]]


@dataclass(frozen=True)
class Convention:
    """One convention, defined once (see the module docstring).

    ``specs``: family name -> the trait's vocabulary there (every family the convention
    applies to). ``oracle(value, s, ctx)``: the float64 branch at ``step`` (``STEPS``); a
    value that changes nothing returns ``s`` (scores) or None (softmax); a value no branch
    builds raises ``SpecError``. ``params(value, cfg)``: the canonical parameters the value
    brings (name -> (shape, init kind)). ``cases``: family -> the names of its cases that
    exercise the convention; ``regimes``: family -> cases it adds. ``mistakes``: family ->
    the named mistakes. ``probes``: the values a module computes when it leaves the step out
    (tried when the trait is left out of a registration). ``module_attrs``: the attributes of
    a library module, or of its ``config``, that hold the value (``map`` starts from it).
    ``kernel_option``: the name a kernel takes the value by in its call. ``reached(value, s,
    ctx)``: whether this call's scores ``s`` (before the branch) reach the value's effect
    (``harness.families.reach.Reach``; None where the value declares nothing to reach, a cap
    of 0); ``reach_plan(value, worst, family)``: a case of ``family`` that would reach it,
    given the unreached note with the most (``harness.families.reach.ReachPlan``), or None."""

    trait: str
    specs: Mapping[str, TraitSpec]
    step: str
    oracle: Callable[[Any, Tensor, Context], Any]
    params: Callable[[Any, Any], dict] | None = None
    cases: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    regimes: Mapping[str, tuple[Regime, ...]] = field(default_factory=dict)
    mistakes: Mapping[str, tuple[Mistake, ...]] = field(default_factory=dict)
    probes: tuple[Any, ...] = ()
    read_module: Callable[[torch.nn.Module], Any] | None = None
    kernel_option: str | None = None
    reached: Callable[[Any, Tensor, Context], Any] | None = None
    reach_plan: Callable[[Any, Any, str], Any] | None = None

    def __post_init__(self) -> None:
        if self.step not in STEPS:
            raise ValueError(f"convention {self.trait!r}: step {self.step!r} is not one of {list(STEPS)}")
