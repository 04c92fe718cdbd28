"""False alarms a kernel once raised, each checked gone: a kernel that computes in float32
inside and declares it (gradcheck and ``--pairs all``), layout hints on a case whose output
does not read the weights, a backward-only difference localised in the backward, ``map``
over every case, and one variant's failing backward as its own error row
(tests/test_kernels.py: ``test_a_kernel_whose_backward_fails_is_its_own_error_row``)."""

from __future__ import annotations

import pytest
import torch

from harness import register_kernel
from harness.base.config import CONFIG_MATRIX, Config
from harness.base.verdicts import Verdict
from harness.check.api import check_all
from harness.check.extras import gradcheck_variant
from harness.families.catalog import get_family
from harness.registry import applicable, get_variant, load_packs, scratch
from harness.trace.hints import layout_hints

ONE_CONFIG = {"default": CONFIG_MATRIX["default"]}


def eager_in_float32(q, k, v, mask, causal=False, window=None, softcap=0.0):
    """The eager kernel computed in float32 whatever the inputs' dtype (a kernel that upcasts
    half inputs to float32 and never to float64)."""
    from variants.kernels import eager

    return eager(q.float(), k.float(), v.float(), mask, causal, window, softcap).to(q.dtype)


def _register(internal: bool):
    traits = {"causal": "top_left", **({"internal_dtype": "float32"} if internal else {})}
    return register_kernel(id="eager_f32", fn=eager_in_float32, traits=traits, source="test")


@pytest.mark.parametrize("internal", [True, False])
def test_gradcheck_honours_a_declared_float32_compute(internal):
    """Declared, gradcheck takes float32's step and tolerance and passes; undeclared, the
    float64 defaults see float32's rounding as a wrong backward (so the test can fail)."""
    load_packs()
    with scratch():
        result = gradcheck_variant(_register(internal))
    assert result.ok == internal, result.note
    if not internal:  # the row names the cause: the forward's rounding, not the backward
        assert "declare internal_dtype='float32'" in result.note and "disagrees" not in result.note, result.note


def test_a_float32_compute_left_out_is_named_as_internal_dtype():
    """The mistake line reads an undeclared float32 compute as ``internal_dtype='float32'``."""
    from harness.trace.kernel_explain import convention_fits

    load_packs()
    with scratch():
        fits = convention_fits(_register(internal=False), [(CONFIG_MATRIX["default"], "self")])
    assert any(f.startswith("internal_dtype='float32'") for f in fits), fits


def test_pairs_all_honours_a_declared_float32_compute_and_the_counts_agree():
    """Measured pair by pair, the float32-inside kernel and the eager reference agree at
    float32's tolerance (its spec: less precise, declared): no '!' and no contradiction, and
    the summary's count is the number of contradicting rows (none)."""
    load_packs()
    with scratch():
        _register(internal=True)
        report = check_all(["attention_kernel"], ONE_CONFIG, "cpu", ["float32"], pairs="all", extras=False,
                           variants=["attention_kernel/eager_f32", "attention_kernel/eager"])
    mine64 = [s for s in report.specs if s.variant == "eager_f32" and s.dtype == "float64"]
    assert mine64 and all(s.ok for s in mine64)
    assert any(s.verdict == Verdict.LESS_PRECISE for s in mine64)
    pairs = [p for p in report.pairs if "eager_f32" in (p.a, p.b) and "eager" in (p.a, p.b)]
    eager = get_variant("attention_kernel", "eager")                         # not ALiBi's cases
    assert len(pairs) == len([c for c in get_family("attention_kernel").cases if applicable(eager, c.name)]) * 2
    assert all(p.ok and p.verdict.agrees for p in pairs), [(p.case, p.dtype, p.verdict) for p in pairs if not p.ok]
    assert report.failures == [] and report.as_dict()["contradictions"] == 0


