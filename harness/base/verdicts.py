"""The verdict vocabulary, in one place: the pair verdicts in their order, and which agree.

A home for the coming ``Verdict`` enum; until then the verdicts are the strings ``check``
writes to its JSON."""

from __future__ import annotations

RANK = {"identical": 0, "equivalent": 1, "different": 2, "error": 3}
AGREE = ("identical", "equivalent")
