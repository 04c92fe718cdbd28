"""docs/layout.md is held to the whole tree: each section headed by a folder (``## `x/` ``)
names every file in that folder (but ``__init__.py``), every file a section names exists
there, and the top level names every entry of the repository's top level."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYOUT = ROOT / "docs" / "layout.md"
FILE = re.compile(r"`([\w./-]+\.(?:py|md|toml|yml|jsonl?))`")


def tree() -> list[str]:
    """The repository's files: tracked, and new ones git does not ignore."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, text=True, check=True)
    return [f for f in listed.stdout.splitlines() if (ROOT / f).exists()]


def sections() -> dict[str, str]:
    """{heading: text} of layout.md's sections."""
    parts = re.split(r"^#{2,3} (.+)$", LAYOUT.read_text(), flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def folder_sections() -> dict[str, str]:
    return {m.group(1): text for head, text in sections().items() if (m := re.fullmatch(r"`([\w./-]+/)`", head))}


def test_each_folder_section_names_every_file_in_its_folder():
    files = tree()
    folders = folder_sections()
    assert {"harness/", "harness/check/", "variants/", "examples/", "benchmarks/"} <= set(folders)
    for folder, text in folders.items():
        mine = [f[len(folder):] for f in files if f.startswith(folder) and "/" not in f[len(folder):]]
        assert mine, f"layout.md has a section for {folder}, which holds no file"
        named = set(re.findall(r"`([\w./-]+)`", text))
        missing = [n for n in mine if n != "__init__.py" or folder == "harness/" if n not in named]
        assert not missing, f"docs/layout.md's `{folder}` section does not name {missing}"


def test_every_sub_package_has_a_section():
    packages = sorted(f"harness/{p.parent.name}/" for p in (ROOT / "harness").glob("*/__init__.py"))
    missing = [p for p in packages if p not in folder_sections()]
    assert not missing, f"docs/layout.md has no section for {missing}"


def test_every_file_named_exists():
    for folder, text in folder_sections().items():
        for name in FILE.findall(text):
            path = ROOT / name if "/" in name else ROOT / folder / name
            assert path.exists(), f"docs/layout.md's `{folder}` section names {name}, which does not exist"


def test_the_top_level_names_every_entry():
    top = sections()["The top level"]
    entries = sorted({f.split("/")[0] + ("/" if "/" in f else "") for f in tree()})
    missing = [e for e in entries if f"`{e}`" not in top]
    assert not missing, f"docs/layout.md's top level does not name {missing}"
