"""The checks can fail: every class of bug that a wrong variant declaring correct traits
can hide is caught, the controls stay equivalent, and declarations are validated."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from harness import RegistryError, register
from harness.base.config import CONFIG_MATRIX, Config
from harness.check import precision as P
from harness.check.api import check_all
from harness.check.runs import RunCache
from harness.families.catalog import get_family
from harness.registry import get_variant, load_file, scratch

WRONG_FILE = Path(__file__).with_name("wrong_variants.py")
ONE_CONFIG = {"default": CONFIG_MATRIX["default"]}


@pytest.fixture(scope="module")
def wrong():
    """The wrong variants and the controls, checked on the default config (float32)."""
    with scratch():
        added = load_file(WRONG_FILE)
        import sys

        module = next(m for m in sys.modules.values() if getattr(m, "__file__", None) == str(WRONG_FILE))
        report = check_all(["attention", "norm"], ONE_CONFIG, "cpu", ["float32"],
                           variants=[v.key for v in added])
    return report, {**module.WRONG, **module.WRONG_NORMS}


def _failures(report, vid):
    return ([s for s in report.specs if s.variant == vid and not s.ok]
            + [g for g in report.gradchecks if g.variant == vid and not g.ok]
            + [d for d in report.dropouts if d.variant == vid and not d.ok])


WRONG_IDS = [
    "wrong_no_scale", "wrong_scale_by_heads", "wrong_head_split", "wrong_mask_polarity",
    "wrong_first_row_mask", "wrong_ignores_mask", "wrong_swapped_kv", "wrong_v_from_key",
    "wrong_backward_only", "wrong_detached", "wrong_dropout_in_eval",
    "wrong_eps_placement", "wrong_one_pass_variance", "wrong_eps_drift",
]


@pytest.mark.parametrize("vid", WRONG_IDS)
def test_every_wrong_variant_is_caught(wrong, vid):
    report, classes = wrong
    assert vid in classes  # the list above covers the file
    assert _failures(report, vid), f"{vid} ({classes[vid][1]}) escaped its spec check"


def test_the_list_covers_every_wrong_variant(wrong):
    _, classes = wrong
    assert set(classes) == set(WRONG_IDS)


@pytest.mark.parametrize("vid", ["honest_textbook", "control_last_ulp"])
def test_controls_stay_equivalent(wrong, vid):
    report, _ = wrong
    assert not _failures(report, vid)
    controls = {"honest_textbook", "control_last_ulp"}
    pairs = [p for p in report.pairs if {p.a, p.b} == controls]
    assert pairs and all(p.verdict in ("identical", "equivalent") and p.ok for p in pairs)
    # and a wrong variant paired with a control is a contradiction, not a silent "different"
    wrong = [p for p in report.pairs if vid in (p.a, p.b) and {p.a, p.b} & {"wrong_no_scale"}]
    assert wrong and all(p.verdict == "different" and not p.ok for p in wrong)


def _spec(report, vid, dtype, case=None):
    return [s for s in report.specs if s.variant == vid and s.dtype == dtype and (case is None or s.case == case)]


def test_role_confusion_is_seen_only_with_distinct_key_and_value(wrong):
    """V projected from the key: invisible while key is value, caught where they differ."""
    report, _ = wrong
    by_case = {s.case: s for s in _spec(report, "wrong_v_from_key", "float64")}
    assert by_case["self"].ok and by_case["cross_memory"].ok
    assert not by_case["self_kv"].ok and not by_case["cross"].ok
    assert by_case["cross"].worst in ("output", "grad:value", "grad:v.weight")


def test_mask_axes_are_seen_only_by_an_arbitrary_mask(wrong):
    """A mask taken from the first query row agrees with every padding mask (all rows
    alike) and with the causal cases only by accident; the random mask case sees it."""
    report, _ = wrong
    by_case = {s.case: s for s in _spec(report, "wrong_first_row_mask", "float64")}
    assert by_case["self"].ok and by_case["cross"].ok
    assert not by_case["random_mask"].ok


def test_a_backward_only_bug_is_caught_by_gradcheck_and_by_the_gradients(wrong):
    report, _ = wrong
    [g] = [g for g in report.gradchecks if g.variant == "wrong_backward_only"]
    assert not g.ok and g.note == "the backward disagrees with finite differences of the forward", g.note
    specs = _spec(report, "wrong_backward_only", "float64")
    assert all(not s.ok and s.worst.startswith("grad:") for s in specs)  # the forward is right


def test_a_detached_output_is_different_and_named(wrong):
    report, _ = wrong
    spec = _spec(report, "wrong_detached", "float64", "self")[0]
    assert spec.verdict == "different" and "missing" in spec.note and "does not require grad" in spec.note


def test_dropout_left_on_in_eval_is_caught(wrong):
    report, _ = wrong
    checks = {d.check.split(" (")[0]: d for d in report.dropouts if d.variant == "wrong_dropout_in_eval"}
    unchanged = checks["eval: output unchanged"]
    assert not unchanged.ok and "random draw(s) in eval mode" in unchanged.measured
    assert checks["train: draws per call"].measured == "1" and checks["train: draws per call"].expected == "0"


def test_an_exact_but_imprecise_formula_is_less_precise(wrong):
    """One-pass variance: right in float64, many times nn.LayerNorm's error in float32."""
    report, _ = wrong
    assert all(s.ok for s in _spec(report, "wrong_one_pass_variance", "float64"))
    [s] = _spec(report, "wrong_one_pass_variance", "float32", "rows")
    assert s.verdict == "less precise" and s.ratio > 2 and not s.ok


