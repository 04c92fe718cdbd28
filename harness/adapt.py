"""Where the mask helpers lived before they joined the public API: a variants file written
then (``from harness.adapt import key_pad_to_attn, causal_and_pad, masked``) still loads.
Each name resolves to the helper of ``harness``; the first says so in one deprecation line
on stderr."""

from __future__ import annotations

import sys

from harness.base import masks

MOVED = ("masked", "per_head", "key_pad_to_attn", "causal_and_pad")
_said: list[bool] = []


def __getattr__(name: str):
    if name not in MOVED:
        raise AttributeError(f"module 'harness.adapt' has no attribute {name!r} (it keeps only {', '.join(MOVED)})")
    if not _said:
        _said.append(True)
        print(f"deprecated: harness.adapt: import its mask helpers from harness (from harness import {name}); "
              f"they resolve as before", file=sys.stderr)
    return getattr(masks, name)


def __dir__() -> list[str]:
    return list(MOVED)
