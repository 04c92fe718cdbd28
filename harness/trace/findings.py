"""The findings of DIFFERENCES.md as data: computed by ``trace.differences``, rendered by
``report.differences_md``."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Boundary:
    """Two classes' representatives, why they differ (declared), by how much (measured) and
    where they first diverge."""

    a: str
    b: str
    reasons: list[str]
    effects: list[str]
    case: str
    first_divergence: str


@dataclass
class Contradiction:
    a: str
    b: str
    case: str
    dtype: str
    verdict: str
    expected: str
    first_divergence: str


@dataclass
class FamilyFindings:
    """Everything DIFFERENCES.md says about one family, as data."""

    family: str
    call: str
    cases: list[tuple[str, str]]
    semantic: list[str]
    case_semantic: dict[str, list[str]]
    skipped: list[tuple[str, str]]
    trait_names: list[str]
    traits: list[list[str]]  # per variant: id, source, a value per trait name
    compared: bool  # False: no pair to compare (the sections below are empty)
    classes: list[list[str]] = field(default_factory=list)
    per_case: list[tuple[str, list[list[str]]]] = field(default_factory=list)
    boundaries: list[Boundary] = field(default_factory=list)
    costs: list[list] = field(default_factory=list)
    kernel_findings: list[str] = field(default_factory=list)
    contradictions: list[Contradiction] = field(default_factory=list)
