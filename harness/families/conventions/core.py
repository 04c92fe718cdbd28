"""The ``Convention`` type: one attention convention defined once, read by every site that
knows conventions (``harness.families.conventions`` lists them).

A convention is a semantic trait of one or more families (its name and vocabulary in each),
the step of the float64 oracle it changes (``oracle``, at ``step``), the canonical parameters
a declared value brings, the call option a kernel takes it by (``KernelOption``), the cases
whose call passes that option (``OptionCase``), the regime cases it adds (drawn from a
family's case by name, for every variant or only for those declaring it), the mistakes
``explain`` and ``diff`` name for it, and the values ``map``'s search reads off a library
module.
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
    changed by ``changes``, named ``base@label`` (``harness.families.base.regime_case``).
    ``declared_only``: the case runs only for the variants that declare a value of the
    convention's trait other than its default (ALiBi's head count off a power of two: nothing
    to the variants without ALiBi, and check time)."""

    base: str
    label: str
    note: str
    changes: Mapping[str, Any]
    declared_only: bool = False


def _as_given(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class KernelOption:
    """The call option an attention kernel takes a convention's value by (flash-attention's
    names): ``name``; ``called(cfg)``: what a case passes where it does not exercise the
    option (softcap: the config's cap; ALiBi: None), a value other than ``off`` making the
    config one a kernel without the option cannot run; ``exercised(cfg)``: what the
    convention's ``OptionCase`` passes (softcap: the config's cap or 2.0; ALiBi: the standard
    slopes of the config's head count); ``to_call``: the value as the kernel receives it
    (softcap: a float); ``off``: the value that asks for nothing, the call's default."""

    name: str
    called: Callable[[Any], Any]
    exercised: Callable[[Any], Any]
    to_call: Callable[[Any], Any] = _as_given
    off: Any = None

    def set_by(self, cfg: Any) -> bool:
        """Whether ``cfg`` has every case pass the option (a kernel without it cannot run it)."""
        value = self.called(cfg)
        return value is not None and value != self.off


@dataclass(frozen=True)
class OptionCase:
    """A case a convention adds to the kernel family: its case ``base`` (by name), the call
    passing the convention's ``KernelOption`` at its ``exercised`` value, named ``name``. A
    kernel whose signature lacks the option is not run on it; ``declared_only``: only the
    kernels declaring a value of the trait other than its default run it."""

    name: str
    base: str
    note: str
    declared_only: bool = False


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
    brings (name -> (shape, init kind)). ``cases``: family -> the ``OptionCase``s it adds
    (the kernel family's, whose call passes ``kernel_option``); ``regimes``: family -> the
    regime cases it adds. ``mistakes``: family ->
    the named mistakes. ``probes``: the values a module computes when it leaves the step out
    (tried when the trait is left out of a registration). ``module_attrs``: the attributes of
    a library module, or of its ``config``, that hold the value (``map`` starts from it).
    ``kernel_option``: the option a kernel takes the value by in its call (``KernelOption``:
    ``harness.register_kernel`` passes it to a function whose signature names it, and an
    ``as called`` value reads it). ``reached(value, s,
    ctx)``: whether this call's scores ``s`` (before the branch) reach the value's effect
    (``harness.families.reach.Reach``; None where the value declares nothing to reach, a cap
    of 0); ``reach_plan(value, worst, family)``: a case of ``family`` that would reach it,
    given the unreached note with the most (``harness.families.reach.ReachPlan``), or None."""

    trait: str
    specs: Mapping[str, TraitSpec]
    step: str
    oracle: Callable[[Any, Tensor, Context], Any]
    params: Callable[[Any, Any], dict] | None = None
    cases: Mapping[str, tuple[OptionCase, ...]] = field(default_factory=dict)
    regimes: Mapping[str, tuple[Regime, ...]] = field(default_factory=dict)
    mistakes: Mapping[str, tuple[Mistake, ...]] = field(default_factory=dict)
    probes: tuple[Any, ...] = ()
    read_module: Callable[[torch.nn.Module], Any] | None = None
    kernel_option: KernelOption | None = None
    reached: Callable[[Any, Tensor, Context], Any] | None = None
    reach_plan: Callable[[Any, Any, str], Any] | None = None

    def __post_init__(self) -> None:
        if self.step not in STEPS:
            raise ValueError(f"convention {self.trait!r}: step {self.step!r} is not one of {list(STEPS)}")
        if any(self.cases.values()) and self.kernel_option is None:
            raise ValueError(f"convention {self.trait!r}: its cases pass its kernel option, and it has none")
