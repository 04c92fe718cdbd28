"""ALiBi (``harness.families.conventions.alibi``): the slopes for any head count and the
oracle's bias on hand-computed examples; the BLOOM variant (real keys) and the MPT kernel
(key indices) check clean, as do controls computing the bias relative to the query; slopes
of the next power of two, a flipped sign and positions over indices where real keys are
declared are caught and named; a library module built for ALiBi is read as one."""

from __future__ import annotations

import pytest
import torch
import wrong_alibi as W

from harness.base.config import CONFIG_MATRIX, Config
from harness.base.errors import SpecError
from harness.check.spec import SpecChecker
from harness.families.catalog import get_family
from harness.families.conventions import alibi as A
from harness.families.conventions.core import Context
from harness.registry import get_variant, scratch
from harness.trace.kernel_explain import name_mistakes

DEFAULT = CONFIG_MATRIX["default"]
# H = 6, not a power of two (the next power's slopes differ); padding with holes between real
# keys (real keys and key indices differ there: row 1 of ``self`` and ``cross``)
SIX = Config(heads=6, padding="arbitrary")
MODULE_CASES = ("self", "causal", "cross", "random_mask", "self@large")
KERNEL_CASES = ("self", "cross", "left_pad", "causal_cross", "gqa")


def test_slopes_for_any_head_count_by_hand():
    assert A.slopes(8).tolist() == [2.0 ** -k for k in range(1, 9)]                 # 2^(-8k/8)
    assert A.slopes(3).tolist() == [2.0 ** -4, 2.0 ** -8, 2.0 ** -2]                # n = 2, then 2n = 4's k = 1
    assert A.slopes(6).tolist() == [2.0 ** -e for e in (2, 4, 6, 8, 1, 3)]         # n = 4, then 2n = 8's k = 1, 3
    assert A.slopes(1).tolist() == [2.0 ** -8]
    assert A.slopes(6, A.Slopes.NEXT_POWER_CUT).tolist() == [2.0 ** -e for e in range(1, 7)]
    assert A.slopes(8, A.Slopes.NEXT_POWER_CUT).tolist() == A.slopes(8).tolist()


def test_the_slopes_are_blooms_and_mpts():
    pytest.importorskip("transformers")
    from transformers.models.bloom.modeling_bloom import _get_alibi_slopes
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    for heads in (1, 3, 5, 6, 8, 12):
        torch.testing.assert_close(_get_alibi_slopes(heads, torch.device("cpu")).double(), A.slopes(heads))
        mpt = build_mpt_alibi_tensor(heads, 2)[:, 0, 0]                   # (H,): slopes * (0 - 1)
        torch.testing.assert_close(-mpt.double(), A.slopes(heads))


def test_the_oracle_branch_by_hand_over_indices_and_real_keys():
    s = torch.zeros(2, 3, 1, 4, dtype=torch.float64)                      # B = 2, H = 3, T = 1, S = 4
    mask = torch.tensor([[True, True, True, True], [True, False, True, True]])[:, None, :]  # row 1: a hole
    ctx = Context({"mask": mask, "key_pad": torch.ones(2, 4, dtype=torch.bool)})
    m = torch.tensor([2.0 ** -4, 2.0 ** -8, 2.0 ** -2], dtype=torch.float64).view(1, 3, 1, 1)
    indices = A.with_alibi(A.KEY_INDICES, s, ctx)
    by_hand = m * torch.tensor([-3.0, -2.0, -1.0, 0.0], dtype=torch.float64)             # slope * (j - (S - 1))
    torch.testing.assert_close(indices, by_hand.expand(2, 3, 1, 4))
    real = A.with_alibi(A.REAL_KEYS, s, ctx)
    torch.testing.assert_close(real[0], indices[0])
    # row 1: keys 0, 2, 3 are real: positions 0, -, 1, 2; relative to the last: -2, (-2), -1, 0
    torch.testing.assert_close(real[1], (m * torch.tensor([-2.0, -2.0, -1.0, 0.0], dtype=torch.float64))[0])
    assert A.with_alibi(A.NONE, s, ctx) is s
    flipped = A.with_alibi(A.Reading(A.KEY_INDICES, sign=-1), s, ctx)
    torch.testing.assert_close(flipped, -indices)
    with pytest.raises(SpecError, match="no oracle for alibi='sideways'"):
        A.with_alibi("sideways", s, ctx)


