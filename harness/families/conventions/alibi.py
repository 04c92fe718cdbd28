"""ALiBi, attention with linear biases (Press, Smith and Lewis, "Train Short, Test Long",
2022; BLOOM, MPT, Falcon with ``alibi=True``): no positional embedding; each head h adds to
its scores, after the scale and before the mask, a bias linear in the distance from the
query to the key:

    s(i, j) += -m_h * (pos(i) - pos(j))       m_h: the head's slope

which the softmax reads as ``m_h * pos(j)`` plus a constant per query row (the softmax is
blind to it): the bias depends on the key alone, the same for a key before or after the
query (the causal form; BLOOM's and MPT's tensors are built this way). The oracle adds
``m_h * (pos(j) - pos(last key))``, 0 on the last key and negative before it.

Slopes, for any head count H (the paper's reference code, BLOOM's ``build_alibi_tensor``,
MPT's ``gen_slopes`` give the same): for n the largest power of two <= H, m_k = 2^(-8k/n),
k = 1..n; the H - n heads left take the odd-indexed slopes of the 2n recipe,
2^(-8k/(2n)), k = 1, 3, 5, ... (H = 6: 2^-2, 2^-4, 2^-6, 2^-8, 2^-1, 2^-3).

What pos(j) counts, the trait's values:

- ``key indices`` (MPT: ``slopes * (j - (S - 1))`` per key index j): every key index, padded
  or not.
- ``real keys`` (BLOOM, Falcon: ``(attention_mask.cumsum(-1) - 1) * attention_mask``): the
  number of real keys before j; a real key is one the key padding keeps (``key_pad``, a
  kernel's call) that some query may attend (the call's mask: the attention family's key
  padding). It differs from ``key indices`` only where padding sits between real keys (left
  or right padding shifts every real key of a row by one constant).

The oracle also builds the readings a reviewer names (``explain``, ``diff``), never declared
(``Reading``): the slopes of the next power of two's head count truncated to H, the sign
flipped (far keys favoured), and positions over indices where real keys are declared.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Mapping

import torch

from harness.base.errors import SpecError
from harness.families.conventions.core import SCORES, Context, Convention
from harness.families.trait_spec import TraitSpec

NONE, KEY_INDICES, REAL_KEYS = "none", "key indices", "real keys"
VALUES = (NONE, KEY_INDICES, REAL_KEYS)
KERNEL_VALUES = (NONE, KEY_INDICES)   # a kernel's cases never leave holes in the key padding


class Slopes(enum.Enum):
    """How the head slopes are drawn: the standard recipe, or (a mistake) the recipe of the
    next power of two >= H cut to H heads."""

    STANDARD = "standard"
    NEXT_POWER_CUT = "next power of two, cut to H"


@dataclass(frozen=True)
class Reading:
    """An ALiBi the oracle builds: ``positions`` (``KEY_INDICES`` or ``REAL_KEYS``), the
    ``slopes`` and the ``sign`` of the bias (+1: far keys penalised). A declared value is
    ``Reading(value)``; the others are the mistakes' readings."""

    positions: str
    slopes: Slopes = Slopes.STANDARD
    sign: int = 1


def slopes(heads: int, rule: Slopes = Slopes.STANDARD) -> torch.Tensor:
    """(H,) float64: the head slopes (see the module docstring)."""
    if heads < 1:
        raise SpecError(f"ALiBi needs at least one head, got heads={heads}")
    if rule is Slopes.NEXT_POWER_CUT:
        n = 1 << (heads - 1).bit_length()                  # the power of two >= H
        return torch.tensor([2.0 ** (-8 * k / n) for k in range(1, heads + 1)], dtype=torch.float64)
    n = 1 << (heads.bit_length() - 1)                      # the power of two <= H
    out = [2.0 ** (-8 * k / n) for k in range(1, n + 1)]
    out += [2.0 ** (-8 * k / (2 * n)) for k in range(1, 2 * (heads - n), 2)]
    return torch.tensor(out, dtype=torch.float64)


