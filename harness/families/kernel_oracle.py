"""The float64 oracle of attention kernels: attention over projected heads, written from its
definition, one branch per named convention (an unknown value raises ``SpecError``).

Shape legend: B batch, H query heads, H_kv key/value heads (H % H_kv == 0), T queries,
S keys, d head width. q (B, H, T, d), k (B, H_kv, S, d), v (B, H_kv, S, d); output
(B, H, T, d).

What the call asks for (the case's inputs, from the config or the case itself):
``mask`` (B, T, S) bool, True = may attend (key padding, an arbitrary mask); ``key_pad``
(B, S) bool, True = a real key; ``causal`` (bool); ``window`` (left, right) or None;
``softcap`` (0: none). How a kernel reads them is declared (the family's traits):

- ``causal``: where the diagonal of query i lies. ``top_left``: key i (PyTorch's
  ``CausalVariant.UPPER_LEFT``, ``is_causal=True``, ``tril``). ``bottom_right``: the last
  query faces the last *real* key: key i + last_b - (T - 1), last_b the last real key of
  row b (PyTorch's ``CausalVariant.LOWER_RIGHT`` without padding; with key padding,
  flash-attention's convention: aligned to the real keys). ``bottom_right_padded``: the last
  query faces key S - 1, the last of the padded length, whatever the padding (SDPA's
  ``causal_lower_right`` combined with an attn_mask; flash-attention's test reference with
  an additive bias and ``causal=True``). ``none``: the kernel applies no
  causal mask even when asked (its window, if any, is on the top-left diagonal).
- ``window``: with (left, right), query i keeps keys diag-left .. diag+right (both
  inclusive), diag the diagonal above; flash-attention's ``window_size=(left, right)``.
  HF's ``sliding_window=w`` keeps keys i-w+1 .. i: left = w-1, right = 0 (with causal).
  ``as called``: the window the call passes; (left, right): a window built into the kernel.
- ``softcap``: scores s become cap * tanh(s / cap) before masking. ``as called`` or a
  number built into the kernel (0: none).
- ``scale``: s = q k^T * scale; ``1/sqrt(d)`` or a number.
- ``gqa_grouping``: which K/V head query head h reads, G = H / H_kv: ``consecutive``
  (h // G: ``repeat_interleave``, SDPA's ``enable_gqa``, flash-attention, HF's
  ``repeat_kv``) or ``tiled`` (h % H_kv: ``k.repeat(1, G, 1, 1)``).
- a row that sees no key (``fully_masked_row``: ``NaN``, ``zeros`` or ``mean of V`` over
  all S keys) and the gradient it sends to q and k (``fully_masked_grad``: ``none``,
  ``NaN``, or ``softmax``: the uniform softmax's own gradient, from a finite additive bias).
  ``mask_method`` says how masked scores are removed and gives both by default:
  ``bool_fill_-inf`` (masked_fill -inf: NaN, none), ``bool_fill_finfo_min`` (masked_fill
  finfo.min: mean of V, none), ``additive_bias`` (+ a 0 / -inf bias: NaN, and the NaN
  reaches dQ and dK), ``additive_finfo_min`` (+ a 0 / finfo.min bias: mean of V, softmax).
  A kernel that repairs such rows (SDPA's safe softmax, flash kernels) declares
  ``zeros`` / ``none``; one that zeroes them after a NaN softmax over an additive -inf bias
  (a query padding mask applied to the output) declares ``additive_bias`` with ``zeros`` /
  ``NaN``: zeros forward, and the NaN row still reaches dQ, dK (its softmax's backward) and
  dV (NaN probabilities times a zero gradient). Each of the three may be a ``ByCause`` or
  ``ByDtype`` (``harness.families.no_key_rows``): each row gets the value of what emptied it
  (``dead_causes``: the causal diagonal, else the window, else the mask).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import torch

from harness.base.errors import SpecError
from harness.families import conventions, reach
from harness.families.conventions.core import AS_CALLED, Context
from harness.families.no_key_rows import traits_at_cause

Tensor = torch.Tensor

CAUSAL = ("top_left", "bottom_right", "bottom_right_padded", "none")
GQA_GROUPINGS = ("consecutive", "tiled")
MASK_METHODS = ("bool_fill_-inf", "bool_fill_finfo_min", "additive_bias", "additive_finfo_min")
DEAD_ROWS = ("NaN", "zeros", "mean of V")
DEAD_GRADS = ("none", "NaN", "softmax")
DEFAULT_SCALE = "1/sqrt(d)"
BY_MASK_METHOD = "by mask_method"
# (fully_masked_row, fully_masked_grad) that each mask method gives by itself.
NATURAL = {
    "bool_fill_-inf": ("NaN", "none"),
    "bool_fill_finfo_min": ("mean of V", "none"),
    "additive_bias": ("NaN", "NaN"),
    "additive_finfo_min": ("mean of V", "softmax"),
}
REPAIRED = ("zeros", "none")  # a kernel that zeroes rows without keys, whatever its method
ZEROED_AFTER = ("zeros", "NaN")  # a NaN row zeroed after the softmax: its backward is still NaN


def _unknown(trait: str, value: Any, known) -> SpecError:
    return SpecError(f"no oracle for {trait}={value!r}; known: {list(known)}")


def dead_row_traits(traits: Mapping[str, Any]) -> tuple[str, str]:
    """(fully_masked_row, fully_masked_grad), the ``by mask_method`` defaults resolved."""
    method = traits.get("mask_method", "bool_fill_-inf")
    if method not in NATURAL:
        raise _unknown("mask_method", method, MASK_METHODS)
    row, grad = traits.get("fully_masked_row", BY_MASK_METHOD), traits.get("fully_masked_grad", BY_MASK_METHOD)
    return (NATURAL[method][0] if row == BY_MASK_METHOD else row,
            NATURAL[method][1] if grad == BY_MASK_METHOD else grad)


def dead_row_problem(traits: Mapping[str, Any]) -> str | None:
    """Why a declared (mask method, row, grad) cannot happen, or None."""
    method = traits.get("mask_method", "bool_fill_-inf")
    if method not in NATURAL:
        return None  # the vocabulary check names it
    pair = dead_row_traits(traits)
    if pair in (NATURAL[method], REPAIRED) or (pair == ZEROED_AFTER and NATURAL[method][1] == "NaN"):
        return None
    return (f"mask_method {method!r} gives a row without keys {NATURAL[method][0]!r} with gradient "
            f"{NATURAL[method][1]!r} to q and k; a kernel that repairs such rows gives "
            f"{REPAIRED[0]!r} / {REPAIRED[1]!r}, one that zeroes a NaN row after the softmax "
            f"{ZEROED_AFTER[0]!r} / {ZEROED_AFTER[1]!r}; declared {pair[0]!r} / {pair[1]!r}")


def diagonal(key_pad: Tensor, T: int, causal: str) -> Tensor:
    """(B or 1, T, 1): the key index on query i's diagonal."""
    i = torch.arange(T)[None, :, None]
    if causal in ("top_left", "none"):
        return i
    if causal == "bottom_right_padded":
        return i + (key_pad.shape[-1] - T)
    if causal == "bottom_right":
        S = key_pad.shape[-1]
        last = torch.where(key_pad, torch.arange(S), -1).max(-1).values       # (B,) last real key
        return i + (last - (T - 1))[:, None, None]
    raise _unknown("causal", causal, CAUSAL)


