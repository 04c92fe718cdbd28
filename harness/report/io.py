"""Writing results: strict JSON (NaN and inf as strings), checked before the work starts, written
whole (``harness.base.files``: a temporary name renamed into place) and never over a file this
harness did not write."""

from __future__ import annotations

import json
import math
from pathlib import Path

from harness.base.errors import HarnessError
from harness.base.files import (
    OUTPUT_MAGIC,
    SCHEMA_VERSION,
    atomic_path,
    atomic_write,
    is_own_json,
    refuse_foreign,
    refuse_unwritable,
    write_text,
)
from harness.base.output import STDOUT, refuse_special

__all__ = ["atomic_path", "atomic_write", "ensure_writable", "refuse_foreign", "strict_json", "write_json"]


def strict_json(value):
    """NaN becomes null and infinities the strings "inf"/"-inf": valid JSON for any parser."""
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    return value


def ensure_writable(path: str | None, what: str = "--json", own=is_own_json) -> None:
    """Refuse an output path before a long run, not after it: a folder, a file this harness
    did not write, /proc, or a place it may not write in (``refuse_unwritable``). Missing
    folders are made when the output is written (the harness's own default places): a path
    the user gives in a folder that does not exist is refused before, by ``cli/validate.py``."""
    if path is None or str(path) == STDOUT:
        return
    if not str(path).strip():
        raise HarnessError(f"{what} is empty: give a file name")
    refuse_special(path, what)
    target = Path(path)
    refuse_foreign(target, what, own=own)
    if target.is_dir():
        raise HarnessError(f"cannot write {what} '{path}': it is a directory")
    refuse_unwritable(target, what, create=True)


def write_json(path: str, payload, what: str = "--json") -> None:
    """Write ``payload`` whole; a dict is marked ``written_by`` so that a later run knows the
    file as its own (a file the harness did not write is refused, never replaced)."""
    if isinstance(payload, dict):  # every dict the harness writes says what wrote it, and in which schema
        payload = {"written_by": payload.get("written_by", OUTPUT_MAGIC), "schema": SCHEMA_VERSION, **payload}
    text = json.dumps(strict_json(payload), indent=2, default=str, allow_nan=False) + "\n"
    if str(path) == STDOUT:
        write_text(STDOUT, text)
        return
    target = Path(path)
    refuse_foreign(target, what)
    atomic_write(target, text)
