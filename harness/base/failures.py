"""A failure of the harness's own code (``harness_failure``: a bug to report, not the user's)
is one line in its row, as any failure (``boundary.describe``); the row that records it keeps
the whole traceback (``harness_traceback``) for its JSON, and with ``--debug``
(``show_tracebacks``) the traceback is printed on stderr as well.
"""

from __future__ import annotations

import sys
import traceback

from harness.base.boundary import UserCodeError, describe
from harness.base.errors import HarnessError

_debug = False


def show_tracebacks(on: bool = True) -> None:
    """``--debug``: print the traceback of each failure of the harness's own code on stderr."""
    global _debug
    _debug = on


def harness_failure(exc: BaseException) -> bool:
    """Whether ``exc``, turned into a row, is a failure of the harness's own code (a bug to
    report) rather than the user's: not raised through the boundary around their code
    (``UserCodeError``), not a refusal of their input (``HarnessError``), not a stop."""
    return not isinstance(exc, (UserCodeError, HarnessError, KeyboardInterrupt, SystemExit, GeneratorExit))


def harness_traceback(exc: BaseException) -> str | None:
    """The whole traceback of ``exc`` where a row records it as the harness's own failure, for
    the row's JSON (``"traceback"``; with ``--debug`` printed on stderr as well, once); None
    for the user's failures, whose one line names their file and line."""
    if not harness_failure(exc):
        return None
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    if _debug and not getattr(exc, "_harness_shown", False):
        exc._harness_shown = True  # type: ignore[attr-defined]
        print(f"--debug: the harness's own failure behind '{describe(exc)}':\n{text}", file=sys.stderr, end="")
    return text


def traceback_if_any(row: dict) -> dict:
    """A row as JSON: its ``traceback`` (the harness's own failure) only where there is one,
    so that every other row is written as it always was."""
    if row.get("traceback") is None:
        row.pop("traceback", None)
    return row