def allowed_keys(mask: Tensor, key_pad: Tensor, is_causal: bool, window: tuple[int, int] | None,
                 causal: str) -> Tensor:
    """(B, T, S) bool, True = query t attends key s: the call's mask, the causal mask on the
    declared diagonal when asked for (and declared), and the window around it."""
    B, T, S = mask.shape
    diag = diagonal(key_pad, T, causal)
    j = torch.arange(S)[None, None, :]
    allowed = mask.clone()
    if is_causal and causal != "none":
        allowed &= j <= diag
    if window is not None:
        left, right = window
        allowed &= (j >= diag - left) & (j <= diag + right)
    return allowed


def window_reach(mask: Tensor, key_pad: Tensor, is_causal: bool, window: tuple[int, int] | None,
                 causal: str) -> reach.Reach:
    """Whether the window removed a key the call's mask (and the causal diagonal) would let a
    query see: a window at least as wide as every case's keys is never exercised."""
    S = mask.shape[-1]
    if window is None:
        return reach.Reach("window", False, S, math.inf, "no case asks for a window")
    without = allowed_keys(mask, key_pad, is_causal, None, causal)
    cut = bool((without & ~allowed_keys(mask, key_pad, is_causal, window, causal)).any())
    left, right = window
    return reach.Reach("window", cut, S, left + right + 2,
                       f"no case has more than {{amount}} keys; the window keeps {left + right + 1} around a query")


def resolve(value: Any, called: Any) -> Any:
    return called if value == AS_CALLED else value


def group_heads(x: Tensor, heads: int, grouping: str) -> Tensor:
    """(B, H_kv, S, d) -> (B, H, S, d): the K/V head each query head reads."""
    G = heads // x.shape[1]
    if grouping == "consecutive":
        return x.repeat_interleave(G, dim=1)
    if grouping == "tiled":
        return x.repeat(1, G, 1, 1)
    raise _unknown("gqa_grouping", grouping, GQA_GROUPINGS)


