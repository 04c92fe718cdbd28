"""Advice offered only on its evidence: a module that keeps state between calls is said to
(no convention offered; the printed ``diff`` command shows it); every failing variant gets its
line; a gradcheck row names a NaN forward as the forward's."""

import torch
from torch import nn

from harness import Param, Zero, register
from harness.base.config import CONFIG_MATRIX
from harness.check.api import check_all
from harness.check.spec import STATE_KEPT
from harness.registry import get_variant, scratch
from harness.trace.explain import explain_failures
from harness.trace.kernel_explain import convention_fits
from harness.trace.pairs import diff_pair


class CausalInside(nn.Module):
    """Self-attention that builds its causal mask itself; ``cached`` keeps the first call's."""

    def __init__(self, cfg, cached):
        super().__init__()
        self.h, self.cached, self.mask = cfg.heads, cached, None
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(cfg.d_model, cfg.d_model, bias=False)
                                                              for _ in range(4))

    def forward(self, x, mask=None):
        B, T, D = x.shape
        d = D // self.h
        q, k, v = (p(x).view(B, T, self.h, d).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        if self.cached:
            self.mask = causal if self.mask is None else self.mask
            causal = self.mask[:T, :T]
        keep = causal if mask is None else mask[:, None]
        s = (q @ k.transpose(-2, -1) / d ** 0.5).masked_fill(~keep, float("-inf"))
        p = s.softmax(-2 if self.cached is None else -1)  # None: softmax over the queries
        return self.o_proj((p @ v).transpose(1, 2).reshape(B, T, D))


def _register(vid, cached):
    register(id=vid, family="attention", source="tests", summary="causal mask built inside",
             build=lambda cfg: CausalInside(cfg, cached), call=lambda m, i: m(i["query"]),
             param_map={**{f"{c}.weight": Param(f"{c}_proj.weight") for c in "qkvo"},
                        **{f"{c}.bias": Zero() for c in "qkvo"}},
             traits={"sublayer": "attention", "fully_masked_row": "zeros", "cases": ("causal_only",)})


def test_state_kept_between_calls_is_said_and_reproduced_and_no_convention_is_offered():
    configs = {"default": CONFIG_MATRIX["default"]}
    with scratch():
        _register("cached_mask", True)
        _register("fresh_mask", False)
        report = check_all(["attention"], configs, "cpu", [], variants=["attention/cached_mask"], extras=False)
        text = explain_failures(report, configs)
        diff = diff_pair("attention", "torch_mha", "cached_mask", "causal_only", configs["default"], "float64")
        control = diff_pair("attention", "torch_mha", "fresh_mask", "causal_only", configs["default"], "float64")
        # the evidence rule: a fresh build meets its declaration there, so no reading is offered
        fits = convention_fits(get_variant("attention", "cached_mask"), [(configs["default"], "causal_only")])
    bad = [s for s in report.specs if s.variant == "cached_mask" and s.dtype == "float64" and not s.ok]
    assert bad and all(s.depends_on_earlier_calls and s.worst == "output" for s in bad), bad
    assert f"cached_mask: {STATE_KEPT} on causal_only" in text, text
    assert "reads as" not in text and "computation mistake" not in text, text
    assert "reproduce: python -m harness diff attention torch_mha cached_mask --case causal_only" in text, text
    assert "called first on" in diff.stateful["cached_mask"], diff.stateful  # the printed command shows it
    assert not control.stateful and fits == []


def test_every_failing_variant_gets_its_mistake_line_and_the_trace_cap_is_said():
    """The one-line diagnosis is given for every failing variant, not the first few; the
    traces (seconds each) stop at ``limit``, and the line that says so counts the rest."""
    import math

    from harness.base.verdicts import Verdict
    from harness.check.results import CheckReport, SpecResult
    from harness.trace.explain import Mistakes

    class Named(Mistakes):
        def line(self, family, variant):
            return f"named {variant}"

    configs = {"default": CONFIG_MATRIX["default"]}
    report = CheckReport(configs, ["float64"])
    report.specs = [SpecResult(family="attention", variant=f"v{i}", config="default", case="self", dtype="float64",
                               device="cpu", verdict=Verdict.DIFFERENT, expected=Verdict.EQUIVALENT, ok=False,
                               err=1.0, ref_err=math.nan, ratio=math.nan, worst="output", reference="torch_mha",
                               path="-") for i in range(12)]
    text = explain_failures(report, configs, limit=0, mistakes=Named(report, configs))
    assert all(f"attention/v{i}: named v{i}" in text for i in range(12)), text
    assert "traced above: the first 0 of 12 failing (variant, case)" in text, text


def test_gradcheck_on_a_forward_that_is_nan_names_the_forward():
    """Softmax over the queries: NaN where a key column is all padding; the backward is
    autograd's own, so the gradcheck row blames the forward's NaN, not the backward."""
    from harness.check.extras import gradcheck_variant

    with scratch():
        register(id="over_queries", family="attention", source="tests", summary="softmax over the queries",
                 build=lambda cfg: CausalInside(cfg, None), call=lambda m, i: m(i["query"], i["mask"]),
                 param_map={**{f"{c}.weight": Param(f"{c}_proj.weight") for c in "qkvo"},
                            **{f"{c}.bias": Zero() for c in "qkvo"}},
                 traits={"sublayer": "attention", "fully_masked_row": "zeros", "cases": ("self",)})
        result = gradcheck_variant(get_variant("attention", "over_queries"))
    assert not result.ok and result.note.startswith("the forward gives NaN/inf"), result.note


def test_a_kv_swap_is_traced_where_k_and_v_have_their_own_inputs_and_hinted():
    """On self-attention (query = key = value) a K/V swap in the map leaves the projections
    equal; the trace follows it to a case with K and V apart, where k's wiring differs, and
    the layout hint names the swap. The same swap inside the module gets the hint too."""
    import importlib

    from harness.porting.entries import linear_entries

    wrong = importlib.import_module("tests.wrong_variants")
    cfg = CONFIG_MATRIX["default"]
    with scratch():
        for vid, entries, mistake in (("honest", {"q": "q", "k": "k", "v": "v", "o": "o"}, None),
                                      ("kv_map", {"q": "q", "k": "v", "v": "k", "o": "o"}, None),
                                      ("kv_module", {"q": "q", "k": "k", "v": "v", "o": "o"}, "swapped_kv")):
            register(id=vid, family="attention", source="tests", summary=vid,
                     build=lambda c, m=mistake: wrong.Attention(c.d_model, c.heads, m),
                     call=lambda m, i: m(i["query"], i["key"], i["value"], i["mask"]),
                     param_map=linear_entries(entries), traits=wrong.HONEST)
        by_map = diff_pair("attention", "honest", "kv_map", "self", cfg, "float64")
        in_module = diff_pair("attention", "honest", "kv_module", "self", cfg, "float64", attribution=False)
    assert "q, k, v agree" in by_map.first.text  # one tensor in three roles: the projections agree here
    assert by_map.apart.startswith("on self_kv") and "wiring differs at k" in by_map.apart, by_map.apart
    assert any("k and v look swapped" in h for h in by_map.hints), by_map.hints
    assert any("k and v look swapped" in h for h in in_module.hints), in_module.hints


def test_padded_positions_are_left_out_and_positions_show_on_real_tokens():
    """A padded query position's output is unspecified: a correct block that zeroes its pad
    rows is equivalent; a block that counts positions itself (ignores the ids it is given) is
    caught, on the gapped case whose ids are not evenly spaced, where no row is padding."""
    from harness.base.verdicts import Verdict

    ref = get_variant("llama_block", "llama_block")

    def ignoring(m, i):
        b, t = i["positions"].shape
        return ref.call(m, {**i, "positions": torch.arange(t).expand(b, t)})

    def zeroing(m, i):
        return ref.call(m, i) * i["pad"][..., None].to(i["x"].dtype)

    with scratch():
        for vid, call in (("positions_ignored", ignoring), ("pad_rows_zeroed", zeroing)):
            register(id=vid, family="llama_block", source="tests", summary=vid, build=ref.build, call=call,
                     param_map=ref.param_map, traits=dict(ref.traits))
        report = check_all(["llama_block"], {"default": CONFIG_MATRIX["default"]}, "cpu", ["float64"], extras=False,
                           variants=["llama_block/positions_ignored", "llama_block/pad_rows_zeroed"])
    verdicts = {(s.variant, s.case): s.verdict for s in report.specs}
    assert {c for (v, c), x in verdicts.items() if v == "positions_ignored" and x == Verdict.DIFFERENT} == {"gapped"}
    assert all(x.agrees for (v, _), x in verdicts.items() if v == "pad_rows_zeroed"), verdicts


def test_the_documented_cache_mistakes_are_caught_and_the_control_is_not():
    """examples/cache_bugs.py (docs/models.md): keys cached before RoPE, positions one too far
    after the prefill, a window left to a cache never trimmed: each fails the cache parity;
    the control decodes like the full forward."""
    from harness.registry import load_all, load_packs
    from harness.systems.decoding import check_cache

    load_packs()
    with scratch():
        load_all(["examples/cache_bugs.py"])
        results = {r.variant: r for r in check_cache("llama_model", CONFIG_MATRIX["default"])}
    assert not any(results[v].ok for v in ("cache_appends_before_rotating", "cache_positions_off_by_one",
                                           "cache_not_trimmed_to_window")), results
    assert results["cache_control"].ok and results["llama_model"].ok


class FusedGQA(nn.Module):
    """Self-attention with one fused QKV Linear whose K and V are narrower than Q (GQA, as
    Phi-3's ``qkv_proj``); ``order`` is how the module reads the fused rows."""

    def __init__(self, cfg, order="qkv"):
        super().__init__()
        self.h, self.h_kv, self.d, self.order = cfg.heads, cfg.n_kv_heads, cfg.d_k, order
        self.qkv_proj = nn.Linear(cfg.d_model, (cfg.heads + 2 * cfg.n_kv_heads) * cfg.d_k, bias=False)
        self.o_proj = nn.Linear(cfg.heads * cfg.d_k, cfg.d_model, bias=False)

    def forward(self, x, mask):
        B, T, _ = x.shape
        q, a, b = self.qkv_proj(x).split([self.h * self.d, self.h_kv * self.d, self.h_kv * self.d], dim=-1)
        k, v = (a, b) if self.order == "qkv" else (b, a)
        q = q.view(B, T, self.h, self.d).transpose(1, 2)
        k, v = (t.view(B, T, self.h_kv, self.d).transpose(1, 2).repeat_interleave(self.h // self.h_kv, dim=1)
                for t in (k, v))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None])
        return self.o_proj(y.transpose(1, 2).reshape(B, T, self.h * self.d))