def positions(kind: str, S: int, ctx: Context) -> torch.Tensor:
    """(B or 1, 1, 1, S): pos(j) - pos(last key), over key indices or over the real keys."""
    if kind == KEY_INDICES:
        return (torch.arange(S) - (S - 1)).view(1, 1, 1, S)
    mask = ctx.inputs.get("mask")
    if not isinstance(mask, torch.Tensor):
        raise SpecError(f"alibi={REAL_KEYS!r} counts the real keys of the call's mask, which it lacks")
    real = mask.any(-2)                                                   # (B, S): some query may attend it
    key_pad = ctx.inputs.get("key_pad")
    if isinstance(key_pad, torch.Tensor):
        real = real & key_pad
    counted = real.long().cumsum(-1)                                      # real keys up to j, j included
    return (counted - counted[:, -1:]).view(-1, 1, 1, S)


def reading(value: Any) -> Reading | None:
    """The ``Reading`` of a declared value or a mistake's (None for ``none``)."""
    if isinstance(value, Reading):
        return value
    if value == NONE:
        return None
    if value in (KEY_INDICES, REAL_KEYS):
        return Reading(value)
    raise SpecError(f"no oracle for alibi={value!r}; known: {list(VALUES)}")


def with_alibi(value: Any, s: torch.Tensor, ctx: Context) -> torch.Tensor:
    """The scores ``s`` (B, H, T, S) with each head's linear bias added."""
    r = reading(value)
    if r is None:
        return s
    H, S = s.shape[1], s.shape[-1]
    m = slopes(H, r.slopes).view(1, H, 1, 1)
    bias = r.sign * m * positions(r.positions, S, ctx)                   # (B or 1, H, 1, S)
    return s + bias.to(dtype=s.dtype, device=s.device)


def read_module(module: torch.nn.Module) -> str | None:
    """``real keys`` where a library module is built for ALiBi: its config says ``alibi``
    (Falcon), or its forward takes the ``alibi`` tensor (BLOOM); both build it with BLOOM's
    ``build_alibi_tensor``, over the real keys of the attention mask."""
    config = getattr(module, "config", None)
    if isinstance(getattr(config, "alibi", None), bool):   # Falcon's forward takes ``alibi`` either way
        return REAL_KEYS if config.alibi else None
    forward = getattr(type(module), "forward", None)
    code = getattr(forward, "__code__", None)
    if code is not None and "alibi" in code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]:
        return REAL_KEYS
    return None


def _reads(label: str, change: Mapping[str, Any], only: str | None = None):
    """A mistake: the declared ALiBi read with ``change`` (``only``: where that value is declared)."""
    def make(traits: dict, inputs: Any) -> dict | None:
        declared = traits.get("alibi", NONE)
        if declared not in (KEY_INDICES, REAL_KEYS) or (only and declared != only):
            return None
        return {**traits, "alibi": Reading(**{"positions": declared, **change})}
    return label, make


WRONG_SLOPES = "ALiBi slopes of the next power of two's head count, cut to H"
SIGN_FLIPPED = "ALiBi's sign flipped: far keys favoured"
OVER_INDICES = "ALiBi positions over key indices, not real keys"
MISTAKES = (_reads(WRONG_SLOPES, {"slopes": Slopes.NEXT_POWER_CUT}), _reads(SIGN_FLIPPED, {"sign": -1}))

ALIBI = Convention(
    trait="alibi",
    specs={"attention": TraitSpec("a linear bias -slope_h * (pos(i) - pos(j)) on each head's scores before the "
                                  "mask, slopes 2^(-8k/n) for any head count (ALiBi: BLOOM, MPT): positions over "
                                  "'key indices' (MPT), over 'real keys' (BLOOM: the keys padding keeps), or "
                                  "'none'", VALUES, default=NONE),
           "attention_kernel": TraitSpec("ALiBi built into the kernel, the standard slopes of its head count: "
                                         "positions over 'key indices', or 'none'", KERNEL_VALUES, default=NONE)},
    step=SCORES,
    oracle=with_alibi,
    mistakes={"attention": (*MISTAKES, _reads(OVER_INDICES, {"positions": KEY_INDICES}, only=REAL_KEYS)),
              "attention_kernel": MISTAKES},
    read_module=read_module,
)
