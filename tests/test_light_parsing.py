"""``--help``, a command's ``--help`` and a usage mistake answer before torch is imported:
every parser is built from light modules (harness/cli/parsers.py), the public API loads on
its first name (harness/__init__.py), and a command's module loads when it runs."""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
from pathlib import Path

import harness
from harness.cli.main import build_parser
from harness.cli.parsers import Command

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "numpy", "pandas", "transformers", "matplotlib")


def _commands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _run(code: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, *args, "-c", code] if code else [sys.executable, *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_help_every_command_help_and_usage_mistakes_import_no_torch():
    """Each line after parsing: the exit status, then the heavy modules loaded (none)."""
    argvs = [["--help"], ["--version"], ["bogus"], [], ["check", "--no-such-option"], ["bench", "--seq"],
             ["parity", "x", "--port", "p", "--dtype", "float8"], ["kernelbench", "p.py", "--gradients", "some"]]
    argvs += [[name, "--help"] for name in _commands()]
    code = ("import contextlib, io, sys\nfrom harness.cli.main import main\n"
            f"for argv in {argvs!r}:\n"
            "    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
            "        status = main(argv)\n"
            f"    heavy = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})\n"
            "    print(argv, status, heavy[:3])\n")
    out = _run(code)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == len(argvs), out.stdout
    for argv, line in zip(argvs, lines):
        expected = 0 if argv in (["--version"],) or argv[-1:] == ["--help"] else 2
        assert line == f"{argv} {expected} []", line


def test_python_m_harness_help_imports_no_torch_from_the_package_on():
    """The real entry point: ``harness/__init__.py`` and ``__main__.py`` included."""
    for argv in (["--help"], ["check", "--help"], ["check", "--set"]):
        out = _run("", "-X", "importtime", "-m", "harness", *argv)
        assert out.returncode == (2 if argv[-1] == "--set" else 0), out.stderr[-2000:]
        imported = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines() if "import time:" in line}
        assert "harness.cli.parsers" in imported, out.stderr[-2000:]
        assert not {m for m in imported if m.split(".")[0] in HEAVY}, sorted(imported)


def test_the_public_api_loads_on_its_first_name_and_refuses_an_unknown_one():
    out = _run("import sys, harness\nassert 'torch' not in sys.modules\nfrom harness import register, Param\n"
               "print(register.__module__, Param.__module__, 'torch' in sys.modules)\n"
               "try:\n    getattr(harness, 'no_such_name')\nexcept AttributeError as e:\n    print(e)\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["harness.registry harness.porting.entries True",
                                       "module 'harness' has no attribute 'no_such_name'"]
    assert set(harness.__all__) <= set(dir(harness)) and all(getattr(harness, n) is not None for n in harness.__all__)


def test_every_command_names_a_function_that_exists():
    for name, parser in _commands().items():
        func = parser.get_default("func")
        assert isinstance(func, Command), name
        assert callable(getattr(importlib.import_module(func.module), func.name)), (name, func)
