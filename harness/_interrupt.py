"""Ctrl-C while ``python -m harness`` (or ``attention-harness``) is still starting: one line
and exit 130. Start-up writes nothing, so the process ends at once; a KeyboardInterrupt
raised inside torch's or numpy's imports could instead be swallowed by them and leave a
module half-imported. Imported first by ``harness``, for its side effect, and only for those
two commands (a program that imports the harness keeps Python's own handling);
``harness.cli.main.main`` calls ``started()``, and from then on handles Ctrl-C itself."""

from __future__ import annotations

import os
import signal
import sys

START_UP_LINE = ("interrupted during start-up: nothing was written or changed; "
                 "run the same command again")


def _is_harness_command() -> bool:
    argv = list(getattr(sys, "orig_argv", []))
    if "-m" in argv:
        i = argv.index("-m")
        return argv[i + 1:i + 2] == ["harness"]
    return bool(sys.argv) and os.path.basename(sys.argv[0]) == "attention-harness"


def _exit_now(signum, frame):
    try:
        sys.stderr.write(f"\n{START_UP_LINE}\n")
        sys.stderr.flush()
    finally:
        os._exit(130)


def started() -> None:
    """Start-up is over: Ctrl-C raises KeyboardInterrupt again (handled by the command)."""
    if signal.getsignal(signal.SIGINT) is _exit_now:
        signal.signal(signal.SIGINT, signal.default_int_handler)


if _is_harness_command() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, _exit_now)
