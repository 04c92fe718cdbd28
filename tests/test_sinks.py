"""Attention sinks (``harness.families.conventions.sinks``): the gpt-oss variant checks clean;
a sink in every numerator, one sink shared by the heads, or the sink missing are caught and
named; the oracle's branch is the softmax over the keys and one more logit; ``map`` finds
the sinks of transformers' GptOssAttention."""

from __future__ import annotations

import pytest
import torch

from harness.base.config import CONFIG_MATRIX, Config
from harness.check.spec import SpecChecker
from harness.families import conventions
from harness.families.catalog import get_family
from harness.families.conventions.core import Context
from harness.families.conventions.sinks import PER_HEAD, with_sinks
from harness.registry import get_variant, register, scratch
from harness.trace.kernel_explain import name_mistakes
from variants.gpt_oss import GPT_OSS, SinkAttention, sink_map
from variants.llama import call

DEFAULT = CONFIG_MATRIX["default"]
CASES = ("self_kv", "causal", "random_mask")   # no row without keys: each reading is defined there


class NumeratorSink(SinkAttention):
    """Wrong: the sink's term added to every key's numerator as well as to the denominator."""

    def probabilities(self, s):
        sink = self.sinks.to(s.dtype).view(1, -1, 1, 1).expand(*s.shape[:-1], 1)
        e = torch.cat([s, sink], -1)
        e = torch.exp(e - e.max(-1, keepdim=True).values)
        return (e[..., :-1] + e[..., -1:]) / e.sum(-1, keepdim=True)


class SharedSink(SinkAttention):
    """Wrong: head 0's sink for every head (a scalar sink)."""

    def probabilities(self, s):
        sink = self.sinks[:1].to(s.dtype).view(1, 1, 1, 1).expand(*s.shape[:-1], 1)
        return torch.cat([s, sink], -1).softmax(-1)[..., :-1]


class MissingSink(SinkAttention):
    """Wrong: the sink parameter kept, the plain softmax over the keys."""

    def probabilities(self, s):
        return s.softmax(-1) + 0.0 * self.sinks.sum()


WRONG = {"sink_in_numerator": (NumeratorSink, "the sink added to every numerator too"),
         "sink_shared": (SharedSink, "one sink for every head, not one per head"),
         "sink_missing": (MissingSink, "the sink missing from the denominator")}


def test_the_oracle_branch_is_a_softmax_over_the_keys_and_the_sink():
    s = torch.randn(2, 3, 4, 5, dtype=torch.float64)
    sinks = torch.randn(3, dtype=torch.float64)
    p = with_sinks(PER_HEAD, s, Context({}, {"sinks": sinks}))
    e, z = s.exp(), sinks.exp().view(1, 3, 1, 1)
    torch.testing.assert_close(p, e / (e.sum(-1, keepdim=True) + z))
    assert bool((p.sum(-1) < 1).all())
    assert with_sinks("none", s, Context({})) is None


def test_sinks_is_a_declared_trait_with_its_canonical_parameter():
    family = get_family("attention")
    assert "sinks" in family.traits and family.traits["sinks"].default == "none"
    assert family.canonical_shapes(DEFAULT, {"sinks": PER_HEAD})["sinks"] == (DEFAULT.heads,)
    assert "sinks" not in family.canonical_shapes(DEFAULT, {})
    assert conventions.trait_params("attention", {"sinks": "none"}, DEFAULT) == {}
    assert any(label == "the sink missing from the denominator" for label, _, _ in conventions.mistakes("attention"))


def test_the_gpt_oss_variant_checks_clean():
    variant = get_variant("attention", "gpt_oss_sinks")
    checker = SpecChecker({"default": DEFAULT})
    for case in ("self_kv", "causal", "fully_masked", "decode"):
        for dtype in ("float64", "float32"):
            result = checker.check(variant, "default", case, dtype)
            assert result.ok, (case, dtype, result.note)


def test_a_sink_declared_but_left_out_of_the_weights_is_an_error():
    from harness.base.errors import SpecError
    with pytest.raises(SpecError, match="'sinks'"):
        with_sinks(PER_HEAD, torch.zeros(1, 2, 3, 4), Context({}))


def test_each_wrong_sink_is_caught_and_named():
    with scratch():
        made = [register(id=vid, family="attention", source="tests", call=call, param_map=sink_map,
                         build=lambda cfg, cls=cls: cls(cfg), traits={**GPT_OSS, "cases": CASES})
                for vid, (cls, _) in WRONG.items()]
        checker = SpecChecker({"default": DEFAULT})
        for variant in made:
            result = checker.check(variant, "default", "causal", "float64")
            assert not result.ok and result.verdict == "different", (variant.id, result.note)
        named = name_mistakes("attention", made, DEFAULT)
    for vid, (_, label) in WRONG.items():
        assert named[vid].startswith(f"reads as {label} (declared sinks='per head')"), named[vid]


@pytest.mark.slow
def test_map_finds_the_sinks_of_gpt_oss_attention():
    pytest.importorskip("transformers")
    from harness.trace.mapsearch import propose_map

    # a tiny config with the default RoPE (gpt-oss's own is YaRN: the rope_scaling trait's business)
    init = ('config=library_config(GptOssConfig, cfg, rope_parameters={"rope_type": "default", '
            '"rope_theta": cfg.rope_base}), layer_idx=0')
    proposal = propose_map("transformers.models.gpt_oss.modeling_gpt_oss:GptOssAttention", "attention",
                           cfg=Config(), init=init)
    assert proposal.found, proposal.text
    assert proposal.traits["sinks"] == PER_HEAD and proposal.traits["rope"] == "half-split", proposal.traits
    assert '"sinks": Param("sinks")' in proposal.text and "0 contradict" in proposal.text, proposal.text
