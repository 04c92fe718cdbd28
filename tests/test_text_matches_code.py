"""Text that cannot drift from the code: what docstrings, comments, help texts and the
documentation say about the code is read back and checked against it.

- a dotted reference into the harness package names a module or attribute that exists;
- a constant named in backquotes exists, and a value quoted beside it is its value;
- a figure quoted where the code has a constant is that constant (the bootstrap
  interval's level);
- an option's help quotes the option's own default;
- a section header (``# -- title ---``) heads code, not the end of a file;
- nothing cites a tracker's issue number: the tracker is not in the repository.
No torch work: source files are read, and the CLI's parser is built."""

from __future__ import annotations

import argparse
import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCE_DIRS = ("harness", "variants", "tests", "benchmarks", "scripts", "examples")


def _files(dirs, suffixes=(".py", ".md")) -> list[Path]:
    return sorted(p for d in dirs for p in (ROOT / d).rglob("*") if p.suffix in suffixes and p.is_file())


def _docs() -> list[Path]:
    return [ROOT / "README.md", *_files(["docs"], (".md",))]


def _resolves(name: str) -> bool:
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:k]))
        except ModuleNotFoundError:
            continue
        for attr in parts[k:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_dotted_references_name_what_exists():
    """``harness.check.tensors.compare_tensors`` in a docstring is where that function is:
    a function or module that moves leaves no pointer behind it."""
    refs: dict[str, str] = {}
    for path in [*_files(SOURCE_DIRS), *_docs()]:
        for i, line in enumerate(path.read_text().splitlines(), 1):
            for m in re.finditer(r"(?<![\w./-])harness(?:\.[A-Za-z_]\w*)+(?![\w*])", line):
                refs.setdefault(m.group(0), f"{path.relative_to(ROOT)}:{i}")  # NAME_* (a family of names): not one
    assert len(refs) > 50  # the scan reads what it should
    stale = {ref: where for ref, where in refs.items() if not _resolves(ref)}
    assert not stale, f"references to what does not exist (moved or renamed?): {stale}"


def _constants() -> dict[str, list[object]]:
    """Module-level UPPER_CASE names of the repository's code, with their literal values
    (None where the value is not a literal)."""
    out: dict[str, list[object]] = {}
    for path in _files(SOURCE_DIRS, (".py",)):
        for node in ast.parse(path.read_text()).body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, ast.AnnAssign) else []
            for t in targets:
                if isinstance(t, ast.Name) and re.fullmatch(r"[A-Z][A-Z0-9_]+", t.id):
                    try:
                        value = ast.literal_eval(node.value) if node.value is not None else None
                    except ValueError:
                        value = None
                    out.setdefault(t.id, []).append(value)
    return out


def _upper_literals() -> set[str]:
    """UPPER_CASE string literals of the code (environment variables, layout names)."""
    found = set()
    for path in _files(SOURCE_DIRS, (".py",)):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found |= set(re.findall(r"\b[A-Z][A-Z0-9_]{2,}\b", node.value))
    return found


def test_constants_named_in_text_exist_and_keep_their_quoted_values():
    """A docstring or page names a constant instead of restating its value; where it quotes
    the value beside the name (```NAME`` (3)`, ```NAME`` = 3`), that is the value."""
    constants, literals = _constants(), _upper_literals()
    unknown, wrong = {}, {}
    for path in [*_files(["harness", "benchmarks"]), *_docs()]:
        text = path.read_text()
        for m in re.finditer(r"``?([A-Z][A-Z0-9_]{2,})``?(?:\s*(?:=|\()\s*([-+]?\d[\d.]*(?:e[-+]?\d+)?))?", text):
            name, quoted = m.group(1), m.group(2)
            if name not in constants and name not in literals:
                unknown.setdefault(name, str(path.relative_to(ROOT)))
            elif quoted is not None and not any(isinstance(v, (int, float)) and float(quoted) == v
                                                for v in constants.get(name, [])):
                wrong[f"{name} ({quoted})"] = f"{path.relative_to(ROOT)}: the code has {constants.get(name)}"
    assert not unknown, f"text names constants the code does not have: {unknown}"
    assert not wrong, f"text quotes values the constants do not have: {wrong}"


