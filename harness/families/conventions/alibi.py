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
- ``as called`` (a kernel only): over key indices, with the slopes the call passes as its
  ``alibi_slopes`` option ((H,) or (B, H), flash-attention's name; None: no bias); the
  ``alibi`` case passes the standard slopes of H heads, the other cases none. flash-attention
  adds ``-slope * |i + S - T - j|`` (S the row's real keys); on the keys a causal row keeps
  on the bottom-right diagonal (j <= i + S - T) that is ``slope * (j - (S - 1))`` plus
  ``slope * (T - 1 - i)``, a constant per row: the same softmax as this value's. Without
  ``causal`` it penalises keys after the diagonal too (symmetric about it), which this value
  does not build.

The regime cases run only for the variants that declare ALiBi: H = 6, not a power of two
(the next power's slopes differ), and, in the attention family, key padding with holes
between real keys (real keys and key indices differ there).

The oracle also builds the readings a reviewer names (``explain``, ``diff``), never declared
(``Reading``): the slopes of the next power of two's head count truncated to H, the sign
flipped (far keys favoured), and positions over indices where real keys are declared.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any, Mapping

import torch

from harness.base.errors import SpecError
from harness.families import reach
from harness.families.conventions.core import AS_CALLED, SCORES, Context, Convention, KernelOption, OptionCase, Regime
from harness.families.trait_spec import TraitSpec

NONE, KEY_INDICES, REAL_KEYS = "none", "key indices", "real keys"
VALUES = (NONE, KEY_INDICES, REAL_KEYS)
KERNEL_VALUES = (NONE, KEY_INDICES, AS_CALLED)   # a kernel's cases never leave holes in the key padding
OPTION = "alibi_slopes"


class Slopes(enum.Enum):
    """How the head slopes are drawn: the standard recipe, or (a mistake) the recipe of the
    next power of two >= H cut to H heads."""

    STANDARD = "standard"
    NEXT_POWER_CUT = "next power of two, cut to H"
    CALLED = "the call's alibi_slopes"


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
    if value == AS_CALLED:
        return Reading(KEY_INDICES, Slopes.CALLED)
    raise SpecError(f"no oracle for alibi={value!r}; known: {list(VALUES)}")


def with_alibi(value: Any, s: torch.Tensor, ctx: Context) -> torch.Tensor:
    """The scores ``s`` (B, H, T, S) with each head's linear bias added."""
    r = reading(value)
    if r is None:
        return s
    H, S = s.shape[1], s.shape[-1]
    m = ctx.inputs.get(OPTION) if r.slopes is Slopes.CALLED else slopes(H, r.slopes)
    if m is None:                                                         # as called, and the call passes none
        return s
    m = m.reshape(-1, H, 1, 1)                                            # (1 or B, H, 1, 1)
    bias = r.sign * m * positions(r.positions, S, ctx)                   # (B or 1, H, 1, S)
    return s + bias.to(dtype=s.dtype, device=s.device)


def reached(value: Any, s: torch.Tensor, ctx: Context) -> reach.Reach | None:
    """Whether this call's scores took a bias: over two keys or more, with slopes (the
    kernel's own, or ``alibi_slopes`` passed where it is declared ``as called``: a kernel that
    does not take the option is never given them, and its declaration is not exercised)."""
    r = reading(value)
    if r is None:
        return None
    passed = r.slopes is not Slopes.CALLED or ctx.inputs.get(OPTION) is not None
    keys = float(s.shape[-1]) if passed else 0.0
    why = (f"no case passed {OPTION} to the call (the kernel does not take it?)" if r.slopes is Slopes.CALLED
           else "no case has more than {amount} key(s); the bias needs {needed}")
    return reach.Reach("alibi", passed and keys >= 2, keys, 2.0, why)


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


def _reads(label: str, change: Mapping[str, Any], only: tuple[str, ...] = (KEY_INDICES, REAL_KEYS, AS_CALLED)):
    """A mistake: the declared ALiBi read with ``change`` (``only``: where one of those values is declared)."""
    def make(traits: dict, inputs: Any) -> dict | None:
        declared = traits.get("alibi", NONE)
        if declared not in only or (declared == AS_CALLED and inputs.get(OPTION) is None):
            return None
        return {**traits, "alibi": dataclasses.replace(reading(declared), **change)}
    return label, make


def _ignored(traits: dict, inputs: Any) -> dict | None:
    """The call's slopes ignored: no ALiBi where ``as called`` is declared and slopes passed."""
    called = traits.get("alibi") == AS_CALLED and inputs.get(OPTION) is not None
    return {**traits, "alibi": NONE} if called else None


def _float32_at_least(value: Any) -> Any:
    """The slopes as a kernel receives them: float32 in a half-precision call (flash-attention's
    ``alibi_slopes`` is fp32), as cast otherwise."""
    if isinstance(value, torch.Tensor) and value.dtype in (torch.float16, torch.bfloat16):
        return value.float()
    return value


WRONG_SLOPES = "ALiBi slopes of the next power of two's head count, cut to H"
SIGN_FLIPPED = "ALiBi's sign flipped: far keys favoured"
OVER_INDICES = "ALiBi positions over key indices, not real keys"
IGNORED = "the alibi_slopes ignored"
MISTAKES = (_reads(WRONG_SLOPES, {"slopes": Slopes.NEXT_POWER_CUT}, only=(KEY_INDICES, REAL_KEYS)),
            _reads(SIGN_FLIPPED, {"sign": -1}))
# H = 6 on every config (D = 48: d_k = 8; as many K/V heads): the next power's slopes differ
HEADS6 = {"heads": 6, "kv_heads": 6, "d_model": 48}
HEADS6_NOTE = "H = 6, not a power of two: ALiBi's slopes of 4 heads, then 2 of 8's"

ALIBI = Convention(
    trait="alibi",
    specs={"attention": TraitSpec("a linear bias -slope_h * (pos(i) - pos(j)) on each head's scores before the "
                                  "mask, slopes 2^(-8k/n) for any head count (ALiBi: BLOOM, MPT): positions over "
                                  "'key indices' (MPT), over 'real keys' (BLOOM: the keys padding keeps), or "
                                  "'none'", VALUES, default=NONE),
           "attention_kernel": TraitSpec("ALiBi over key indices: built into the kernel with the standard slopes of "
                                         "its head count ('key indices'), or with the slopes the call passes as "
                                         "alibi_slopes ('as called', flash-attention's, causal), or 'none'",
                                         KERNEL_VALUES, default=NONE)},
    step=SCORES,
    oracle=with_alibi,
    cases={"attention_kernel": (OptionCase("alibi", "causal_pad", "ALiBi's standard slopes of H heads passed as "
                                           "alibi_slopes; causal, S > T, right key padding", declared_only=True),)},
    regimes={"attention": (Regime("cross", "heads6", HEADS6_NOTE, HEADS6, declared_only=True),
                           Regime("cross", "holes", "key padding with holes between real keys: real keys and key "
                                  "indices differ", {"padding": "arbitrary"}, declared_only=True)),
             "attention_kernel": (Regime("self", "heads6", HEADS6_NOTE, HEADS6, declared_only=True),)},
    mistakes={"attention": (*MISTAKES, _reads(OVER_INDICES, {"positions": KEY_INDICES}, only=(REAL_KEYS,))),
              "attention_kernel": (*MISTAKES, (IGNORED, _ignored))},
    read_module=read_module,
    reached=reached,
    kernel_option=KernelOption(OPTION, called=lambda cfg: None, exercised=lambda cfg: slopes(cfg.heads),
                               to_call=_float32_at_least),
)
