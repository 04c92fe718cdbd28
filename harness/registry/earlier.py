"""A map written before its family's traits brought canonical norm parameters of their own.

A family's ``trait_params`` make parameters canonical when a variant declares the trait (the
QK-norm gains ``q_norm.weight`` and ``k_norm.weight`` under ``qk_norm``). A map written when
they were not canonical has no entry for any of them: the module's gains were listed in
``fixed`` and held at their init on both sides. Such a map keeps loading with those meaning:
each one is read as its init value (``Absent(1.0)`` for a gain, ``Zero()`` for a bias) and
declared not learned (``traits['not_learned']``), said in one deprecation line that names the
new form (map them)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

from harness.base.config import Config
from harness.porting.entries import Absent, Zero

NORM_FILLS = {"norm_weight": 1.0, "norm_bias": 0.0}


def _trait_norms(family, traits, cfg: Config) -> dict[str, float]:
    """The canonical norm parameters ``traits`` bring for ``cfg``, each with its init value."""
    if family.trait_params is None:
        return {}
    brought = family.trait_params(family.semantic_traits(traits), cfg)
    return {name: NORM_FILLS[kind] for name, (_, kind) in brought.items() if kind in NORM_FILLS}


def unmapped_trait_norms(variant: Any) -> Any:
    """``variant`` itself, or, where its map has no entry for any of the norm parameters its
    traits bring, the variant with those read as their init value and declared not learned
    (one deprecation line)."""
    family = variant.family_spec
    cfg = Config()
    try:
        norms = _trait_norms(family, variant.traits, cfg)
        entries = variant.map_for(cfg) if norms else {}
    except Exception:  # a map or trait that fails: its error row comes where it is used
        return variant
    if not norms or any(name in entries for name in norms):
        return variant
    own = variant.param_map

    def param_map(cfg: Config) -> dict:
        entries = dict(own(cfg) if callable(own) else own)
        for name, fill in _trait_norms(family, variant.traits, cfg).items():
            entries.setdefault(name, Absent(fill) if fill else Zero())
        return entries

    names = sorted(norms)
    declared = tuple(variant.traits.get("not_learned", ()))
    traits = {**variant.traits, "not_learned": declared + tuple(n for n in names if n not in declared)}
    where = f" ({Path(variant.origin).name})" if variant.origin else ""
    shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    print(f"deprecated: variant '{variant.key}'{where}: its param_map has no entry for {shown}, "
          f"canonical parameters since its traits bring them: read as held at their init on both sides (as "
          f"`fixed` held them); map them (\"{names[0]}\": Param(<the module's gain>)) to port and check them",
          file=sys.stderr)
    return dataclasses.replace(variant, param_map=param_map, traits=traits)
