"""The one configuration every family is built from.

Shape legend, used in comments everywhere in the project:
    B batch, T query (target) length, S key (source) length, D model width,
    H heads, d_k = D / H per-head width, F feed-forward width.

The default config gives every role a different size (B=3, T=7, S=5, D=48, H=4, d_k=12,
F=192), so a bug that swaps two of them (a head split written ``view(B, T, d_k, H)``, a
1/sqrt(H) scale, K read where V belongs) changes a shape or a value and cannot pass.
``CONFIG_MATRIX`` is what ``check`` and pytest run by default: that config, eight heads
(with another vocabulary and RoPE base), one head, and a B=1 / T=1 edge.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from typing import Any, Callable

from harness.base.errors import ConfigError

PADDINGS = ("right", "left", "arbitrary", "per_row")  # key padding patterns (harness.families.base.pad_pattern)


@dataclass(frozen=True)
class Config:
    d_model: int = 48   # D
    heads: int = 4      # H   (d_k = 12)
    d_ff: int = 192     # F   (= 4 D, the write-ups' fixed FFN width)
    batch: int = 3      # B
    tgt_len: int = 7    # T
    src_len: int = 5    # S
    vocab: int = 11     # V (embedding tables)
    dropout: float = 0.0
    seed: int = 0
    # Attention kernels (the attention_kernel family; the attention family reads kv_heads
    # and rope_base):
    kv_heads: int | None = None             # H_kv, K/V heads (left out or None: = heads, and follows
                                            # heads through replace/--set; 1: MQA)
    window: tuple[int, int] | None = None   # (left, right) keys around the diagonal (None: none)
    softcap: float = 0.0                    # logit soft-cap: cap * tanh(s / cap) (0: none)
    block: int = 64                         # block size of a blocked (flash-style) kernel
    rope_base: float = 10000.0              # RoPE's base: pair i turns by position * base^(-2i/r)
    head_dim: int | None = None             # d_k when it is not D / H (Gemma: 256 at D = 2048, H = 8)
    # The input regime: the defaults are the cases' own inputs. Drawn by the
    # Hypothesis strategies of harness.base.regimes (``check --explore``), fixed in the
    # families' regime cases ("padded@left", "self@x12", ...), settable with --set.
    padding: str = "right"   # key padding: right, left, arbitrary (holes) or per_row (each row another)
    scale: float = 1.0       # factor on the activations a family differentiates (query, x, logits...)
    pad_idx: int = 0         # the padding token of the embedding and masks cases (token 0 a real token)
    factor: float = 1.0      # the learning-rate schedule's factor

    def __post_init__(self) -> None:
        for name in ("d_model", "heads", "d_ff", "batch", "tgt_len", "src_len", "vocab"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name}={value!r} must be a positive integer")
        if self.vocab < 2:
            raise ConfigError(f"vocab={self.vocab} must be at least 2 (token 0 is the padding token)")
        hd = self.head_dim
        if hd is not None and (not isinstance(hd, int) or isinstance(hd, bool) or hd < 1):
            raise ConfigError(f"head_dim={hd!r} must be a positive integer, or none (D / H)")
        if self.d_model % self.heads and hd is None:
            raise ConfigError(
                f"d_model={self.d_model} is not divisible by heads={self.heads}"
            )
        if self.d_model % 2:
            raise ConfigError(
                f"d_model={self.d_model} must be even (sinusoidal encodings pair dims)"
            )
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or not 0 <= self.seed < 2**63:
            raise ConfigError(f"seed={self.seed!r} must be an integer from 0 to 2**63-1 (torch's and numpy's range)")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout={self.dropout!r} must be in [0, 1)")
        self._check_kernel_fields()
        if self.kv_heads is None:  # read as documented: H_kv = H, kept following H by replace()
            object.__setattr__(self, "kv_heads", self.heads)
            object.__setattr__(self, "_kv_follows_heads", True)

    def _check_kernel_fields(self) -> None:
        """The attention kernels' fields: heads % kv_heads == 0, window counts >= 0, a finite
        softcap >= 0, a positive block."""
        kv = self.kv_heads
        if kv is not None and (not isinstance(kv, int) or isinstance(kv, bool) or kv < 1 or self.heads % kv):
            raise ConfigError(f"kv_heads={kv!r} must be a positive integer dividing heads={self.heads}")
        w = self.window
        if w is not None and (not isinstance(w, tuple) or len(w) != 2
                              or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in w)):
            raise ConfigError(f"window={w!r} must be None or (left, right) integers >= 0")
        if not (isinstance(self.softcap, (int, float)) and math.isfinite(self.softcap) and self.softcap >= 0):
            raise ConfigError(f"softcap={self.softcap!r} must be a finite number >= 0 (0: none)")
        if not (isinstance(self.rope_base, (int, float)) and math.isfinite(self.rope_base) and self.rope_base > 1):
            raise ConfigError(f"rope_base={self.rope_base!r} must be a finite number > 1")
        if not isinstance(self.block, int) or isinstance(self.block, bool) or self.block < 1:
            raise ConfigError(f"block={self.block!r} must be a positive integer")
        self._check_regime_fields()

    def _check_regime_fields(self) -> None:
        """The input regime: a known padding pattern, finite positive scale and factor, a pad
        index inside the vocabulary."""
        if self.padding not in PADDINGS:
            raise ConfigError(f"padding={self.padding!r} must be one of {', '.join(PADDINGS)}")
        for name in ("scale", "factor"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and not isinstance(value, bool)
                    and math.isfinite(value) and 0 < value <= 1e4):
                raise ConfigError(f"{name}={value!r} must be a finite number > 0 (at most 1e4)")
        p = self.pad_idx
        if not isinstance(p, int) or isinstance(p, bool) or not 0 <= p < self.vocab:
            raise ConfigError(f"pad_idx={p!r} must be an integer from 0 to vocab-1={self.vocab - 1}")

    @property
    def n_kv_heads(self) -> int:
        """H_kv, the same as ``kv_heads`` (always an integer: ``heads`` when not given)."""
        return self.heads if self.kv_heads is None else self.kv_heads

    @property
    def d_k(self) -> int:
        """The head width: ``head_dim``, or D / H when it is not set."""
        return self.d_model // self.heads if self.head_dim is None else self.head_dim

    def replace(self, **changes: Any) -> "Config":
        """A copy with ``changes``; a ``kv_heads`` that was not given keeps following ``heads``."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            known = ", ".join(f.name for f in dataclasses.fields(self))
            raise ConfigError(f"unknown config key(s) {sorted(unknown)}; known: {known}")
        if getattr(self, "_kv_follows_heads", False) and "kv_heads" not in changes:
            changes = {**changes, "kv_heads": None}
        return dataclasses.replace(self, **changes)

    @classmethod
    def parse(cls, items: list[str] | None, base: "Config | None" = None, *, fit: bool = True) -> "Config":
        """Build from ``["d_model=128", "heads=4"]`` (the CLI's ``--set``); refuses a
        config that cannot work, naming the key and the value, and (``fit``) one whose check
        cannot fit in memory."""
        base = base or cls()
        changes: dict[str, object] = {}
        types = {f.name: f.type for f in dataclasses.fields(cls)}
        for item in items or []:
            key, sep, raw = item.partition("=")
            key, raw = key.strip(), raw.strip()
            if not sep or key not in types:
                raise ConfigError(
                    f"bad --set {item!r}: expected KEY=VALUE with KEY one of {sorted(types)}"
                )
            if key in changes:  # a repeated key is never meant as "the last one wins"
                raise ConfigError(f"--set {key} is given twice ({key}={changes[key]!r} and {item!r}): give it once")
            kind = _KINDS.get(key, "a number" if types[key] == "float" else "an integer")
            try:
                changes[key] = _PARSERS.get(key, float if types[key] == "float" else int)(raw)
            except ValueError:
                raise ConfigError(f"bad --set {item!r}: {key} takes {kind}, got {raw!r}") from None
        cfg = base.replace(**changes)
        return cfg.check_fits() if changes and fit else cfg

    def set_items(self) -> list[str]:
        """The ``--set KEY=VALUE`` items that rebuild this config from the default one
        (``Config.parse(cfg.set_items()) == cfg``): what a printed command carries."""
        base, items = Config(), []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "kv_heads" and (getattr(self, "_kv_follows_heads", False) or value == self.heads):
                continue
            if value == getattr(base, f.name):
                continue
            shown = f"{value[0]},{value[1]}" if f.name == "window" and value is not None else value
            items.append(f"{f.name}={shown}")
        return items

    def estimate_bytes(self) -> int:
        """A generous estimate of peak memory on this config: the largest intermediate
        (attention scores B*H*T*S, the FFN hidden B*T*F) in float64, times 16 for its copies,
        gradients and the oracle's; plus the weights of a whole model (per layer 4 D*D
        attention projections twice and 2 D*F, six layers, two V*D tables) in float64, times 8
        (the variant's, the oracle's and a ported copy, with their gradients and Adam's moments)."""
        length = max(self.tgt_len, self.src_len)
        largest = max(self.batch * self.heads * self.tgt_len * length, self.batch * length * self.d_ff,
                      self.batch * length * self.d_model)
        weights = 6 * (8 * self.d_model ** 2 + 2 * self.d_model * self.d_ff) + 2 * self.vocab * self.d_model
        return 16 * 8 * largest + 8 * 8 * weights

    def check_fits(self, name: str = "--set") -> "Config":
        """Refuse, before anything is allocated, a config that cannot fit in this machine's memory."""
        need, have = self.estimate_bytes(), physical_memory()
        if have and need > have / 2:
            raise ConfigError(
                f"config {name} ({self.describe()}) needs about {need / 2**30:.3g} GiB to check or run "
                f"(B*H*T*S scores and B*T*F activations, and the D*D and D*F weights, in float64 with gradients); "
                f"this machine has {have / 2**30:.3g} GiB")
        return self

    def describe(self) -> str:
        # the attention kernels' fields and RoPE's base, when set
        kernel = "".join(f" {name}={value}" for name, value, default in (
            ("H_kv", self.kv_heads, self.heads), ("window", self.window, None), ("softcap", self.softcap, 0.0),
            ("block", self.block, 64), ("rope_base", self.rope_base, 10000.0), ("head_dim", self.head_dim, None),
            ("padding", self.padding, "right"),
            ("scale", self.scale, 1.0), ("pad_idx", self.pad_idx, 0), ("factor", self.factor, 1.0)) if value != default)
        return (f"B={self.batch} T={self.tgt_len} S={self.src_len} D={self.d_model} "
                f"H={self.heads} d_k={self.d_k} F={self.d_ff}{kernel}")



