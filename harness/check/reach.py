"""Every declaration exercised: a declared trait whose effect no checked case reached (a
window wider than every case's keys, a soft cap far above every score, a RoPE scaling that
acts only past every case's positions) would pass whatever the module does about it.

From the float64 specs of a variant (what each oracle run noted, ``harness.families.reach``)
``reach_checks`` finds each declared trait no case reached, tries the case the family names
to reach it (``Family.reach_plan``: on a config of its own, within ``reach.MAX_KEYS`` keys),
and reports what is still unreached as ``NotExercised``: counted in ``check``'s summary, in
its JSON, and a skip in the pytest plugin; not a contradiction."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping

from harness.base.config import Config
from harness.check.results import SpecResult
from harness.check.runs import RunCache, applicable
from harness.families.base import Family
from harness.families.reach import MAX_KEYS, MAX_SCALE, Reach, ReachPlan
from harness.registry import Variant


class UnexercisedDeclaration(UserWarning):
    """A declared trait whose effect no checked case reached: a pass says nothing of it (the
    pytest plugin's warning on the variant's semantics test)."""


@dataclass(frozen=True)
class NotExercised:
    """A declared trait of ``variant`` whose effect no checked case reached, and why."""

    family: str
    variant: str
    trait: str
    value: str      # the declared value, as written
    why: str

    def __str__(self) -> str:
        return f"{self.trait} {self.value} ({self.why})"

    def as_dict(self) -> dict:
        return asdict(self)


def judged(family: Family, traits: Mapping[str, Any]) -> dict[str, Any]:
    """The semantic traits ``traits`` declares off the family's default: those whose reach counts."""
    return {name: traits[name] for name, spec in family.traits.items()
            if name in traits and traits[name] != spec.default}


def unreached(family: Family, variant: Variant, specs: Iterable[SpecResult]) -> dict[str, Reach]:
    """Each judged trait the variant's float64 specs noted and none reached: the note with the
    most of what reaching it takes (the longest case, the largest score)."""
    notes: dict[str, list[Reach]] = {}
    for s in specs:
        if s.family == variant.family and s.variant == variant.id and s.dtype == "float64":
            for n in s.reaches:
                notes.setdefault(n.trait, []).append(n)
    declared = judged(family, variant.traits)
    return {trait: max(found, key=lambda n: n.amount) for trait, found in notes.items()
            if trait in declared and not any(n.reached for n in found)}


PREFIX = "reach:"   # the name of a config a case added to reach a declaration runs on: reach:TRAIT:VARIANT


def is_reach_config(name: str) -> bool:
    """Whether ``name`` is a config of a case added to reach a declaration (not of the matrix)."""
    return name.startswith(PREFIX)


ROUNDS = 2   # a plan read off a case at another scale is tried once more from the config it made


def reach_checks(engine: Any, variant: Variant, specs: list[SpecResult], first: Config
                 ) -> tuple[list[SpecResult], list[NotExercised]]:
    """(the specs of the cases added to reach a declaration, the declarations still not
    exercised). ``engine``: the check's ``SpecChecker`` (each added case's config joins its
    ``checkers`` under its name); ``first``: the family's first config, which a plan starts from."""
    family = variant.family_spec
    added: list[SpecResult] = []
    left: list[NotExercised] = []
    for trait, worst in unreached(family, variant, specs).items():
        value, tried = variant.traits[trait], None
        cfg: Config | None = first
        plan: ReachPlan | None = None
        for attempt in range(ROUNDS):
            plan = family.reach_plan(trait, value, worst) if family.reach_plan else None
            cfg = plan.config(cfg) if plan is not None and plan.affordable and cfg is not None else None
            if plan is None or cfg is None or (tried is not None and cfg == engine.checkers[tried.config].cfg):
                break
            tried = _try(engine, variant, f"{PREFIX}{trait}:{variant.id}" + (f":{attempt}" if attempt else ""),
                         plan, cfg)
            if tried is None:
                break
            added.append(tried)
            notes = [n for n in tried.reaches if n.trait == trait]
            if not notes or any(n.reached for n in notes):
                break
            worst = max(notes, key=lambda n: n.amount)
        if tried is None or not any(n.trait == trait and n.reached for n in tried.reaches):
            left.append(NotExercised(family.name, variant.id, trait, _shown(value), _why(worst, plan, cfg, tried)))
    return added, left


def _try(engine: Any, variant: Variant, name: str, plan: ReachPlan, cfg: Config) -> SpecResult | None:
    """The float64 spec of the first of the plan's cases the variant takes, on ``cfg`` (named ``name``)."""
    engine.checkers.setdefault(name, RunCache(cfg, engine.device, record=False))
    case = next((c for c in plan.cases if applicable(variant, c)), None)
    return engine.check(variant, name, case, "float64") if case is not None else None


def _why(worst: Reach, plan: ReachPlan | None, cfg: Config | None, tried: SpecResult | None) -> str:
    why = worst.why()
    if plan is None:
        return why
    if not plan.affordable:
        return f"{why}; a case reaching it would have {plan.keys} keys, above the limit of {MAX_KEYS}"
    if tried is None and cfg is None:
        return f"{why}; a case reaching it would need inputs scaled past {MAX_SCALE:g}"
    if tried is None:
        return f"{why}; the variant takes none of the cases that would reach it ({', '.join(plan.cases)})"
    return f"{why}; nor did the case added to reach it ({tried.case} on {tried.config})"


def _shown(value: Any) -> str:
    describe = getattr(value, "describe", None)
    return describe() if callable(describe) else str(value)
