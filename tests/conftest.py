"""The registry drives the tests: every registered variant (the project's and any
``--variants FILE`` / $HARNESS_VARIANTS file, loaded by the root conftest.py) is compared
with every other of its family."""

from __future__ import annotations

import itertools

import pytest
import torch

from harness.compare import CPU_DTYPES, CUDA_DTYPES, Checker, common_cases
from harness.config import Config
from harness.families import FAMILIES
from harness.registry import variants_of

CUDA_SKIP = "no CUDA device: bfloat16/float16/float32 CUDA comparisons run on a GPU machine"


def pair_params():
    """One param per (family, pair, dtype, device), id ``family/a-vs-b[dtype-device]`` (usable in ``pytest -k``)."""
    params = []
    cfg = Config()
    for family in FAMILIES.values():
        members = [v for v in variants_of(family.name) if not v.supports(cfg)]
        targets = [(d, "cpu") for d in (family.dtypes or CPU_DTYPES)]
        if not family.dtypes:
            targets += [(d, "cuda") for d in CUDA_DTYPES]
        for a, b in itertools.combinations(members, 2):
            if not common_cases(a, b):
                continue  # builders of different masks: nothing to compare
            for dtype, device in targets:
                marks = []
                if device == "cuda" and not torch.cuda.is_available():
                    marks.append(pytest.mark.skip(reason=CUDA_SKIP))
                params.append(pytest.param(
                    family.name, a.id, b.id, dtype, device, marks=marks,
                    id=f"{family.name}/{a.id}-vs-{b.id}[{dtype}-{device}]",
                ))
    return params


@pytest.fixture(scope="session")
def checkers():
    """One caching Checker per device for the whole session."""
    cache: dict[str, Checker] = {}

    def get(device: str) -> Checker:
        if device not in cache:
            cache[device] = Checker(Config(), device)
        return cache[device]

    return get
