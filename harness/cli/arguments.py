"""What every option means, settled once for every command (``settle`` runs over the whole
parser after it is built):

- a path: ``~`` expanded; ``-`` is standard output for an output file, refused for a folder
  and for an input; a folder given where a file is expected (or the reverse, a name ending
  in ``/`` included) and a special filesystem (/proc, /sys, /dev) refused with the way out;
- an option that takes one value, given twice, is refused (the last one never silently
  wins); the repeatable ones (``--variants``, ``--family``, ``--variant``, ``--set``,
  ``--dtype``, ``--from``) accumulate: in a set (``SETS``) a value repeated counts once,
  ``--set`` refuses a key given twice and ``--from`` the same file twice;
- long options are never abbreviated (``--var`` is not ``--variant``);
- options may come before the command (``--family norm list``): ``subcommand_first``;
- every command takes ``--debug`` (``DEBUG_HELP``).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from harness.base.output import STDOUT, expand, special_filesystem

# dest -> what the value is: an output file, an output folder, an input file
OUT_FILE, OUT_DIR, IN_FILE = "output file", "output folder", "input file"
PATH_KINDS = {"json": OUT_FILE, "log": OUT_FILE, "csv": OUT_FILE, "compare": IN_FILE, "from_file": IN_FILE,
              "variants": IN_FILE}
# ``--out`` is a folder, except where the command writes one file
OUT_IS_FILE = {"differences": "DIFFERENCES.md"}
STDOUT_REFUSED = {"log": "a log is read back to resume a sweep"}
EXAMPLE_NAME = {"json": "results.json", "log": "bench.jsonl", "csv": "rows.csv"}
# repeatable options that name a set: a value given twice counts once (``--from`` twice is refused
# where the rows are read: the same shard twice)
SETS = ("family", "variant", "dtype", "variants", "only")


def _path_type(flag: str, dest: str, kind: str, example: str):
    """The ``type=`` of a path option: returns the expanded path (a str), or refuses in one line."""

    def convert(value: str) -> str:
        if value == STDOUT:
            if kind == OUT_FILE and dest not in STDOUT_REFUSED:
                return STDOUT
            why = STDOUT_REFUSED.get(dest) or ("it names a folder" if kind == OUT_DIR else "it is read, not written")
            raise argparse.ArgumentTypeError(f"'-' (standard output) cannot be {flag}: {why}; give a path")
        if not value.strip():
            return value  # said by validate_args, naming the option
        path = expand(value)
        fs = special_filesystem(path)
        if fs and kind != IN_FILE:
            raise argparse.ArgumentTypeError(f"cannot write {flag} '{value}': it is on a special filesystem ({fs}), "
                                             "not a disk; give a path on a disk"
                                             + (" (or - for standard output)" if kind == OUT_FILE else ""))
        p = Path(path)
        if kind == OUT_DIR:
            if p.exists() and not p.is_dir():
                raise argparse.ArgumentTypeError(f"{flag} '{value}' is a file, not a folder; it is left as it is: "
                                                 f"give a folder (e.g. '{p.with_suffix('')}_out/')")
        elif kind == OUT_FILE:
            if p.is_dir() or value.endswith(("/", os.sep)):
                raise argparse.ArgumentTypeError(f"cannot write {flag} '{value}': it is a directory, and {flag} takes "
                                                 f"a file; give a file in it (e.g. '{p / example}')")
        else:  # an input file
            if p.is_dir():
                what = "variant file" if dest == "variants" else f"{flag} file"
                raise argparse.ArgumentTypeError(f"{what} '{value}' is a directory; give a file in it"
                                                 + (" (a .py file that calls register(...))" if dest == "variants"
                                                    else ""))
            if p.exists() and not p.is_file():
                raise argparse.ArgumentTypeError(f"'{value}' is not a regular file (a device, a pipe or a socket): "
                                                 "give a file")
        return path

    convert.__name__ = kind  # argparse names the type in its own messages
    return convert


class _StoreOnce(argparse._StoreAction):
    """A one-value option given twice is refused (never "the last one wins")."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = namespace.__dict__.setdefault("_given_once", {})
        if self.dest in given:
            raise argparse.ArgumentError(self, f"given twice ({given[self.dest]!r} and {values!r}): give it once")
        given[self.dest] = values
        super().__call__(parser, namespace, values, option_string)


class _StoreConstOnce(argparse._StoreConstAction):
    """``--quick``/``--full``: two that set one thing to different values are refused."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = namespace.__dict__.setdefault("_given_once", {})
        if self.dest in given and given[self.dest] != option_string:
            raise argparse.ArgumentError(self, f"contradicts {given[self.dest]}: give one")
        given[self.dest] = option_string
        super().__call__(parser, namespace, values, option_string)


class _AppendOnce(argparse._AppendAction):
    """A repeatable option: the values accumulate, a value given twice counts once."""

    def __call__(self, parser, namespace, values, option_string=None):
        if values not in (getattr(namespace, self.dest, None) or []):
            super().__call__(parser, namespace, values, option_string)


DEBUG_HELP = ("also print on stderr the whole traceback of a failure of the harness's own code (a bug to "
              "report; its row says it in one line, and a JSON output keeps the traceback)")


def settle(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Apply the rules above to ``parser`` and every command's parser."""
    for name, sub in _commands(parser).items():
        sub.add_argument("--debug", action="store_true", help=DEBUG_HELP)
        for action in sub._actions:
            if not action.option_strings:
                continue
            kind = PATH_KINDS.get(action.dest)
            if action.dest == "out":
                kind = OUT_FILE if name in OUT_IS_FILE else OUT_DIR
            if kind is not None:
                flag = action.option_strings[-1]
                example = OUT_IS_FILE.get(name) or EXAMPLE_NAME.get(action.dest, "out.json")
                action.type = _path_type(flag, action.dest, kind, example)
            if type(action) is argparse._StoreAction:
                action.__class__ = _StoreOnce
            elif type(action) is argparse._AppendAction and action.dest in SETS:
                action.__class__ = _AppendOnce
            elif type(action) is argparse._StoreConstAction:
                action.__class__ = _StoreConstOnce
    return parser


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def subcommand_first(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """``--family norm list`` read as ``list --family norm``: options given before the command
    move after it (the command's own parser reads them)."""
    commands = _commands(parser)
    if not argv or argv[0] in commands or not argv[0].startswith("-"):
        return argv
    takes_value = {opt for sub in commands.values() for a in sub._actions for opt in a.option_strings
                   if a.nargs != 0}
    i = 0
    while i < len(argv):
        token = argv[i]
        if token in commands:
            return [token, *argv[:i], *argv[i + 1:]]
        if token == "--" or not token.startswith("-"):
            break
        i += 2 if token in takes_value else 1
    return argv
