"""``map`` on a plain attention function (``--family attention_kernel``): the layout, mask
form and conventions found by trying every candidate over every case, the failing case of
the closest candidate named with its mistake, and a printed registration that, written to a
file and checked, passes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.base.config import CONFIG_MATRIX
from harness.check.api import check_all
from harness.registry import load_file, load_packs, scratch
from harness.trace.kernel_map import propose_kernel_map

WRONG_FILE = Path(__file__).with_name("wrong_kernels.py")

# flash-attention's test reference, as a user would wrap it: (B, S, H, d) heads, key lengths
# (right padding), GQA by repeat_interleave, the causal diagonal bottom-right of the real keys.
REFERENCE = '''
import math
import torch


def fa_reference(q, k, v, lengths, causal=False):
    B, T, H, d = q.shape
    S = k.shape[1]
    k = k.repeat_interleave(H // k.shape[2], dim=2)
    v = v.repeat_interleave(H // v.shape[2], dim=2)
    s = torch.einsum("bthd,bshd->bhts", q / math.sqrt(d), k)
    keys = torch.arange(S)
    keep = (keys[None, :] < lengths[:, None])[:, None, None, :]
    if causal:
        last = (lengths - 1)[:, None, None]
        keep = keep & (keys[None, None, :] <= torch.arange(T)[None, :, None] + last - (T - 1))[:, None]
    p = torch.softmax(s.masked_fill(~keep, float("-inf")), -1)
    return torch.einsum("bhts,bshd->bthd", p, v)
'''


def test_map_finds_layout_mask_and_conventions_and_its_registration_checks(tmp_path):
    (tmp_path / "fa_ref_21.py").write_text(REFERENCE)
    load_packs()
    try:
        proposal = propose_kernel_map(f"{tmp_path / 'fa_ref_21.py'}:fa_reference", cfg=CONFIG_MATRIX["default"])
        assert proposal.found, proposal.text
        assert proposal.call_form == "BSHD" and 'mask="lengths"' in proposal.code
        assert proposal.traits["causal"] == "bottom_right" and proposal.traits["gqa_grouping"] == "consecutive"
        assert "0 contradict" in proposal.text
        # the printed registration, written to a file beside the function's and checked
        (tmp_path / "mapped_21.py").write_text(proposal.code + "\n")
        with scratch():
            added = load_file(tmp_path / "mapped_21.py")
            report = check_all(["attention_kernel"], {"default": CONFIG_MATRIX["default"]}, "cpu", ["float32"],
                               variants=[v.key for v in added])
        assert [v.id for v in added] == ["fa_reference"]
        assert report.specs and not report.failures
    finally:
        sys.modules.pop("fa_ref_21", None)
        if str(tmp_path) in sys.path:
            sys.path.remove(str(tmp_path))


def test_map_names_the_case_the_closest_candidate_fails_and_its_mistake():
    """The window read one key too wide: no candidate fits; the closest (the declared
    conventions) fails on the window cases only, each named, with the mistake."""
    load_packs()
    proposal = propose_kernel_map(f"{WRONG_FILE}:window_off_by_one", cfg=CONFIG_MATRIX["default"])
    assert not proposal.found
    assert set(proposal.closest["failing"]) == {"window", "window_causal", "window@wide"}
    assert "fails on window (max_abs" in proposal.text and "window_causal (max_abs" in proposal.text
    assert "its mistake: reads as window left +1" in proposal.text


def test_map_refuses_what_is_not_a_function(capsys):
    from harness.cli.main import main

    assert main(["map", "torch.nn:MultiheadAttention", "--family", "attention_kernel"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not a function (it is the class MultiheadAttention); its functions: " in err[0]


FIRST_ROW_MASK = '''
import torch
from torch import nn


class FirstRowMask(nn.Module):
    """Reads the mask as key padding: the first query row's mask for every row. Right on the
    cases whose mask is key padding only, wrong where rows differ (causal, an arbitrary mask)."""

    def __init__(self, d_model, heads):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, query, key, value, mask):
        B, T, D = query.shape
        split = lambda x: x.view(B, -1, self.heads, D // self.heads).transpose(1, 2)
        q, k, v = split(self.q(query)), split(self.k(key)), split(self.v(value))
        keep = mask[:, :1, :].expand_as(mask)[:, None]
        scores = (q @ k.transpose(-1, -2) / (D // self.heads) ** 0.5).masked_fill(~keep, float("-inf"))
        return self.o((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, D))
'''


@pytest.mark.slow  # about 10 s of CPU: 384 candidate maps screened, 12 scored over every case
def test_module_map_scores_the_closest_over_every_case_and_names_the_failing_ones(tmp_path):
    """The closest map was scored on the first case only, so a module right there but wrong
    elsewhere was never told where: now every candidate that ran is scored over every case."""
    from harness.trace.mapsearch import propose_map

    path = tmp_path / "first_row_mask_21.py"
    path.write_text(FIRST_ROW_MASK)
    with scratch():
        proposal = propose_map(f"{path}:FirstRowMask", "attention", call="qkv_mask", cfg=CONFIG_MATRIX["default"])
    assert not proposal.found
    failing, agrees = set(proposal.closest["failing"]), set(proposal.closest["agrees"])
    assert {"causal", "random_mask"} <= failing and {"self", "cross"} <= agrees
    assert "fails on causal (max_abs" in proposal.text


PLAIN = '''
def returns_weights_too(q, k, v, mask):
    p = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).masked_fill(~mask, float("-inf")).softmax(-1)
    return p @ v, p


def mask_first(mask, q, k, v):
    p = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).masked_fill(~mask, float("-inf")).softmax(-1)
    return p @ v
'''


@pytest.mark.parametrize("name,says", [
    ("returns_weights_too", "returns a tuple: register a function that returns the output alone, "
                            "e.g. fn=lambda q, k, v, mask: returns_weights_too(q, k, v, mask)[0]"),
    ("mask_first", "takes its mask in position 1 (mask, q, k, v); register_kernel calls fn(q, k, v, mask, ...): "
                   "register fn=lambda q, k, v, mask: mask_first(mask, q, k, v)"),
])
def test_map_says_why_a_plain_function_runs_under_no_form(tmp_path, name, says):
    """A function returning (output, weights), or taking the mask first: map says which and
    how to wrap it, beside what the forms' calls raised."""
    (tmp_path / "plain_fns.py").write_text(PLAIN)
    proposal = propose_kernel_map(f"{tmp_path / 'plain_fns.py'}:{name}", cfg=CONFIG_MATRIX["default"])
    assert not proposal.found and says in proposal.text, proposal.text
    assert "form(s) (" in proposal.text
