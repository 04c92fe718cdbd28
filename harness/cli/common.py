"""What every command shares: the variant files to load, the families asked for."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from harness.base.errors import RegistryError
from harness.check.declared import oracle_refusal
from harness.families.catalog import FAMILIES, get_family
from harness.registry import REGISTRY, load_all

VARIANTS_ENV = "HARNESS_VARIANTS"


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
    families = getattr(args, "family", None)
    if families and files:  # a filter that leaves out the user's own variants is said aloud
        mine = {str(Path(f).resolve()) for f in files}
        for v in REGISTRY.values():
            if v.origin and str(Path(v.origin).resolve()) in mine and v.family not in families:
                print(f"note: --family {','.join(families)} leaves out {v.id} ({v.family} family) "
                      f"from {v.origin}", file=sys.stderr)


def _families(args) -> list[str]:
    names = args.family or list(FAMILIES)
    for name in names:
        get_family(name)
    return names


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line on stderr and exit 2 (no usage block), and a
    long option is never abbreviated (``--var`` is not taken for ``--variant``)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(2, f"error: {self.prog}: {message} (see {self.prog} --help)\n")
