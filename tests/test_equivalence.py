"""One test per (family, pair, dtype, device): every case's verdict must match what the
pair declares (equivalent, or different with a reason), in both directions."""

from __future__ import annotations

import pytest

from harness.families import get_family
from harness.registry import get_variant
from harness.tables import differences_table, equivalences_table

from conftest import pair_params


@pytest.mark.parametrize("family,a,b,dtype,device", pair_params())
def test_pair(family, a, b, dtype, device, checkers):
    checker = checkers(device)
    va, vb = get_variant(family, a), get_variant(family, b)
    results = [
        r for case in get_family(family).cases
        if (r := checker.compare(va, vb, case.name, dtype)) is not None
    ]
    assert results, f"no case of {family} applies to both {a} and {b}"
    wrong = [r for r in results if not r.ok]
    assert not wrong, (
        "verdicts contradict the declarations:\n" + differences_table(wrong)
        + "\n\nall cases:\n" + equivalences_table(results) + "\n" + differences_table(results)
    )
