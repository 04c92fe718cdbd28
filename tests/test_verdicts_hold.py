"""Verdicts that hold on real code: a registration that cannot honour a shape says so, and
the conventions real code uses are declarable (each with its wrong variant caught and its
correct control equivalent)."""

from __future__ import annotations

import pytest
import torch

from harness.base.config import Config
from harness.check.api import check_all
from harness.registry import get_variant, load_packs


def test_a_partial_rotary_with_an_odd_count_of_dims_is_skipped_with_the_reason():
    """GPT-NeoX at d_k = 2 rotates int(2 * 0.5) = 1 dim: no declared convention, so the
    attention family refuses the shape for it (any registration declaring such a fraction),
    with the reason, where it used to be "different"; at d_k = 4 it is checked and clean."""
    load_packs()
    neox = get_variant("attention", "gpt_neox")
    why = neox.supports(Config(d_model=4, heads=2))
    assert why and "rotates 1 dim(s)" in why
    assert neox.supports(Config(d_model=8, heads=2)) is None
    report = check_all(["attention"], {"tiny": Config(d_model=4, heads=2, batch=2, tgt_len=3, src_len=4, d_ff=8)},
                       "cpu", ["float32"], variants=["attention/gpt_neox"], extras=False)
    assert not [s for s in report.specs if s.variant == "gpt_neox"]
    assert any(v == "gpt_neox" and "rotates 1 dim" in why for _, v, _, why in report.skipped)
    from harness.check.spec import SpecChecker

    ok = SpecChecker({"d8": Config(d_model=8, heads=2, batch=2, tgt_len=3, src_len=4, d_ff=8)})
    assert all(ok.check(neox, "d8", "causal", d).ok for d in ("float64", "float32"))


# -- the kernels' conventions ------------------------------------------------------------------------

def _sdpa_lower_right(q, k, v, mask, causal=False):
    """SDPA with ``causal_lower_right`` combined with the padding mask: the diagonal is
    aligned to the padded key length S, whatever the padding."""
    from variants.kernels import repeat_kv

    k, v = repeat_kv(k, q.shape[1]), repeat_kv(v, q.shape[1])
    keep = mask
    if causal:  # torch.nn.attention.bias.causal_lower_right(T, S), materialised
        T, S = q.shape[2], k.shape[2]
        keep = keep & torch.ones(T, S, dtype=torch.bool, device=q.device).tril(S - T)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep)


def _zeroed_after_nan(q, k, v, mask):
    """A softmax over an additive -inf bias (NaN rows), then the rows without keys zeroed on
    the output (a query padding mask applied after): zeros forward, NaN into dQ and dK."""
    from variants.kernels import repeat_kv

    k, v = repeat_kv(k, q.shape[1]), repeat_kv(v, q.shape[1])
    bias = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill(~mask, float("-inf"))
    s = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5 + bias
    return (s.softmax(-1) @ v).masked_fill(~mask.any(-1, keepdim=True), 0.0)


@pytest.mark.parametrize("fn,right,wrong,case", [
    (_sdpa_lower_right, {"causal": "bottom_right_padded", "fully_masked_row": "zeros", "fully_masked_grad": "none"},
     {"causal": "bottom_right", "fully_masked_row": "zeros", "fully_masked_grad": "none"}, "causal_pad"),
    (_zeroed_after_nan, {"causal": "none", "mask_method": "additive_bias", "fully_masked_row": "zeros",
                         "fully_masked_grad": "NaN"},
     {"causal": "none", "mask_method": "additive_bias", "fully_masked_row": "zeros", "fully_masked_grad": "none"},
     "fully_masked"),
])
def test_a_kernel_convention_is_declarable(fn, right, wrong, case):
    """Declared as it is, the kernel is equivalent (on its case and two others); declared as its
    neighbour convention, it is caught on the case that tells the two apart."""
    from harness import register_kernel
    from harness.base.config import CONFIG_MATRIX
    from harness.registry import scratch

    load_packs()
    with scratch():
        register_kernel(id="k_right", fn=fn, source="test", traits={**right, "cases": (case, "self", "causal_cross")})
        register_kernel(id="k_wrong", fn=fn, source="test", traits={**wrong, "cases": (case,)})
        report = check_all(["attention_kernel"], {"default": CONFIG_MATRIX["default"]}, "cpu", ["float32"],
                           extras=False, variants=["attention_kernel/k_right", "attention_kernel/k_wrong"])
    mine = [s for s in report.specs if s.variant == "k_right"]
    assert case in {s.case for s in mine}
    assert all(s.ok for s in mine), [(s.case, s.dtype, s.note) for s in mine if not s.ok]
    caught = [s for s in report.specs if s.variant == "k_wrong" and s.dtype == "float64"]
    assert caught and all(not s.ok and s.verdict == "different" for s in caught)