def test_float64_sees_a_difference_below_float32s_resolution(wrong):
    """eps 1.0001e-5 instead of 1e-5: ~5e-8, which assert_close's float64 default (1e-7) passes."""
    report, _ = wrong
    [s] = _spec(report, "wrong_eps_drift", "float64", "rows")
    [out] = [t for t in s.tensors if t.name == "output"]
    assert not s.ok and out.verdict != "equivalent" and 1e-9 < out.err < 1e-6
    x = get_family("norm").inputs("rows", Config())["x"]
    drifted = torch.nn.functional.layer_norm(x, x.shape[-1:], eps=1.0001e-5)
    exact = torch.nn.functional.layer_norm(x, x.shape[-1:], eps=1e-5)
    torch.testing.assert_close(drifted, exact)  # the float64 default lets it through
    assert not P.within(drifted, exact, P.FLOAT64_RTOL, P.FLOAT64_ATOL)  # the float64 rule does not


# -- declarations are validated ------------------------------------------------------------

def _register(**traits):
    register(id="mistyped", family="norm", source="tests", build=lambda cfg: torch.nn.LayerNorm(cfg.d_model),
             call=lambda m, i: m(i["x"]), param_map={}, traits=traits)


@pytest.mark.parametrize("traits,message", [
    ({"norm_formula": "layernorm", "epsilon": 1e-5}, "unknown trait 'epsilon'"),
    ({"norm_formula": "layernorm"}, "semantic trait 'eps' is not declared"),
    ({"norm_formula": "layer norm", "eps": 1e-5}, "trait norm_formula='layer norm' has no oracle"),
    ({"norm_formula": "layernorm", "eps": 1e-5, "cases": ("rowz",)}, "names unknown case(s) ['rowz']"),
    ({"norm_formula": "layernorm", "eps": 1e-5, "dropout_sites": "hidden"}, "must be a tuple of site names"),
])
def test_a_declaration_mistake_is_one_clear_error(traits, message):
    with scratch(), pytest.raises(RegistryError) as info:
        _register(**traits)
    assert message in str(info.value) and "\n" not in str(info.value)
    assert "known" in str(info.value) or "must be" in str(info.value)


# -- what a case cannot show is not a contradiction ---------------------------------------------------

def test_a_difference_a_case_cannot_show_is_not_exercised():
    """B = 1: no padded row, so 'causal & query not pad' equals 'causal & key not pad'."""
    report = check_all(["masks"], {"edge": CONFIG_MATRIX["edge"]}, "cpu", extras=False)
    [p] = [p for p in report.pairs if {p.a, p.b} == {"postnorm_blog", "torch"} and p.case == "target"]
    assert p.verdict == "not exercised" and p.ok
    report = check_all(["masks"], ONE_CONFIG, "cpu", extras=False)
    [p] = [p for p in report.pairs if {p.a, p.b} == {"postnorm_blog", "torch"} and p.case == "target"]
    assert p.verdict == "different" and p.ok and "target_mask" in p.reason


def test_a_difference_below_bfloat16s_resolution_is_not_resolvable():
    report = check_all(["norm"], ONE_CONFIG, "cpu", ["bfloat16"], extras=False)
    verdicts = {p.dtype: p for p in report.pairs if {p.a, p.b} == {"t2t_layernorm", "torch_layernorm"}}
    assert verdicts["float64"].verdict == "different" and "eps" in verdicts["float64"].reason
    assert verdicts["bfloat16"].verdict == "not resolvable" and verdicts["bfloat16"].ok
    assert not report.failures


def test_random_seeds_and_shapes_give_no_false_alarm():
    """Two seeded random draws of (seed, B, T, S, D, H) over the families whose cases have
    padding and masks (where B = 1 or T = 1 used to raise false alarms)."""
    rng = random.Random(2026)
    configs = {}
    for n in range(2):
        heads = rng.choice([1, 2, 4, 8])
        configs[f"draw{n}"] = Config(d_model=heads * rng.choice([2, 4, 6]) * 2, heads=heads, batch=rng.randint(1, 4),
                                     tgt_len=rng.randint(1, 8), src_len=rng.randint(1, 8), seed=rng.randint(0, 10**6))
        configs[f"draw{n}"] = configs[f"draw{n}"].replace(d_ff=4 * configs[f"draw{n}"].d_model)
    report = check_all(["attention", "decoder_only_block", "masks"], configs, "cpu", extras=False)
    assert not report.failures, [(s.variant, s.config, s.case, s.dtype, s.verdict) for s in report.failures]
    assert not [p for p in report.pairs if not p.ok]


def test_fully_masked_rows_match_the_write_ups():
    """-inf gives NaN, -1e9 / -1e20 the mean of V, SDPA zeros (torch 2.13)."""
    checker = RunCache(Config(), "cpu")
    family = get_family("attention")
    inputs = checker.inputs(family, "fully_masked")
    row = (~inputs["mask"]).all(-1)  # (B, T) True where the row sees no key
    outs = {}
    for vid in ("fused_explicit", "annotated", "fused_sdpa"):
        run = checker.run(get_variant("attention", vid), "fully_masked", {}, torch.float64)
        outs[vid] = run.tensors["output"][row]
    assert torch.isnan(outs["fused_explicit"]).all()
    o_bias = checker.weights(family, {})["o.bias"]
    torch.testing.assert_close(outs["fused_sdpa"], o_bias.expand_as(outs["fused_sdpa"]))  # zeros, then + o.bias
    assert not torch.isnan(outs["annotated"]).any()
    assert not torch.allclose(outs["annotated"], outs["fused_sdpa"])


def test_scratch_registry_is_restored():
    with scratch():
        load_file(WRONG_FILE)
        assert get_variant("attention", "wrong_no_scale")
    with pytest.raises(Exception, match="unknown variant 'wrong_no_scale'"):
        get_variant("attention", "wrong_no_scale")
