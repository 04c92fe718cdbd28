"""A declaration checked when a user's file loads, before any command runs."""

from __future__ import annotations

from harness.base.config import Config
from harness.base.dtypes import dtype_of
from harness.base.errors import SpecError
from harness.check.runs import applicable, oracle_run
from harness.families.no_key_rows import named_dtypes
from harness.registry import Variant


def oracle_refusal(variant: Variant) -> str | None:
    """What the family's oracle refuses in ``variant``'s declared traits (a ``SpecError``: an
    additive mask declared with NaN rows), found at load on one small config and every case
    the variant takes, or None. A declaration no check could ever judge is refused before any
    command runs, not found half-way through ``check``."""
    family = variant.family_spec
    if family.oracle is None:
        return None
    cfg = Config(batch=1, tgt_len=3, src_len=4, d_model=8, heads=2, d_ff=16)
    try:
        if variant.supports(cfg):
            cfg = Config()
    except Exception:  # noqa: BLE001  (its own supports failing is said where it runs)
        return None
    semantic = family.semantic_traits(variant.traits)
    weights = family.canonical_weights(cfg, traits=variant.traits)
    for dtype in named_dtypes(semantic):  # float64, and each dtype a ByDtype gives its own value
        for case in family.cases:
            if not applicable(variant, case.name):
                continue
            try:
                oracle_run(family, semantic, family.case_config(case.name, cfg), family.inputs(case.name, cfg),
                           weights, dtype=dtype_of(dtype))
            except SpecError as exc:
                return f"case {case.name}" + (f" in {dtype}" if dtype != "float64" else "") + f": {exc}"
            except Exception:  # noqa: BLE001  (any other failure is the check's error row, with its context)
                continue
    return None