def test_a_final_logit_softcap_is_declarable_in_llama_model():
    """Gemma 2's final logit soft-capping (30) on the project's LLaMA model: declared, it is
    equivalent on every case; undeclared, caught."""
    from harness import register
    from harness.base.config import CONFIG_MATRIX
    from harness.check.spec import SpecChecker
    from harness.registry import scratch
    from variants.llama import LlamaModel

    load_packs()
    base = get_variant("llama_model", "llama_model")
    with scratch():
        made = {cap: register(id=f"capped_{int(cap)}", family="llama_model", source="test", call=base.call,
                              build=lambda cfg: LlamaModel(cfg, final_softcap=30.0), param_map=base.param_map,
                              traits={**base.traits, "final_softcap": cap}) for cap in (30.0, 0.0)}
        checker = SpecChecker({"default": CONFIG_MATRIX["default"]})
        right = [checker.check(made[30.0], "default", c, "float64") for c in ("full", "right_pad")]
        wrong = checker.check(made[0.0], "default", "full", "float64")
    assert all(r.ok and r.verdict == "equivalent" for r in right), [r.note for r in right]
    assert not wrong.ok and wrong.verdict == "different"


@pytest.mark.slow  # flex_attention compiles its op outside the recorder (seconds); the mechanism's default
def test_a_kernel_without_a_backward_on_the_device_is_checked_forward_only():  # test: tests/test_kernels.py
    """flex_attention has no backward on the CPU: its output is held to the oracle, the row
    says it is forward only (no error row); a flex kernel with the wrong scale is caught."""
    from torch.nn.attention.flex_attention import flex_attention

    from harness import register_kernel
    from harness.base.config import CONFIG_MATRIX
    from harness.check.spec import SpecChecker
    from harness.registry import scratch
    from variants.kernels import flex

    def flex_unscaled(q, k, v, mask):
        out = flex_attention(q, k, v, scale=1.0, block_mask=None, enable_gqa=True)
        return out.masked_fill(~mask.any(-1)[..., None], 0)

    rows = {"causal": "top_left", "fully_masked_row": "zeros", "fully_masked_grad": "none", "cases": ("self",)}
    with scratch():
        right = register_kernel(id="flex_user", fn=flex, source="test", traits=rows)
        wrong = register_kernel(id="flex_unscaled", fn=flex_unscaled, source="test", traits=rows)
        checker = SpecChecker({"default": CONFIG_MATRIX["default"]})
        ok = checker.check(right, "default", "self", "float64")
        bad = checker.check(wrong, "default", "self", "float64")
    assert ok.ok and ok.verdict == "equivalent" and ok.note.startswith("forward only: no backward on cpu"), ok.note
    assert [t.name for t in ok.tensors if not t.name.startswith("output")] == []
    assert not bad.ok and bad.verdict == "different"


# -- half precision: what a careful implementation computes -----------------------------------------

