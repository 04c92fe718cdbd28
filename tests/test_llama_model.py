"""The LLaMA-style block and model families, the model parity metrics and the KV-cache
parity: each wrong variant of tests/wrong_llama_model.py is caught where its mistake shows,
the per-token KL sees what greedy tokens and top-k hide (and says what it hides itself), and
a cache that does not offset RoPE positions, or lets a step attend to left padding, fails
the parity on the calls and the padding where it shows."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import variants.llama  # noqa: F401  (registered outside the scratch registry below)
from harness.base.config import CONFIG_MATRIX
from harness.check.api import check_all
from harness.families.catalog import get_family
from harness.families.llama import GQA_CONFIG
from harness.families.models import DECODINGS, Decoding
from harness.registry import get_variant, load_file, load_packs, scratch, variants_of
from harness.systems.cache_parity import check_cache_parity, schedules
from harness.systems.parity import KL_BOUND, compare_distributions

WRONG_FILE = Path(__file__).with_name("wrong_llama_model.py")
CONFIGS = {"default": CONFIG_MATRIX["default"], "gqa": GQA_CONFIG}


def _wrong_module():
    return next(m for m in sys.modules.values() if getattr(m, "__file__", None) == str(WRONG_FILE))


@pytest.fixture(scope="module")
def checked():
    with scratch():
        added = load_file(WRONG_FILE)
        report = check_all(["llama_block", "llama_model"], CONFIGS, "cpu", ["float32"],
                           variants=[v.key for v in added], extras=False)
        kl = {(r.a, r.b, r.case): r for r in compare_distributions("llama_model", CONFIGS["default"])}
    return report, _wrong_module(), kl


def _failing(report, vid):
    return [s for s in report.specs if s.variant == vid and not s.ok]


def _output_differs(spec) -> bool:
    return any(t.name == "output" and t.verdict == "different" for t in spec.tensors)


@pytest.mark.parametrize("vid, in_output", [
    ("wrong_block_post_norm", True),
    ("wrong_model_tied_as_untied", False),
    ("wrong_model_untied_as_tied", False),
    ("wrong_model_rope_layout", True),
])
def test_each_wrong_variant_is_caught(checked, vid, in_output):
    """On every case of both configs; in the output, or (a tying confusion) only in the
    gradients: the canonical head is drawn equal to the embedding, so every model takes the
    same weights and the forward cannot tell."""
    report, module, _ = checked
    assert vid in module.WRONG
    failing = _failing(report, vid)
    cases = {(n, c.name) for n in CONFIGS for c in get_family(failing[0].family).cases} if failing else set()
    assert {(s.config, s.case) for s in failing} == cases, f"{vid} ({module.WRONG[vid]}) escaped"
    semantics = [s for s in failing if s.dtype == "float64"]   # (float32 then repeats "semantics already differ")
    assert semantics and all(_output_differs(s) == in_output for s in semantics), [(s.case, s.worst) for s in semantics]


@pytest.mark.parametrize("vid", ["wrong_model_positions_of_row_0", "wrong_model_segments_ignored"])
def test_a_packed_row_catches_what_an_unpacked_one_cannot(checked, vid):
    """Positions restarting where row 0's sequences do, in every row, or a mask across the
    row's sequences: equivalent on left padding (one sequence per row), different on packed
    rows, in the output."""
    report, module, _ = checked
    assert vid in module.WRONG
    mine = [s for s in report.specs if s.variant == vid]
    assert {s.case for s in mine} == {"left_pad", "packed"}
    assert {s.case for s in mine if not s.ok} == {"packed"}, f"{vid} ({module.WRONG[vid]}) escaped"
    semantics = [s for s in mine if s.case == "packed" and s.dtype == "float64"]
    assert semantics and all(s.verdict == "different" and _output_differs(s) for s in semantics)


def test_positions_that_do_not_restart_are_no_difference_under_rope(checked):
    """Positions counted along the packed row (not restarting at each sequence): RoPE reads
    only distances, which are the same within a sequence, and the mask keeps each sequence to
    itself: equivalent, as it should be (the control of the two mistakes above)."""
    report, _, _ = checked
    mine = [s for s in report.specs if s.variant == "model_positions_counted"]
    assert {s.case for s in mine} == {"left_pad", "packed"} and all(s.ok for s in mine), [s.note for s in mine]


def test_packed_rows_hold_the_reference_and_a_model_without_segments_says_so():
    """The reference reads the segments and the call's positions: equivalent on packed rows.
    A model that takes no segment ids refuses the case in its ``supports(cfg, case)``: that
    case is skipped with its reason, the others are checked."""
    from harness import register

    load_packs()
    ref = get_variant("llama_model", "llama_model")
    with scratch():
        register(id="no_segments", family="llama_model", source="test", build=ref.build,
                 call=lambda m, i: m(i["tokens"], i["pad"], i["positions"]), param_map=ref.param_map,
                 traits=ref.traits, supports=lambda cfg, case: "takes no segment ids" if case == "packed" else None)
        report = check_all(["llama_model"], {"default": CONFIG_MATRIX["default"]}, "cpu", ["float32"], extras=False,
                           variants=["llama_model/llama_model", "llama_model/no_segments"])
    packed = [s for s in report.specs if s.variant == "llama_model" and s.case == "packed"]
    assert {s.dtype for s in packed} == {"float64", "float32"} and all(s.ok for s in packed)
    mine = [s for s in report.specs if s.variant == "no_segments"]
    assert mine and all(s.ok for s in mine) and "packed" not in {s.case for s in mine}
    assert ("llama_model", "no_segments", "default", "case packed: takes no segment ids") in report.skipped


def test_the_kl_cannot_see_tying(checked):
    """What the distributions hide: a tying confusion, and a tied model against an untied
    one, agree within the bound (reported as a hidden declared difference)."""
    _, _, kl = checked
    assert kl["llama_model", "wrong_model_untied_as_tied", "full"].kl_worst <= KL_BOUND
    tied = kl["llama_model", "llama_model_tied", "full"]
    assert tied.expected == "different" and tied.hidden


def test_the_controls_stay_equivalent(checked):
    """The fused block and model declare the reference's semantic traits, so the registry's
    pair matrix (tests/test_equivalence.py) holds them equivalent to it on every case; here:
    their distributions agree to float32 rounding and their caches to the full forward."""
    _, _, kl = checked
    fused = kl["llama_model", "llama_model_fused", "left_pad"]
    assert fused.expected == "equivalent" and fused.agrees and fused.kl_worst < 1e-11 and fused.top1 == 1.0
    assert all(r.ok for r in check_cache_parity("llama_model", CONFIG_MATRIX["default"])
               if r.variant == "llama_model_fused")


def test_kl_sees_the_rope_permutation_where_top1_may_not(checked):
    """Interleaved RoPE on half-split rows: KL far above the bound at its worst position
    (reported with the row and position), while some positions keep the same argmax."""
    _, _, kl = checked
    r = kl["llama_model", "wrong_model_rope_layout", "full"]
    assert r.expected == "equivalent" and not r.agrees and not r.ok
    assert r.kl_worst > 1e4 * KL_BOUND and r.worst_at.startswith("row ")
    assert len(r.kl_per_position) == CONFIGS["default"].tgt_len and max(r.kl_per_position) == r.kl_worst
    assert 0.0 < r.top1 < 1.0


def test_every_model_with_a_cache_has_parity_on_its_padding_sides():
    cfg = CONFIG_MATRIX["default"]
    for family, sides in (("llama_model", {"right", "left"}), ("decoder_only_model", {"right"}),
                          ("encoder_decoder", {"right"})):
        results = check_cache_parity(family, cfg)
        cached = {v.id for v in variants_of(family)
                  if DECODINGS.get(v.key) and DECODINGS[v.key].cache and not v.supports(cfg)}
        assert {r.variant for r in results} == cached and cached
        assert {r.padding for r in results} == sides
        assert all(r.ok and r.steps for r in results), [r for r in results if not r.ok]
    assert schedules(7) == {"prefill + steps": [3, 4, 5, 6, 7], "chunked prefill": [2, 4, 6, 7]}


@pytest.mark.parametrize("step, bad_sides", [
    ("step_without_offset", {"right", "left"}),
    ("step_ignoring_left_pad", {"left"}),
])
def test_a_wrong_cache_is_caught_on_the_calls_where_it_shows(monkeypatch, step, bad_sides):
    with scratch():
        load_file(WRONG_FILE)
        wrong = _wrong_module().WRONG_STEPS[step]
    right = DECODINGS["llama_model/llama_model"]
    monkeypatch.setitem(DECODINGS, "llama_model/llama_model",
                        Decoding(prepare=right.prepare, step=wrong, cache=right.cache, padding=right.padding))
    results = [r for r in check_cache_parity("llama_model", CONFIG_MATRIX["default"]) if r.variant == "llama_model"]
    assert {r.padding for r in results if not r.ok} == bad_sides
    for r in results:
        if r.padding in bad_sides and r.schedule == "prefill + steps":
            assert r.steps[0].verdict == "equivalent"              # the prefill itself is right
            assert r.first_bad is not None and r.first_bad.max_abs > 1e-3
    assert all(r.ok for r in check_cache_parity("llama_model", CONFIG_MATRIX["default"])
               if r.variant != "llama_model")


def test_the_block_is_composed_from_the_layer_families():
    """One set of conventions: the block's canonical parameters are the attention, norm and
    gated_ffn families' own, nested; K/V keep the GQA width (2 K/V heads of d_k = 10)."""
    block = get_family("llama_block").canonical_shapes(GQA_CONFIG)
    attention = get_family("attention").canonical_shapes(GQA_CONFIG)
    assert all(block[f"self_attn.{n}"] == s for n, s in attention.items())
    assert block["mlp.gate.weight"] == get_family("gated_ffn").canonical_shapes(GQA_CONFIG)["gate.weight"]
    assert block["attn_norm.weight"] == (GQA_CONFIG.d_model,)
    assert block["self_attn.k.weight"][0] == GQA_CONFIG.n_kv_heads * GQA_CONFIG.d_k == 2 * 10


