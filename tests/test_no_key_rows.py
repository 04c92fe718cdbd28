"""Rows without keys whose value depends on what emptied them or on the dtype
(``harness.families.no_key_rows``): declared with ``ByCause`` / ``ByDtype``, the oracle gives
each row its declared value; a single value declared where the code depends on the cause or
the dtype is caught; a declaration that cannot happen is refused at load, in one line; the
single-value form reads as before."""

from __future__ import annotations

import math

import pytest
import torch

from harness import ByCause, ByDtype, RegistryError, register, register_kernel
from harness.base.config import CONFIG_MATRIX, Config
from harness.check.spec import SpecChecker
from harness.registry import load_packs, scratch

DEFAULT = {"default": CONFIG_MATRIX["default"]}


# -- a kernel whose rows depend on the cause -------------------------------------------------------

def _skipping(q, k, v, mask, causal=False, window=None, *, align="top_left"):
    """A sliding-window kernel that visits only the keys its causal diagonal and window reach
    (a row that reaches none is never visited: zeros, no gradient) and removes the masked ones
    among them with finfo.min (a row whose reached keys are all masked: the mean of V)."""
    from variants.kernels import attend_mask, repeat_kv

    k, v = repeat_kv(k, q.shape[1]), repeat_kv(v, q.shape[1])
    reach = attend_mask(torch.ones_like(mask), causal, window, align)                # (B, 1, T, S)
    visited = reach.any(-1, keepdim=True)
    s = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~reach, float("-inf"))
    s = s.masked_fill(reach & ~mask, torch.finfo(q.dtype).min).masked_fill(~visited, 0.0)
    return torch.where(visited, s.softmax(-1), 0.0) @ v


SKIPPING = {"mask_method": "bool_fill_finfo_min", "fully_masked_grad": "none"}
BY_CAUSE = ByCause(mask="mean of V", other="zeros")


@pytest.mark.parametrize("align,case", [("top_left", "window_short"), ("bottom_right", "causal_short")])
def test_a_kernel_whose_rows_depend_on_the_cause_is_declarable_and_a_single_value_is_caught(align, case):
    """Declared per cause, the kernel is equivalent where the mask empties rows (the mean of
    V) and where the window or the causal diagonal does (zeros); declared with one value,
    whichever it is, it is caught on the case where the other cause shows."""
    import functools

    load_packs()
    fn = functools.partial(_skipping, align=align)
    with scratch():
        made = {name: register_kernel(id=f"skipping_{name}", fn=fn, source="test",
                                      traits={**SKIPPING, "causal": align, "fully_masked_row": row})
                for name, row in (("right", BY_CAUSE), ("claims_mean", "mean of V"), ("claims_zeros", "zeros"))}
        checker = SpecChecker(DEFAULT)
        right = [checker.check(made["right"], "default", c, d) for c in ("fully_masked", case, "self")
                 for d in ("float64", "float32")]
        claims_mean = checker.check(made["claims_mean"], "default", case, "float64")
        claims_zeros = checker.check(made["claims_zeros"], "default", "fully_masked", "float64")
    assert all(r.ok and r.verdict == "equivalent" for r in right), [(r.case, r.dtype, r.note) for r in right]
    for wrong in (claims_mean, claims_zeros):
        assert not wrong.ok and wrong.verdict == "different", wrong.note


def test_the_oracle_gives_each_row_the_value_of_its_cause():
    """On the window_short case (top-left: its last rows' windows hold no key) with one row's
    keys also masked, the oracle of ByCause(mask=NaN, window=zeros) has NaN on the masked
    row and zeros on the window's, by the first cause that empties each."""
    from harness.families.kernel import ATTENTION_KERNEL
    from harness.families.kernel_oracle import attention_kernel

    cfg = CONFIG_MATRIX["default"]
    inputs = ATTENTION_KERNEL.inputs("window_short", cfg)
    inputs["mask"][0, 1] = False                       # row 1: its window has keys, all masked
    traits = ATTENTION_KERNEL.semantic_traits({"causal": "top_left", "mask_method": "bool_fill_-inf",
                                               "fully_masked_row": ByCause(mask="NaN", other="zeros")})
    out = attention_kernel(traits, cfg, {}, inputs, torch.float64)        # (B, H, T, d)
    T, S = inputs["q"].shape[2], inputs["k"].shape[2]
    assert bool(out[0, :, 1].isnan().all())
    assert bool((out[:, :, S + 1:] == 0).all()) and T > S + 1      # keys i-1 .. i: none past S
    assert bool(out[1:, :, :S + 1].isfinite().all())