class RopeAttention(torch.nn.Module):
    """LLaMA attention, RoPE half-split. ``cast_buffer``: the inverse frequencies are a
    buffer, which ``model.to(torch.bfloat16)`` rounds (the bug); else they and the angles are
    computed in float32 at least, in the forward (as HF's rotary embedding computes them)."""

    def __init__(self, cfg, cast_buffer: bool):
        super().__init__()
        self.h, self.d, self.base, self.cast = cfg.heads, cfg.d_k, cfg.rope_base, cast_buffer
        self.q, self.k, self.v, self.o = (torch.nn.Linear(cfg.d_model, cfg.d_model, bias=False) for _ in range(4))
        self.register_buffer("inv_freq", 1.0 / self.base ** (torch.arange(0, self.d, 2) / self.d), persistent=False)

    def rotate(self, x, positions):
        work = torch.promote_types(x.dtype, torch.float32)
        inv = (self.inv_freq.to(work) if self.cast
               else 1.0 / self.base ** (torch.arange(0, self.d, 2, dtype=work) / self.d))
        angle = positions.to(work)[:, None, :, None] * inv
        cos, sin = torch.cat([angle.cos()] * 2, -1).to(x.dtype), torch.cat([angle.sin()] * 2, -1).to(x.dtype)
        half = x.shape[-1] // 2
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin

    def forward(self, query, key, value, mask, positions, key_positions):
        B, T, D = query.shape
        split = lambda t: t.view(B, -1, self.h, self.d).transpose(1, 2)  # noqa: E731
        q, k = self.rotate(split(self.q(query)), positions), self.rotate(split(self.k(key)), key_positions)
        s = (q @ k.transpose(-2, -1) / self.d ** 0.5).masked_fill(~mask[:, None], float("-inf"))
        return self.o((s.softmax(-1) @ split(self.v(value))).transpose(1, 2).reshape(B, T, D))


def test_rope_inverse_frequencies_rounded_to_bfloat16_are_caught_thousands_of_positions_back():
    """On the attention family's ``far`` case (keys thousands of positions back) in bfloat16:
    the buffer rounded with the model is "different" (the baseline's angles are float32's, as a
    careful implementation's); the float32 buffer is equivalent."""
    from harness import linear_entries, register
    from harness.base.config import CONFIG_MATRIX
    from harness.check.spec import SpecChecker
    from harness.registry import scratch
    from variants.llama import call

    traits = {"sublayer": "attention", "rope": "half-split", "fully_masked_row": "NaN", "cases": ("far",)}
    qkvo = linear_entries({"q": "q", "k": "k", "v": "v", "o": "o"}, bias=False)
    with scratch():
        made = {cast: register(id=f"rope_cast_{cast}", family="attention", source="test", call=call, param_map=qkvo,
                               build=lambda cfg, c=cast: RopeAttention(cfg, c), traits=traits)
                for cast in (False, True)}
        checker = SpecChecker({"default": CONFIG_MATRIX["default"]})
        careful = checker.check(made[False], "default", "far", "bfloat16")
        rounded = checker.check(made[True], "default", "far", "bfloat16")
    assert careful.ok and careful.verdict == "equivalent", careful.note
    assert not rounded.ok and rounded.verdict == "different", rounded.note


class HalfStatsNorm(torch.nn.Module):
    """LayerNorm written out; ``upcast``: its statistics in float32 (and so declared), else in
    the input's dtype: float16 squares overflow beyond |x| = 256 and the output is zeros."""

    def __init__(self, d, upcast: bool):
        super().__init__()
        self.weight, self.bias = torch.nn.Parameter(torch.ones(d)), torch.nn.Parameter(torch.zeros(d))
        self.upcast = upcast

    def forward(self, x):
        h = x.float() if self.upcast else x
        mean = h.mean(-1, keepdim=True)
        var = ((h - mean) ** 2).mean(-1, keepdim=True)
        return ((h - mean) / torch.sqrt(var + 1e-5)).to(x.dtype) * self.weight + self.bias


