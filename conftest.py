"""Shared by tests/ and benchmarks/: load the project's variants, and any user file
given with ``--variants FILE`` or $HARNESS_VARIANTS, before collection."""

from __future__ import annotations

import os

from harness.cli import VARIANTS_ENV
from harness.registry import load_all


def pytest_addoption(parser):
    parser.addoption("--variants", action="append", default=[], metavar="FILE",
                     help="also test the variants registered by this file (repeatable)")


def pytest_configure(config):
    files = list(config.getoption("--variants") or [])
    files += [p for p in os.environ.get(VARIANTS_ENV, "").split(os.pathsep) if p]
    load_all(files)
