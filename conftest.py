"""Shared by tests/ and benchmarks/: the project's variants are loaded before collection.

``--variants FILE`` and $HARNESS_VARIANTS belong to the pytest plugin
(``harness.pytest_plugin``, installed with the package), which also loads user files.
"""

from __future__ import annotations

import pytest

from harness.base.errors import HarnessError
from harness.registry import load_all


def pytest_configure(config):
    try:
        load_all()
    except HarnessError as exc:
        raise pytest.UsageError(str(exc)) from None