def test_a_float16_statistics_norm_declaring_an_upcast_is_caught_on_large_activations():
    """The norm family's ``large`` case (outliers |x| 300..1000) in float16: statistics in
    float16 overflow to zeros; declared ``internal_dtype: float32`` the baseline upcasts, so
    it is "different"; the upcasting norm with the same declaration is equivalent."""
    from harness import Param, register
    from harness.base.config import CONFIG_MATRIX
    from harness.check.spec import SpecChecker
    from harness.registry import scratch

    traits = {"norm_formula": "layernorm", "eps": 1e-5, "internal_dtype": "float32", "cases": ("large",)}
    with scratch():
        made = {up: register(id=f"norm_up_{up}", family="norm", source="test", traits=traits,
                             param_map={"weight": Param("weight"), "bias": Param("bias")},
                             build=lambda cfg, u=up: HalfStatsNorm(cfg.d_model, u), call=lambda m, i: m(i["x"]))
                for up in (True, False)}
        checker = SpecChecker({"default": CONFIG_MATRIX["default"]})
        careful = checker.check(made[True], "default", "large", "float16")
        overflow = checker.check(made[False], "default", "large", "float16")
    assert careful.ok and careful.verdict == "equivalent", careful.note
    assert not overflow.ok and overflow.verdict == "different", overflow.note


class PositionWindowAttention(torch.nn.Module):
    """Attention whose sliding window compares positions (query position - key position in
    0 .. left), as HF's and Mistral's masks do: after a cache, on the bottom-right diagonal."""

    def __init__(self, cfg):
        super().__init__()
        self.h, self.d = cfg.heads, cfg.d_k
        self.q, self.k, self.v, self.o = (torch.nn.Linear(cfg.d_model, cfg.d_model) for _ in range(4))

    def forward(self, query, key, value, mask, positions, key_positions, window):
        B, T, D = query.shape
        split = lambda t: t.view(B, -1, self.h, self.d).transpose(1, 2)  # noqa: E731
        keep = mask
        if window is not None:
            rel = key_positions[:, None, :] - positions[:, :, None]                  # (B, T, S)
            keep = keep & (rel >= -window[0]) & (rel <= window[1])
        s = (split(self.q(query)) @ split(self.k(key)).transpose(-2, -1) / self.d ** 0.5)
        p = s.masked_fill(~keep[:, None], float("-inf")).softmax(-1)
        return self.o((p @ split(self.v(value))).transpose(1, 2).reshape(B, T, D))


def test_a_window_on_the_bottom_right_diagonal_after_a_cache_is_declarable():
    """Decoding after a cache with a sliding window: a position-based window declared
    ``window_diagonal: bottom_right`` is equivalent on ``decode_window`` (and ``window``);
    declared top-left (the default), caught there."""
    from harness import linear_entries, register
    from harness.base.config import CONFIG_MATRIX
    from harness.check.spec import SpecChecker
    from harness.registry import scratch

    base = {"sublayer": "attention", "fully_masked_row": "NaN", "window": "as called",
            "cases": ("decode_window", "window")}
    with scratch():
        made = {diag: register(id=f"pos_window_{diag}", family="attention", source="test",
                               build=PositionWindowAttention, param_map=linear_entries({c: c for c in "qkvo"}),
                               call=lambda m, i: m(i["query"], i["key"], i["value"], i["mask"], i["positions"],
                                                   i["key_positions"], i["window"]),
                               traits={**base, "window_diagonal": diag}) for diag in ("bottom_right", "top_left")}
        checker = SpecChecker({"default": CONFIG_MATRIX["default"]})
        right = [checker.check(made["bottom_right"], "default", c, "float64") for c in ("decode_window", "window")]
        wrong = checker.check(made["top_left"], "default", "decode_window", "float64")
    assert all(r.ok and r.verdict == "equivalent" for r in right), [r.note for r in right]
    assert not wrong.ok and wrong.verdict == "different"


