"""The typed vocabulary: ``Verdict`` (order, symbol, agreement, and still a string for the
JSON and any caller comparing strings) and the one tensor-comparison core, ``mismatch``,
whose decisions must be ``torch.testing.assert_close``'s and whose numbers must be the ones
the helpers routed through it computed before."""

from __future__ import annotations

import json
import math

import pytest
import torch

from harness.base.verdicts import Verdict
from harness.check.mismatch import mismatch
from harness.check.precision import gap, within
from harness.check.tensors import compare_tensors


def test_verdict_order_symbol_and_agreement():
    order = ["identical", "equivalent", "less precise", "not exercised", "not resolvable", "different", "error"]
    assert [v.value for v in sorted(Verdict, key=lambda v: v.rank)] == order
    assert "".join(v.symbol for v in Verdict) == "≡≈≲○◌≠E"
    assert [v for v in Verdict if v.agrees] == [Verdict.IDENTICAL, Verdict.EQUIVALENT]
    assert Verdict.worst(["equivalent", "less precise"]) is Verdict.LESS_PRECISE
    assert Verdict.worst([], default="equivalent") is Verdict.EQUIVALENT
    assert Verdict.worst([Verdict.ERROR, "identical"]) is Verdict.ERROR


def test_verdict_is_still_its_string():
    v = Verdict.LESS_PRECISE
    assert v == "less precise" and {"less precise": 1}[v] == 1
    assert f"{v}" == str(v) == "less precise" and f"{v:>14}" == "  less precise"
    assert json.dumps({"verdict": v}) == '{"verdict": "less precise"}'
    assert v + " (3x)" == "less precise (3x)"
    with pytest.raises(ValueError):
        Verdict("roughly")


def test_mismatch_counts_where_and_message():
    e = torch.zeros(2, 3, dtype=torch.float64)
    a = e.clone()
    a[1, 2] = 0.5
    a[0, 1] = 1e-9
    m = mismatch(a, e, rtol=0.0, atol=1e-6)
    assert not m.ok and (m.mismatched, m.total) == (1, 6)
    assert m.max_abs == 0.5 and m.max_abs_index == (1, 2)
    assert m.message.startswith("Mismatched elements: 1 / 6 (16.7%); greatest absolute difference: 0.5 "
                                "at index (1, 2) (up to 1e-06 allowed); greatest relative difference:")
    assert mismatch(a, e, rtol=0.0, atol=1.0).ok
    assert mismatch(a, e[:1]).message == "shapes (2, 3) vs (1, 3)"


def test_mismatch_nan_and_inf():
    e = torch.tensor([1.0, math.nan, math.inf, 2.0], dtype=torch.float64)
    a = torch.tensor([1.0, math.nan, math.inf, math.nan], dtype=torch.float64)
    m = mismatch(a, e)
    assert m.nan_mismatch == 1 and m.total == 2 and not m.ok  # NaN in both: skipped; in one: counted
    same = mismatch(a[:3], e[:3])
    assert same.ok  # equal infinities are close, as in assert_close
    assert mismatch(a[:3], e[:3], equal_inf=False).mismatched == 1  # the plain bound: inf - inf is NaN


def test_mismatch_mask_and_worst_index_for_a_trace():
    """The per-element view ``trace.divergence.where_differs`` counts rows with: a NaN in one
    and not the other is a mismatch and the worst place; equal infinities are neither."""
    e = torch.tensor([[1.0, 2.0, math.inf], [math.nan, 5.0, 6.0]], dtype=torch.float64)
    a = torch.tensor([[1.0, 2.5, math.inf], [math.nan, math.nan, 6.0]], dtype=torch.float64)
    m = mismatch(a, e, rtol=0.0, atol=0.1)
    assert m.mask.tolist() == [[False, True, False], [False, True, False]]
    assert m.worst_index == (1, 1)  # the NaN in one, before the 0.5 at (0, 1)
    assert mismatch(a[:1], e[:1], atol=0.1).worst_index == (0, 1)
    assert mismatch(e, e).worst_index == (0, 0) and not mismatch(e, e).mask.any()
    with pytest.raises(ValueError, match="float tensors of one shape"):
        mismatch(a, e[:1]).mask


@pytest.mark.parametrize("scale", [0.0, 1e-7, 1e-5, 1e-3])
def test_mismatch_decides_as_assert_close(scale):
    torch.manual_seed(0)
    e = torch.randn(4, 5)
    a = e + scale * torch.randn_like(e)
    try:
        torch.testing.assert_close(a, e, rtol=1.3e-6, atol=1e-5)
        expected = True
    except AssertionError:
        expected = False
    assert mismatch(a, e, rtol=1.3e-6, atol=1e-5).ok == expected


def test_routed_helpers_keep_their_numbers():
    torch.manual_seed(1)
    o = torch.randn(3, 4, dtype=torch.float64)
    a = (o + 1e-6 * torch.randn_like(o)).float()
    g = gap(a, o)
    d = (a.double() - o).abs()
    assert g.max_abs == float(d.max()) and g.excess == float((d - 1e-10 * o.abs()).max())
    assert within(a, o, 1e-3, 1e-5) and not within(a, o, 0.0, 1e-9)
    b = a + 1e-3
    tv = compare_tensors(a, b, None, None, torch.float32)
    assert tv.verdict is Verdict.DIFFERENT and tv.max_abs == float((a - b).abs().max())
    assert tv.mismatch is not None and tv.mismatch.mismatched == 12
    assert compare_tensors(a, a.clone(), None, None, torch.float32).verdict is Verdict.IDENTICAL


def test_variant_resolves_its_family_once():
    from harness.families.catalog import get_family
    from harness.registry import load_packs, variants_of

    load_packs()
    v = variants_of("attention")[0]
    assert v.family_spec is get_family("attention") and v.family_spec is v.family_spec
