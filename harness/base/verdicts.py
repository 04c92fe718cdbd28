"""The verdict vocabulary, in one place: every verdict ``check`` gives, in its order (best
first), with its table symbol and whether it counts as agreement.

``Verdict`` is a ``str`` enum: a member equals, hashes and prints as its value, so the JSON
``check`` writes and any code still holding the bare strings keep working."""

from __future__ import annotations

from enum import Enum
from typing import Iterable


class Verdict(str, Enum):
    IDENTICAL = "identical"            # bitwise the same
    EQUIVALENT = "equivalent"          # within the tolerance: the same function
    LESS_PRECISE = "less precise"      # the same function, more rounding than the reference
    NOT_EXERCISED = "not exercised"    # a declared difference this case cannot show
    NOT_RESOLVABLE = "not resolvable"  # a declared difference below the dtype's resolution
    DIFFERENT = "different"            # a different function
    ERROR = "error"                    # it did not run

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @property
    def rank(self) -> int:
        """Position in the order, best first: ``max(..., key=rank)`` is the worst."""
        return _ORDER.index(self)

    @property
    def symbol(self) -> str:
        return _SYMBOL[self]

    @property
    def agrees(self) -> bool:
        """Whether two results with this verdict compute the same thing, as precisely."""
        return self in (Verdict.IDENTICAL, Verdict.EQUIVALENT)

    @classmethod
    def worst(cls, verdicts: Iterable[str], default: Verdict | str = "identical") -> Verdict:
        """The worst of ``verdicts`` (strings or members); ``default`` when there are none."""
        return max((cls(v) for v in verdicts), key=_ORDER.index, default=cls(default))


_ORDER = tuple(Verdict)
_SYMBOL = {Verdict.IDENTICAL: "≡", Verdict.EQUIVALENT: "≈", Verdict.LESS_PRECISE: "≲",
           Verdict.NOT_EXERCISED: "○", Verdict.NOT_RESOLVABLE: "◌", Verdict.DIFFERENT: "≠", Verdict.ERROR: "E"}