def test_chunk_with_sizes_ports_a_fused_gqa_qkv_and_a_wrong_order_is_caught():
    """``Chunk(..., sizes=(q, kv, kv))``: the unequal blocks of a fused GQA projection; the
    module reading them as Q, K, V meets its oracle on the GQA config, one reading Q, V, K does not."""
    from harness.check.runs import RunCache
    from harness.families.llama import GQA_CONFIG
    from harness.porting.entries import Chunk
    from harness.trace.kernel_explain import meets_spec

    def fused_map(cfg):
        sizes = (cfg.heads * cfg.d_k, cfg.n_kv_heads * cfg.d_k, cfg.n_kv_heads * cfg.d_k)
        return {**{f"{c}.weight": Chunk("qkv_proj.weight", i, sizes=sizes) for i, c in enumerate("qkv")},
                "o.weight": Param("o_proj.weight"), **{f"{c}.bias": Zero() for c in "qkvo"}}

    assert Chunk("w", 1, sizes=(8, 4, 4)).code() == 'Chunk("w", 1, sizes=(8, 4, 4))'
    checker = RunCache(GQA_CONFIG, record=False)
    with scratch():
        for vid, order in (("fused_gqa", "qkv"), ("fused_gqa_wrong_order", "qvk")):
            register(id=vid, family="attention", source="tests", summary=vid,
                     build=lambda c, o=order: FusedGQA(c, o), call=lambda m, i: m(i["query"], i["mask"]),
                     param_map=fused_map, traits={"sublayer": "attention", "fully_masked_row": "NaN",
                                                  "gqa_grouping": "consecutive", "cases": ("self",)})
        right, wrong = (get_variant("attention", v) for v in ("fused_gqa", "fused_gqa_wrong_order"))
        traits = right.family_spec.semantic_traits(right.traits)
        assert meets_spec(right, checker, "self", traits) is True
        assert meets_spec(wrong, checker, "self", traits) is False
