"""What the run cache (``harness.check.runs.RunCache``) keys a run by: frozen, hashable values,
a variant's run by ``RunKey`` (its ``Mode`` a member, not a string) and an oracle's by
``OracleKey``; the fills a run reads are frozen into the key."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Mapping

import torch


class Mode(enum.Enum):
    """How a variant's module is called."""

    AUTOGRAD = "autograd"    # forward and backward
    INFERENCE = "inference"  # forward only, under torch.no_grad() in eval mode (torch's fast paths)
    SEQUENCE = "sequence"    # one build called on other inputs first, then on the case's (no-grad eval)


def frozen_fills(fills: Mapping[str, float]) -> frozenset[tuple[str, float]]:
    """The fills (canonical name: the value it reads as) as a key: equal fills, equal keys."""
    return frozenset(fills.items())


@dataclass(frozen=True)
class RunKey:
    variant: str  # family/id
    case: str
    fills: frozenset[tuple[str, float]]
    dtype: torch.dtype
    device: str
    mode: Mode


@dataclass(frozen=True)
class OracleKey:
    family: str
    semantic: tuple[tuple[str, Any], ...]  # the semantic traits the oracle is built from, sorted
    case: str
    fills: frozenset[tuple[str, float]]
    dtype: torch.dtype    # the dtype of the run it is compared with
    compute: torch.dtype  # the dtype it computes in
    rounded: torch.dtype | None
    through: torch.dtype | None