def test_figures_quoted_where_the_code_has_a_constant_are_the_constant():
    """The level of the bootstrap interval a target is decided on (``INTERVAL_LEVEL``), as
    the report's text, the README and the documentation quote it."""
    from harness.bench.timing import INTERVAL_LEVEL

    quoted = []
    for path in [*_docs(), *_files(["harness"], (".py",))]:
        quoted += [(int(x), path.name) for x in re.findall(r"\b(\d+)% (?:percentile-)?(?:bootstrap )?interval",
                                                            path.read_text())]
    assert quoted, "no quoted interval level found: the pattern no longer reads the text"
    assert all(level == round(INTERVAL_LEVEL * 100) for level, _ in quoted), quoted


def _actions(parser: argparse.ArgumentParser, prefix: str = ""):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _actions(sub, f"{prefix}{name} ")
        else:
            yield prefix, action


def _same(quoted: str, default) -> bool:
    if isinstance(default, (int, float)) and not isinstance(default, bool):
        try:
            return float(quoted) == default
        except ValueError:
            return False
    return quoted == str(default)


def test_help_texts_quote_their_options_defaults():
    """``(default N)`` in an option's help is the option's default (``%(default)s``, or the
    constant it is set from), never a figure typed twice. An option whose default is None
    is decided later (by the profile, or a file): its help is not read here."""
    from harness.cli.main import build_parser

    parser = build_parser()
    checked, wrong = 0, []
    for prefix, action in _actions(parser):
        if not action.help or action.help == argparse.SUPPRESS or action.default is None:
            continue
        text = action.help % {"default": action.default, "prog": parser.prog}
        for m in re.finditer(r"\(default:? (-?\d[\d.,]*\d|\d)\b", text):
            checked += 1
            if not _same(m.group(1), action.default):
                wrong.append(f"{prefix}{'/'.join(action.option_strings)}: {text!r}, default {action.default!r}")
    assert checked >= 3 and not wrong, wrong


def test_section_headers_head_code():
    """A ``# -- title ---`` header is followed by code at its own indentation before the
    next header: one left at the end of a file or a class, when its code moved, is stale."""
    stale = []
    for path in _files(["harness"], (".py",)):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            m = re.match(r"^(\s*)# -- .* -+\s*$", line)
            if not m:
                continue
            indent = m.group(1)
            for later in lines[i + 1:]:
                if re.match(r"^\s*# -- .* -+\s*$", later):
                    stale.append(f"{path.relative_to(ROOT)}:{i + 1}")
                    break
                if later.strip() and not later.lstrip().startswith("#"):
                    if not later.startswith(indent) or later[len(indent):len(indent) + 1].isspace():
                        stale.append(f"{path.relative_to(ROOT)}:{i + 1}")
                    break
            else:
                stale.append(f"{path.relative_to(ROOT)}:{i + 1}")
    assert not stale, f"section headers with no code of theirs under them: {stale}"


# An issue number of this project's tracker (the word, a space or a dash, the number); a link
# into another project's tracker (".../issues/<number>") names where it is, and is allowed.
ISSUE = re.compile(r"(?i)(?<![/\w])issues?[ -]#?\d+")


@pytest.mark.parametrize("where", ["code", "documentation"])
def test_nothing_cites_an_issue_tracker_that_is_not_in_the_repository(where):
    """The reason is written where it applies, not as a number in a tracker a reader cannot
    open. (README.md is being rewritten outside this check and joins it once it is.)"""
    paths = (_files(SOURCE_DIRS) + [ROOT / "pyproject.toml", ROOT / "conftest.py"] if where == "code"
             else _files(["docs"], (".md",)))
    cited = [f"{p.relative_to(ROOT)}:{i}: {line.strip()[:80]}" for p in paths
             for i, line in enumerate(p.read_text().splitlines(), 1) if ISSUE.search(line)]
    assert not cited, cited
