"""The command line: ``python -m harness <command>``; ``--help`` lists every command by the
question it answers (``QUESTIONS``).

User mistakes (unknown names, impossible configs, unreadable files) print one line and
exit 2; a check whose verdicts contradict their declarations exits 1.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import sys
import textwrap

from harness.base.errors import HarnessError
from harness.base.output import EXIT_CLOSED_PIPE, EXIT_OUTPUT, EXIT_USAGE, quiet_closed_stdout
from harness.base.output import install as install_output
from harness.cli.arguments import DEBUG_HELP, settle, subcommand_first
from harness.cli.parsers import OneLineParser, add_commands

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

    add_commands(sub)
    parser.description = _description(sub)
    return settle(parser)


def main(argv: list[str] | None = None) -> int:
    """The exit statuses: docs/errors-and-exit-codes.md (``harness.base.output.EXIT_*``)."""
    install_output()
    try:
        try:
            parser = build_parser()
            try:
                args = parser.parse_args(subcommand_first(parser, list(sys.argv[1:] if argv is None else argv)))
            except SystemExit as exc:  # a usage mistake (its line printed), --help or --version
                return exc.code if isinstance(exc.code, int) else EXIT_USAGE
            from harness.cli.run import run  # the command's modules and torch: after the command line is read

            return run(args)
        except HarnessError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return getattr(exc, "exit_code", EXIT_USAGE)
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
