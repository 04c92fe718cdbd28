"""The architecture and the house style, checked: import-linter's contracts (one direction of
imports in ``harness/``, nothing imports the CLI, reporting never runs a check, families never
import the registry, variants import only the public API), ruff, and the size of each file
and each function of ``harness/``. (docs/layout.md is held to the tree by tests/test_layout.py.)"""

from __future__ import annotations

import ast
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


LONG_FUNCTION_LINES = 70


def long_functions(root: Path, limit: int = LONG_FUNCTION_LINES) -> dict[str, int]:
    """``file:function`` -> its lines (``def`` to its last line, decorators aside) for every
    function or method under ``root``/harness longer than ``limit``."""
    found = {}
    for p in sorted((root / "harness").rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > limit:
                    found[f"{p.relative_to(root).as_posix()}:{node.name}"] = n
    return found


def test_no_function_in_harness_is_too_long():
    """A function reads in one screen: about 70 lines at most (the house rule)."""
    long = long_functions(ROOT)
    assert not long, long


def test_the_function_length_lint_sees_a_long_function_and_passes_a_short_one(tmp_path):
    (tmp_path / "harness").mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(LONG_FUNCTION_LINES))  # def + 70 lines: 71
    (tmp_path / "harness" / "m.py").write_text(
        f"def long():\n{body}\n\nclass C:\n    async def short(self):\n        return 1\n\n"
        f"    def method(self):\n" + "".join(f"    {line}" for line in body.splitlines(keepends=True)))
    assert long_functions(tmp_path) == {"harness/m.py:long": 71, "harness/m.py:method": 71}
    assert long_functions(tmp_path, limit=71) == {}
