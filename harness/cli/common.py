"""What every command shares: the variant files to load, the families asked for."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from harness.base.errors import RegistryError
from harness.check.declared import oracle_refusal
from harness.cli.parsers import VARIANTS_ENV
from harness.families.catalog import FAMILIES, get_family
from harness.registry import REGISTRY, load_all


def _variant_files(args) -> list[str]:
    files = list(getattr(args, "variants", None) or [])
    env = os.environ.get(VARIANTS_ENV, "")
    files += [p for p in env.split(os.pathsep) if p]
    return files


def _load(args) -> None:
    files = _variant_files(args)
    for variant in load_all(files):  # a user's declaration the oracle refuses: refused now, at load
        refusal = oracle_refusal(variant)
        if refusal:
            raise RegistryError(f"variant '{variant.key}' ({variant.origin}) declares traits its family's oracle "
                                f"refuses ({refusal}); declare what the code does")
    chosen = FamilyChoice.of(args)
    if chosen.names and files:  # a filter that leaves out the user's own variants is said aloud
        mine = {str(Path(f).resolve()) for f in files}
        for v in REGISTRY.values():
            if v.origin and str(Path(v.origin).resolve()) in mine and v.family not in chosen.names:
                print(f"note: {chosen} leaves out {v.id} ({v.family} family) from {v.origin}", file=sys.stderr)


@dataclass(frozen=True)
class FamilyChoice:
    """The families a command line limits a command to, typed: ``--family`` given any number
    of times arrives as a list, the one family of ``diff FAMILY`` or ``map --family F`` as a
    str; both become a tuple of names here (a str is never taken for its letters), with the
    way it was given for a message."""

    names: tuple[str, ...]
    option: bool  # --family (repeatable) rather than the command's one family

    @classmethod
    def of(cls, args: argparse.Namespace) -> FamilyChoice:
        value = getattr(args, "family", None)
        if value is None:
            return cls((), True)
        if isinstance(value, str):
            return cls((value,), False)
        return cls(tuple(value), True)

    def __str__(self) -> str:
        return f"--family {','.join(self.names)}" if self.option else f"the family '{self.names[0]}'"


def _families(args) -> list[str]:
    names = list(FamilyChoice.of(args).names) or list(FAMILIES)
    for name in names:
        get_family(name)
    return names
