"""The registry drives the tests: every registered variant (the project's and any
``--variants FILE`` / $HARNESS_VARIANTS file) is checked against its spec, and each family's
pair matrix is derived from those checks. One check per family and device, shared by the
session; a variant's test reads only its own results, so a user's variant that fails its
spec fails only its own test."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

import pytest
import torch

from harness.base.config import CONFIG_MATRIX
from harness.base.dtypes import default_dtypes
from harness.check.api import check_all
from harness.families.catalog import FAMILIES
from harness.registry import REGISTRY, scratch

# The suite starts some 200 Python processes (xdist workers, every documented command, the
# nested pytest runs). Where the environment sets PYTHONDONTWRITEBYTECODE, each of them would
# compile the whole package again, and pytest rewrite every harness module again (the
# package is a pytest plugin, so all its modules are rewritten): the suite's own processes
# (started after this file is read) keep Python's default and cache bytecode in the
# checkout's git-ignored __pycache__ folders.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

# The documented commands the suite runs (tests/test_readme.py) check the same families on the
# same code in many processes: they share one check cache ($HARNESS_CHECK_CACHE,
# harness.check.check_cache) for the run, made by the controlling process before xdist starts
# its workers (they inherit it) and removed when the run ends. The suite's own in-process
# checks never read it: a test that patches the harness must see its patch.
SUITE_CACHE_ENV = "HARNESS_SUITE_CHECK_CACHE"


def pytest_configure(config):
    if not hasattr(config, "workerinput") and SUITE_CACHE_ENV not in os.environ:
        config._suite_check_cache = tempfile.mkdtemp(prefix="attention-harness-check-")
        os.environ[SUITE_CACHE_ENV] = config._suite_check_cache


def pytest_unconfigure(config):
    made = getattr(config, "_suite_check_cache", None)
    if made:
        shutil.rmtree(made, ignore_errors=True)
        os.environ.pop(SUITE_CACHE_ENV, None)


CUDA_SKIP = "no CUDA device: the float32/bfloat16/float16 CUDA checks run on a GPU machine"
DEVICES = ("cpu", "cuda")
# Precision dtypes per device: harness.base.dtypes.default_dtypes (float64 always runs, for
# semantics). Half precision on CPU runs on the default config only, to keep the suite
# inside its budget.
HALF_ON_CPU = ["bfloat16", "float16"]


def _device_marks(device: str) -> list:
    if device == "cuda" and not torch.cuda.is_available():
        return [pytest.mark.skip(reason=CUDA_SKIP)]
    return []


def variant_params():
    """One param per (variant, device), id ``family/variant[device]``."""
    return [
        pytest.param(v.family, v.id, device, marks=_device_marks(device), id=f"{v.family}/{v.id}[{device}]")
        for v in REGISTRY.values() for device in DEVICES
    ]


def family_params():
    return [
        pytest.param(name, device, marks=_device_marks(device), id=f"{name}[{device}]")
        for name in FAMILIES for device in DEVICES
    ]


def _narrowed(items, family: str, device: str) -> list[str] | None:
    """The variants of ``family`` on ``device`` that the selected tests need (``pytest -k
    attention/annotated`` needs one), or None when one of them needs the whole family (its
    pair matrix, or a test without a variant parameter)."""
    keys = []
    for item in items:
        if "family_check" not in getattr(item, "fixturenames", ()):
            continue
        params = getattr(getattr(item, "callspec", None), "params", {})
        if params.get("family", family) != family or params.get("device", device) != device:
            continue
        if "variant" not in params:
            return None
        keys.append(f"{family}/{params['variant']}")
    return sorted(set(keys)) or None


@pytest.fixture(scope="session")
def family_check(request):
    """family, device -> the CheckReport of that family over the config matrix (cached). A
    run that selects some of a family's spec tests only (``-k``) checks only those variants
    (and the family reference, the precision baseline)."""
    cache: dict[tuple, object] = {}
    items = request.session.items

    def get(family: str, device: str, half: bool = False):
        only = _narrowed(items, family, device)
        key = (family, device, half, tuple(only or ()))
        if key not in cache:
            if half:
                cache[key] = check_all([family], {"default": CONFIG_MATRIX["default"]}, device,
                                       HALF_ON_CPU, extras=False, variants=only)
            else:
                cache[key] = check_all([family], CONFIG_MATRIX, device, default_dtypes(device), variants=only)
        return cache[key]

    return get


@pytest.fixture(autouse=True)
def _registry_restored():
    """Each test leaves the registry as it found it: a test that loads a user file (the
    README's example, a planted variant) without ``scratch()`` cannot make a later test in
    the same worker see its variants twice, whatever order xdist gives them."""
    with scratch():
        yield
