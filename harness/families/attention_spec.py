"""The attention definition's options as one frozen value: what ``oracles.multi_head_attention``
computes, built once from a variant's declared traits (``AttentionSpec.from_traits``).

Traits are declared as strings in variant files; the modes the oracle branches on become
enums here, at the edge, and a value no oracle can build raises the ``SpecError`` it always
raised (``no oracle for qk_norm='...'; known: [...]``). The dead-row traits
(``fully_masked_row``, ``mask_style``) stay as declared: either may be a ``ByCause``
(``harness.families.no_key_rows``), resolved per row by the kernel oracle.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from harness.base.errors import SpecError
from harness.families import conventions, kernel_oracle
from harness.families.no_key_rows import kernel_dead_rows


def _unknown(trait: str, value: Any, known) -> SpecError:
    return SpecError(f"no oracle for {trait}={value!r}; known: {list(known)}")


class QkNorm(enum.Enum):
    """q and k RMS-normalised before RoPE: not at all, per head over d_k (Qwen3), or over the
    whole projection before the head split (OLMo2)."""

    NONE = "none"
    PER_HEAD = "rms per head"
    ALL_HEADS = "rms over all heads"

    @classmethod
    def of(cls, value: Any) -> QkNorm:
        if isinstance(value, QkNorm):
            return value
        try:
            return cls(value)
        except ValueError:
            raise _unknown("qk_norm", value, QK_NORMS) from None


class WindowDiagonal(enum.Enum):
    """The diagonal a window sits on when T < S: query i faces key i (top-left), or key
    S - T + i, its own position after a cache (bottom-right)."""

    TOP_LEFT = "top_left"
    BOTTOM_RIGHT = "bottom_right"

    @classmethod
    def of(cls, value: Any) -> WindowDiagonal:
        # any declaration but top_left has always meant the bottom-right diagonal here (the
        # family's vocabulary admits only these two)
        return value if isinstance(value, WindowDiagonal) else (
            cls.TOP_LEFT if value == cls.TOP_LEFT.value else cls.BOTTOM_RIGHT)


QK_NORMS = tuple(m.value for m in QkNorm)
AS_CONFIGURED = "as configured"


def rope_scaling(value: Any, cfg: Any) -> Any:
    """The ``rope_scaling`` trait as a ``RopeScaling`` or None: ``as configured`` reads the
    config's own (``ModelConfig.rope_scaling``, a checkpoint's; None on a plain config)."""
    if value == AS_CONFIGURED:
        return getattr(cfg, "rope_scaling", None)
    return None if value in (None, "none") else value


def score_scale(value: Any) -> float | None:
    """The ``score_scale`` trait as the factor on q k^T: None for 1/sqrt(d_k) (the head width
    decides it), else the number."""
    if value == kernel_oracle.DEFAULT_SCALE:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < math.inf:
        return float(value)
    raise _unknown("score_scale", value, [kernel_oracle.DEFAULT_SCALE, "a number > 0"])


@dataclass(frozen=True, kw_only=True)
class AttentionSpec:
    """The options of one multi-head attention (``oracles.multi_head_attention``).
    ``kv_heads`` None: as many as ``heads``; ``window`` None: no window, else (left, right)
    keys around the diagonal.

    A row whose keys are all masked becomes, by ``fully_masked_row``: NaN (a -inf fill),
    the mean of V with no gradient to Q and K (a finite fill such as -1e9), or zeros (SDPA).
    ``mask_style`` "additive" adds a very negative number instead of replacing the scores:
    the same forward, but a fully masked row then sends gradient to Q and K (the mean of V:
    a finite number; NaN: one that reaches the softmax as -inf; zeros: a kernel that repairs
    such rows, SDPA given a 0 / -inf float mask, sends none). Either may be a ``ByCause``
    (``harness.families.no_key_rows``).

    ``qk_norm`` per head: q and k of each head are RMS-normalised over d_k (Qwen3); over all
    heads: over the whole projection before the head split (OLMo2); eps ``qk_eps``, then
    times the gains ``q_norm.weight`` and ``k_norm.weight`` (one per dim of a head, shared by
    every head; or one per head and dim), before RoPE; ``conventions``: the values of the
    registered conventions (``harness.families.conventions``: a softcap c > 0 makes scores
    c tanh(s / c) before masking, Gemma 2's; a sink per head joins every softmax denominator,
    gpt-oss's); ``scale``
    multiplies q k^T (None: 1 / sqrt(d_k); Gemma 2: query_pre_attn_scalar ** -0.5);
    ``window_diagonal`` bottom-right: the window sits on query i's key S - T + i (decoding
    after a cache: the query's own position)."""

    heads: int
    fully_masked_row: Any = "NaN"
    mask_style: Any = "fill"
    kv_heads: int | None = None
    gqa_grouping: str = "consecutive"
    rope_layout: str = "none"
    rope_fraction: float = 1.0
    rope_base: float = 10000.0
    rope_scaling: Any = None          # a harness.families.rope_scaling.RopeScaling, or None (the default RoPE)
    window: tuple[int, int] | None = None
    # (trait, value) of each registered convention (``harness.families.conventions``: the
    # softcap, attention sinks), its oracle branch taken in the kernel oracle
    conventions: tuple[tuple[str, Any], ...] = ()
    qk_norm: QkNorm = QkNorm.NONE
    qk_eps: float = 1e-6
    scale: float | None = None
    window_diagonal: WindowDiagonal = WindowDiagonal.TOP_LEFT
    # (mask_method, fully_masked_row, fully_masked_grad) in the kernel oracle's terms
    dead_rows: tuple[Any, Any, Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # the dead-row declaration is read first, then qk_norm: the order their errors come in
        object.__setattr__(self, "dead_rows", kernel_dead_rows(self.fully_masked_row, self.mask_style))
        object.__setattr__(self, "qk_norm", QkNorm.of(self.qk_norm))
        object.__setattr__(self, "window_diagonal", WindowDiagonal.of(self.window_diagonal))

    @classmethod
    def from_traits(cls, traits: Mapping[str, Any], cfg: Any, *, eps: float,
                    window: tuple[int, int] | None) -> AttentionSpec:
        """The attention family's declared traits (strings as written) with the config's heads,
        K/V heads and RoPE base; ``window`` the one resolved for the call (declared or the
        call's own)."""
        return cls(
            heads=cfg.heads, fully_masked_row=traits["fully_masked_row"], mask_style=traits["mask_style"],
            kv_heads=cfg.n_kv_heads, gqa_grouping=traits.get("gqa_grouping", "consecutive"),
            rope_layout=traits.get("rope", "none"), rope_fraction=traits.get("rope_fraction", 1.0),
            rope_base=cfg.rope_base, rope_scaling=rope_scaling(traits.get("rope_scaling", "none"), cfg),
            window=window, conventions=conventions.values(traits, "attention"),
            qk_norm=traits.get("qk_norm", "none"), qk_eps=eps,
            scale=score_scale(traits.get("score_scale", kernel_oracle.DEFAULT_SCALE)),
            window_diagonal=traits.get("window_diagonal", "top_left"))
