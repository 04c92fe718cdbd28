"""Types checked: mypy over the typed core named in pyproject.toml's ``[tool.mypy]`` (the
public API, ``harness/base``, the bench row, the porting entries, ``harness/check`` and
diff's result), and every callable the public ``harness`` API exports annotated whole."""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import harness

ROOT = Path(__file__).resolve().parents[1]


def test_the_typed_core_passes_mypy():
    pytest.importorskip("mypy", reason="mypy is not installed (pip install -e '.[test]' installs it)")
    # a cache per checkout, outside it: a few seconds once warm
    cache = Path(tempfile.gettempdir()) / f"attention-harness-mypy-{hashlib.sha1(str(ROOT).encode()).hexdigest()[:8]}"
    out = subprocess.run([sys.executable, "-m", "mypy", "--config-file", "pyproject.toml", "--cache-dir", str(cache)],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "Success" in out.stdout


def _public_callables():
    for name in harness.__all__:
        obj = getattr(harness, name)
        if inspect.isfunction(obj) and obj.__module__.startswith("harness"):
            yield name, obj
        elif inspect.isclass(obj) and obj.__module__.startswith("harness"):
            fields = {f.name for f in dataclasses.fields(obj)} if dataclasses.is_dataclass(obj) else set()
            for attr, value in vars(obj).items():
                public = attr == "__init__" or not attr.startswith("_")
                if inspect.isfunction(value) and attr not in fields and public:
                    yield f"{name}.{attr}", value


def test_the_public_api_is_annotated():
    """What a variants file calls says its types: every parameter and every return."""
    found = list(_public_callables())
    assert len(found) > 30
    missing = []
    for name, fn in found:
        sig = inspect.signature(fn)
        bare = [p.name for p in sig.parameters.values()
                if p.name not in ("self", "cls") and p.annotation is inspect.Parameter.empty]
        if bare or (sig.return_annotation is inspect.Signature.empty and fn.__name__ != "__init__"):
            missing.append(f"{name}({', '.join(bare)})" + (" -> ?" if fn.__name__ != "__init__" else ""))
    assert not missing, f"public callables without annotations: {missing}"