def test_packed_rows_catch_a_causal_mask_rebuilt_from_positions():
    """The ``packed`` case (positions restarting inside a row, a block-diagonal causal mask):
    the LLaMA attention and block are equivalent; the same modules with their causal mask
    rebuilt from the positions (right where positions count along the row: the attention
    agrees on ``causal_only``) attend across sequences there and are caught."""
    from harness import register
    from harness.base.config import CONFIG_MATRIX
    from harness.check.spec import SpecChecker
    from harness.registry import scratch

    load_packs()
    attn, block = get_variant("attention", "llama"), get_variant("llama_block", "llama_block")

    def by_position(i, mask):
        """The causal mask rebuilt from positions (key position <= query position) over the
        keys the call's mask keeps for some query: right where positions count along the row."""
        keys = i.get("key_positions", i["positions"])
        return (keys[:, None, :] <= i["positions"][:, :, None]) & mask.any(-2, keepdim=True)

    with scratch():
        wrong_attn = register(id="llama_position_causal", family="attention", source="test", build=attn.build,
                              param_map=attn.param_map, traits={**attn.traits, "cases": ("packed", "causal_only")},
                              call=lambda m, i: m(i["query"], i["key"], i["value"], by_position(i, i["mask"]),
                                                  i["positions"], i["key_positions"]))
        wrong_block = register(id="block_position_causal", family="llama_block", source="test", build=block.build,
                               param_map=block.param_map, traits=block.traits,
                               call=lambda m, i: m(i["x"], by_position(i, i["mask"]), i["positions"]))
        checker = SpecChecker({"default": CONFIG_MATRIX["default"]})
        assert all(checker.check(v, "default", "packed", "float64").ok for v in (attn, block))
        assert checker.check(wrong_attn, "default", "causal_only", "float64").ok   # positions 0.. there
        caught = [checker.check(v, "default", "packed", "float64") for v in (wrong_attn, wrong_block)]
    assert all(not c.ok and c.verdict == "different" for c in caught), [(c.variant, c.verdict) for c in caught]


# -- map entries -------------------------------------------------------------------------------------

class FoldedGainRMSNorm(torch.nn.Module):
    """Gemma's RMSNorm after a checkpoint converter folded its 1 + w into the weight: the
    forward is a plain x / rms(x) * weight."""

    def __init__(self, d):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class PartialInterleavedRope(RopeAttention):
    """Attention rotating interleaved pairs (Meta's layout) on the first half of each head's
    dims only (a partial rotary, GPT-NeoX's rotary_pct = 0.5, stored for interleaved RoPE);
    RopeAttention's projections and forward, its own rotation."""

    def __init__(self, cfg):
        super().__init__(cfg, cast_buffer=False)
        del self.inv_freq  # the rotation below computes its own frequencies

    def rotate(self, x, positions):
        r = self.d // 2
        inv = self.base ** (-torch.arange(0, r, 2, dtype=torch.float64) / r)
        angle = positions.to(torch.float64)[:, None, :, None] * inv
        cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
        a, b = x[..., :r:2], x[..., 1:r:2]
        turned = torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2)
        return torch.cat([turned, x[..., r:]], -1)


def test_map_entries_for_a_folded_gain_and_a_partial_rotary_stored_interleaved():
    """``Offset(Param("weight"), 1.0)``: a weight converted at load (Gemma's 1 + w folded in)
    checks equivalent against ``gain: "1+w"``, where the plain ``Param`` is caught;
    ``RopePermuted(..., fraction=0.5)``: interleaved RoPE on half of each head matches the
    half-split canonical weights with ``rope_fraction: 0.5``, where permuting every row is caught."""
    from harness import Offset, Param, RopePermuted, Zero, register
    from harness.base.config import CONFIG_MATRIX
    from harness.check.spec import SpecChecker
    from harness.registry import scratch
    from variants.llama import call

    def rope_map(fraction):
        return lambda cfg: {"q.weight": RopePermuted(Param("q.weight"), heads=cfg.heads, fraction=fraction),
                            "k.weight": RopePermuted(Param("k.weight"), heads=cfg.heads, fraction=fraction),
                            "v.weight": Param("v.weight"), "o.weight": Param("o.weight"),
                            **{f"{c}.bias": Zero() for c in "qkvo"}}

    norm = {"norm_formula": "rms", "eps": 1e-6, "gain": "1+w"}
    rope = {"sublayer": "attention", "rope": "half-split", "rope_fraction": 0.5, "fully_masked_row": "NaN",
            "cases": ("self_kv",)}
    with scratch():
        made = {
            "folded": register(id="folded", family="norm", source="test", build=lambda c: FoldedGainRMSNorm(c.d_model),
                               call=lambda m, i: m(i["x"]), traits=norm,
                               param_map={"weight": Offset(Param("weight"), 1.0), "bias": Zero()}),
            "folded_plain": register(id="folded_plain", family="norm", source="test", call=lambda m, i: m(i["x"]),
                                     build=lambda c: FoldedGainRMSNorm(c.d_model), traits=norm,
                                     param_map={"weight": Param("weight"), "bias": Zero()}),
            "partial": register(id="partial", family="attention", source="test", build=PartialInterleavedRope,
                                call=call, param_map=rope_map(0.5), traits=rope),
            "partial_whole": register(id="partial_whole", family="attention", source="test",
                                      build=PartialInterleavedRope, call=call, param_map=rope_map(1.0), traits=rope),
        }
        checker = SpecChecker({"default": CONFIG_MATRIX["default"]})
        verdicts = {k: checker.check(v, "default", "rows" if v.family == "norm" else "self_kv", "float64")
                    for k, v in made.items()}
    assert verdicts["folded"].ok and verdicts["partial"].ok, (verdicts["folded"].note, verdicts["partial"].note)
    assert not verdicts["folded_plain"].ok and not verdicts["partial_whole"].ok