@dataclass(frozen=True)
class ModelConfig(Config):
    """A whole model's config read from a checkpoint: a ``Config`` with its layer count
    (``harness.families.models.layers`` reads it) and the groups of parameters the model
    holds beyond its family's (``extensions``: names a family declares, e.g. the llama
    family's ``qk_norm`` gains and Gemma 2's ``sandwich_norms``)."""

    layers: int = 2
    extensions: tuple[str, ...] = ()
    # The class's own values, read from its config (``harness.registry.checkpoints.model_config``)
    # for a port to build from; ``window`` and ``softcap`` (the attention's) are Config's own.
    norm_eps: float = 1e-6                  # the norms' eps (rms_norm_eps, layer_norm_eps)
    rope_scaling: Any = None                # a harness.families.rope_scaling.RopeScaling, None: the default
    layer_types: tuple[str, ...] = ()       # per layer: "sliding_attention" (the window) or "full_attention"
    layer_rope: tuple = ()                  # ((layer type, rope_base, RopeScaling), ...) where they differ
                                            # by layer type (Gemma 3)
    final_softcap: float = 0.0              # the logits' soft cap (final_logit_softcapping; 0: none)
    score_scale: float | None = None        # the factor on q k^T where it is not 1/sqrt(d_k) (Gemma's
                                            # query_pre_attn_scalar ** -0.5)
    tied: bool = False                      # tie_word_embeddings
    max_positions: int | None = None        # max_position_embeddings
    model_type: str = ""
    # the class's whole config as a dict (what no field above says: read it by name); not compared
    class_config: Any = dataclasses.field(default=None, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.layers, int) or isinstance(self.layers, bool) or self.layers < 1:
            raise ConfigError(f"layers={self.layers!r} must be a positive integer")
        if not isinstance(self.extensions, tuple) or not all(isinstance(e, str) for e in self.extensions):
            raise ConfigError(f"extensions={self.extensions!r} must be a tuple of names")
        if self.layer_types and len(self.layer_types) != self.layers:
            raise ConfigError(f"layer_types has {len(self.layer_types)} entries for {self.layers} layers")
        if not (isinstance(self.norm_eps, (int, float)) and 0 < self.norm_eps < 1):
            raise ConfigError(f"norm_eps={self.norm_eps!r} must be a number in (0, 1)")

    def layer_window(self, i: int) -> tuple[int, int] | None:
        """Layer i's window: the config's where the layer is a sliding one (every layer when
        no layer types are given), else None."""
        if self.layer_types and self.layer_types[i] != "sliding_attention":
            return None
        return self.window

    def layer_rope_of(self, i: int) -> tuple[float, Any]:
        """(RoPE base, scaling) of layer i: its layer type's where they differ by type."""
        for kind, base, scaling in self.layer_rope:
            if self.layer_types and self.layer_types[i] == kind:
                return base, scaling
        return self.rope_base, self.rope_scaling