def test_a_measured_pair_that_contradicts_is_counted():
    """The count and the '!' agree the other way too: a pair measured apart beyond what its
    two specs allow while both specs hold is a contradiction of its own, counted once; when
    a spec fails, that spec is the one counted."""
    from harness.check.results import CheckReport, PairResult, SpecResult

    def spec(vid, ok=True):
        return SpecResult(family="f", variant=vid, config="c", case="k", dtype="float64", device="cpu",
                          verdict="equivalent", expected="equivalent", ok=ok, err=0.0, ref_err=0.0, ratio=0.0,
                          worst="", reference="", path="")
    row = dict(family="f", a="x", b="y", case="k", dtype="float64", device="cpu", config="c", path_a="", path_b="",
               noise_ratio=0.0, grad_noise_ratio=0.0, verdict="different", expected="equivalent", reason="",
               max_abs=1.0, max_rel=1.0, grad_verdict="different", grad_max_abs=1.0, worst_grad="", note="")
    report = CheckReport({}, ["float64"], specs=[spec("x"), spec("y")], pairs=[PairResult(**row, ok=False)])
    assert len(report.failures) == 1
    report.specs[0] = spec("x", ok=False)       # then the spec's failure is the one counted
    assert len(report.failures) == 1 and isinstance(report.failures[0], SpecResult)


def test_no_layout_hint_where_the_output_does_not_read_the_weights():
    """B = 1, T = 1 and the one query row sees no key: torch_mha's output is its output
    bias whatever the projections, so every transposed or reordered weight 'fixed' the pair
    (nine hints); a hint now needs outputs that differ and a layout that makes them agree."""
    load_packs()
    family, cfg = get_family("attention"), Config(batch=1, tgt_len=1)
    a, b = get_variant("attention", "torch_mha"), get_variant("attention", "torch_sdpa")
    weights = family.canonical_weights(cfg)
    for case in ("fully_masked", "self"):
        assert layout_hints(family, a, b, case, cfg, weights=weights) == ([], 0)
    # where the layouts are distinguishable the hint still comes (tests/test_diff.py:
    # test_a_transposed_square_weight_is_named_by_the_layout_hint)


def test_a_backward_only_difference_is_localised_in_the_backward():
    """SDPA's CPU flash backward under a 0 / finfo.min mask (tests/test_kernels.py): the
    outputs agree, dQ and dK do not. ``diff`` used to blame 'ops outside the traced
    sub-modules' and give no first divergence; it now names the first backward step whose
    gradient differs, by op, and where the two backward graphs part before it."""
    from torch.nn.attention import SDPBackend

    from harness.trace.pairs import diff_pair
    from harness.trace.render import summary_text
    from variants.kernels import sdpa

    load_packs()
    traits = {"mask_method": "additive_finfo_min", "cases": ("self", "fully_masked")}
    with scratch():
        for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.MATH):
            register_kernel(id=f"finfo_min_{backend.name.lower()}", mask="additive_min", traits=traits,
                            fn=lambda q, k, v, mask, b=backend: sdpa(q, k, v, mask, backend=b))
        d = diff_pair("attention_kernel", "finfo_min_flash_attention", "finfo_min_math", "fully_masked",
                      CONFIG_MATRIX["default"], "float64", hints=False)
    assert d.verdict == Verdict.DIFFERENT and d.where[0].verdict in (Verdict.EQUIVALENT, Verdict.IDENTICAL)
    back = d.backward
    assert back is not None and back.op in ("AccumulateGrad(q)", "AccumulateGrad(k)")
    assert back.parted is not None and back.parted[0] == "ScaledDotProductFlashAttentionForCpuBackward0"
    assert "SafeSoftmaxBackward0" in back.parted[1] or "..." in back.parted[1]
    text = summary_text(d)
    assert text.startswith("first divergence (backward only): the outputs agree; the backward differs first at "
                           "AccumulateGrad(")
    assert "ops outside" not in text


def softcap_in_place(q, k, v, mask, softcap=0.0):
    """flash-attention's test reference's softcap path: the tanh output scaled in place,
    which autograd refuses in the backward (tanh saves its output)."""
    s = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    if softcap:
        s = torch.tanh(s / softcap)
        s *= softcap
    return torch.softmax(s.masked_fill(~mask, float("-inf")), -1) @ v


