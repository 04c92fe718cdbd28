"""A registration ``map`` prints is printed as found only once it ran and checked clean: the
code executed in a scratch registry (its own imports, the target's folder importable, the
mapped class in scope for a class from a file), then ``check`` of that one variant."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any, Mapping

from harness.base.boundary import describe
from harness.base.config import Config
from harness.check.api import check_all
from harness.check.settings import CheckSettings
from harness.registry import scratch


@contextlib.contextmanager
def on_path(folder: Path | None):
    """``folder`` importable for the block; modules first imported from it are forgotten
    after (importing a variants file registers its variants: each block sees that afresh)."""
    added = folder is not None and str(folder) not in sys.path
    before = set(sys.modules)
    if added:
        sys.path.insert(0, str(folder))
    try:
        yield
    finally:
        if added:
            sys.path.remove(str(folder))
        for name in set(sys.modules) - before:
            if folder is not None and str(folder) in str(getattr(sys.modules[name], "__file__", "") or ""):
                del sys.modules[name]


def verify_registration(code: str, family: str, variant_id: str, cfg: Config, *, folder: Path | None = None,
                        scope: Mapping[str, Any] | None = None, dtypes: tuple[str, ...] = ("float32",),
                        extras: bool = True) -> tuple[bool, str]:
    """(clean, one line): what was checked, or why the registration does not check."""
    with scratch(), on_path(folder):
        try:
            exec(compile(code, "<map registration>", "exec"), {"__name__": "harness_map_registration",  # noqa: S102
                                                               **(scope or {})})
        except Exception as exc:  # noqa: BLE001  (a registration that does not even run)
            return False, f"the registration fails to run: {describe(exc)}"
        report = check_all([family], {"map": cfg}, settings=CheckSettings(
            "cpu", tuple(dtypes), variants=frozenset([f"{family}/{variant_id}"]), extras=extras))
    mine = [s for s in report.specs if s.variant == variant_id]
    bad = [f for f in report.failures if getattr(f, "variant", "") == variant_id]
    if bad:
        where = ", ".join(sorted({f"{getattr(f, 'case', 'gradcheck')} {getattr(f, 'dtype', '')}".strip()
                                  for f in bad}))
        return False, f"the registration does not check clean: {len(bad)} contradiction(s) ({where})"
    if not mine:
        return False, "the registration checks nothing: no case of the family applies to it"
    return True, (f"checked: {len(mine)} spec checks ({', '.join(sorted({s.dtype for s in mine}))})"
                  + (", gradcheck and dropout" if extras else "") + ", 0 contradict")
