"""Whether a case reached a declared trait's effect: a window wider than every case's keys,
a soft cap far above every score, a RoPE scaling that acts only beyond positions no case has
is declared and never exercised, and a module that leaves it out checks clean.

Each definition says, where it is applied in the float64 oracle, whether this call reached
it (``note(Reach(...))``): the window in ``harness.families.kernel_oracle``, each convention
through its ``Convention.reached`` (``harness.families.conventions``), a RoPE scaling in
``harness.families.rope_scaling``. ``recording()`` gathers the notes of one oracle run (the
check records its float64 spec runs); outside it ``note`` does nothing and ``active()`` is
False, so the oracle pays nothing for it elsewhere. ``harness.check.reach`` reads them: a
declaration no checked case reached is reported as *not exercised*, after the family's
``ReachPlan`` (a case on a config that reaches it, within ``MAX_KEYS``) was tried."""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

from harness.base.defaults import FLOAT64_ATOL, FLOAT64_RTOL  # noqa: F401 (FLOAT64_ATOL: read by the rules)

# The most keys a case added to reach a declaration may have: a window of 4096 (Mistral's) and
# 64 more. Measured on this project's 2-core CPU at B = 1, H = 2, d_k = 8, float64, one thread:
# the oracle's forward and backward take 3.1 s at 4160 keys (1.1 s at 2112); the added case's
# runs (the oracle's, the variant's, its no-grad eval) add 2.6 s of CPU to a variant's check
# (0.9 s at 2112) and raise its peak memory from 0.37 to 1.5 GB (0.66 GB at 2112), which grows
# as the square of the keys (docs/verdicts.md).
MAX_KEYS = 4160
MARGIN = 64   # keys beyond a window's span the added case has
MAX_SCALE = 1e4   # harness.base.config's bound on the input scale


def bends(a: float, b: float) -> bool:
    """Whether ``b`` differs from ``a`` by more than the float64 spec's tolerance."""
    return abs(a - b) > FLOAT64_ATOL + FLOAT64_RTOL * abs(a)


@dataclass(frozen=True)
class Reach:
    """One oracle call's evidence about one trait: ``reached`` whether its effect showed on
    this call's inputs; ``amount`` what the call had of what it takes (keys, |score|, a
    position), ``needed`` how much it takes, and ``unreached`` the reason said when no case
    reached it, ``{amount}`` and ``{needed}`` the largest amount any case had and the need."""

    trait: str
    reached: bool
    amount: float
    needed: float
    unreached: str

    def why(self) -> str:
        return self.unreached.format(amount=_number(self.amount), needed=_number(self.needed))


@dataclass(frozen=True)
class ReachPlan:
    """A case that reaches a declaration: the first of the family's ``cases`` the variant takes,
    on a config of its own (``config``: the family's first config changed by ``changes``, such
    as lengths past a window at B = 1 and a few small heads, its inputs scaled by ``scale``),
    with ``keys`` keys; tried only when ``keys <= MAX_KEYS``. A plan whose scale was read off
    a case at another scale is tried again from the config it made (``harness.check.reach``)."""

    cases: tuple[str, ...]
    changes: Mapping[str, Any] = field(default_factory=dict)
    keys: int = 0
    scale: float = 1.0    # a factor on the config's input scale (the scores grow as its square)

    @property
    def affordable(self) -> bool:
        return self.keys <= MAX_KEYS

    def config(self, base: Any) -> Any:
        """``base`` (a ``Config``) with the plan's changes and its input scale times ``scale``;
        None where that scale passes the config's bound (``MAX_SCALE``)."""
        scale = base.scale * self.scale
        return base.replace(**{**dict(self.changes), "scale": scale}) if scale <= MAX_SCALE else None


def _number(x: float) -> str:
    return f"{int(x)}" if float(x).is_integer() else f"{x:.3g}"


_SEEN: ContextVar[list | None] = ContextVar("harness_reach", default=None)


@contextlib.contextmanager
def recording(on: bool = True) -> Iterator[list[Reach]]:
    """The ``Reach`` notes of the oracle calls made inside, in order (none when not ``on``)."""
    seen: list[Reach] = []
    if not on:
        yield seen
        return
    token = _SEEN.set(seen)
    try:
        yield seen
    finally:
        _SEEN.reset(token)


def active() -> bool:
    return _SEEN.get() is not None


def note(reach: Reach) -> None:
    seen = _SEEN.get()
    if seen is not None:
        seen.append(reach)
