"""Shared by tests/ and benchmarks/: the project's variants are loaded before collection.

``--variants FILE`` and $HARNESS_VARIANTS belong to the pytest plugin
(``harness.pytest_plugin``, installed with the package), which also loads user files.
"""

from __future__ import annotations

import pytest
from _pytest.mark.expression import Expression  # pytest's own -k/-m parser

from harness.base.errors import HarnessError
from harness.pytest_plugin import share_cpus
from harness.registry import load_all


def _check_expressions(config) -> None:
    """A malformed ``-k``/``-m`` is pytest's own one-line usage error here, before xdist's
    workers start (there it surfaces as a 35-line INTERNALERROR from the default ``-n 2``)."""
    for option, flag in (("keyword", "-k"), ("markexpr", "-m")):
        expr = getattr(config.option, option, "") or ""
        if not expr:
            continue
        try:
            Expression.compile(expr)
        except SyntaxError as exc:
            raise pytest.UsageError(f"Wrong expression passed to '{flag}': {exc.text}: "
                                    f"at column {exc.offset}: {exc.msg}") from None


def pytest_configure(config):
    _check_expressions(config)
    share_cpus()  # two xdist workers on two cores: one torch thread each, not two spinning against two
    try:
        load_all()
    except HarnessError as exc:
        raise pytest.UsageError(str(exc)) from None
