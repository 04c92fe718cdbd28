"""The plugin in a repository of the user's, outside this checkout (docs/your-repository.md):
``examples/user_repo`` copied to a temporary folder, its own ``pytest`` run there with the
harness installed in the environment. The ini's files and configs are read, the variant is
checked on every aspect, and a ``--set`` on the command line replaces the ini's item."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _pytest(repo: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("HARNESS_VARIANTS", "PYTEST_ADDOPTS")}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", *args], cwd=repo,
                          env=env, capture_output=True, text=True, timeout=600)


def test_a_repository_outside_the_checkout_checks_what_its_ini_names(tmp_path):
    repo = tmp_path / "their_repo"
    shutil.copytree(ROOT / "examples" / "user_repo", repo, ignore=shutil.ignore_patterns("__pycache__", ".*"))
    done = _pytest(repo, "-v")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert f"rootdir: {repo}" in out and "Traceback" not in out
    for aspect in ("semantics", "precision", "gradcheck", "dropout"):  # each checked on the CPU
        assert f"attention/my_mqa[cpu-{aspect}] PASSED" in out, out[-3000:]
    assert "4 passed, 4 skipped" in out and out.count("no CUDA device") >= 1
    refused = _pytest(repo, "--set", "kv_heads=2")  # replaces the ini's kv_heads=1: MQA refuses the config
    assert "attention/my_mqa (cpu): checked on 0 of 1 configs; not buildable: custom" in refused.stdout, (
        refused.stdout[-3000:])