def kernel_attention(traits: Mapping[str, Any], inputs: Mapping[str, Any]) -> Tensor:
    """softmax(softcap(q k^T * scale) over the allowed keys) v, per query head; each
    convention the traits hold changes its step (``harness.families.conventions``: the
    softcap on the scores, attention sinks in the softmax). ``inputs["params"]``: the
    module's canonical parameters a convention reads (a sink per head)."""
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    B, H, T, d = q.shape
    if H % k.shape[1]:
        raise SpecError(f"H={H} query heads cannot share H_kv={k.shape[1]} K/V heads")
    k = group_heads(k, H, traits["gqa_grouping"])                       # (B, H, S, d)
    v = group_heads(v, H, traits["gqa_grouping"])
    scale = traits["scale"]
    if scale == DEFAULT_SCALE:
        scale = 1.0 / math.sqrt(d)
    elif not isinstance(scale, (int, float)) or isinstance(scale, bool):
        raise _unknown("scale", scale, [DEFAULT_SCALE, "a number"])
    # Multiplied, as flash kernels do (the oracle evaluated in float32 is the precision baseline).
    s = q @ k.transpose(-2, -1) * scale                                 # (B, H, T, S)
    ctx = Context(inputs, inputs.get("params", {}))
    s = conventions.scores(traits, s, ctx)                              # the softcap, ...
    window = resolve(traits["window"], inputs["window"])
    window = None if window is None else tuple(window)
    allowed = allowed_keys(inputs["mask"], inputs["key_pad"], inputs["causal"], window,
                           traits.get("causal", "none"))[:, None]      # (B, 1, T, S)
    if reach.active():
        reach.note(window_reach(inputs["mask"], inputs["key_pad"], inputs["causal"], window,
                                traits.get("causal", "none")))
    dead = ~allowed.any(-1, keepdim=True)                               # (B, 1, T, 1)
    p = conventions.softmax(traits, s.masked_fill(~allowed, float("-inf")).masked_fill(dead, 0.0), ctx)
    if not bool(dead.any()):
        return p @ v                                                    # (B, H, T, d)
    zeroed = torch.zeros_like(dead)
    for cause, rows_of in dead_causes(inputs, window, traits.get("causal", "none"), dead).items():
        rows = dead_row_traits(traits_at_cause(traits, cause))
        if rows == ZEROED_AFTER:  # the NaN row of an additive -inf bias, zeroed on the output: NaN into dQ, dK, dV
            rows, zeroed = ("NaN", "NaN"), zeroed | rows_of
        p = torch.where(rows_of, _dead_rows(s, rows_of, *rows), p)
    return (p @ v).masked_fill(zeroed, 0.0) if bool(zeroed.any()) else p @ v


def dead_causes(inputs: Mapping[str, Any], window: tuple[int, int] | None, causal: str,
                dead: Tensor) -> dict[str, Tensor]:
    """The rows without keys (``dead``, (B, 1, T, 1)) by what emptied them
    (``harness.families.no_key_rows``): the causal diagonal alone, else the window on it, else
    the call's mask; only the causes some row has."""
    every = torch.ones_like(inputs["mask"])
    kept = {"causal": allowed_keys(every, inputs["key_pad"], inputs["causal"], None, causal),
            "window": allowed_keys(every, inputs["key_pad"], inputs["causal"], window, causal)}
    by_causal = ~kept["causal"].any(-1)[:, None, :, None]
    by_window = ~kept["window"].any(-1)[:, None, :, None] & ~by_causal
    out = {"causal": dead & by_causal, "window": dead & by_window, "mask": dead & ~by_causal & ~by_window}
    return {c: rows for c, rows in out.items() if bool(rows.any())}


def _dead_rows(s: Tensor, dead: Tensor, row: str, grad: str) -> Tensor:
    """The probabilities of a row without keys (``dead``, broadcast over ``s``): its value by
    ``row``, its gradient to the scores by ``grad``. Only the dead rows' scores receive the
    gradient of this branch (``torch.where`` sends the other rows a gradient of 0, and 0 times
    a NaN factor would be NaN)."""
    S = s.shape[-1]
    if row == "NaN":
        value = torch.full_like(s, math.nan)
    elif row == "zeros":
        value = torch.zeros_like(s)
    elif row == "mean of V":
        value = torch.full_like(s, 1.0 / S)
    else:
        raise _unknown("fully_masked_row", row, DEAD_ROWS)
    if grad == "none":
        return value
    if grad == "NaN":        # the NaN softmax's backward: NaN into every score of a dead row
        return value + _NaNBackward.apply(s, dead)
    if grad == "softmax":    # softmax(s + c), c a huge constant: uniform, with softmax's own gradient
        return value + torch.softmax(s - s.detach(), dim=-1) - 1.0 / S
    raise _unknown("fully_masked_grad", grad, DEAD_GRADS)


class _NaNBackward(torch.autograd.Function):
    """Zeros forward; NaN as the gradient of every score of a ``dead`` row, 0 elsewhere."""

    @staticmethod
    def forward(ctx, s: Tensor, dead: Tensor) -> Tensor:
        ctx.save_for_backward(dead)
        return torch.zeros_like(s)

    @staticmethod
    def backward(ctx, grad: Tensor):
        (dead,) = ctx.saved_tensors
        return torch.where(dead, math.nan, 0.0).to(grad.dtype).expand_as(grad).clone(), None


def attention_kernel(traits, cfg, w, inputs, dtype) -> Tensor:
    """The family's oracle (``harness.families.oracles.Oracle`` signature; no weights)."""
    return kernel_attention(traits, inputs)
