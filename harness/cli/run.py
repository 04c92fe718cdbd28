"""A command run, once its command line is read (``harness.cli.main`` parses it from light
modules): Ctrl-C handled from here on, the arguments' values checked, the command's module
imported and called; a variant's failure no command turned into its row is one line."""

from __future__ import annotations

import argparse
import signal
import sys

from harness._interrupt import started
from harness.base.boundary import UserCodeError, call_timeout, failure_text, watch_ctrl_c
from harness.base.failures import show_tracebacks
from harness.base.output import EXIT_INTERRUPTED, EXIT_USAGE, STDOUT, stdout_for_data
from harness.cli.validate import validate_args

INTERRUPTED = ("interrupted: every output is written whole or not at all, so the files from "
               "before are as they were (a bench log keeps the groups measured so far); "
               "run the same command again to go on")


def _takes_stdout(args) -> bool:
    """Whether an output is ``-``: then standard output carries it alone."""
    return any(getattr(args, dest, None) == STDOUT for dest in ("json", "out"))


def run(args: argparse.Namespace) -> int:
    """The command ``args`` names; a ``HarnessError`` and an ``OSError`` go on to ``main``."""
    started()  # Ctrl-C from here on is a KeyboardInterrupt, handled below
    watch_ctrl_c()  # ... told apart from a KeyboardInterrupt a variant's code raises
    try:
        vars(args).pop("_given_once", None)
        show_tracebacks(vars(args).pop("debug", False))
        validate_args(args)
        call_timeout()  # a malformed $HARNESS_CALL_TIMEOUT: one line before any work
        with stdout_for_data(_takes_stdout(args)):
            code = args.func(args)
        if sys.stdout is not None:  # None: the shell closed it (`>&-`)
            sys.stdout.flush()
        return code
    except UserCodeError as exc:  # a variant's failure no command turned into its row: still one line
        print(f"error: {failure_text(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut this line
        try:
            print(f"\n{INTERRUPTED}", file=sys.stderr)
        finally:
            signal.signal(signal.SIGINT, previous)
        return EXIT_INTERRUPTED
