"""A semantic trait's vocabulary (``TraitSpec``) and the marker of a trait without a default
(``REQUIRED``): below the families and the conventions (``harness.families.conventions``),
which both declare traits."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

REQUIRED = object()


@dataclass(frozen=True)
class TraitSpec:
    """A semantic trait's vocabulary: the values its oracle can build (``values``), or any
    number when ``number`` is set; ``default`` is used when a variant does not declare it."""

    doc: str
    values: tuple[Any, ...] = ()
    number: bool = False
    default: Any = REQUIRED
    # a value's name in another library's vocabulary -> its name here: named in the error
    # that refuses it (declare the name here)
    aliases: Mapping[Any, Any] = field(default_factory=dict)

    def accepts(self, value: Any) -> bool:
        if self.number and isinstance(value, (int, float)) and not isinstance(value, bool):
            return math.isfinite(value) and value >= 0
        return value in self.values

    def known(self) -> str:
        parts = [repr(v) for v in self.values] + (["a number >= 0"] if self.number else [])
        return ", ".join(parts)
