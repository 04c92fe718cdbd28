"""The manual (docs/, mkdocs.yml) builds as a site with ``mkdocs build --strict``: a page
the nav names that is missing, a link to a page or an anchor that does not exist, fails."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _build(root: Path, site: Path) -> subprocess.CompletedProcess:
    # not --quiet: it silences the warnings that --strict counts, and nothing fails
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                           "-f", str(root / "mkdocs.yml"), "-d", str(site)],
                          cwd=root, capture_output=True, text=True, timeout=300)


def test_the_manual_builds_strictly(tmp_path):
    built = _build(ROOT, tmp_path / "site")
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    pages = sorted(p.stem for p in (ROOT / "docs").glob("*.md"))
    assert pages and all((tmp_path / "site" / (p if p != "index" else "") / "index.html").is_file()
                         for p in pages)


def test_a_broken_link_fails_the_build(tmp_path):
    """The build above would pass on a lenient configuration too: a link to a missing anchor
    and one to a missing page must fail it, each named."""
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy2(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    index = tmp_path / "docs" / "index.md"
    index.write_text(index.read_text() + "\n[x](verdicts.md#no-such-heading) [y](no-such-page.md)\n")
    built = _build(tmp_path, tmp_path / "site")
    assert built.returncode != 0
    assert "no-such-heading" in built.stderr and "no-such-page.md" in built.stderr, built.stderr[-3000:]
