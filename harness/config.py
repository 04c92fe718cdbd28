"""The one configuration every family is built from.

Shape legend, used in comments everywhere in the project:
    B batch, T query (target) length, S key (source) length, D model width,
    H heads, d_k = D / H per-head width, F feed-forward width.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

from .errors import ConfigError


@dataclass(frozen=True)
class Config:
    d_model: int = 64   # D
    heads: int = 8      # H
    d_ff: int = 256     # F
    batch: int = 3      # B
    tgt_len: int = 6    # T
    src_len: int = 5    # S
    vocab: int = 11     # V (embedding tables)
    dropout: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("d_model", "heads", "d_ff", "batch", "tgt_len", "src_len", "vocab"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name}={value!r} must be a positive integer")
        if self.vocab < 2:
            raise ConfigError(f"vocab={self.vocab} must be at least 2 (token 0 is the padding token)")
        if self.d_model % self.heads:
            raise ConfigError(
                f"d_model={self.d_model} is not divisible by heads={self.heads}"
            )
        if self.d_model % 2:
            raise ConfigError(
                f"d_model={self.d_model} must be even (sinusoidal encodings pair dims)"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout={self.dropout!r} must be in [0, 1)")

    @property
    def d_k(self) -> int:
        return self.d_model // self.heads

    def replace(self, **changes) -> "Config":
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            known = ", ".join(f.name for f in dataclasses.fields(self))
            raise ConfigError(f"unknown config key(s) {sorted(unknown)}; known: {known}")
        return dataclasses.replace(self, **changes)

    @classmethod
    def parse(cls, items: list[str] | None, base: "Config | None" = None) -> "Config":
        """Build from ``["d_model=128", "heads=4"]`` (the CLI's ``--set``); refuses a
        config that cannot work or cannot fit in this machine's memory."""
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
            kind = "a number" if types[key] == "float" else "an integer"
            try:
                changes[key] = float(raw) if types[key] == "float" else int(raw)
            except ValueError:
                raise ConfigError(f"bad --set {item!r}: {key} takes {kind}, got {raw!r}") from None
        cfg = base.replace(**changes)
        need = cfg.estimated_bytes()
        have = physical_memory()
        if have and need > have:
            raise ConfigError(
                f"config {', '.join(items or [])} needs about {need / 2**30:,.0f} GiB "
                f"(attention scores B*H*T*max(T,S) in float64, with autograd's copies), "
                f"more than this machine's {have / 2**30:.0f} GiB"
            )
        return cfg

    def estimated_bytes(self) -> int:
        """A lower bound of one check's peak memory: the largest family's activations in
        float64 (attention scores, their softmax and gradients: about 6 copies)."""
        rows = self.batch * max(self.tgt_len, self.src_len)
        scores = self.batch * self.heads * self.tgt_len * max(self.tgt_len, self.src_len)
        return 8 * (6 * scores + 16 * rows * max(self.d_model, self.d_ff))


def physical_memory() -> int | None:
    """Bytes of RAM, or None where the OS does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None