def test_gpt_neox_per_head_qkv_needs_its_entry():
    """GPT-NeoX's query_key_value holds each head's q, k, v together: read through
    ``PerHeadChunk`` it checks clean (the registry's gpt_neox); read as plain thirds
    (``fused_entries``, the layout of a fused Linear whose first third is every q) it is
    different on every case it runs."""
    from harness import fused_entries, register
    from harness.registry import get_variant

    neox = get_variant("attention", "gpt_neox")
    cfg = CONFIG_MATRIX["default"]
    with scratch():
        register(id="wrong_neox_thirds", family="attention", source="test", build=neox.build, call=neox.call,
                 param_map={**neox.map_for(cfg), **fused_entries("query_key_value.weight", "query_key_value.bias",
                                                                 ("q", "k", "v"))},
                 traits=neox.traits)
        report = check_all(["attention"], {"default": cfg}, "cpu", ["float32"],
                           variants=["attention/wrong_neox_thirds", "attention/gpt_neox"], extras=False)
    bad = {s.case for s in report.specs if s.variant == "wrong_neox_thirds" and not s.ok}
    assert set(neox.traits["cases"]) <= bad   # (and the regime cases derived from them: self@large...)
    assert all(s.ok for s in report.specs if s.variant == "gpt_neox")


def test_per_head_chunk_reads_and_writes_the_heads_rows():
    import torch
    from torch import nn

    from harness import PerHeadChunk, nest
    from harness.porting.entries import entry_code
    from harness.porting.portmap import PortMap

    H, d, D = 3, 4, 6
    module = nn.Linear(D, 3 * H * d)
    entries = {f"{c}.{p}": PerHeadChunk(p, i, 3, heads=H) for i, c in enumerate("qkv") for p in ("weight", "bias")}
    shapes = {n: (H * d, D) if n.endswith("weight") else (H * d,) for n in entries}
    portmap = PortMap("neox", module, entries, shapes)
    weights = {n: torch.randn(s) for n, s in shapes.items()}
    portmap.load(weights)
    assert torch.equal(module.weight.view(H, 3, d, D)[:, 1].reshape(H * d, D), weights["k.weight"])
    assert all(torch.equal(portmap.export()[n], w) for n, w in weights.items())
    assert entry_code(entries["v.weight"]) == 'PerHeadChunk("weight", 2, 3, heads=3)'
    assert nest(entries, "attn.", "layer.")["attn.q.bias"] == PerHeadChunk("layer.bias", 0, 3, heads=H)


