"""Map search, before it starts: does the module fit the family at all? A module fits when
some candidate map (``map_slots.candidate_maps``) places every one of its parameters; one
that does not (an attention module searched as a norm) is told in one line: which of its
parameters has no place among the family's canonical ones, and the families whose
canonical parameters it does fit, by shape."""

from __future__ import annotations

import itertools

import torch

from harness.base.config import Config
from harness.base.errors import InputError
from harness.families.base import Family
from harness.families.catalog import FAMILIES
from harness.registry import reference_of
from harness.trace.map_slots import candidate_maps

MOST_WEIGHTS = 8  # families with more canonical weights (whole models) are not suggested: their search is long
MAPS_LOOKED_AT = 400  # candidate maps examined per family: a fitting module places every parameter in its first


def unplaced(family: Family, cfg: Config, module: torch.nn.Module, layouts: list[dict]) -> list[str] | None:
    """None when a candidate map under one of ``layouts`` (trait sets) places every module parameter,
    else the module's parameters that the closest candidate leaves without a place (all of them
    when the family gives no candidate at all)."""
    params = [name for name, _ in module.named_parameters()]
    if not params:  # nothing to place: the call decides
        return None
    best: list[str] = params
    for layout in layouts or [{}]:
        try:
            maps = list(itertools.islice(candidate_maps(family, cfg, module, layout), MAPS_LOOKED_AT))
        except (ValueError, KeyError, TypeError, IndexError):  # shapes this family's slots cannot read
            continue
        for pmap in maps:
            used = {r.path for entry in pmap.values() for r in entry.regions()}
            left = [p for p in params if p not in used]
            if not left:
                return None
            best = left if len(left) < len(best) else best
    return best


def _shapes(named: dict[str, tuple[int, ...]], most: int = 6) -> str:
    shown = [f"{n} {tuple(s)}" for n, s in named.items()]
    more = f", and {len(shown) - most} more" if len(shown) > most else ""
    return ", ".join(shown[:most]) + more if shown else "none"


def fitting_families(cfg: Config, module: torch.nn.Module, skip: str) -> list[str]:
    """The families (with a reference to search against, at most ``MOST_WEIGHTS`` canonical
    weights) whose canonical parameters take every parameter of ``module``, by shape;
    parameter-free families only for a parameter-free module."""
    has_params = any(True for _ in module.parameters())
    fits = []
    for name, family in FAMILIES.items():
        if name == skip or name == "attention_kernel" or reference_of(name) is None:
            continue
        try:
            canonical = family.canonical_shapes(cfg, reference_of(name).traits)
        except Exception:  # noqa: BLE001  (a family that cannot describe this config: not a suggestion)
            continue
        if has_params != bool(canonical) or sum(len(s) == 2 for s in canonical.values()) > MOST_WEIGHTS:
            continue
        if unplaced(family, cfg, module, [dict(reference_of(name).traits)]) is None:
            fits.append(name)
    return fits


def refuse_misfit(target: str, family: Family, cfg: Config, module: torch.nn.Module, layouts: list[dict]) -> None:
    """Raise one line when no candidate map places every parameter of ``module`` in ``family``."""
    left = unplaced(family, cfg, module, layouts)
    if left is None:
        return
    shapes = {n: tuple(p.shape) for n, p in module.named_parameters()}
    canonical = family.canonical_shapes(cfg, layouts[0] if layouts else None)
    what = (f"its parameter(s) {_shapes({n: shapes[n] for n in left})} have no place among {family.name}'s "
            f"canonical parameters ({_shapes(canonical)})")
    others = fitting_families(cfg, module, family.name)
    hint = (f"; by its parameter shapes it fits {', '.join(others)} (--family {others[0]})" if others
            else "; by its parameter shapes it fits no family at this config (try --set to match its sizes)")
    raise InputError(f"{target} does not fit family '{family.name}': {what}{hint}")