def _parse_window(raw: str) -> tuple[int, int] | None:
    """``--set window=LEFT,RIGHT`` (keys diagonal-LEFT .. diagonal+RIGHT), or ``none``. HF's
    ``sliding_window=w`` keeps keys i-w+1 .. i: ``window=w-1,0``."""
    if raw.lower() in ("none", ""):
        return None
    left, sep, right = raw.partition(",")
    if not sep:
        raise ValueError(raw)
    return int(left), int(right)


_PARSERS: dict[str, Callable[[str], Any]] = {
    "window": _parse_window, "kv_heads": lambda raw: None if raw.lower() == "none" else int(raw),
    "head_dim": lambda raw: None if raw.lower() == "none" else int(raw), "padding": str}
_KINDS = {"window": "LEFT,RIGHT (e.g. 2,0; HF's sliding_window=w is w-1,0) or none",
          "kv_heads": "an integer dividing heads, or none", "head_dim": "a positive integer, or none (D / H)",
          "padding": "right, left, arbitrary or per_row"}


# The default matrix. Every config keeps B, T, S, D, H, d_k and F apart where it can
# (one head makes d_k = D; the edge makes B = T = 1 on purpose). A field a family reads takes
# a value off its default in at least one config a family runs (heads8: another vocabulary
# and RoPE base; a family's extra configs and regime cases count), so a variant that
# hard-codes the default instead of reading the config is caught (tests/test_config.py).
CONFIG_MATRIX: dict[str, Config] = {
    "default": Config(),
    "heads8": Config(d_model=96, heads=8, d_ff=384, batch=2, tgt_len=6, src_len=9, vocab=13, rope_base=500000.0),
    "one_head": Config(d_model=16, heads=1, d_ff=64, batch=2, tgt_len=5, src_len=3),
    "edge": Config(batch=1, tgt_len=1, src_len=3),
}


def config_matrix(overrides: list[str] | None = None) -> dict[str, Config]:
    """The default matrix; with ``--set`` overrides, the one default config changed by them.
    A config whose check cannot fit in this machine's memory is refused with the estimate."""
    configs = {"custom": Config.parse(overrides)} if overrides else dict(CONFIG_MATRIX)
    for name, cfg in configs.items():
        cfg.check_fits(name)
    return configs


def physical_memory() -> int:
    """Bytes of RAM, or 0 when the platform does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return 0
