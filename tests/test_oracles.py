"""The oracles cover what real modules differ by: a norm inside the attention sublayer
(its eps and placement), an additive mask (the same forward as a fill, other gradients on a
fully masked row), and a trait value no oracle can build is refused."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from harness import RegistryError, register
from harness.base.config import Config
from harness.check.api import check_all
from harness.porting.entries import linear_entries
from harness.registry import scratch

CONFIGS = {"small": Config(batch=2, tgt_len=4, src_len=3)}
QKVO = linear_entries({"q": "q", "k": "k", "v": "v", "o": "o"})
NORM_FIXED = {"norm.weight": "the sublayer's own LayerNorm, held at init", "norm.bias": "likewise"}


class Sublayer(nn.Module):
    """BERT-style (post: LayerNorm(x + attn(x))) or pre-norm (x + attn(LayerNorm(x)))
    attention sublayer, with an additive or a filled mask."""

    def __init__(self, d, h, placement, eps, additive):
        super().__init__()
        self.h, self.placement, self.additive = h, placement, additive
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.norm = nn.LayerNorm(d, eps=eps)

    def attend(self, query, key, value, mask):
        B, T, D = query.shape
        split = lambda x: x.view(B, -1, self.h, D // self.h).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.q(query)), split(self.k(key)), split(self.v(value))
        scores = q @ k.transpose(-2, -1) / math.sqrt(D // self.h)
        if self.additive:  # BERT's extended attention mask: 0 or finfo.min, added
            scores = scores + (~mask[:, None]).to(scores.dtype) * torch.finfo(scores.dtype).min
        else:
            scores = scores.masked_fill(~mask[:, None], -1e9)
        return self.o((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, D))

    def forward(self, query, key, value, mask):
        if self.placement == "post":
            return self.norm(query + self.attend(query, key, value, mask))
        y = self.norm(query)
        return query + self.attend(y, y if key is query else key, y if value is query else value, mask)


def _register(vid, placement, module_eps, additive, **traits):
    register(id=vid, family="attention", source="tests",
             build=lambda cfg: Sublayer(cfg.d_model, cfg.heads, placement, module_eps, additive),
             call=lambda m, i: m(i["query"], i["key"], i["value"], i["mask"]),
             param_map=QKVO, fixed=NORM_FIXED, traits={"fully_masked_row": "mean of V", **traits})


def _failures(report, vid):
    return [s for s in report.specs if s.variant == vid and not s.ok]


def test_a_norm_inside_the_attention_sublayer_with_its_eps_and_placement():
    with scratch():
        _register("bert_like", "post", 1e-12, True, sublayer="attention + residual + post-LayerNorm",
                  eps=1e-12, mask_style="additive")
        _register("pre_ln", "pre", 1e-5, False, sublayer="pre-LayerNorm + attention + residual")
        _register("bert_claims_1e5", "post", 1e-12, True, sublayer="attention + residual + post-LayerNorm",
                  eps=1e-5, mask_style="additive")
        report = check_all(["attention"], CONFIGS, "cpu", ["float32"], extras=False,
                           variants=["attention/bert_like", "attention/pre_ln", "attention/bert_claims_1e5"])
    assert not _failures(report, "bert_like") and not _failures(report, "pre_ln")
    wrong = _failures(report, "bert_claims_1e5")  # eps 1e-12 declared as 1e-5: a real difference
    assert wrong and all(s.dtype == "float64" or s.verdict == "different" for s in wrong)


def test_an_additive_mask_differs_from_a_fill_only_in_gradients_of_a_fully_masked_row():
    with scratch():
        _register("additive", "post", 1e-5, True, sublayer="attention + residual + post-LayerNorm",
                  mask_style="additive")
        _register("additive_claims_fill", "post", 1e-5, True, sublayer="attention + residual + post-LayerNorm")
        report = check_all(["attention"], CONFIGS, "cpu", ["float32"], extras=False,
                           variants=["attention/additive", "attention/additive_claims_fill"])
    assert not _failures(report, "additive")
    wrong = _failures(report, "additive_claims_fill")
    assert {s.case for s in wrong} == {"fully_masked"}
    assert all(s.worst.startswith("grad:") for s in wrong)  # the forward agrees


def test_an_additive_mask_cannot_give_zeros_on_a_fully_masked_row():
    with scratch(), pytest.raises(RegistryError):
        _register("nonsense", "post", 1e-5, True, sublayer="attention", mask_style="subtractive")
    from harness.families import oracles

    with pytest.raises(Exception, match="additive mask gives the mean of V"):
        oracles.multi_head_attention({}, "", torch.zeros(1, 1, 4), torch.zeros(1, 1, 4), torch.zeros(1, 1, 4),
                                     torch.ones(1, 1, 1, dtype=torch.bool),
                                     oracles.AttentionSpec(heads=1, fully_masked_row="zeros", mask_style="additive"))


def test_the_attention_options_are_one_frozen_typed_value_built_at_the_edge():
    """Declared trait strings become the oracle's enums once, in ``AttentionSpec``; a mode no
    oracle builds is the one-line error it always was; the value cannot change after."""
    import dataclasses

    from harness.base.config import Config
    from harness.base.errors import SpecError
    from harness.families import oracles
    from harness.families.attention_spec import AttentionSpec, QkNorm, WindowDiagonal

    traits = {"fully_masked_row": "NaN", "mask_style": "fill", "qk_norm": "rms over all heads",
              "window_diagonal": "bottom_right", "score_scale": 0.5}
    spec = AttentionSpec.from_traits(traits, Config(), eps=1e-6, window=(3, 0))
    assert (spec.qk_norm, spec.window_diagonal, spec.scale, spec.window) == (
        QkNorm.ALL_HEADS, WindowDiagonal.BOTTOM_RIGHT, 0.5, (3, 0))
    assert oracles.QK_NORMS == ("none", "rms per head", "rms over all heads")  # the family's vocabulary
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.heads = 2  # type: ignore[misc]
    with pytest.raises(SpecError, match=r"^no oracle for qk_norm='rms'; known: \['none', 'rms per head'"):
        AttentionSpec.from_traits({**traits, "qk_norm": "rms"}, Config(), eps=1e-6, window=None)
