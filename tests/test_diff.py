"""``harness diff``: the divergence trace localizes known differences, attribution
feeds A into B, the layout hints name a transposed or reordered weight."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from harness import Chunk, Param, PortingError, register
from harness.base.config import Config
from harness.base.verdicts import Verdict
from harness.cli.main import main
from harness.families.catalog import get_family
from harness.porting.portmap import PortMap
from harness.registry import REGISTRY, build, get_variant, load_file, scratch
from harness.trace.diff_result import Attribution, DivergenceKind, PairDiff, TraitRow
from harness.trace.pairs import diff_pair, explain_variant, first_divergence

ROOT = Path(__file__).resolve().parents[1]
CONV1D = ROOT / "examples" / "conv1d_attention.py"
EINSUM = ROOT / "examples" / "my_attention.py"
CFG = Config()
CFG8 = CFG.replace(heads=8)  # the 000 (t2t) layers always build 8 heads


def _registered(path: Path, vid: str):
    key = f"attention/{vid}"
    if key not in REGISTRY:
        load_file(path)
    return REGISTRY[key]


def _variant_like(v, **changes):
    fields = {f.name: getattr(v, f.name) for f in dataclasses.fields(v) if f.name != "origin"}
    return register(**{**fields, **changes})


def test_eps_difference_is_found_at_norm1():
    """t2t (LayerNorm eps 1e-6) vs nn.TransformerEncoderLayer(norm_first=True) (1e-5)."""
    d = diff_pair("encoder_layer", "t2t", "torch_pre", "padded", CFG8, hints=False)
    assert d.verdict == Verdict.DIFFERENT and "eps" in d.declared_reason
    assert d.first is not None and d.first.unit == "norm1" and d.first.kind == DivergenceKind.COMPUTATION
    norm1 = next(r for r in d.trace if r.unit == "norm1")
    assert Verdict(norm1.input_verdict).agrees and norm1.verdict == Verdict.DIFFERENT
    # feeding t2t's norm outputs into torch_pre makes the whole layer agree
    assert d.attribution is not None and d.attribution.agrees and d.attribution.patched == ("norm1", "norm2")
    assert next(t for t in d.traits if t.trait == "eps").differs


@pytest.mark.parametrize("a,b", [("torch_post", "torch_pre"), ("torch_pre", "torch_post")])
def test_post_vs_pre_norm_is_found_at_the_first_norm(a, b):
    d = diff_pair("encoder_layer", a, b, "padded", CFG, hints=False)
    assert d.first is not None and d.first.unit == "norm1" and d.first.kind == DivergenceKind.WIRING
    assert d.attribution is not None and not d.attribution.agrees  # no single sub-module explains a different order


def test_002_blocks_differ_at_the_fully_masked_rows_of_left_padding_through_the_gradients():
    """-inf (NaN rows) vs -1e20 (mean of V): the two blocks part only on the rows that see no
    key, the left padding's. A padded position's output is unspecified and left out, so the
    outputs agree; the NaN still reaches the weights' gradients (0 * NaN in the backward, as in
    training), and the trace finds it inside the attention, q, k, v agreeing."""
    d = diff_pair("decoder_only_block", "simple_decoder_layer", "simple_decoder", "left_pad", CFG, hints=False)
    where = {w.tensor: w for w in d.where}
    assert where["output"].verdict.agrees and d.verdict == Verdict.DIFFERENT
    assert where["grad:self_attn.o.weight"].verdict == Verdict.DIFFERENT
    assert where["grad:x"].row_kind.startswith("fully masked row")
    assert d.first is not None and d.first.unit == "self_attn.o:in" and "q, k, v agree" in d.first.text
    right = diff_pair("decoder_only_block", "simple_decoder_layer", "simple_decoder", "right_pad", CFG, hints=False)
    assert right.verdict.agrees and right.first is None

def test_fused_projections_are_read_at_the_dispatcher():
    """nn.MultiheadAttention has no q/k/v sub-module: its projections come from the aten
    ops that consume in_proj_weight, and they match the four-Linear SDPA module's."""
    d = diff_pair("attention", "torch_mha", "torch_sdpa", "cross", CFG, hints=False)
    rows = {(r.unit, r.what): r for r in d.trace}
    for key in [("q", "out"), ("k", "out"), ("v", "out"), ("o", "in"), ("o", "out")]:
        assert Verdict(rows[key].verdict).agrees, key
        assert rows[key].how_a.startswith("dispatcher")
    assert rows[("q", "out")].how_b == "module q"
    assert any(tag == "≠" for tag, _, _ in d.ops)  # the two run different aten ops


def test_a_transposed_square_weight_is_named_by_the_layout_hint():
    with scratch():
        good = _registered(CONV1D, "conv1d_gpt2")
        wrong_map = {**good.param_map, "o.weight": Param("c_proj.weight")}  # forgot Transposed
        _variant_like(good, id="conv1d_forgot_transposed", param_map=wrong_map)
        text = first_divergence("attention", "torch_sdpa", "conv1d_forgot_transposed", "self", CFG).text
    assert "o.weight looks transposed" in text
    assert 'Transposed(Param("c_proj.weight"))' in text


