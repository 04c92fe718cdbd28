"""The attention_kernel family: its oracle's conventions on inputs small enough to compute by
hand, the deliberately wrong kernels caught on the case that shows each mistake, the controls
equivalent, ``register_kernel`` (the manual's example in at most 10 lines), the config's
kernel fields and a variants file's own folder importable."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from harness import RegistryError, register_kernel
from harness.base.config import CONFIG_MATRIX, Config
from harness.base.errors import ConfigError, SpecError
from harness.check.api import check_all
from harness.families.catalog import get_family
from harness.families.kernel_oracle import allowed_keys, group_heads, kernel_attention
from harness.registry import load_file, load_packs, scratch
from harness.trace.kernel_explain import explain_mistake

ROOT = Path(__file__).resolve().parents[1]
WRONG_FILE = Path(__file__).with_name("wrong_kernels.py")
ONE_CONFIG = {"default": CONFIG_MATRIX["default"]}
FAMILY = get_family("attention_kernel")
BASE = {"causal": "top_left", "window": "as called", "softcap": "as called", "scale": "1/sqrt(d)",
        "gqa_grouping": "consecutive", "mask_method": "bool_fill_-inf"}


def _traits(**changes):
    return FAMILY.semantic_traits({**BASE, **changes})


def _call(q, k, v, mask=None, key_pad=None, causal=False, window=None, softcap=0.0):
    B, T, S = q.shape[0], q.shape[2], k.shape[2]
    key_pad = torch.ones(B, S, dtype=torch.bool) if key_pad is None else key_pad
    mask = key_pad[:, None, :].expand(B, T, S).clone() if mask is None else mask
    return {"q": q, "k": k, "v": v, "mask": mask, "key_pad": key_pad, "causal": causal,
            "window": window, "softcap": softcap}


# -- the oracle's conventions, by hand ----------------------------------------------------------

def test_causal_diagonals_top_left_and_bottom_right():
    ones = torch.ones(1, 2, 3, dtype=torch.bool)   # T = 2 queries, S = 3 keys
    pad = torch.ones(1, 3, dtype=torch.bool)
    top = allowed_keys(ones, pad, True, None, "top_left")[0].int().tolist()
    bottom = allowed_keys(ones, pad, True, None, "bottom_right")[0].int().tolist()
    assert top == [[1, 0, 0], [1, 1, 0]]           # query i sees keys 0..i (tril)
    assert bottom == [[1, 1, 0], [1, 1, 1]]        # the last query sees the last key
    assert allowed_keys(ones, pad, True, None, "none")[0].all()


def test_bottom_right_aligns_to_the_last_real_key_with_key_padding():
    pad = torch.tensor([[True, True, False]])      # key 2 is padding: the last real key is 1
    mask = pad[:, None, :].expand(1, 2, 3)
    assert allowed_keys(mask, pad, True, None, "bottom_right")[0].int().tolist() == [[1, 0, 0], [1, 1, 0]]


def test_bottom_right_is_pytorchs_lower_right_causal_bias():
    from torch.nn.attention.bias import causal_lower_right, causal_upper_left

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, n, 4, generator=gen, dtype=torch.float64) for n in (3, 5, 5))
    for bias, diagonal in ((causal_upper_left(3, 5), "top_left"), (causal_lower_right(3, 5), "bottom_right")):
        ours = kernel_attention(_traits(causal=diagonal), _call(q, k, v, causal=True))
        torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v, attn_mask=bias),
                                   rtol=1e-12, atol=1e-12)


def test_window_counts_and_hf_sliding_window():
    ones, pad = torch.ones(1, 4, 4, dtype=torch.bool), torch.ones(1, 4, dtype=torch.bool)
    band = allowed_keys(ones, pad, False, (1, 1), "top_left")[0].int().tolist()
    assert band == [[1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1], [0, 0, 1, 1]]
    # HF's sliding_window=2 keeps keys i-1..i: (left, right) = (w - 1, 0), on a causal mask.
    sliding = allowed_keys(ones, pad, True, (2 - 1, 0), "top_left")[0].int().tolist()
    assert sliding == [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]]


def test_gqa_grouping_consecutive_and_tiled():
    kv = torch.arange(2.0).view(1, 2, 1, 1)         # K/V head j holds the value j
    assert group_heads(kv, 4, "consecutive").flatten().tolist() == [0, 0, 1, 1]   # h // (H / H_kv)
    assert group_heads(kv, 4, "tiled").flatten().tolist() == [0, 1, 0, 1]         # h % H_kv
    with pytest.raises(SpecError, match="gqa_grouping"):
        group_heads(kv, 4, "strided")


def test_softcap_and_scale_by_hand():
    q = torch.tensor([[[[2.0]]]], dtype=torch.float64)                 # d = 1
    k = torch.tensor([[[[1.0], [0.0]]]], dtype=torch.float64)          # scores 2 and 0
    v = torch.tensor([[[[1.0], [0.0]]]], dtype=torch.float64)          # the output is p_0
    capped = kernel_attention(_traits(), _call(q, k, v, softcap=1.0)).item()
    assert capped == pytest.approx(1 / (1 + math.exp(-math.tanh(2.0))), abs=1e-15)
    fixed = kernel_attention(_traits(softcap=0.5, scale=0.5), _call(q, k, v, softcap=1.0)).item()
    assert fixed == pytest.approx(1 / (1 + math.exp(-0.5 * math.tanh(1.0 / 0.5))), abs=1e-15)


@pytest.mark.parametrize("method,row,nan_in_dq", [
    ("bool_fill_-inf", "NaN", False),
    ("bool_fill_finfo_min", "mean of V", False),
    ("additive_bias", "NaN", True),
    ("additive_finfo_min", "mean of V", False),
])
def test_a_row_without_keys_by_mask_method(method, row, nan_in_dq):
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 1, n, 3, generator=gen, dtype=torch.float64, requires_grad=True) for n in (2, 4, 4))
    mask = torch.ones(1, 2, 4, dtype=torch.bool)
    mask[0, 0] = False                                                 # query 0 sees no key
    traits = _traits(mask_method=method)
    assert (traits["fully_masked_row"], traits["fully_masked_grad"]) == (
        row, {"additive_bias": "NaN", "additive_finfo_min": "softmax"}.get(method, "none"))
    out = kernel_attention(traits, _call(q, k, v, mask=mask))
    dead = out[0, 0, 0]
    if row == "NaN":
        assert dead.isnan().all()
    else:
        torch.testing.assert_close(dead, v[0, 0].mean(0), rtol=0, atol=1e-15)
    out.nan_to_num().sum().backward()       # nan_to_num passes no gradient from a NaN output
    dq_dead = q.grad[0, 0, 0]
    assert bool(dq_dead.isnan().all()) == nan_in_dq
    if method == "additive_finfo_min":      # the uniform softmax's own gradient reaches q
        assert torch.isfinite(dq_dead).all() and dq_dead.abs().max() > 0
    elif not nan_in_dq:                     # a masked_fill stops it
        assert (dq_dead == 0).all()


def test_repaired_rows_are_zeros_and_send_nothing():
    q, k, v = (torch.ones(1, 1, n, 2, dtype=torch.float64, requires_grad=True) for n in (1, 3, 3))
    traits = _traits(fully_masked_row="zeros", fully_masked_grad="none")
    out = kernel_attention(traits, _call(q, k, v, mask=torch.zeros(1, 1, 3, dtype=torch.bool)))
    out.sum().backward()
    assert (out == 0).all() and (q.grad == 0).all() and (k.grad == 0).all() and (v.grad == 0).all()


@pytest.mark.parametrize("traits,message", [
    ({"causal": "upper_left"}, "causal='upper_left' has no oracle"),
    ({"causal": "top_left", "window": 3}, "window=3 has no oracle"),
    ({"causal": "top_left", "gqa_grouping": "strided"}, "gqa_grouping='strided' has no oracle"),
    ({"causal": "top_left", "mask_method": "bool_fill_finfo_min", "fully_masked_grad": "NaN"},
     "mask_method 'bool_fill_finfo_min' gives a row without keys"),
    ({}, "semantic trait 'causal' is not declared"),
])
def test_a_declaration_no_oracle_can_build_is_refused(traits, message):
    with scratch(), pytest.raises(RegistryError, match=re.escape(message)):
        register_kernel(id="bad", fn=lambda q, k, v, mask, causal=False: q, traits=traits)


# -- the config's kernel fields ---------------------------------------------------------------

def test_the_kernel_fields_leave_every_other_config_as_it_was():
    cfg = Config()
    assert (cfg.kv_heads, cfg.n_kv_heads, cfg.window, cfg.softcap, cfg.block) == (4, 4, None, 0.0, 64)
    assert Config.parse(["heads=8"]).kv_heads == 8   # kv_heads follows heads unless set
    assert Config(kv_heads=2).replace(heads=8).kv_heads == 2


@pytest.mark.parametrize("item,value", [
    ("kv_heads=2", ("kv_heads", 2)), ("window=2,0", ("window", (2, 0))), ("window=none", ("window", None)),
    ("softcap=30", ("softcap", 30.0)), ("block=16", ("block", 16)),
])
def test_set_parses_the_kernel_fields(item, value):
    assert getattr(Config.parse([item]), value[0]) == value[1]


@pytest.mark.parametrize("item,message", [
    ("kv_heads=3", "kv_heads=3 must be a positive integer dividing heads=4"),
    ("window=3", "window takes LEFT,RIGHT"), ("window=-1,0", "window=(-1, 0) must be"),
    ("softcap=-1", "softcap=-1.0 must be"), ("block=0", "block=0 must be"),
])
def test_set_refuses_bad_kernel_fields(item, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        Config.parse([item])


def test_check_refuses_a_bad_kernel_field_in_one_line(capsys):
    from harness.cli.main import main

    assert main(["check", "--family", "attention_kernel", "--set", "kv_heads=3"]) == 2
    err = capsys.readouterr().err
    assert "kv_heads=3 must be a positive integer dividing heads=4" in err and err.count("\n") == 1


def test_describe_names_the_kernel_fields_only_when_set():
    assert "H_kv" not in Config().describe()
    assert Config(kv_heads=2, window=(2, 0)).describe().endswith("H_kv=2 window=(2, 0)")


def test_the_cases_follow_the_config():
    cfg = Config(kv_heads=2, window=(1, 0), softcap=3.0)
    self_case = FAMILY.inputs("self", cfg)
    assert self_case["k"].shape[1] == 2 and self_case["window"] == (1, 0) and self_case["softcap"] == 3.0
    long = FAMILY.inputs("long", Config())
    assert min(long["q"].shape[2], long["k"].shape[2]) >= 130   # crosses 64- and 128-wide blocks
    assert FAMILY.inputs("mqa", Config())["k"].shape[1] == 1


# -- register_kernel --------------------------------------------------------------------------

def test_register_kernel_takes_only_the_cases_its_function_can():
    with scratch():
        plain = register_kernel(id="plain", fn=lambda q, k, v, mask: q, traits={})
        lengths = register_kernel(id="lengths", fn=lambda q, k, v, lengths, causal=False: q,
                                  mask="lengths", traits={"causal": "top_left"})
    assert "causal" not in plain.traits["cases"] and "fully_masked" in plain.traits["cases"]
    assert "softcap" not in plain.traits["cases"] and "random_mask" not in lengths.traits["cases"]
    assert "causal_pad" in lengths.traits["cases"]
    assert plain.supports(Config(softcap=2.0)) == "softcap set by the config, and the function takes no softcap"
    with scratch(), pytest.raises(RegistryError, match="layout 'BTHD'"):
        register_kernel(id="bad", fn=lambda q, k, v, mask: q, layout="BTHD", traits={})



def softmax_additive(q, k, v, bias):
    """Softmax over the scores plus the additive mask it is given."""
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    return (q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5 + bias).softmax(-1) @ v


def softmax_additive_zeroed(q, k, v, bias):
    """The same, its NaN rows (no key) zeroed after the softmax: the NaN stays in the backward."""
    return softmax_additive(q, k, v, bias).nan_to_num(0.0)


@pytest.mark.parametrize("mask,fn,traits,ok", [
    ("additive", softmax_additive, {"fully_masked_row": "NaN"}, True),
    ("additive_min", softmax_additive, {}, True),
    ("additive", softmax_additive_zeroed, {"fully_masked_row": "zeros"}, True),
    ("additive", softmax_additive_zeroed, {}, False),
], ids=["additive-NaN", "additive_min-mean-of-V", "additive-zeroed-declared", "additive-zeroed-undeclared"])
def test_the_mask_form_gives_the_mask_method(mask, fn, traits, ok):
    """mask='additive' is an additive -inf bias (mask_method additive_bias: a row without keys
    is NaN, and so are its gradients), 'additive_min' a finfo.min one (additive_finfo_min: the
    mean of V, the uniform softmax's gradient), unless the traits declare a method: correct
    kernels agree on fully_masked with no mask_method declared; a row zeroed but declared as
    the method's NaN is caught."""
    from harness.check.spec import SpecChecker

    with scratch():
        variant = register_kernel(id="additive", fn=fn, mask=mask, traits={**traits, "cases": ("fully_masked",)})
        result = SpecChecker(ONE_CONFIG).check(variant, "default", "fully_masked", "float64")
    assert variant.traits["mask_method"] == {"additive": "additive_bias", "additive_min": "additive_finfo_min"}[mask]
    assert result.ok is ok, result.note
    with scratch():
        declared = register_kernel(id="additive", fn=fn, mask=mask, traits={"mask_method": "bool_fill_-inf"})
    assert declared.traits["mask_method"] == "bool_fill_-inf"

def test_packed_layouts_take_the_cases_one_tensor_can_hold():
    """qkvpacked stacks q, k, v on one axis: only self-attention over as many K/V heads as
    query heads fits (T = S); kvpacked stacks k and v only, so every case fits."""
    seen = {}

    def qkv_fn(qkv, mask, causal=False):
        seen["qkv"] = tuple(qkv.shape)
        return qkv[:, :, 0].clone()  # a new tensor: a view of an input is refused as an answer

    def kv_fn(q, kv, mask):
        seen["kv"] = (tuple(q.shape), tuple(kv.shape))
        return q.clone()

    with scratch():
        qkv = register_kernel(id="qkv", fn=qkv_fn, layout="qkvpacked", traits={"causal": "top_left"})
        kv = register_kernel(id="kv", fn=kv_fn, layout="kvpacked", traits={})
    assert qkv.traits["cases"] == ("self", "causal")              # no window option: no window_causal
    assert "cross" in kv.traits["cases"] and "gqa" in kv.traits["cases"]
    cfg = Config(heads=4, kv_heads=2)
    assert "one packed QKV tensor holds as many K/V heads" in qkv.supports(cfg) and not kv.supports(cfg)
    gqa = FAMILY.inputs("gqa", Config())
    B, H, T, d = gqa["q"].shape
    S, H_kv = gqa["k"].shape[2], gqa["k"].shape[1]
    out = kv.call(kv.build(Config()), gqa)
    assert seen["kv"] == ((B, T, H, d), (B, S, 2, H_kv, d)) and out.shape == (B, H, T, d)
    self_case = FAMILY.inputs("self", Config())
    qkv.call(qkv.build(Config()), self_case)
    assert seen["qkv"] == (B, T, 3, H, d)


def _readme_kernel_block() -> str:
    text = (ROOT / "docs" / "kernels.md").read_text()
    section = text.split("## Register it", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_manual_kernel_example_is_the_example_file_in_at_most_10_lines():
    code = _readme_kernel_block()
    example = (ROOT / "examples" / "my_kernel.py").read_text()
    assert code.strip() in example
    lines = [ln for ln in code.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert len(lines) <= 10, f"{len(lines)} lines"


def test_the_readme_kernel_example_meets_its_spec():
    load_packs()
    with scratch():
        added = load_file(ROOT / "examples" / "my_kernel.py")
        report = check_all(["attention_kernel"], ONE_CONFIG, "cpu", ["float32"], variants=[v.key for v in added])
    assert report.specs and not report.failures


def test_a_variants_file_imports_a_helper_beside_it(tmp_path):
    (tmp_path / "kernel_helpers_21.py").write_text("def attend(q, k, v, mask):\n    return q\n")
    (tmp_path / "mine.py").write_text(
        "from harness import register_kernel\nfrom kernel_helpers_21 import attend\n"
        "register_kernel(id='helped', fn=attend, traits={})\n")
    try:
        with scratch():
            assert [v.id for v in load_file(tmp_path / "mine.py")] == ["helped"]
    finally:
        sys.modules.pop("kernel_helpers_21", None)
        sys.path.remove(str(tmp_path))


# -- the wrong kernels and the controls ------------------------------------------------------------

@pytest.fixture(scope="module")
def wrong():
    load_packs()   # variants.kernels registers outside the scratch registry
    with scratch():
        added = load_file(WRONG_FILE)
        module = next(m for m in sys.modules.values() if getattr(m, "__file__", None) == str(WRONG_FILE))
        report = check_all(["attention_kernel"], ONE_CONFIG, "cpu", ["float32"], variants=[v.key for v in added])
    return report, module


def _failures(report, vid):
    return ([s for s in report.specs if s.variant == vid and not s.ok]
            + [g for g in report.gradchecks if g.variant == vid and not g.ok])


@pytest.mark.parametrize("vid", ["wrong_window_off_by_one", "wrong_causal_swapped", "wrong_softcap_dropped",
                                 "wrong_heads_tiled", "wrong_no_rescale", "wrong_no_max_subtraction",
                                 "wrong_block_drops_last_key"])
def test_every_wrong_kernel_is_caught_on_the_case_that_shows_its_mistake(wrong, vid):
    report, module = wrong
    case, mistake = module.WRONG[vid]
    failed = {s.case for s in _failures(report, vid)}
    assert case in failed, f"{vid} ({mistake}) escaped on {case}; failed on {sorted(failed)}"
    assert "self" not in failed   # a one-convention mistake: the plain case still agrees


@pytest.mark.parametrize("vid,named", [
    ("wrong_window_off_by_one", "reads as window left +1 (declared window='as called')"),
    ("wrong_causal_swapped", "reads as causal='bottom_right' (declared causal='top_left')"),
    ("wrong_softcap_dropped", "reads as the softcap ignored (declared softcap='as called')"),
    ("wrong_heads_tiled", "reads as gqa_grouping='tiled' (declared gqa_grouping='consecutive')"),
    ("wrong_no_rescale", "no single convention read another way explains it on long"),
])
def test_check_names_each_wrong_kernels_mistake(wrong, vid, named):
    report, _ = wrong
    with scratch():
        load_file(WRONG_FILE)
        line = explain_mistake("attention_kernel", vid, report, ONE_CONFIG)
    assert line.startswith(named), line


MISTAKES = {
    "wrong_window_off_by_one": "reads as window left +1 (declared window='as called')",
    "wrong_causal_swapped": "reads as causal='bottom_right' (declared causal='top_left')",
    "wrong_softcap_dropped": "reads as the softcap ignored (declared softcap='as called')",
    "wrong_heads_tiled": "reads as gqa_grouping='tiled' (declared gqa_grouping='consecutive')",
    "wrong_no_rescale": "no single convention read another way explains it on long",
}


@pytest.mark.parametrize("vid", sorted(MISTAKES))
def test_diff_names_each_wrong_kernels_mistake(vid):
    """``diff`` names the mistake as ``check`` does, from the variant's own float64 runs
    over every case of the config (no check report needed)."""
    from harness.registry import get_variant
    from harness.trace.kernel_explain import name_mistakes

    load_packs()
    with scratch():
        load_file(WRONG_FILE)
        named = name_mistakes("attention_kernel", [get_variant("attention_kernel", vid)], CONFIG_MATRIX["default"])
    assert set(named) == {vid} and named[vid].startswith(MISTAKES[vid]), named


@pytest.mark.slow  # the whole diff (trace, ops, paths); the naming itself is tested above
def test_the_diff_command_prints_the_mistake(capsys):
    from harness.cli.main import main

    load_packs()
    with scratch():
        assert main(["diff", "attention_kernel", "wrong_heads_tiled", "eager", "--case", "gqa",
                     "--variants", str(WRONG_FILE)]) == 0
    printed = capsys.readouterr().out
    assert f"mistake of wrong_heads_tiled: {MISTAKES['wrong_heads_tiled']}" in printed
    assert "mistake of eager" not in printed   # a kernel that meets its spec has none


def test_the_missing_rescale_shows_only_beyond_one_key_block(wrong):
    """On the causal long case and on cross@long, the one a kernel without a causal option
    crosses its blocks on (wrong_block_drops_last_key is caught there alone); a softmax
    without its max subtracted only on large logits, in float32 (float64's exp reaches 709)."""
    report, _ = wrong
    assert {s.case for s in _failures(report, "wrong_no_rescale")} == {"long", "cross@long"}
    assert {s.case for s in _failures(report, "wrong_block_drops_last_key")} == {"cross@long"}
    assert {(s.case, s.dtype) for s in _failures(report, "wrong_no_max_subtraction")} == {("self@large", "float32")}


def test_the_list_covers_every_wrong_kernel(wrong):
    report, module = wrong
    ids = {s.variant for s in report.specs}
    assert {v for v in ids if v.startswith("wrong_")} == set(module.WRONG)


@pytest.mark.parametrize("vid", ["control_block16", "control_blocked_mask_only", "control_bshd", "control_lengths",
                                 "control_varlen_bottom_right", "control_qkvpacked", "control_kvpacked"])
def test_controls_stay_equivalent(wrong, vid):
    report, _ = wrong
    assert [s for s in report.specs if s.variant == vid]
    assert not _failures(report, vid)
    assert all(d.ok for d in report.dropouts if d.variant == vid)


@pytest.mark.filterwarnings("ignore:.*flex_attention called without torch.compile")
def test_flex_forward_meets_the_oracle_on_cpu():
    """flex_attention's backward is not implemented on CPU (torch 2.13), so the check skips
    ``flex`` there with that reason; its forward (eager, no torch.compile) is held to the
    float64 oracle here, on every case, at the family's float64 bound."""
    from harness.check import precision as P
    from harness.registry import REGISTRY

    load_packs()
    variant, cfg = REGISTRY["attention_kernel/flex"], CONFIG_MATRIX["default"]
    module = variant.build(cfg).eval()
    traits = FAMILY.semantic_traits(variant.traits)
    for case in FAMILY.cases:
        inputs = FAMILY.inputs(case.name, cfg)
        with torch.no_grad():
            got = variant.call(module, inputs)
            want = FAMILY.oracle(traits, cfg, {}, inputs, torch.float64)
        torch.testing.assert_close(got, want, rtol=P.FLOAT64_RTOL, atol=P.FLOAT64_ATOL,
                                   msg=lambda m, case=case.name: f"{case}: {m}")


def test_cpu_flash_backward_on_a_row_whose_keys_carry_a_finite_bias_is_seen():
    """A finding, torch 2.13 on CPU: with a 0 / finfo.min additive mask, a row whose every
    key carries the bias is the mean of V in both SDPA backends (the forward agrees), but the
    CPU flash backward sends S times the uniform softmax's gradient into dQ and dK (measured:
    exactly 2, 3, 5, 8 times for S = 2, 3, 5, 8; the math backend matches the definition).
    The log-sum-exp it saves, finfo.min + log(S), rounds to finfo.min, so its backward
    recomputes probabilities of 1 instead of 1/S. Declared as the definition, the flash
    backend is caught on the fully masked case only, in its gradients only."""
    from torch.nn.attention import SDPBackend

    from variants.kernels import sdpa

    load_packs()
    traits = {"mask_method": "additive_finfo_min", "cases": ("self", "cross", "fully_masked")}
    with scratch():
        for backend in (SDPBackend.MATH, SDPBackend.FLASH_ATTENTION):
            register_kernel(id=f"finfo_min_{backend.name.lower()}", mask="additive_min", traits=traits,
                            fn=lambda q, k, v, mask, b=backend: sdpa(q, k, v, mask, backend=b))
        report = check_all(["attention_kernel"], ONE_CONFIG, "cpu", ["float32"],
                           variants=["attention_kernel/finfo_min_math", "attention_kernel/finfo_min_flash_attention"])
    bad = {(s.variant, s.case, s.dtype): s for s in report.specs if not s.ok}
    assert not [s for s in report.specs if s.variant == "finfo_min_math" and not s.ok]
    assert set(bad) == {("finfo_min_flash_attention", "fully_masked", "float64"),
                        ("finfo_min_flash_attention", "fully_masked", "float32")}
    worst = bad[("finfo_min_flash_attention", "fully_masked", "float64")]
    assert worst.worst in ("grad:q", "grad:k")
    assert next(t for t in worst.tensors if t.name == "output").verdict == "equivalent"


def test_a_kernel_whose_backward_is_not_implemented_is_checked_forward_only():
    """flex_attention's CPU backward raises NotImplementedError: such a kernel's forward is
    still held to its oracle, each row saying it is forward only, and the check goes on;
    a backward that fails otherwise stays an error row (tests/test_kernel_false_alarms.py)."""
    from variants.kernels import eager

    class NoBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, out):
            return out.clone()

        @staticmethod
        def backward(ctx, grad):
            raise NotImplementedError("no backward on this device")

    load_packs()
    with scratch():
        register_kernel(id="no_backward", fn=lambda q, k, v, mask: NoBackward.apply(eager(q, k, v, mask)),
                        traits={"causal": "none"}, source="test")
        report = check_all(["attention_kernel"], ONE_CONFIG, "cpu", ["float32"], extras=False)
    mine = [s for s in report.specs if s.variant == "no_backward"]
    assert mine and all(s.ok and "forward only: no backward on cpu (NotImplementedError: no backward on this "
                        "device)" in s.note for s in mine), [(s.case, s.verdict, s.note) for s in mine if not s.ok]
    assert all(s.ok for s in report.specs if s.variant == "eager")


@pytest.mark.parametrize("gpu", [False, True])
def test_kernels_the_check_cannot_run_are_skipped_with_the_reason(monkeypatch, gpu):
    """flex_attention eager is registered and skipped with its reason, with or without a GPU
    (flex_compiled is the one judged on CUDA); the CUDA-only backends declare their device,
    whatever this machine has (tests/test_half_kernels.py checks them)."""
    from harness.registry import REGISTRY

    load_packs()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    for vid in ("sdpa_flash", "sdpa_efficient", "sdpa_cudnn", "flex_compiled"):
        assert REGISTRY[f"attention_kernel/{vid}"].supports(Config()) is None
        assert "runs on cuda only" in REGISTRY[f"attention_kernel/{vid}"].refuses(Config(), "cpu")
    flex = REGISTRY["attention_kernel/flex"].supports(Config())
    assert ("kernel-path recorder" in flex) if gpu else ("no backward on CPU" in flex)
