"""``map`` on a plain attention function (``--family attention_kernel``): the layout, mask
form and conventions found by trying every candidate over every case, the failing case of
the closest candidate named with its mistake, and a printed registration that, written to a
file and checked, passes."""

from __future__ import annotations

import sys
from pathlib import Path

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
    assert set(proposal.closest["failing"]) == {"window", "window_causal"}
    assert "fails on window (max_abs" in proposal.text and "window_causal (max_abs" in proposal.text
    assert "its mistake: reads as window left +1" in proposal.text


def test_map_refuses_what_is_not_a_function(capsys):
    from harness.cli.main import main

    assert main(["map", "torch.nn:MultiheadAttention", "--family", "attention_kernel"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not a function" in err[0]
