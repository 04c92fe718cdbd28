"""The pytest plugin of the harness (entry point ``pytest11``, active wherever the
package is installed).

    pytest --variants mine.py            # from any directory; repeatable
    HARNESS_VARIANTS=mine.py pytest      # the same (os.pathsep-separated list)

Each file is loaded before collection (with every installed variant pack) and collected
as tests of its own: one per (variant, dtype, device), named ``family/id[dtype-device]``
(``pytest -k my_einsum``), comparing the variant with its family's reference on every
case that applies to it. A file that cannot be loaded is a usage error (exit 4), with one
line naming the problem. Without ``--variants`` the plugin does nothing (and imports
nothing: pytest runs of other projects do not pay for torch).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# harness.cli.VARIANTS_ENV, spelled out so that a pytest run without variants imports
# neither the harness nor torch (tests/test_cli.py checks the two agree).
VARIANTS_ENV = "HARNESS_VARIANTS"
CUDA_SKIP = "no CUDA device: the CUDA comparisons run on a GPU machine"

_FILES = pytest.StashKey[frozenset]()
_CHECKERS = pytest.StashKey[dict]()


def pytest_addoption(parser):
    group = parser.getgroup("attention-harness")
    group.addoption(
        "--variants", action="append", default=[], metavar="FILE",
        help=f"load the variants this file registers and test each against its family's "
             f"reference (repeatable; or ${VARIANTS_ENV}, {os.pathsep}-separated)",
    )


def variant_files(config) -> list[str]:
    files = list(config.getoption("variants") or [])
    files += [p for p in os.environ.get(VARIANTS_ENV, "").split(os.pathsep) if p]
    return files


def pytest_configure(config):
    config.stash[_FILES] = frozenset()
    config.stash[_CHECKERS] = {}
    files = variant_files(config)
    if not files:
        return
    from harness.errors import HarnessError
    from harness.registry import load_all

    base = config.invocation_params.dir
    paths = [Path(f) if Path(f).is_absolute() else base / f for f in files]
    try:
        load_all(files)
    except HarnessError as exc:
        raise pytest.UsageError(str(exc)) from None
    resolved = frozenset(p.resolve() for p in paths)
    config.stash[_FILES] = resolved
    # Collect each file beside whatever else was asked for (pytest drops overlaps).
    config.args.extend(str(p) for p in sorted(resolved) if str(p) not in config.args)


def pytest_collect_file(file_path: Path, parent):
    if file_path.resolve() in parent.config.stash.get(_FILES, frozenset()):
        return VariantFile.from_parent(parent, path=file_path)
    return None


class VariantFile(pytest.File):
    """A user's variant file: one test per (variant it registers, dtype, device)."""

    def collect(self):
        import torch

        from harness.compare import CPU_DTYPES, CUDA_DTYPES
        from harness.families import get_family
        from harness.registry import REGISTRY

        origin = str(self.path.resolve())
        for variant in [v for v in REGISTRY.values() if v.origin == origin]:
            family = get_family(variant.family)
            targets = [(d, "cpu") for d in (family.dtypes or CPU_DTYPES)]
            if not family.dtypes:
                targets += [(d, "cuda") for d in CUDA_DTYPES]
            for dtype, device in targets:
                item = VariantItem.from_parent(
                    self, name=f"{variant.family}/{variant.id}[{dtype}-{device}]",
                    key=variant.key, dtype=dtype, device=device,
                )
                if device == "cuda" and not torch.cuda.is_available():
                    item.add_marker(pytest.mark.skip(reason=CUDA_SKIP))
                yield item


class VariantMismatch(Exception):
    """A variant's verdicts contradict what its traits declare."""


class VariantItem(pytest.Item):
    def __init__(self, *, key: str, dtype: str, device: str, **kwargs):
        super().__init__(**kwargs)
        self.key, self.dtype, self.device = key, dtype, device

    def runtest(self):
        from harness.registry import REGISTRY
        from harness.tables import differences_table, equivalences_table

        results = _check_one(REGISTRY[self.key], self.dtype, self.device, self.config)
        wrong = [r for r in results if not r.ok]
        if wrong:
            raise VariantMismatch(
                "verdicts contradict the declarations:\n" + differences_table(wrong)
                + "\n\nthe other cases:\n" + equivalences_table(results)
                + "\n" + differences_table([r for r in results if r.ok])
            )

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, VariantMismatch):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, 0, f"{self.key} [{self.dtype}-{self.device}]"


def _check_one(variant, dtype: str, device: str, config) -> list:
    """The one place that decides a user's variant: compared with its family's reference
    on every case that applies to both. Returns the results (each with ``.ok``)."""
    from harness.compare import Checker
    from harness.config import Config
    from harness.families import get_family
    from harness.registry import reference_of

    cfg = Config()
    reason = variant.supports(cfg)
    if reason:
        pytest.skip(f"{variant.key} cannot be built for the default config: {reason}")
    reference = reference_of(variant.family)
    if reference is None or reference.key == variant.key:
        pytest.skip(f"family '{variant.family}' has no other reference to compare {variant.id} with")
    checkers = config.stash[_CHECKERS]
    if device not in checkers:
        checkers[device] = Checker(cfg, device)
    checker = checkers[device]
    results = [
        r for case in get_family(variant.family).cases
        if (r := checker.compare(variant, reference, case.name, dtype)) is not None
    ]
    if not results:
        pytest.fail(f"no case of {variant.family} applies to both {variant.id} and {reference.id} "
                    f"(check traits['cases'])", pytrace=False)
    return results
