"""The one way out: how every byte the harness prints or writes leaves the process.

- Standard output and standard error degrade a character their encoding cannot hold (a
  latin-1 or C locale) to an ASCII symbol (``ASCII``; the verdict legend degrades with the
  table, so it still says which symbol is which) instead of raising ``UnicodeEncodeError``.
- ``-`` as an output path means standard output (``data_stream``); ``~`` is expanded; a
  path on a special filesystem (/proc, /sys, /dev) is refused before any work.
- A failed write (a full disk, a place that cannot be written) is ``OutputError``: one line
  naming the path, exit status ``EXIT_OUTPUT``. A closed pipe on standard output (``list |
  head -1``) ends the command quietly with ``EXIT_CLOSED_PIPE``.

The exit statuses are listed in docs/errors-and-exit-codes.md (``EXIT_*`` below).
"""

from __future__ import annotations

import codecs
import contextlib
import os
import sys
from pathlib import Path
from typing import Iterator, TextIO

from harness.base.errors import HarnessError

EXIT_OK = 0
EXIT_CONTRADICTION = 1
EXIT_USAGE = 2
EXIT_OUTPUT = 74          # sysexits.h EX_IOERR: an output could not be written
EXIT_INTERRUPTED = 130    # 128 + SIGINT: Ctrl-C
EXIT_CLOSED_PIPE = 141    # 128 + SIGPIPE: the reader of standard output went away

# What a symbol becomes where the output's encoding cannot hold it (each distinct from the
# ASCII symbols already in use: E error, ! contradiction, - not supported).
ASCII = {"≡": "=", "≈": "~", "≲": "<", "≠": "#", "○": "o", "◌": ",", "·": ".", "Δ": "d", "—": "-", "–": "-",
         "…": "...", "×": "x", "≤": "<=", "≥": ">=", "±": "+-", "→": "->", "²": "^2", "µ": "u", "√": "sqrt"}
ERRORS = "harness-ascii"


def _degrade(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    text = exc.object[exc.start:exc.end]
    return "".join(ASCII.get(c, "?") for c in text), exc.end


codecs.register_error(ERRORS, _degrade)


class OutputError(HarnessError):
    """An output that could not be written (a full disk, no permission, a special file)."""

    exit_code = EXIT_OUTPUT


def ascii_text(text: str) -> str:
    """``text`` with every symbol outside ASCII degraded as standard output would."""
    return text.encode("ascii", errors=ERRORS).decode("ascii")


def install() -> None:
    """Make standard output and error degrade what their encoding cannot hold."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors=ERRORS)
            except (ValueError, OSError):  # a stream already closed or detached
                pass


def can_encode(text: str, stream: TextIO | None = None) -> bool:
    encoding = getattr(stream or sys.stdout, "encoding", None) or "utf-8"
    try:
        text.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return False
    return True


def quiet_closed_stdout() -> None:
    """After a closed pipe: point the stdout descriptor at /dev/null, so that the flush at
    exit finds nowhere to fail."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError):
        pass


_data: list[TextIO] = []


def data_stream() -> TextIO:
    """Where an output given as ``-`` goes: standard output as it was when the command began."""
    return _data[-1] if _data else sys.stdout


@contextlib.contextmanager
def stdout_for_data(taken: bool) -> Iterator[None]:
    """When an output is ``-`` (``taken``), standard output carries that output alone: the
    text the command would print goes to standard error instead."""
    if not taken:
        yield
        return
    _data.append(sys.stdout)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        _data.pop()


# -- paths -----------------------------------------------------------------------------------------

STDOUT = "-"
SPECIAL_FILESYSTEMS = frozenset({
    "proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "debugfs", "tracefs", "securityfs", "pstore",
    "bpf", "configfs", "fusectl", "mqueue", "hugetlbfs", "autofs", "binfmt_misc", "efivarfs", "rpc_pipefs",
    "nsfs", "selinuxfs"})


def expand(value: str) -> str:
    """``~`` and ``~user`` expanded (a shell leaves a quoted one as it is); ``-`` stays."""
    return value if value == STDOUT else os.path.expanduser(value)


def _mounts() -> list[tuple[str, str]]:
    try:
        text = Path("/proc/self/mounts").read_text()
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            out.append((parts[1].replace("\\040", " "), parts[2]))
    return out


def special_filesystem(path: str | Path) -> str | None:
    """The type of the special filesystem ``path`` would land on (proc, sysfs, devtmpfs...),
    or None for a disk (or where the mounts cannot be read)."""
    target = Path(path).expanduser()
    try:
        target = target.resolve()
    except OSError:
        return None
    best, kind = "", None
    for point, fstype in _mounts():
        if (str(target) == point or str(target).startswith(point.rstrip("/") + "/")) and len(point) >= len(best):
            best, kind = point, fstype
    if kind in SPECIAL_FILESYSTEMS:
        return kind
    if kind is None and str(target).startswith(("/proc/", "/sys/", "/dev/")):
        return str(target).split("/")[1]
    return None


def refuse_special(path: str | Path, what: str) -> None:
    kind = special_filesystem(path)
    if kind:
        raise OutputError(f"{what} '{path}' is on a special filesystem ({kind}), not a disk; it is left as it "
                          "is: give a path on a disk (or - for standard output)")


def write_failed(path: str | Path, exc: OSError) -> OutputError:
    """One line for a write that failed (the disk full, no permission)."""
    reason = exc.strerror or str(exc)
    return OutputError(f"cannot write '{path}': {reason}; nothing was left there half-written")