def test_one_kernels_failing_backward_is_its_own_error_row():
    """That reference's backward raises on the softcap case: the error is that variant's row
    on that case (with the reason), its other cases and every other variant are checked,
    and nothing ends the run."""
    load_packs()
    with scratch():
        register_kernel(id="softcap_in_place", fn=softcap_in_place, source="test",
                        traits={"causal": "top_left", "cases": ("self", "softcap")})
        report = check_all(["attention_kernel"], ONE_CONFIG, "cpu", ["float32"], extras=False,
                           variants=["attention_kernel/softcap_in_place", "attention_kernel/eager"])
    mine = {(s.case, s.dtype): s for s in report.specs if s.variant == "softcap_in_place"}
    assert all(mine[("softcap", d)].verdict == "error" and "backward: RuntimeError" in mine[("softcap", d)].note
               for d in ("float64", "float32"))
    assert mine[("self", "float64")].ok and mine[("self", "float32")].ok
    assert all(s.ok for s in report.specs if s.variant == "eager")


def additive_bias_reference(q, k, v, mask, causal=False):
    """flash-attention's test reference's masking: a 0 / -inf bias added to the scores, so a
    row without keys is NaN and its NaN reaches dQ and dK; the other rows are untouched."""
    from variants.kernels import repeat_kv

    k, v = repeat_kv(k, q.shape[1]), repeat_kv(v, q.shape[1])
    bias = torch.zeros(mask.shape, dtype=q.dtype).masked_fill(~mask, float("-inf"))
    if causal:
        T, S = q.shape[2], k.shape[2]
        bias = bias.masked_fill(~torch.ones(T, S, dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5 + bias, -1) @ v


def test_a_nan_gradient_in_a_dead_row_stays_in_that_row():
    """The oracle's ``fully_masked_grad: NaN`` sends NaN to the scores of the rows without keys
    only: the live rows' gradients are finite and those of the definition over their keys."""
    from harness.families.kernel_oracle import kernel_attention

    gen = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 1, n, 3, generator=gen, dtype=torch.float64, requires_grad=True) for n in (3, 4, 4))
    mask = torch.ones(1, 3, 4, dtype=torch.bool)
    mask[0, 1] = False                                                 # query 1 sees no key
    traits = get_family("attention_kernel").semantic_traits(
        {"causal": "top_left", "mask_method": "additive_bias"})
    call = {"q": q, "k": k, "v": v, "mask": mask, "key_pad": torch.ones(1, 4, dtype=torch.bool),
            "causal": False, "window": None, "softcap": 0.0}
    out = kernel_attention(traits, call)
    out.nan_to_num().sum().backward()
    assert q.grad[0, 0, 1].isnan().all() and k.grad.isnan().all()      # the dead row's NaN reaches every key
    live = [0, 2]
    assert torch.isfinite(q.grad[0, 0, live]).all()
    q2 = q.detach().clone().requires_grad_()
    (torch.softmax(q2[:, :, live] @ k.detach().transpose(-2, -1) / 3 ** 0.5, -1) @ v.detach()).sum().backward()
    torch.testing.assert_close(q.grad[0, 0, live], q2.grad[0, 0, live], rtol=1e-12, atol=1e-12)


def test_an_additive_minus_inf_kernel_is_equivalent_on_rows_without_keys():
    """flash-attention's reference (a 0 / -inf bias) declared ``additive_bias``: every case,
    the rows without keys among them, is equivalent in float64 (a wrong declaration, the
    repaired rows' ``zeros``, stays caught on the same case)."""
    load_packs()
    with scratch():
        register_kernel(id="additive_ref", fn=additive_bias_reference, mask="bool", source="test",
                        traits={"causal": "top_left", "mask_method": "additive_bias",
                                "cases": ("self", "cross", "fully_masked")})
        register_kernel(id="additive_ref_said_zeros", fn=additive_bias_reference, mask="bool", source="test",
                        traits={"causal": "top_left", "mask_method": "additive_bias", "fully_masked_row": "zeros",
                                "fully_masked_grad": "none", "cases": ("fully_masked",)})
        report = check_all(["attention_kernel"], ONE_CONFIG, "cpu", ["float32"], extras=False,
                           variants=["attention_kernel/additive_ref", "attention_kernel/additive_ref_said_zeros"])
    mine = {(s.variant, s.case, s.dtype): s for s in report.specs}
    assert all(s.ok and s.verdict == Verdict.EQUIVALENT for (v, c, d), s in mine.items()
               if v == "additive_ref" and d == "float64"), [(k, s.note) for k, s in mine.items() if not s.ok]
    assert mine[("additive_ref", "fully_masked", "float64")].verdict == Verdict.EQUIVALENT
    assert mine[("additive_ref_said_zeros", "fully_masked", "float64")].verdict == Verdict.DIFFERENT
