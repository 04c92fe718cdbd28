"""The LLaMA-era conventions of the attention, norm and gated_ffn families: each wrong
variant of tests/wrong_llama.py is caught (on the case or config that exposes it), the
controls stay equivalent, RopePermuted is HF's converter's permutation, and the positions,
GQA and window inputs mean what the oracle says."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import variants.llama  # noqa: F401  (registered outside the scratch registry below)
from harness import RopePermuted
from harness.base.config import CONFIG_MATRIX, Config
from harness.base.errors import ConfigError
from harness.check.api import check_all
from harness.families.catalog import get_family
from harness.families.oracles import rope
from harness.registry import load_file, scratch

WRONG_FILE = Path(__file__).with_name("wrong_llama.py")
GQA = get_family("attention").extra_configs["gqa"]


@pytest.fixture(scope="module")
def checked():
    """The wrong variants and controls on the default and the GQA config, float32."""
    with scratch():
        added = load_file(WRONG_FILE)
        module = next(m for m in sys.modules.values() if getattr(m, "__file__", None) == str(WRONG_FILE))
        report = check_all(["attention", "norm"], {"default": CONFIG_MATRIX["default"], "gqa": GQA}, "cpu",
                           ["float32"], variants=[v.key for v in added], extras=False)
    return report, module


def _failing(report, vid):
    return {(s.config, s.case) for s in report.specs if s.variant == vid and not s.ok}


@pytest.mark.parametrize("vid, where", [
    ("wrong_rope_layout", {("default", "self"), ("gqa", "decode")}),
    ("wrong_kv_tiled", {("gqa", "self"), ("gqa", "decode")}),
    ("wrong_window_off_by_one", {("default", "window"), ("gqa", "window")}),
    ("wrong_gain", {("default", "rows")}),
    ("wrong_eps", {("default", "rows")}),
    ("wrong_softcap_dropped", {("default", "self_kv"), ("default", "causal"), ("gqa", "causal")}),
    ("wrong_qk_norm_full_width", {("default", "self_kv"), ("gqa", "causal")}),
])
def test_each_wrong_variant_is_caught_where_its_mistake_shows(checked, vid, where):
    report, module = checked
    assert vid in module.WRONG
    assert where <= _failing(report, vid), f"{vid} ({module.WRONG[vid]}) escaped"


def test_the_mistakes_stay_hidden_where_they_cannot_show(checked):
    """Tiling K/V heads is invisible with one K/V head per query head; a window off by one
    only on the window cases: the cases and the GQA config are what catch them."""
    report, _ = checked
    assert not {c for c in _failing(report, "wrong_kv_tiled") if c[0] == "default"}
    assert {c for _, c in _failing(report, "wrong_window_off_by_one")} == {"window", "decode_window", "window@wide"}


def test_controls_stay_equivalent(checked):
    report, module = checked
    for vid in module.CONTROLS:
        assert not _failing(report, vid)
    pairs = [p for p in report.pairs if {p.a, p.b} == set(module.CONTROLS)]
    assert pairs and all(p.ok and p.verdict in ("identical", "equivalent") for p in pairs)


def test_rope_permuted_is_hf_converters_permutation():
    """HF's convert_llama_weights_to_hf: permute(w) = w.view(h, d/2, 2, D).transpose(1, 2)."""
    h, d, D = 3, 8, 10
    w = torch.randn(h * d, D)
    index = RopePermuted(None, heads=h).index(h * d)
    assert torch.equal(w[index], w.view(h, d // 2, 2, D).transpose(1, 2).reshape(h * d, D))


def test_interleaved_rope_on_permuted_rows_is_half_split_rope():
    h, d = 2, 8
    x = torch.randn(1, h, 5, d, dtype=torch.float64)
    pos = torch.arange(5)[None] + 3
    index = RopePermuted(None, heads=1).index(d)
    back = torch.empty_like(x)
    back[..., index] = x                     # the interleaved module's rows of x
    ours = rope(x, pos, "half-split")
    theirs = rope(back, pos, "interleaved")[..., index]
    torch.testing.assert_close(ours, theirs)


def test_partial_rotary_leaves_the_rest():
    x = torch.randn(1, 1, 4, 8, dtype=torch.float64)
    out = rope(x, torch.arange(4)[None] + 1, "half-split", fraction=0.5)
    assert torch.equal(out[..., 4:], x[..., 4:]) and not torch.allclose(out[..., :4], x[..., :4])


def test_decode_positions_follow_the_cache_and_the_padding():
    family = get_family("attention")
    cfg = CONFIG_MATRIX["default"]
    dec = family.inputs("decode", cfg)
    assert torch.equal(dec["positions"][0], torch.arange(cfg.src_len, cfg.src_len + cfg.tgt_len))
    left = family.inputs("decode_left_pad", cfg)
    first_real = left["mask"][:, -1].float().argmax(-1)                 # (B,) the first real key
    for b in range(cfg.batch):
        assert left["key_positions"][b, first_real[b]] == 0
        assert left["positions"][b, -1] == cfg.src_len + cfg.tgt_len - 1 - first_real[b]
    assert bool(left["mask"].any(-1).all())                              # every query keeps a key


def test_gqa_config_shapes_and_skips():
    family = get_family("attention")
    shapes = family.canonical_shapes(GQA)
    assert shapes["k.weight"] == (GQA.n_kv_heads * GQA.d_k, GQA.d_model) and shapes["q.weight"] == (48, 48)
    assert family.canonical_shapes(CONFIG_MATRIX["default"])["k.weight"] == (48, 48)
    from harness.registry import get_variant
    assert "declares no gqa_grouping" in get_variant("attention", "torch_mha").supports(GQA)
    assert get_variant("attention", "llama").supports(GQA) is None
    assert "gqa" in family.configs_of(CONFIG_MATRIX) and "gqa" not in get_family("norm").configs_of(CONFIG_MATRIX)


def test_rope_base_is_a_config_field():
    assert Config.parse(["rope_base=500000"]).rope_base == 500000.0
    with pytest.raises(ConfigError, match="rope_base"):
        Config.parse(["rope_base=1"])


@pytest.mark.parametrize("vid, named", [
    ("wrong_rope_layout", "q/k rows look permuted: interleaved vs half-split RoPE"),
    ("wrong_kv_tiled", "K/V heads grouped tile vs repeat_interleave"),
    ("wrong_window_off_by_one", "window off by one (one key more)"),
    ("wrong_gain", "norm gain 1+w vs w"),
    ("wrong_eps", "eps differs: 1e-05"),
])
def test_check_names_each_mistake(checked, vid, named):
    """The line check prints above the first divergence (harness.trace.kernel_explain)."""
    from harness.trace.kernel_explain import explain_mistake

    report, module = checked
    family = "norm" if vid in ("wrong_gain", "wrong_eps") else "attention"
    with scratch():
        load_file(WRONG_FILE)
        line = explain_mistake(family, vid, report, {"default": CONFIG_MATRIX["default"], "gqa": GQA})
    assert line.startswith(f"reads as {named} (declared"), line


def test_no_mistake_named_for_a_computation_bug_or_a_passing_variant(checked):
    from harness.trace.kernel_explain import explain_mistake

    report, _ = checked
    with scratch():
        load_file(WRONG_FILE)
        assert explain_mistake("attention", "control_llama", report, {"default": CONFIG_MATRIX["default"]}) == ""


@pytest.mark.parametrize("vid, named, config", [
    ("wrong_rope_layout", "q/k rows look permuted: interleaved vs half-split RoPE", "default"),
    ("wrong_kv_tiled", "K/V heads grouped tile vs repeat_interleave", "gqa"),
    ("wrong_window_off_by_one", "window off by one (one key more)", "default"),
    ("wrong_gain", "norm gain 1+w vs w", "default"),
    ("wrong_eps", "eps differs: 1e-05", "default"),
])
def test_diff_names_each_mistake(vid, named, config):
    """What `diff` prints for each side (harness.trace.pairs.diff_pair's "mistakes"): the same
    line as check, from the variant's own float64 runs on the config given to diff."""
    from harness.registry import get_variant
    from harness.trace.kernel_explain import name_mistakes

    family = "norm" if vid in ("wrong_gain", "wrong_eps") else "attention"
    cfg = GQA if config == "gqa" else CONFIG_MATRIX["default"]
    with scratch():
        load_file(WRONG_FILE)
        line = name_mistakes(family, [get_variant(family, vid), get_variant(family, "control_llama"
                                                                            if family == "attention" else vid)], cfg)
    assert line.get(vid, "").startswith(f"reads as {named} (declared"), line
    assert "control_llama" not in line
