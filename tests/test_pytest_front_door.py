"""pytest's own front door: a malformed -k/-m is pytest's one-line usage error, not xdist's
INTERNALERROR (the default addopts start two workers)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("flag, expr", [("-k", "attention and ("), ("-m", "slow or")])
def test_malformed_expression_is_one_usage_line(flag, expr):
    done = subprocess.run([sys.executable, "-m", "pytest", flag, expr, "-p", "no:cacheprovider"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 4, done.stdout + done.stderr  # pytest's usage-error status
    text = done.stdout + done.stderr
    assert "INTERNALERROR" not in text and "Traceback" not in text, text
    lines = [x for x in text.splitlines() if x.strip()]
    assert lines == [lines[0]] and f"Wrong expression passed to '{flag}'" in lines[0], text