def test_a_reordered_fused_chunk_is_named_by_the_layout_hint():
    with scratch():
        good = _registered(EINSUM, "my_einsum")
        swapped = {**good.param_map,
                   "q.weight": Chunk("w_qkv", 1, 3), "q.bias": Chunk("b_qkv", 1, 3),
                   "k.weight": Chunk("w_qkv", 0, 3), "k.bias": Chunk("b_qkv", 0, 3)}
        _variant_like(good, id="einsum_kqv", param_map=swapped)
        d = first_divergence("attention", "torch_sdpa", "einsum_kqv", "self", CFG)
    assert any("chunks of w_qkv look like (q, k, v) in that order; its map says (k, q, v)" in h
               for h in d.data.hints), d.text


def test_shape_check_names_the_transposed_orientation():
    with scratch():
        v = _registered(CONV1D, "conv1d_gpt2")
        module = v.build(CFG)
    shapes = get_family("attention").canonical_shapes(CFG)
    plain = {**v.param_map, "q.weight": Chunk("c_attn.weight", 0, 3)}
    with pytest.raises(PortingError, match=r'Transposed\(Chunk\("c_attn.weight", 0, 3, dim=1\)\)'):
        PortMap("mine", module, plain, shapes)


def test_transposed_entries_port_both_ways():
    weights = get_family("attention").canonical_weights(CFG, seed=5)
    with scratch():
        v = _registered(CONV1D, "conv1d_gpt2")
        module, portmap = build(v, CFG, dtype=torch.float64, weights=weights)
    d = CFG.d_model
    assert torch.equal(module.c_attn.weight[:, d:2 * d], weights["k.weight"].t())
    assert torch.equal(module.c_proj.weight, weights["o.weight"].t())
    back = portmap.export()
    assert all(torch.equal(back[n], weights[n]) for n in weights)


def test_diff_cli_prints_and_writes_json(tmp_path, capsys):
    out = tmp_path / "diff.json"
    assert main(["diff", "norm", "torch_layernorm", "t2t_layernorm", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "divergence trace" in printed and "eps" in printed and "aten ops, aligned" in printed
    data = json.loads(out.read_text())
    assert data["verdict"] == "different" and data["where"][0]["mismatches"] > 0


def test_diff_cli_bad_input_is_one_line(capsys):
    assert main(["diff", "norm", "torch_layernorm", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown variant 'nope'" in err[0]
    assert main(["diff", "attention", "torch_mha", "torch_sdpa", "--case", "nope"]) == 2


def test_a_variant_off_its_spec_is_explained_against_a_peer_of_its_class():
    """A deliberately transposed map declares the reference's traits: its explanation
    traces it against the reference and names the transposed weight."""
    with scratch():
        good = _registered(CONV1D, "conv1d_gpt2")
        _variant_like(good, id="conv1d_forgot_transposed",
                      param_map={**good.param_map, "o.weight": Param("c_proj.weight")})
        d = explain_variant("attention", "conv1d_forgot_transposed", "self", CFG)
    assert d is not None and d.data.b == "conv1d_forgot_transposed"
    assert get_variant("attention", d.data.a).traits["fully_masked_row"] == "mean of V"
    assert any("o.weight looks transposed" in h for h in d.data.hints)


def test_the_json_form_of_an_error_row_has_no_traced_part():
    """``diff --json`` of a pair where a side did not run: the declared part, the error and
    empty rows; the traced part's own fields (worst, backward, op counts) are absent."""
    row = PairDiff("norm", "x", "y", "rows", "float32", "cpu", Verdict.EQUIVALENT, "",
                   traits=(TraitRow("eps", 1e-5, 1e-6, True, True),), errors={"y": "building it: boom"},
                   paths={"x": "-", "y": "-"}, mistakes={}, verdict=Verdict.ERROR, seconds=0.5)
    data = row.to_json()
    assert list(data) == ["family", "a", "b", "case", "dtype", "device", "expected", "declared_reason", "traits",
                          "errors", "paths", "mistakes", "verdict", "trace", "first", "attribution", "where",
                          "ops", "hints", "seconds"]
    assert data["traits"] == [{"trait": "eps", "a": 1e-5, "b": 1e-6, "differs": True, "semantic": True}]
    assert data["errors"] == {"y": "building it: boom"} and data["verdict"] == "error"


@pytest.mark.parametrize("reversed_, agrees, text", [
    (False, True, "with A's norm1 + norm2 fed into B, B's output agrees with A's: the whole difference comes "
                  "from those"),
    (True, True, "with B's norm1 + norm2 fed into A, A's output agrees with B's: the whole difference comes "
                 "from those"),
    (True, False, "with B's norm1 + norm2 fed into A, the outputs still differ"),
])
def test_the_attribution_names_who_was_fed_into_whom(reversed_, agrees, text):
    found = Attribution(("norm1", "norm2"), agrees, reversed=reversed_)
    assert found.text.startswith(text)
    assert found.to_json() == {"patched": ["norm1", "norm2"], "agrees": agrees, "text": found.text,
                               **({"reversed": True} if reversed_ else {})}
    assert Attribution((), False).text == "no sub-module of B to feed (none observed as a module)"
