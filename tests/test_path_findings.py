"""Behaviour that depends on the path taken, per case: a kernel that takes another
path for one shape (B = 1, T = 1: the edge config) is reported on that case and config with
the declaration that would make it a finding; declared (``traits['path_findings']``), it is
a finding in its own section and no contradiction, and the same kernel's failure elsewhere
still is one."""

from __future__ import annotations

import re

import pytest
import torch

from harness import PathFinding, RegistryError, register_kernel
from harness.base.config import CONFIG_MATRIX
from harness.check.api import check_all
from harness.registry import load_packs, scratch
from harness.trace.explain import path_findings

CONFIGS = {n: CONFIG_MATRIX[n] for n in ("default", "edge")}
CASES = ("self", "cross", "fully_masked")
WHY = "B=1, T=1 takes a decode path that attends every key"


def switches_at_one(q, k, v, mask, causal=False):
    """The eager kernel, but one query of one row attends every key, padding included (a
    decode fast path that drops the mask)."""
    from variants.kernels import eager

    if q.shape[0] == 1 and q.shape[2] == 1:
        mask = torch.ones_like(mask)
    return eager(q, k, v, mask, causal)


def _check(traits):
    load_packs()
    with scratch():
        register_kernel(id="switches", fn=switches_at_one, source="test",
                        traits={"causal": "top_left", "cases": CASES, **traits})
        return check_all(["attention_kernel"], CONFIGS, "cpu", ["float32"], extras=False,
                         variants=["attention_kernel/switches"])


def test_a_path_switch_on_one_shape_is_named_per_case_with_its_declaration():
    report = _check({})
    bad = {(s.case, s.config) for s in report.failures}
    assert bad == {("fully_masked", "edge")}
    text = path_findings(report, CONFIGS)
    assert "switches on fully_masked: fails on config edge only (edge: B=1 T=1" in text
    assert "holds on default" in text and "traits={'path_findings': {'fully_masked@edge': 'why'}}" in text


def test_a_declared_path_finding_is_a_finding_not_a_contradiction():
    report = _check({"path_findings": {"fully_masked@edge": WHY}})
    assert report.failures == []
    found = [s for s in report.specs if s.finding is not None]
    assert {(s.case, s.config) for s in found} == {("fully_masked", "edge")}
    assert all(s.verdict == "different" and s.ok for s in found)       # the measurement stays
    # a typed field, said first in the note and in ``declared``; the JSON keeps its fields
    assert all(s.finding == PathFinding(WHY) and s.declared == WHY for s in found)
    assert all(s.note.startswith(f"declared path finding: {WHY}") and "finding" not in s.as_dict() for s in found)
    assert not [s for s in report.specs if s.finding is None and s.note.startswith("declared path finding")]
    assert f"declared path finding: {WHY}" in path_findings(report, CONFIGS)


def test_a_declaration_covers_only_its_case_and_config():
    """Declared for another config, the failure on edge is still a contradiction."""
    report = _check({"path_findings": {"fully_masked@default": WHY}})
    assert {(s.case, s.config) for s in report.failures} == {("fully_masked", "edge")}


@pytest.mark.parametrize("findings,message", [
    ({"nope": WHY}, "traits['path_findings'] names unknown case(s) ['nope']"),
    ({"self": ""}, "traits['path_findings'] must map 'CASE' or 'CASE@CONFIG' to a reason"),
    ("self", "traits['path_findings'] must map"),
])
def test_a_bad_path_findings_declaration_is_refused(findings, message):
    with scratch(), pytest.raises(RegistryError, match=re.escape(message)):
        register_kernel(id="bad", fn=switches_at_one, traits={"causal": "top_left", "path_findings": findings})


def test_sdpa_cpu_flash_gradient_on_a_row_without_keys_can_be_declared_per_case():
    """The finding tests/test_kernels.py shows (SDPA's CPU flash backward sends S times the
    uniform softmax's gradient into dQ and dK for a row whose keys all carry finfo.min) is
    a contradiction on fully_masked; declared for that case it is a finding, listed."""
    from torch.nn.attention import SDPBackend

    from variants.kernels import sdpa

    load_packs()
    reports = []
    for declared in ({}, {"path_findings": {"fully_masked": "CPU flash backward: saved log-sum-exp absorbs log S"}}):
        with scratch():
            register_kernel(id="flash_min", mask="additive_min",
                            traits={"mask_method": "additive_finfo_min", "cases": ("fully_masked",), **declared},
                            fn=lambda q, k, v, mask: sdpa(q, k, v, mask, backend=SDPBackend.FLASH_ATTENTION))
            reports.append(check_all(["attention_kernel"], {"default": CONFIG_MATRIX["default"]}, "cpu", ["float32"],
                                     extras=False, variants=["attention_kernel/flash_min"]))
    assert {s.case for s in reports[0].failures} == {"fully_masked"}
    assert reports[1].failures == []
    assert "declared path finding: CPU flash backward" in path_findings(reports[1], CONFIG_MATRIX)
