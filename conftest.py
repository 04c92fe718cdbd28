"""Shared by tests/ and benchmarks/: the project's variants are loaded before collection.

``--variants FILE`` and $HARNESS_VARIANTS belong to the pytest plugin
(``harness.pytest_plugin``, installed with the package), which also loads user files.

Distribution over pytest-xdist workers is ``--dist loadgroup`` (pyproject's addopts): a
test with an ``xdist_group`` mark runs on its group's worker; every other test is put in
the group of its file here, so a file's tests stay on one worker and share its module- and
session-scoped checks (what ``--dist loadfile`` did), while the README's commands spread
over the workers by the copy of the repository they run in.
"""

from __future__ import annotations

import pytest

from harness.errors import HarnessError
from harness.registry import load_all


def pytest_configure(config):
    try:
        load_all()
    except HarnessError as exc:
        raise pytest.UsageError(str(exc)) from None


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
