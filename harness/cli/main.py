"""The command line: ``python -m harness <command>``; ``--help`` lists every command by the
question it answers (``QUESTIONS``).

User mistakes (unknown names, impossible configs, unreadable files) print one line and
exit 2; a check whose verdicts contradict their declarations exits 1.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import signal
import sys
import textwrap

from harness._interrupt import started
from harness.base.boundary import UserCodeError, call_timeout, failure_text, watch_ctrl_c
from harness.base.errors import HarnessError
from harness.base.failures import show_tracebacks
from harness.base.output import (
    EXIT_CLOSED_PIPE,
    EXIT_INTERRUPTED,
    EXIT_OUTPUT,
    EXIT_USAGE,
    STDOUT,
    quiet_closed_stdout,
    stdout_for_data,
)
from harness.base.output import install as install_output
from harness.check.precision import PRECISION_FACTOR
from harness.cli import bench as bench_commands
from harness.cli import kernelbench as kernelbench_commands
from harness.cli import models as models_commands
from harness.cli import parity as parity_commands
from harness.cli import report as report_commands
from harness.cli.arguments import DEBUG_HELP, settle, subcommand_first
from harness.cli.check import cmd_check, cmd_list
from harness.cli.common import VARIANTS_ENV, OneLineParser
from harness.cli.review import add_review_commands
from harness.cli.validate import validate_args

ABOUT = "Compare, verify and benchmark hand-written Transformer components (PyTorch)."
# The question each command answers, in the order --help lists them; every command is in one.
QUESTIONS = {
    "same function?": ("check", "list", "parity", "kernelbench"),
    "where and why different?": ("diff", "map", "differences"),
    "faster?": ("bench", "report", "cache-bench"),
    "whole models": ("decode", "train-step", "copy-task"),
}


def _description(sub) -> str:
    """The top of --help: what the tool is, then every command by the question it answers,
    each with its one-line help."""
    helps = {a.dest: a.help for a in sub._choices_actions}
    grouped = [name for names in QUESTIONS.values() for name in names]
    if sorted(grouped) != sorted(helps):  # a command added without a place in --help: the harness's bug
        raise AssertionError(f"QUESTIONS lists {sorted(grouped)}, the parser has {sorted(helps)}")
    lines = [ABOUT, ""]
    for question, names in QUESTIONS.items():
        lines.append(f"{question}")
        lines += [textwrap.fill(helps[name], 79, initial_indent=f"  {name:12s} ", subsequent_indent=" " * 15)
                  for name in names]
    lines.append("\nRun python -m harness <command> --help for a command's options.")
    lines.append(textwrap.fill(f"Every command takes --debug: {DEBUG_HELP}.", 79))
    return "\n".join(lines)


def _version() -> str:
    try:
        return importlib.metadata.version("attention-harness")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m harness", usage="python -m harness command [options]",
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser, metavar="command",
                                prog="python -m harness",  # a command's errors read "python -m harness bench: ..."
                                help=argparse.SUPPRESS)  # listed by question in the description
    parser.add_argument("--version", action="version", version=f"attention-harness {_version()}")

    def common(p, families=True):
        p.add_argument("--variants", action="append", metavar="FILE",
                       help=f"also load variants from this file (repeatable; or ${VARIANTS_ENV})")
        if families:
            p.add_argument("--family", action="append", metavar="F", help="only this family (repeatable)")

    p = sub.add_parser("list", help="print every registered variant and its traits")
    common(p)
    p.add_argument("--json", metavar="PATH", help="also write the list as JSON")
    p.add_argument("--params", action="store_true",
                   help="each family's canonical parameter names and shapes (what a parameter map targets)")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("check",
                       help="every variant against its spec, and the verdict matrix; exit 1 on a contradiction")
    common(p)
    p.add_argument("--device", default="cpu", help="cpu (default), cuda or auto")
    p.add_argument("--dtype", action="append",
                   help="precision dtype (repeatable; default float32 on CPU; float64 always runs, for semantics)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="config override, e.g. d_model=128 (replaces the default config matrix by one config)")
    p.add_argument("--variant", action="append", metavar="ID",
                   help="check only this variant (repeatable; its family's reference still runs, as the baseline)")
    p.add_argument("--pairs", choices=("derived", "all"), default="derived",
                   help="derive the pair matrix from the equivalence classes (default), or measure every pair")
    p.add_argument("--precision-factor", type=float, default=PRECISION_FACTOR,
                   help="a variant may have this many times the baseline's RMS error "
                        f"(default {PRECISION_FACTOR:g}, calibrated: benchmarks/precision_calibration.py)")
    p.add_argument("--strict-precision", action="store_true",
                   help="'less precise' in bfloat16/float16 is a contradiction too")
    p.add_argument("--explain", action="store_true",
                   help="also trace where each declared difference first shows (seconds per difference)")
    p.add_argument("--compiled", action="store_true",
                   help="also check each attention/layer variant under torch.compile against itself eager (slow)")
    p.add_argument("--compile-backend", metavar="NAME",
                   help="torch.compile backend for --compiled (default inductor; aot_eager skips code generation)")
    p.add_argument("--explore", type=int, default=0, metavar="N",
                   help="also check N configs drawn by Hypothesis (sizes, padding, scales, pad index, factor)")
    p.add_argument("--seed", type=int, default=0, metavar="K",
                   help="the seed of --explore's draws (the same N and K draw the same configs; default 0)")
    p.add_argument("--json", metavar="PATH", help="also write every spec, pair, path, gradcheck and dropout result")
    p.set_defaults(func=cmd_check)

    add_review_commands(sub, common)

    bench_commands.add_commands(sub, common)  # bench
    report_commands.add_command(sub, common)  # report
    models_commands.add_commands(sub, common)  # decode, train-step, copy-task, cache-bench
    parity_commands.add_commands(sub, common)  # parity (a port on its checkpoint's weights)
    kernelbench_commands.add_commands(sub, common)  # kernelbench (Model / ModelNew files)
    parser.description = _description(sub)
    return settle(parser)


INTERRUPTED = ("interrupted: every output is written whole or not at all, so the files from "
               "before are as they were (a bench log keeps the groups measured so far); "
               "run the same command again to go on")


def _takes_stdout(args) -> bool:
    """Whether an output is ``-``: then standard output carries it alone."""
    return any(getattr(args, dest, None) == STDOUT for dest in ("json", "out"))


def main(argv: list[str] | None = None) -> int:
    """The exit statuses: docs/errors-and-exit-codes.md (``harness.base.output.EXIT_*``)."""
    started()  # Ctrl-C from here on is a KeyboardInterrupt, handled below
    watch_ctrl_c()  # ... told apart from a KeyboardInterrupt a variant's code raises
    install_output()
    try:
        try:
            parser = build_parser()
            try:
                args = parser.parse_args(subcommand_first(parser, list(sys.argv[1:] if argv is None else argv)))
            except SystemExit as exc:  # a usage mistake (its line printed), --help or --version
                return exc.code if isinstance(exc.code, int) else EXIT_USAGE
            vars(args).pop("_given_once", None)
            show_tracebacks(vars(args).pop("debug", False))
            validate_args(args)
            call_timeout()  # a malformed $HARNESS_CALL_TIMEOUT: one line before any work
            with stdout_for_data(_takes_stdout(args)):
                code = args.func(args)
            if sys.stdout is not None:  # None: the shell closed it (`>&-`)
                sys.stdout.flush()
            return code
        except HarnessError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return getattr(exc, "exit_code", EXIT_USAGE)
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
    except BrokenPipeError:  # the reader of standard output went away (list | head -1): quietly
        quiet_closed_stdout()
        return EXIT_CLOSED_PIPE
    except OSError as exc:
        if exc.filename is not None:  # not a stream: a harness bug, shown as one
            raise
        with contextlib.suppress(OSError):
            print(f"error: cannot write to standard output: {exc.strerror or exc}", file=sys.stderr)
        quiet_closed_stdout()
        return EXIT_OUTPUT