# -- Hugging Face's eager attention: its row depends on the dtype ----------------------------------

def _hf_eager(vid: str, row):
    """LlamaAttention (eager) called with the mask its model builds in the call's dtype,
    finfo(dtype).min, softened in float32: in float64 that minimum is -inf there (NaN forward,
    NaN into dQ and dK), in float32 a finite bias (the mean of V)."""
    transformers = pytest.importorskip("transformers")  # noqa: F841
    from transformers.models.llama.configuration_llama import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaAttention

    from harness import Param, Zero, additive_mask, library_config, rotary_tables

    def call(m, i):
        return m(i["query"], position_embeddings=rotary_tables(m, i["query"], i["positions"]),
                 attention_mask=additive_mask(i["mask"], i["query"].dtype))[0]

    return register(
        id=vid, family="attention", source="transformers.models.llama.modeling_llama.LlamaAttention",
        build=lambda cfg: LlamaAttention(config=library_config(LlamaConfig, cfg), layer_idx=0), call=call,
        param_map={f"{c}.{k}": Param(f"{c}_proj.{k}") if k == "weight" else Zero() for c in "qkvo"
                   for k in ("weight", "bias")},
        traits={"sublayer": "attention", "rope": "half-split", "gqa_grouping": "consecutive", "mask_style": "additive",
                "internal_dtype": "float32", "fully_masked_row": row, "cases": ("fully_masked", "causal")})


def test_hf_eager_attention_is_equivalent_in_float32_and_float64_with_its_row_declared_by_dtype():
    with scratch():
        right = _hf_eager("hf_eager_by_dtype", ByDtype(float64="NaN", other="mean of V"))
        wrong = {row: _hf_eager(f"hf_eager_{i}", row) for i, row in enumerate(("mean of V", "NaN"))}
        checker = SpecChecker(DEFAULT)
        results = [checker.check(right, "default", c, d) for c in ("fully_masked", "causal")
                   for d in ("float64", "float32")]
        caught = {row: [checker.check(v, "default", "fully_masked", d) for d in ("float64", "float32")]
                  for row, v in wrong.items()}
    assert all(r.ok for r in results), [(r.case, r.dtype, r.verdict, r.note) for r in results]
    assert {r.verdict for r in results if r.dtype == "float32"} == {"equivalent"}
    # one value for both dtypes: the mean of V is wrong in float64, NaN in float32
    assert not caught["mean of V"][0].ok and caught["mean of V"][0].verdict == "different"
    assert caught["NaN"][0].ok and not caught["NaN"][1].ok and caught["NaN"][1].verdict == "different"


# -- refused at load, in one line ---------------------------------------------------------------------

ATTN = {"sublayer": "attention"}


@pytest.mark.parametrize("traits,said", [
    ({**ATTN, "fully_masked_row": ByDtype(float64="NaN")}, "gives no value for float32, bfloat16, float16"),
    ({**ATTN, "fully_masked_row": ByCause(window="zeros", other="NaN")}, "names window"),
    ({**ATTN, "fully_masked_row": ByDtype(float64="NaN", other="none")},
     "in float32: trait fully_masked_row='none' has no oracle"),
    ({**ATTN, "fully_masked_row": ByDtype(float64=ByDtype(other="NaN"), other="NaN")}, "a ByDtype inside a ByDtype"),
    ({**ATTN, "fully_masked_row": ByDtype(float32="nope", other="NaN")}, "in float32: trait fully_masked_row='nope'"),
    ({**ATTN, "eps": ByDtype(other=1e-5), "fully_masked_row": "NaN"}, "only the traits of rows without keys"),
])
def test_a_declaration_that_cannot_happen_is_refused_at_registration(traits, said):
    with scratch(), pytest.raises(RegistryError, match=said) as refused:
        register(id="refused", family="attention", source="test", build=lambda cfg: torch.nn.Identity(),
                 call=lambda m, i: m(i["query"]), traits=traits)
    assert len(str(refused.value).splitlines()) == 1


def test_a_kernel_declaration_is_checked_per_cause():
    """ByCause on a kernel: each cause's (row, gradient) must be one its mask method gives, or
    a repaired row; every cause the family's cases produce needs a value."""
    with scratch():
        with pytest.raises(RegistryError, match="rows lost to the window in float64: mask_method 'additive_bias'"):
            register_kernel(id="k", fn=_skipping, source="test", traits={
                "causal": "top_left", "mask_method": "additive_bias",
                "fully_masked_row": ByCause(mask="NaN", other="mean of V")})
        with pytest.raises(RegistryError, match="gives no value for causal"):
            register_kernel(id="k", fn=_skipping, source="test", traits={
                "causal": "top_left", "fully_masked_row": ByCause(mask="NaN", window="zeros")})


