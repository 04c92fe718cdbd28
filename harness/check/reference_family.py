"""``judge(..., family={...})``: where a registered family describes the candidate, its own
check as well, as ``check`` runs it (the family's cases, configs and oracle, gradcheck and
the dropout checks): the candidate registered for the duration under the keywords of
``harness.register`` given, then ``check_all`` on it alone. Its spec results join the
judgement (``Judgement.family``) and its report is kept (``Judgement.family_report``:
``harness.trace.explain.explain_failures(report, configs)`` names the mistake in one line)."""

from __future__ import annotations

from typing import Any, Mapping

from harness.base.config import CONFIG_MATRIX
from harness.base.errors import RegistryError
from harness.check.api import check_all
from harness.check.results import CheckReport
from harness.check.settings import CheckSettings
from harness.registry import register, scratch


def family_check(candidate: Any, fields: Mapping[str, Any], device: str = "cpu") -> CheckReport:
    """The family check of ``candidate`` registered with ``fields`` (``family``, ``param_map``,
    ``traits``...; ``build`` defaults to ``candidate(cfg)``'s class called on nothing, so give
    it where the class takes arguments; ``id`` defaults to "candidate")."""
    given = dict(fields)
    if "family" not in given:
        raise RegistryError("family= takes the keywords of harness.register for the candidate; it names no family")
    given.setdefault("id", "candidate")
    given.setdefault("source", "judge(family=...)")
    given.setdefault("summary", "the candidate judged against a reference")
    given.setdefault("build", lambda cfg: candidate())
    with scratch():
        variant = register(**given)
        settings = CheckSettings(device, ("float32",), variants=frozenset([variant.key]))
        return check_all([variant.family], CONFIG_MATRIX, settings=settings)
