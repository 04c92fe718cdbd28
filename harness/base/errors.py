"""Errors a user can cause. Each one names the thing that is wrong.

The CLI turns any ``HarnessError`` into one line on stderr and exit code 2; it never
shows a traceback for them. Anything else raised while a variant runs is that variant's
finding, and anything else raised while the check itself judges a spec (its oracle, its
baseline, the comparison) is that spec's error row, named as the harness's failure: in
both cases the run goes on. Outside those, an exception other than these is a bug in the
harness and propagates.
"""

from __future__ import annotations

import sysconfig
import traceback
from pathlib import Path


class HarnessError(ValueError):
    """Base class of every user-facing error of the harness."""


class UnknownName(HarnessError):
    """An unknown family, variant, case, dtype or device was asked for."""


class ConfigError(HarnessError):
    """A configuration that cannot work (d_model not divisible by heads, ...)."""


class PortingError(HarnessError):
    """Weights that cannot move between two parameter layouts."""


class InputError(HarnessError):
    """Inputs that a family cannot take (mismatched shapes, NaN, wrong dtype)."""


class VariantFileError(HarnessError):
    """A user's variant file that cannot be loaded or registers nothing valid."""


class RegistryError(HarnessError):
    """A malformed or duplicate registry entry."""


class ResultsFileError(HarnessError):
    """A results file (``--compare``, ``report --from``) that cannot be read."""


class SpecError(HarnessError):
    """A declared trait that no oracle can build (a value outside the family's vocabulary)."""


_HARNESS_DIR = Path(__file__).resolve().parents[1]
_LIBRARY_DIRS = tuple({Path(p).resolve() for key in ("stdlib", "platstdlib", "purelib", "platlib")
                       if (p := sysconfig.get_paths().get(key))})


def _theirs(filename: str) -> bool:
    """Whether a frame's file is the harness's own, a library's or Python's (not the user's)."""
    if not filename or filename.startswith("<"):
        return True
    path = Path(filename).resolve()
    return path.is_relative_to(_HARNESS_DIR) or any(path.is_relative_to(d) for d in _LIBRARY_DIRS)


def user_frame(exc: BaseException) -> traceback.FrameSummary | None:
    """The innermost frame of ``exc``'s traceback in the user's code (a variant file, the
    project's variants): not the harness's, not a library's, not Python's own."""
    mine = [f for f in traceback.extract_tb(exc.__traceback__) if not _theirs(f.filename)]
    return mine[-1] if mine else None


def where_raised(exc: BaseException) -> str:
    """' (at FILE:LINE, in FUNCTION)' naming the user's line that raised ``exc``, or ''.
    FILE is relative to the working directory when it lies inside it."""
    frame = user_frame(exc)
    if frame is None:
        return ""
    path = Path(frame.filename).resolve()
    try:
        shown = str(path.relative_to(Path.cwd()))
    except ValueError:
        shown = str(path)
    return f" (at {shown}:{frame.lineno}, in {frame.name})"


def not_python_source(exc: BaseException) -> str | None:
    """Why a file that failed to compile is not Python source at all (null bytes, bytes that
    are not UTF-8: a binary or a file in another encoding), where the compiler names no line
    or names line 1 only for the decoding; None for an ordinary syntax error, which has its
    line, and for any other exception."""
    if isinstance(exc, SyntaxError):
        msg = str(exc.msg or "").strip()
        if msg.startswith("(unicode error)"):
            return f"its bytes are not UTF-8 text ({msg.removeprefix('(unicode error)').strip()})"
        return (msg or "it does not compile") if exc.lineno is None else None
    if isinstance(exc, ValueError) and "null bytes" in str(exc) and user_frame(exc) is None:
        return str(exc).strip()  # the compiler's refusal (before Python 3.11.4: a ValueError)
    return None


def exception_line(exc: BaseException, limit: int = 200) -> str:
    """One line for a user's exception: its type, the first line of its message (at most
    ``limit`` characters) and the user's file and line it was raised from; for a file that is
    not Python source, that (``not_python_source``) with the file's name."""
    source = not_python_source(exc)
    if source is not None:
        name = Path(getattr(exc, "filename", None) or "").name or "the file"
        return f"{name} is not valid Python source: {source}"[:limit]
    text = str(exc).strip()
    first = text.splitlines()[0][:limit] if text else ""
    return f"{type(exc).__name__}: {first}{where_raised(exc)}"
