"""The ``attention_kernel`` family: attention as a function over heads that are already
projected (SDPA and its backends, flex_attention, flash-attention, a Triton or CUDA kernel of
one's own), with no parameters.

Call: (q (B, H, T, d), k (B, H_kv, S, d), v (B, H_kv, S, d), mask (B, T, S) bool True = may
attend, key_pad (B, S) bool True = real key, causal, window, and each convention's kernel
option: softcap, alibi_slopes) -> (B, H, T, d). A kernel is registered with
``harness.register_kernel`` (its layout and mask form as data); its traits declare how it
reads the call (``harness.families.kernel_oracle`` says each convention and its branch). The
config states the problem: ``heads``, ``d_k`` (= d), ``kv_heads``, ``window``, ``softcap``,
``block``; a case takes its window, K/V heads and conventions' options from the config
(``KernelOption.called``) unless it exists to exercise one (``window``: (2, 1) when the
config sets none; a convention's ``OptionCase``: its ``exercised`` value, ...).

Cases keep every size apart (T != S where they may differ, d != T) and say which trait each
exercises; the mask kind of each case (``CASE_MASKS``) tells ``register_kernel`` which cases a
kernel with only key lengths, or no mask at all, can take.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch

from harness.base.config import Config
from harness.families import conventions
from harness.families import kernel_oracle as K
from harness.families.attention import random_mask
from harness.families.base import (
    Case,
    Family,
    ScaleSpec,
    TraitSpec,
    activations,
    case_named,
    convention_regimes,
    left_pad,
    regime_case,
    right_pad,
)
from harness.families.no_key_rows import varies

LONG_T, LONG_S = 133, 157   # crosses 64- and 128-wide blocks on both axes


@dataclass(frozen=True)
class WindowSpec(TraitSpec):
    """``as called`` or a (left, right) pair of integers >= 0 built into the kernel."""

    def accepts(self, value: Any) -> bool:
        if value == K.AS_CALLED:
            return True
        return (isinstance(value, tuple) and len(value) == 2
                and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in value))

    def known(self) -> str:
        return f"{K.AS_CALLED!r}, (left, right) integers >= 0"


@dataclass(frozen=True)
class KernelFamily(Family):
    """A family whose dead-row traits default to what the declared mask method gives, and
    whose declarations are checked together (a mask method cannot give any dead row)."""

    def semantic_traits(self, traits: Mapping[str, Any]) -> dict[str, Any]:
        out = super().semantic_traits(traits)
        if not varies(out):  # a typed value is resolved per row, by the oracle
            out["fully_masked_row"], out["fully_masked_grad"] = K.dead_row_traits(out)
        return out

    def validate_traits(self, variant_id: str, traits: Mapping[str, Any]) -> list[str]:
        problems = super().validate_traits(variant_id, traits)
        if not problems and not varies(traits):
            why = K.dead_row_problem(self.semantic_traits(traits))
            if why:
                problems.append(why)
        return problems


# -- seeded inputs ---------------------------------------------------------------------------

def _lengths_at_least(gen: torch.Generator, batch: int, low: int, high: int) -> torch.Tensor:
    """(B, high) bool right padding with lengths in [low, high]: row 0 full, one row short
    when B > 1 (causal cases: with low = T every query keeps a key on either diagonal)."""
    lens = torch.randint(low, high + 1, (batch,), generator=gen)
    lens[0] = high
    if batch > 1 and bool((lens == high).all()) and high > low:
        lens[-1] = low
    return torch.arange(high)[None, :] < lens[:, None]


def problem(cfg: Config, gen: torch.Generator, *, T: int, S: int, pad: str = "none",
            causal: bool = False, window: tuple[int, int] | None = None,
            kv_heads: int | None = None, batch: int | None = None) -> dict[str, Any]:
    """One case's inputs: q, k, v ~ N(0, 1) in float64; the key padding ``pad`` (none,
    right, left, right >= T); the causal flag; the window (the config's unless given); K/V
    heads (the config's unless given); each convention's kernel option as the config has it
    (``KernelOption.called``: the softcap, no ALiBi slopes)."""
    B, H, d = batch or cfg.batch, cfg.heads, cfg.d_k
    H_kv = kv_heads or cfg.n_kv_heads
    q = activations(gen, B, H, T, d)                                # (B, H, T, d)
    k = activations(gen, B, H_kv, S, d)                             # (B, H_kv, S, d)
    v = activations(gen, B, H_kv, S, d)
    if pad == "none":
        key_pad = torch.ones(B, S, dtype=torch.bool)
    elif pad == "right":
        key_pad = right_pad(gen, B, S)
    elif pad == "left":
        key_pad = left_pad(gen, B, S)
    elif pad == "right >= T":
        key_pad = _lengths_at_least(gen, B, min(T, S), S)
    else:
        raise ValueError(f"unknown padding {pad!r}")
    mask = key_pad[:, None, :].expand(B, T, S).clone()              # (B, T, S) True = may attend
    return {"q": q, "k": k, "v": v, "mask": mask, "key_pad": key_pad, "causal": causal,
            "window": cfg.window if window is None else window,
            **{o.name: o.called(cfg) for o in conventions.kernel_options()}}


def _T(cfg: Config) -> int:
    return cfg.tgt_len


def _self(cfg, gen):
    return problem(cfg, gen, T=_T(cfg), S=_T(cfg))


def _cross(cfg, gen):
    return problem(cfg, gen, T=_T(cfg), S=cfg.src_len, pad="right")


def _left_pad(cfg, gen):
    return problem(cfg, gen, T=_T(cfg), S=cfg.src_len, pad="left")


def _random_mask(cfg, gen):
    inputs = problem(cfg, gen, T=_T(cfg), S=cfg.src_len)
    inputs["mask"] = random_mask(gen, cfg.batch, _T(cfg), cfg.src_len)
    return inputs


def _causal(cfg, gen):
    return problem(cfg, gen, T=_T(cfg), S=_T(cfg), causal=True)


def _causal_cross(cfg, gen):
    return problem(cfg, gen, T=_T(cfg), S=_T(cfg) + cfg.src_len, causal=True)


def _causal_pad(cfg, gen):
    return problem(cfg, gen, T=_T(cfg), S=_T(cfg) + cfg.src_len, pad="right >= T", causal=True)


def _window_size(cfg: Config, default: tuple[int, int]) -> tuple[int, int]:
    return cfg.window if cfg.window is not None else default


def _window(cfg, gen):
    return problem(cfg, gen, T=_T(cfg), S=_T(cfg) + cfg.src_len, window=_window_size(cfg, (2, 1)))


def _window_causal(cfg, gen):
    """HF's sliding_window=3 on a causal mask: (left, right) = (2, 0)."""
    return problem(cfg, gen, T=_T(cfg), S=_T(cfg), causal=True, window=_window_size(cfg, (2, 0)))


def gqa_heads(cfg: Config) -> int:
    """K/V heads of the gqa case: the config's when it groups heads, else H / 2 (1 when H is odd)."""
    if cfg.n_kv_heads < cfg.heads:
        return cfg.n_kv_heads
    return cfg.heads // 2 if cfg.heads % 2 == 0 else 1


def _gqa(cfg, gen):
    return problem(cfg, gen, T=_T(cfg), S=cfg.src_len, kv_heads=gqa_heads(cfg))


def _mqa(cfg, gen):
    return problem(cfg, gen, T=_T(cfg), S=_T(cfg) + cfg.src_len, causal=True, kv_heads=1)


def _fully_masked(cfg, gen):
    inputs = problem(cfg, gen, T=_T(cfg), S=cfg.src_len, pad="right")
    mask = inputs["mask"]
    mask[-1, 0, :] = False          # one query row sees no key at all
    if cfg.batch > 1 and _T(cfg) > 1:
        mask[0, -1, :] = False
    return inputs


def _causal_short(cfg, gen):
    """More queries than keys, causal: on the bottom-right diagonal the first T - S rows lose
    every key to it (none do on the top-left one)."""
    return problem(cfg, gen, T=_T(cfg) + cfg.src_len, S=cfg.src_len, causal=True)


def _window_short(cfg, gen):
    """More queries than keys, a window (1, 0) (or the config's), not causal: the last rows'
    windows (top-left diagonal) or the first rows' (bottom-right) hold no key."""
    return problem(cfg, gen, T=_T(cfg) + cfg.src_len + 1, S=cfg.src_len, window=_window_size(cfg, (1, 0)))


def _long(cfg, gen):
    return problem(cfg, gen, T=LONG_T, S=LONG_S, pad="right >= T", causal=True,
                   kv_heads=gqa_heads(cfg), batch=min(cfg.batch, 2))


BASE_CASES = (
    Case("self", "T = S, no padding, not causal", _self),
    Case("cross", "T != S, right key padding", _cross),
    Case("left_pad", "T != S, left key padding", _left_pad),
    Case("random_mask", "an arbitrary mask, every row keeps a key (axes and polarity)", _random_mask),
    Case("causal", "causal, T = S, no padding (both diagonals agree)", _causal),
    Case("causal_cross", "causal, S > T (a KV cache): top-left and bottom-right differ", _causal_cross),
    Case("causal_pad", "causal, S > T, right key padding: bottom-right aligns to the last real key", _causal_pad),
    Case("window", "window (2, 1) (or the config's), S > T, not causal", _window),
    Case("window_causal", "causal with window (2, 0) (HF sliding_window=3; or the config's), T = S", _window_causal),
    Case("gqa", "GQA: H_kv = H / 2 (or the config's kv_heads)", _gqa),
    Case("mqa", "MQA: H_kv = 1, causal, S > T", _mqa),
    Case("fully_masked", "rows whose keys are all masked", _fully_masked),
    Case("causal_short", "causal, T > S: bottom-right, the first rows lose every key to the diagonal",
         _causal_short),
    Case("window_short", "window (1, 0) (or the config's), T > S + 1: rows whose window holds no key",
         _window_short),
    Case("long", f"T = {LONG_T}, S = {LONG_S}: crosses 64- and 128-wide blocks; causal, right key padding, GQA",
         _long),
)


def _with_option(make, name: str, exercised):
    return lambda cfg, gen: {**make(cfg, gen), name: exercised(cfg)}


def convention_cases(cases: tuple[Case, ...]) -> tuple[Case, ...]:
    """The cases the conventions add whose call passes their kernel option at its
    ``exercised`` value (``Convention.cases``: softcap's ``cross`` with the cap 2.0 or the
    config's, ALiBi's ``causal_pad`` with its slopes), each drawn from one of ``cases`` by name."""
    out = []
    for trait, option, c in conventions.option_cases("attention_kernel"):
        base = case_named(cases, c.base)
        out.append(Case(c.name, c.note, _with_option(base.make, option.name, option.exercised),
                        declarer=trait if c.declared_only else ""))
    return tuple(out)


CASES = BASE_CASES + convention_cases(BASE_CASES)
# The fixed regimes of the default matrix, as the attention family's: logits in the hundreds
# (a softmax without its max subtracted overflows in float32 and below) on a case every kernel
# takes, and a problem without the causal option across 64- and 128-wide blocks (``long`` is
# causal; a kernel taking a mask alone crosses its blocks here).
REGIME_CASES = (
    regime_case(case_named(CASES, "self"), "large", "q, k, v x12: logits of std ~140", scale=12.0),
    regime_case(case_named(CASES, "cross"), "long", f"B = 2, T = {LONG_T}, S = {LONG_S}: across 64- and 128-wide "
                "query and key blocks", batch=2, tgt_len=LONG_T, src_len=LONG_S),
    # the window and the cap the config sets, off the cases' own: a kernel that fixes them passes those
    regime_case(case_named(CASES, "window"), "wide", "the config's window (4, 2)", window=(4, 2)),
    *convention_regimes("attention_kernel", CASES),   # softcap@cap5, self@heads6 (ALiBi's declarers)
)
# What each case's mask is ("none": every key may be attended; "right": right key padding
# only; "arbitrary": anything else) and which of the call's options it needs.
CASE_MASKS = {
    "self": "none", "cross": "right", "left_pad": "arbitrary", "random_mask": "arbitrary",
    "causal": "none", "causal_cross": "none", "causal_pad": "right", "window": "none",
    "window_causal": "none", "gqa": "none", "mqa": "none",
    "fully_masked": "arbitrary", "long": "right", "causal_short": "none", "window_short": "none",
}
CASE_NEEDS = {
    "causal": ("causal",), "causal_cross": ("causal",), "causal_pad": ("causal",), "mqa": ("causal",),
    "long": ("causal",), "window": ("window",), "window_causal": ("causal", "window"),
    "causal_short": ("causal",), "window_short": ("window",),
}
# A convention's case: its base's mask, and its base's options with the convention's own.
for _trait, _option, _case in conventions.option_cases("attention_kernel"):
    CASE_MASKS[_case.name] = CASE_MASKS[_case.base]
    CASE_NEEDS[_case.name] = (*CASE_NEEDS.get(_case.base, ()), _option.name)
# The cases whose queries and keys are the same positions (T = S) over the config's K/V
# heads: what one packed QKV tensor (flash-attention's qkvpacked (B, S, 3, H, d)) can hold.
SELF_CASES = ("self", "causal", "window_causal")
CAUSAL_CASES = tuple(c for c, needs in CASE_NEEDS.items() if "causal" in needs)
DEAD_ROW_TRAITS = ("mask_method", "fully_masked_row", "fully_masked_grad")
NO_KEY_CASES = ("fully_masked", "causal_short", "window_short")  # cases with rows that lose every key

ATTENTION_KERNEL = KernelFamily(
    name="attention_kernel",
    call="(q (B,H,T,d), k (B,H_kv,S,d), v (B,H_kv,S,d), mask (B,T,S) bool True=may attend, key_pad (B,S), "
         f"causal, window, {', '.join(o.name for o in conventions.kernel_options())}) -> (B,H,T,d)",
    doc="Attention over projected heads (a kernel: SDPA, flex_attention, a blocked kernel); no parameters.",
    params=lambda cfg: {},
    cases=CASES + REGIME_CASES,
    traits={
        "causal": TraitSpec("the causal diagonal: top-left (query i faces key i), bottom-right "
                            "(the last query faces the last real key), or none", K.CAUSAL),
        "window": WindowSpec("the keys diag-left .. diag+right a query keeps", default=K.AS_CALLED),
        **conventions.trait_specs("attention_kernel"),   # the softcap, ALiBi
        "scale": ScaleSpec("the factor on q k^T", default=K.DEFAULT_SCALE),
        "gqa_grouping": TraitSpec("query head h reads K/V head h // (H / H_kv) (consecutive) or h % H_kv "
                                  "(tiled)", K.GQA_GROUPINGS, default="consecutive"),
        "mask_method": TraitSpec("how masked scores are removed", K.MASK_METHODS, default="bool_fill_-inf"),
        "fully_masked_row": TraitSpec("what a query row that sees no key becomes",
                                      (K.BY_MASK_METHOD, *K.DEAD_ROWS), default=K.BY_MASK_METHOD),
        "fully_masked_grad": TraitSpec("what such a row sends into dQ and dK",
                                       (K.BY_MASK_METHOD, *K.DEAD_GRADS), default=K.BY_MASK_METHOD),
    },
    oracle=K.attention_kernel,
    case_semantic={**{c: ("causal",) for c in CAUSAL_CASES},
                   "window": ("causal",),  # the window sits on the declared diagonal (S > T)
                   "fully_masked": DEAD_ROW_TRAITS,
                   **{c: ("causal", *DEAD_ROW_TRAITS) for c in NO_KEY_CASES[1:]}},
    grad_inputs=("q", "k", "v"),
    matrix=("default", "heads8", "edge"),
    matrix_note="the cases vary H_kv, T and S themselves: GQA, MQA, S > T, 133 x 157",
    dropout_stats=lambda t: "mean",
    no_key_causes=("mask", "window", "causal"),
    # a built-in softcap no case reached: its case at B = 1 on inputs scaled (Convention.reach_plan)
    reach_plan=lambda trait, value, worst: conventions.reach_plan("attention_kernel", trait, value, worst),
)