# -- the single value: as before -------------------------------------------------------------------

@pytest.mark.parametrize("row,style", [("NaN", "fill"), ("mean of V", "additive"), ("zeros", "fill")])
def test_a_single_value_reads_as_the_same_value_for_every_cause_and_dtype(row, style):
    """The oracle of a plain declaration and of ByCause / ByDtype giving that value everywhere
    are the same tensors (gradients included)."""
    from harness.check.runs import oracle_run
    from harness.families.attention import ATTENTION

    cfg = Config()
    inputs, weights = ATTENTION.inputs("fully_masked", cfg), ATTENTION.canonical_weights(cfg)
    runs = [oracle_run(ATTENTION, ATTENTION.semantic_traits({**ATTN, "fully_masked_row": r, "mask_style": style}),
                       cfg, inputs, weights, dtype=torch.float32).tensors
            for r in (row, ByCause(other=row), ByDtype(other=ByCause(mask=row)))]
    for other in runs[1:]:
        assert all(torch.equal(runs[0][n].nan_to_num(7.0), other[n].nan_to_num(7.0)) for n in runs[0])


# -- map: a row that depends on the dtype is inferred per dtype ------------------------------------

EAGER_MIN = '''
import math

import torch
from torch import nn


class EagerMinAttention(nn.Module):
    """Adds the additive mask it is given, softmax in float32 (Hugging Face's eager attention)."""

    def __init__(self, d_model, heads):
        super().__init__()
        self.h = heads
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, query, key, value, attention_mask):
        B, T, D = query.shape
        split = lambda x: x.view(B, x.shape[1], self.h, D // self.h).transpose(1, 2)
        q, k, v = split(self.q_proj(query)), split(self.k_proj(key)), split(self.v_proj(value))
        s = q @ k.transpose(-2, -1) / math.sqrt(D // self.h) + attention_mask
        p = torch.softmax(s, dim=-1, dtype=torch.float32).to(query.dtype)
        return self.o_proj((p @ v).transpose(1, 2).reshape(B, T, D))
'''


def test_map_infers_a_row_that_depends_on_the_dtype_per_dtype(tmp_path):
    """Called with finfo(dtype).min (the mask built in the call's dtype), the module's row
    without keys is NaN in float64 and the mean of V in float32: map's one extra float32 run
    tells it, and the registration it prints declares ByDtype and checks clean in both."""
    from harness.trace.map_verify import verify_registration
    from harness.trace.mapsearch import propose_map

    path = tmp_path / "eager_min.py"
    path.write_text(EAGER_MIN)
    load_packs()
    with scratch():
        proposal = propose_map(f"{path}:EagerMinAttention", "attention",
                               call='m(i["query"], i["key"], i["value"], additive_mask(i["mask"], i["query"].dtype))')
    assert proposal.found, proposal.text
    assert proposal.traits["fully_masked_row"] == ByDtype(float64="NaN", other="mean of V")
    assert proposal.traits["mask_style"] == "additive" and "from harness import" in proposal.code
    import importlib.util

    spec = importlib.util.spec_from_file_location("eager_min", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with scratch():
        clean, said = verify_registration(proposal.code, "attention", "eagerminattention", Config(),
                                          scope={"EagerMinAttention": module.EagerMinAttention},
                                          dtypes=("float64", "float32"), extras=False)
    assert clean, said


def test_kernel_map_infers_a_row_that_depends_on_the_cause_per_cause():
    """The mask's rows decide first (the mean of V, from a finfo.min fill); the window's rows
    differ (never visited: zeros): a ByCause for the row, one value for the gradient."""
    from harness.check.runs import RunCache
    from harness.trace.kernel_map import _dead_rows_by_cause

    with scratch():
        variant = register_kernel(id="skipping_probe", fn=_skipping, source="test", traits={"causal": "top_left"})
        found = _dead_rows_by_cause(RunCache(CONFIG_MATRIX["default"]), variant,
                                    {"causal": "top_left", "gqa_grouping": "consecutive"})
    assert found is not None
    dead, cases = found
    assert dead == {"mask_method": "bool_fill_finfo_min",
                    "fully_masked_row": ByCause(window="zeros", other="mean of V")}
    assert set(cases) == {"fully_masked", "causal_short", "window_short"}