def test_left_or_right_padding_shifts_real_keys_by_a_constant():
    """Real keys and key indices differ by one constant per row where padding sits at one end:
    the softmax cannot tell them apart there."""
    s = torch.randn(2, 4, 3, 6, dtype=torch.float64)
    left = torch.tensor([[True] * 6, [False, False, True, True, True, True]])[:, None, :].expand(2, 3, 6)
    ctx = Context({"mask": left})
    p = {v: A.with_alibi(v, s, ctx).masked_fill(~left[:, None], float("-inf")).softmax(-1)
         for v in (A.KEY_INDICES, A.REAL_KEYS)}
    torch.testing.assert_close(p[A.KEY_INDICES], p[A.REAL_KEYS])


def test_alibi_is_a_trait_of_both_families():
    assert get_family("attention").traits["alibi"].values == (A.NONE, A.KEY_INDICES, A.REAL_KEYS)
    assert get_family("attention_kernel").traits["alibi"].values == (A.NONE, A.KEY_INDICES)
    assert get_family("attention").traits["alibi"].default == A.NONE
    shapes = get_family("attention").canonical_shapes(DEFAULT, {"alibi": A.REAL_KEYS})
    assert shapes == get_family("attention").canonical_shapes(DEFAULT, {})    # ALiBi learns nothing


@pytest.mark.parametrize("cfg", [DEFAULT, SIX], ids=["default", "heads6"])
def test_the_bloom_variant_and_its_control_check_clean(cfg):
    checker = SpecChecker({"c": cfg})
    with scratch():
        made = W.register_all()
        for variant in (get_variant("attention", "bloom_alibi"), made["control_alibi_relative"]):
            for case in MODULE_CASES:
                for dtype in ("float64", "float32"):
                    result = checker.check(variant, "c", case, dtype)
                    assert result.ok, (variant.id, case, dtype, result.note)


@pytest.mark.parametrize("cfg", [DEFAULT, Config(heads=6, kv_heads=3)], ids=["default", "heads6"])
def test_the_mpt_kernel_and_its_control_check_clean(cfg):
    checker = SpecChecker({"c": cfg})
    with scratch():
        made = W.register_all()
        for variant in (get_variant("attention_kernel", "mpt_alibi_sdpa"), made["control_alibi_kernel_relative"]):
            for case in KERNEL_CASES:
                for dtype in ("float64", "float32"):
                    result = checker.check(variant, "c", case, dtype)
                    assert result.ok, (variant.id, case, dtype, result.note)


def test_each_wrong_alibi_is_caught_and_named():
    with scratch():
        made = W.register_all()
        checker = SpecChecker({"six": SIX})
        for vid in (*W.WRONG_MODULES, *W.WRONG_KERNELS):
            variant = made[vid]
            case = "cross" if variant.family == "attention" else "self"
            result = checker.check(variant, "six", case, "float64")
            assert not result.ok and result.verdict == "different", (vid, result.note)
        named = {**name_mistakes("attention", [made[v] for v in W.WRONG_MODULES], SIX),
                 **name_mistakes("attention_kernel", [made[v] for v in W.WRONG_KERNELS], SIX)}
    for vid, (_, label) in W.WRONG_MODULES.items():
        assert named[vid].startswith(f"reads as {label} (declared alibi='real keys')"), named[vid]
    for vid, (_, label) in W.WRONG_KERNELS.items():
        assert named[vid].startswith(f"reads as {label} (declared alibi='key indices')"), named[vid]


def test_next_power_slopes_pass_where_heads_are_a_power_of_two():
    """The default matrix's head counts (4, 8, 1) are powers of two: there the next power's
    slopes are the right ones, and only a config like heads=6 shows the mistake."""
    with scratch():
        made = W.register_all()
        result = SpecChecker({"d": DEFAULT}).check(made["wrong_alibi_next_power"], "d", "self", "float64")
    assert result.ok, result.note


def test_a_library_module_built_for_alibi_is_read_as_one():
    pytest.importorskip("transformers")
    from transformers import BloomConfig, FalconConfig, LlamaConfig
    from transformers.models.bloom.modeling_bloom import BloomAttention
    from transformers.models.falcon.modeling_falcon import FalconAttention
    from transformers.models.llama.modeling_llama import LlamaAttention

    assert A.read_module(BloomAttention(BloomConfig(hidden_size=48, n_head=6), layer_idx=0)) == A.REAL_KEYS
    falcon = dict(hidden_size=48, num_attention_heads=6)
    assert A.read_module(FalconAttention(FalconConfig(**falcon, alibi=True), layer_idx=0)) == A.REAL_KEYS
    assert A.read_module(FalconAttention(FalconConfig(**falcon, alibi=False), layer_idx=0)) is None
    assert A.read_module(LlamaAttention(LlamaConfig(hidden_size=48, num_attention_heads=4), layer_idx=0)) is None
