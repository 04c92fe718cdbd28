"""The architecture and the house style, checked: import-linter's contracts (one direction of
imports in ``harness/``, nothing imports the CLI, reporting never runs a check, families never
import the registry, variants import only the public API), ruff, and the size of each file
of ``harness/``. (docs/layout.md is held to the tree by tests/test_layout.py.)"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool(name: str) -> str:
    """The tool beside this interpreter (the venv's), else on PATH; skip when absent."""
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (pip install -e '.[test]' installs it)")
    return found


def test_import_contracts_hold():
    out = subprocess.run([_tool("lint-imports"), "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


def test_ruff_is_clean():
    out = subprocess.run([_tool("ruff"), "check", "harness", "variants", "tests", "benchmarks", "examples",
                          "conftest.py"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


def test_no_file_in_harness_is_too_big():
    """The rooms stay small enough to read: about 400 lines at most."""
    big = {str(p.relative_to(ROOT)): n for p in (ROOT / "harness").rglob("*.py")
           if (n := len(p.read_text().splitlines())) > 420}
    assert not big, big
