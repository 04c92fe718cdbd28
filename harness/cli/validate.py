"""Every command's options checked in one place, before anything is loaded or measured:
numbers finite and in range, paths not empty, flags that contradict each other, and the
``--set`` config (its seed, its memory estimate counting weights, activations and gradients)."""

from __future__ import annotations

import math
from pathlib import Path

from harness.base.config import Config
from harness.base.errors import ConfigError, HarnessError
from harness.base.files import refuse_unwritable
from harness.base.output import STDOUT, refuse_special

# dest: (lowest, lowest allowed?, highest, what it is)
NUMBERS = {
    "precision_factor": (0.0, False, 1e6, "a factor > 0 (3 = three times the baseline's RMS error)"),
    "threshold": (0.0, True, 100.0, "a fraction >= 0 (0.10 = 10% slower)"),
    "min_time": (0.0, False, 600.0, "a positive number of seconds (at most 600)"),
    "rounds": (3, True, 1000, "at least 3 (quartiles across rounds; at most 1000)"),
    "threads": (1, True, 4096, "at least 1 (and at most 4096)"),
    "steps": (1, True, 10**6, "positive (an integer, at most 10**6)"),
    "eval": (1, True, 10**5, "positive (an integer, at most 10**5)"),
    "explore": (0, True, 100, "a number of configs from 0 to 100"),
    "seed": (0, True, 2**63 - 1, "an integer from 0 to 2**63-1"),
    "time_budget": (0.0, False, 1e6, "a positive number of seconds"),
    "budget": (0.0, False, 1e6, "a positive number of seconds"),
}
COPY_BATCH = (1, True, 10**5, "positive (an integer, at most 10**5)")
PATHS = {"json": "--json", "log": "--log", "out": "--out", "compare": "--compare", "from_file": "--from"}


# The options that name an output: --out is a folder the command writes into for these
# commands (a file for ``differences``); the harness's own default places have their missing
# folders made, a path a user gives must be in a folder that exists.
OUTPUTS = {"json": "--json", "csv": "--csv", "log": "--log", "out": "--out"}
FOLDER_OUT = frozenset({"report", "copy-task", "cache-bench"})
DEFAULT_PLACES = frozenset({"reports", "reports/DIFFERENCES.md"})


POSITIONALS = {"family": "FAMILY", "a": "variant A", "b": "variant B", "target": "TARGET", "checkpoint": "CHECKPOINT"}


def _flag(dest: str) -> str:
    return PATHS.get(dest) or "--" + dest.replace("_", "-")


def _in_range(dest: str, value, rule) -> None:
    low, inclusive, high, what = rule
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{_flag(dest)} {value} must be {what}")
    if value < low or (value == low and not inclusive) or value > high:
        raise ConfigError(f"{_flag(dest)} {value:g} must be {what}")


def validate_args(args) -> None:
    """Raise one HarnessError naming the option, before the command runs."""
    given = vars(args)
    for dest, rule in NUMBERS.items():
        if given.get(dest) is not None:
            _in_range(dest, given[dest], rule)
    if args.command == "copy-task" and given.get("batch") is not None:
        _in_range("batch", given["batch"], COPY_BATCH)
    for dest, value in given.items():  # an empty name is never meant: refused, whichever option
        values = value if isinstance(value, list) else [value]
        if any(isinstance(v, str) and not v.strip() for v in values):
            what = {"variants": "a variants file (.py)", **dict.fromkeys(PATHS, "a file name")}.get(dest, "a value")
            name = POSITIONALS[dest] if dest in POSITIONALS and isinstance(value, str) else _flag(dest)
            raise HarnessError(f"{name} is empty: give {what}")
    if given.get("no_compare") and given.get("compare"):
        raise HarnessError(f"--no-compare and --compare {args.compare} contradict each other: give one")
    if given.get("log") and given.get("json") and Path(args.log).resolve() == Path(args.json).resolve():
        raise HarnessError(f"--log and --json name one file ('{args.json}'): the rows would overwrite "
                           "the log; give two paths")
    if args.command == "kernelbench" and given.get("threads") is not None and not given.get("time"):
        raise ConfigError(f"--threads {args.threads} is the thread count --time times pairs at: add --time "
                          "or leave it out")
    if args.command == "check":
        _compile_backend(args)
    if given.get("set"):
        Config.parse(args.set)  # seed range, every key, the memory estimate
    _outputs(args)  # after the values: a bad value is named before the place it would be written to


def _compile_backend(args) -> None:
    """--compile-backend names one of torch.compile's backends, and only with --compiled
    (otherwise nothing is compiled and the name would be ignored)."""
    if args.compile_backend is None:
        args.compile_backend = "inductor"
        return
    if not args.compiled:
        raise ConfigError(f"--compile-backend {args.compile_backend} applies to --compiled only: add --compiled "
                          "or leave it out")
    from torch._dynamo import list_backends

    known = sorted(set(list_backends(exclude_tags=())) | {"inductor"})
    if args.compile_backend not in known:
        raise ConfigError(f"--compile-backend '{args.compile_backend}' is not a torch.compile backend; known: "
                          f"{', '.join(known)}")


def _outputs(args) -> None:
    """Every output the command line names, refused now if it could not be written: a
    missing folder (exit 2), a folder the harness may not write in (exit 74), a special
    filesystem; nothing is created or written here."""
    for dest, flag in OUTPUTS.items():
        value = getattr(args, dest, None)
        if not isinstance(value, str) or value == STDOUT:
            continue
        refuse_special(value, flag)
        refuse_unwritable(value, flag, folder=dest == "out" and args.command in FOLDER_OUT,
                          create=value in DEFAULT_PLACES)
