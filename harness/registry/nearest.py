"""The nearest reference of a variant: the registered variant of its family it is compared
with where one verdict must speak for it (the report's summary). The family's reference is
one answer, but a variant that declares RoPE, GQA or a NaN for a row without keys is
'different' from a plain ``torch_mha`` whatever it does right; the useful comparison is with
the variant it can be equivalent to.

The rule reads declarations only, never ids. Of the family's other variants that can run
where the variant runs (a device type and a dtype in common, a case in common), the nearest
has, in order:

1. the fewest semantic traits whose declared values differ (defaults filled in): zero is a
   variant of the same equivalence class, the one the variant can be equivalent to;
2. the fewest of the variant's cases and extra configs it does not take (a RoPE or GQA
   variant's decoding cases, the GQA config), so the verdict covers what the variant runs;
3. the family's reference before any other variant, a pack's or the project's before a
   user's file, then registration order.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.registry import REGISTRY, Variant, applicable, from_user_file, variants_of


@dataclass(frozen=True)
class Nearness:
    """How far ``candidate`` is from the variant: the semantic traits whose declared values
    differ, and how many of the variant's cases and extra configs it does not take."""

    candidate: Variant
    differing: tuple[str, ...]
    uncovered: int

    def key(self, order: int) -> tuple[int, int, bool, bool, int]:
        c = self.candidate
        return len(self.differing), self.uncovered, not c.reference, from_user_file(c), order


def differing_traits(a: Variant, b: Variant) -> tuple[str, ...]:
    """The family's semantic traits whose values ``a`` and ``b`` declare differently (the
    family's defaults filled in), in the family's order."""
    family = a.family_spec
    sem_a, sem_b = family.semantic_traits(a.traits), family.semantic_traits(b.traits)
    return tuple(t for t in family.traits if sem_a.get(t) != sem_b.get(t))


def _runs_with(variant: Variant, other: Variant, device: str | None) -> bool:
    """Whether a pair of the two can run at all: a device type (``device``'s, when given) and a
    dtype both run in."""
    sets = [v.devices for v in (variant, other) if v.devices is not None]
    if device is not None and any(s.refuses(device) for s in sets):
        return False
    if len(sets) == 2 and not set(sets[0].types) & set(sets[1].types):
        return False
    return not (variant.dtypes and other.dtypes and not set(variant.dtypes) & set(other.dtypes))


def nearness(variant: Variant, candidate: Variant) -> Nearness | None:
    """``candidate`` measured from ``variant`` (None: no case both take)."""
    family = variant.family_spec
    mine = [c.name for c in family.cases if applicable(variant, c.name)]
    theirs = {c.name for c in family.cases if applicable(candidate, c.name)}
    if not theirs & set(mine):
        return None
    uncovered = sum(c not in theirs for c in mine)
    if family.requires is not None:
        uncovered += sum(family.requires(variant.traits, cfg) is None
                         and family.requires(candidate.traits, cfg) is not None
                         for cfg in family.extra_configs.values())
    return Nearness(candidate, differing_traits(variant, candidate), uncovered)


def ranked_references(variant: Variant, device: str | None = None) -> list[Nearness]:
    """The family's other variants that a pair with ``variant`` can run for, nearest first
    (the module's rule); the variant itself and those it cannot run beside are left out."""
    order = {key: i for i, key in enumerate(REGISTRY)}
    found = [n for c in variants_of(variant.family)
             if c.key != variant.key and _runs_with(variant, c, device) and (n := nearness(variant, c)) is not None]
    return sorted(found, key=lambda n: n.key(order[n.candidate.key]))


def nearest_reference(variant: Variant, device: str | None = None) -> Nearness | None:
    """The variant ``variant`` is compared with (None: none can run beside it)."""
    ranked = ranked_references(variant, device)
    return ranked[0] if ranked else None