# -- QK-norm gains, canonical parameters -------------------------------------------------------------

def test_qk_norm_gains_are_canonical_where_declared_and_only_there():
    """A variant declaring ``qk_norm`` has the canonical ``q_norm.weight`` and ``k_norm.weight``
    ((d_k,) per head; (H d_k,) and (H_kv d_k,) over all heads), drawn away from one and ported
    into its module; one declaring none keeps the family's parameters, with the same tensors;
    a QK-norm variant whose map leaves one gain out is a PortingError naming it (both left out:
    tests/test_declared_names.py); ``diff`` runs a
    QK-norm variant beside one without and refuses two whose gains differ in shape."""
    from harness import Param, register
    from harness.base.errors import PortingError
    from harness.families.catalog import get_family
    from harness.porting.portmap import absent_fills, zero_unrepresented
    from harness.registry import build, scratch
    from variants.llama import LLAMA, LlamaAttention, attention_map, call

    family, cfg = get_family("attention"), get_family("attention").extra_configs["gqa"]
    per_head, all_heads = ({**LLAMA, "qk_norm": q} for q in ("rms per head", "rms over all heads"))
    assert family.canonical_shapes(cfg, LLAMA) == family.canonical_shapes(cfg)
    assert family.canonical_shapes(cfg, per_head)["k_norm.weight"] == (cfg.d_k,)
    assert family.canonical_shapes(cfg, all_heads)["k_norm.weight"] == (cfg.n_kv_heads * cfg.d_k,)
    plain, qk = family.canonical_weights(cfg), family.canonical_weights(cfg, traits=all_heads)
    assert all(torch.equal(plain[n], qk[n]) for n in plain)
    gain = qk["q_norm.weight"]
    assert gain.shape == (cfg.heads * cfg.d_k,) and (gain - 1).abs().min() > 0 and gain.std() > 0.05
    load_packs()
    olmo2 = get_variant("attention", "olmo2_qk_norm")
    module, _ = build(olmo2, cfg, dtype=torch.float64, weights=zero_unrepresented(qk, absent_fills(olmo2.map_for(cfg))))
    assert torch.equal(module.q_norm.weight, gain)
    with scratch():
        register(id="one_gain_entry", family="attention", source="test", call=call,
                 param_map=lambda c: {**attention_map()(c), "q_norm.weight": Param("q_norm.weight")},
                 build=lambda c: LlamaAttention(c, qk_norm="per head"), traits={**per_head, "eps": 1e-6},
                 fixed={"k_norm.weight": "test"})
        with pytest.raises(PortingError, match=r"no entry for canonical \['k_norm.weight'\]"):
            build(get_variant("attention", "one_gain_entry"), cfg)
    # diff ports each side its own parameters (the shared ones one tensor); gains of two shapes: refused
    from harness.base.errors import ConfigError
    from harness.trace.pairs import diff_pair

    d = diff_pair("attention", "qwen3", "llama", "causal", Config(), "float64", hints=False, attribution=False)
    assert d.verdict == "different" and not d.errors
    with pytest.raises(ConfigError, match="k_norm.weight, q_norm.weight in different shapes"):
        diff_pair("attention", "qwen3", "olmo2_qk_norm", "causal", Config(), "float64")