@pytest.mark.slow  # flex_attention eager on CPU: ~8 s to warm up, then ~0.5 s a forward (load 9)
@pytest.mark.filterwarnings("ignore:.*flex_attention called without torch.compile")
@pytest.mark.parametrize("vid", ["llama_model_flex", "mistral_model_flex"])
def test_flex_block_masks_meet_the_oracle_forward_on_cpu(vid):
    """flex_attention has no backward on CPU (torch 2.13), so the check skips the flex models
    there with that reason; their forward (block masks composed of causal, padding and window
    mask_mods, eager) is held here to the float64 oracle on every case of both configs, and
    their cached prefill + steps to their own full forward (block masks offset by the cache)."""
    import torch

    from harness.check import precision as P
    from harness.porting.portmap import PortMap, absent_fills, zero_unrepresented

    variant = get_variant("llama_model", vid)
    family = get_family("llama_model")
    assert torch.cuda.is_available() or "no backward on CPU" in variant.supports(CONFIG_MATRIX["default"])
    traits = family.semantic_traits(variant.traits)
    for name, cfg in CONFIGS.items():
        weights = zero_unrepresented(family.canonical_weights(cfg), absent_fills(variant.map_for(cfg)))
        module = variant.build(cfg).double().eval()
        PortMap(vid, module, variant.map_for(cfg), family.canonical_shapes(cfg)).load(weights)
        for case in family.cases:
            inputs = family.inputs(case.name, cfg)
            with torch.no_grad():
                got = variant.call(module, inputs)
            want = family.oracle(traits, cfg, weights, inputs, torch.float64)
            torch.testing.assert_close(got, want, rtol=P.FLOAT64_RTOL, atol=P.FLOAT64_ATOL,
                                       msg=lambda m, c=(name, case.name): f"{c}: {m}")
        decoding = DECODINGS[variant.key]
        inputs = family.inputs("left_pad", cfg)
        state = decoding.prepare(module, inputs, True)
        with torch.no_grad():
            got = variant.call(module, inputs)
            for k in schedules(cfg.tgt_len)["prefill + steps"]:
                rows = inputs["pad"][:, k - 1]
                step = decoding.step(module, state, inputs["tokens"][:, :k])
                torch.testing.assert_close(step[rows], got[rows, k - 1], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("family", ["encoder_decoder", "decoder_only_model", "llama_model"])
def test_every_equivalent_pair_of_models_agrees_far_inside_the_kl_bound(family):
    """Registry-driven: every pair declared equivalent agrees (worst per-token KL at least
    1000x below the bound: the bound is not tuned to pass them), and every pair that agrees
    while declared different is reported as hidden, not as agreeing."""
    results = compare_distributions(family, CONFIG_MATRIX["default"])
    assert results and all(r.ok for r in results), [r for r in results if not r.ok]
    equivalent = [r for r in results if r.expected == "equivalent"]
    assert equivalent and all(r.kl_worst < KL_BOUND / 1000 for r in equivalent)
    assert all(r.hidden == (r.expected != "equivalent" and r.agrees) for r in results)


def test_a_window_only_decoding_shows_is_caught_by_the_cache_parity(checked):
    """The window counted from each call's first query: a full forward (one call from 0) is
    right, so check passes it on every case; with a cache, every cached key before the call
    stays visible, and the parity fails from the first step whose window should drop one."""
    report, _, _ = checked
    assert not _failing(report, "wrong_window_in_the_call")
    with scratch():
        load_file(WRONG_FILE)
        results = [r for r in check_cache_parity("llama_model", CONFIG_MATRIX["default"])
                   if r.variant == "wrong_window_in_the_call"]
    assert results and all(not r.ok for r in results)
    assert all(r.first_bad.fed > 4 for r in results if r.schedule == "prefill + steps")  # past the window