def test_a_wrong_qk_norm_is_caught_on_its_gains_and_a_correct_one_computed_another_way_is_not():
    """tests/wrong_qk_norm.py: norm after RoPE (per head and over all heads), k normalised with
    q's gain, the gains swapped, one head's gain for every head where a gain per head and dim
    is declared, the gains never applied: each "different" in float64 on the GQA config, a
    QK-norm gain among the tensors that differ. The controls (``F.rms_norm``, Gemma
    3's 1 + w gain through ``Offset``, OLMo2's norm over all heads by hand) and the project's
    qwen3 and olmo2_qk_norm are equivalent."""
    import sys
    from pathlib import Path

    from harness.check.spec import SpecChecker
    from harness.families.catalog import get_family
    from harness.registry import load_file, scratch

    path = Path(__file__).with_name("wrong_qk_norm.py")
    configs = {"gqa": get_family("attention").extra_configs["gqa"]}  # H_kv < H: k's gains apart from q's
    with scratch():
        load_file(path)
        module = next(m for m in sys.modules.values() if getattr(m, "__file__", None) == str(path))
        checker = SpecChecker(configs)
        results = {(vid, c): checker.check(get_variant("attention", vid), c, "self_kv", "float64")
                   for vid in (*module.WRONG, *module.CONTROLS, "qwen3", "olmo2_qk_norm") for c in configs}
    for (vid, c), r in results.items():
        if vid in module.WRONG:
            assert not r.ok and r.verdict == "different", (vid, c, module.WRONG[vid])
            gains = [t.name for t in r.tensors if t.name.endswith("_norm.weight") and not t.verdict.agrees]
            assert gains, (vid, c, [(t.name, t.verdict) for t in r.tensors])
        else:
            assert r.ok and r.verdict == "equivalent", (vid, c, r.note)


def test_qwen3s_model_port_is_held_to_the_llama_model_oracle_with_its_qk_norm_gains():
    """``llama_block`` and ``llama_model`` nest the attention family's QK-norm gains under each
    layer's ``self_attn.``: examples/checkpoint_ports.py's ``qwen3_port`` runs on a plain config
    and is equivalent; the same port with each layer's q and k gains read from the other's
    parameter (a map that swaps them) is "different"."""
    from pathlib import Path

    from harness import layers, register
    from harness.check.spec import SpecChecker
    from harness.families.catalog import get_family
    from harness.registry import load_file, scratch

    cfg = Config(d_model=16, heads=2, d_ff=32, batch=2, tgt_len=4)
    with scratch():
        load_file(Path(__file__).resolve().parents[1] / "examples" / "checkpoint_ports.py")
        port = get_variant("llama_model", "qwen3_port")
        assert "layers.1.self_attn.k_norm.weight" in get_family("llama_model").canonical_shapes(cfg, port.traits)
        assert port.supports(cfg) is None

        def swapped(c):
            out = port.map_for(c)
            for i in range(layers(c)):
                q, k = (f"layers.{i}.self_attn.{x}_norm.weight" for x in "qk")
                out[q], out[k] = out[k], out[q]
            return out
        wrong = register(id="qwen3_gains_swapped", family="llama_model", source="test", build=port.build,
                         call=port.call, param_map=swapped, traits=port.traits)
        checker = SpecChecker({"tiny": cfg})
        right, bad = (checker.check(v, "tiny", "left_pad", "float64") for v in (port, wrong))
    assert right.ok and right.verdict == "equivalent", right.note
    assert not bad.ok and bad.verdict == "different"
