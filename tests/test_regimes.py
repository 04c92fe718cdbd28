"""Regimes by construction: the Hypothesis strategies of ``harness.base.regimes``
keep their promises, the default matrix's fixed regime cases are drawn from them, drawn
regimes raise no false alarm, and ``check --explore N --seed K`` draws N configs, the same
for the same K. Hypothesis runs derandomized here, with small ``max_examples``."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from harness.base import regimes as R
from harness.base.config import CONFIG_MATRIX, PADDINGS, Config
from harness.base.errors import ConfigError
from harness.check.api import check_all
from harness.cli.main import main
from harness.families.base import pad_pattern, right_pad
from harness.families.catalog import FAMILIES
from harness.registry import reference_of

CI = dict(derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck))


@settings(max_examples=60, **CI)
@given(R.configs())
def test_a_drawn_config_keeps_its_promises(cfg):
    sizes = (cfg.batch, cfg.tgt_len, cfg.src_len, cfg.d_model, cfg.heads, cfg.d_k, cfg.d_ff)
    if min(cfg.tgt_len, cfg.src_len) >= R.LONG[0]:   # the long config: two lengths over 128, apart
        assert cfg.tgt_len != cfg.src_len and max(cfg.tgt_len, cfg.src_len) <= R.LONG[1]
    elif cfg.heads == 1:                              # one head: d_k = D, the rest apart
        assert len(set(sizes)) == 6 and cfg.d_k == cfg.d_model
    else:                                             # B = 1, T = 1 or none: every size apart
        assert len(set(sizes)) == 7
    assert R.in_strategies(cfg)
    regime = {k: getattr(cfg, k) for k in ("padding", "scale", "pad_idx", "factor")}
    assert Config.parse([f"{k}={v}" for k, v in regime.items()]) == Config(**regime)  # settable with --set


@settings(max_examples=40, **CI)
@given(st.sampled_from(PADDINGS), st.integers(1, 6), st.integers(1, 12), st.integers(0, 2**16))
def test_a_padding_pattern_is_what_it_says(kind, batch, length, seed):
    pad = pad_pattern(kind, torch.Generator().manual_seed(seed), batch, length)
    assert pad.shape == (batch, length) and pad.dtype == torch.bool
    assert pad[0].all() and pad.any(-1).all()          # row 0 full, every row keeps a token
    counts = pad.sum(-1, keepdim=True)
    prefix = pad == (torch.arange(length) < counts)    # right padding: real tokens first
    suffix = pad == (torch.arange(length) >= length - counts)
    if kind == "right":
        assert prefix.all() and torch.equal(pad, right_pad(torch.Generator().manual_seed(seed), batch, length))
    if kind == "left":
        assert suffix.all()
    if kind == "per_row" and batch > 1:                # row 1 left-padded, row 2 anywhere
        assert suffix[1].all()


def test_the_fixed_regimes_are_drawn_from_the_strategies():
    """Every regime case of the default matrix takes values the strategies draw; its name says
    the case it comes from; the long one crosses 64- and 128-wide key blocks."""
    found = []
    for family in FAMILIES.values():
        for case in family.cases:
            if not case.changes:
                continue
            cfg = family.case_config(case.name, Config())
            found.append(case.name)
            assert case.name.startswith(case.base + "@") and R.in_strategies(cfg), case.name
            if max(cfg.tgt_len, cfg.src_len) > 64:
                assert R.LONG[0] <= min(cfg.tgt_len, cfg.src_len) <= max(cfg.tgt_len, cfg.src_len) <= R.LONG[1]
    assert {"self@large", "cross@long", "padded@per_row", "pad@pad_idx5", "smoothed@std50", "noam@factor2"} \
        <= set(found)


def test_a_regime_case_leaves_its_base_case_as_it_was():
    """The base cases' inputs in the default regime are the draws of before (right padding
    exactly ``right_pad``'s), and a regime case's call sees its base case's name."""
    family = FAMILIES["encoder_layer"]
    base, per_row = family.inputs("padded", Config()), family.inputs("padded@per_row", Config())
    assert per_row["case"] == "padded" and torch.equal(base["x"], per_row["x"])
    assert not torch.equal(base["pad"], per_row["pad"])
    attn = FAMILIES["attention"].inputs("self@large", Config())
    assert attn["query"] is attn["key"] is attn["value"] and attn["query"].std() > 10


# Drawn regimes raise no false alarm: these families' references (PyTorch's own modules)
# against their specs on a few drawn configs (whole families would cost minutes; not shrunk:
# each example is a check, and the failing config is printed as drawn).
FAMILIES_DRAWN = ("attention", "encoder_layer", "decoder_layer", "embedding", "masks", "loss", "norm")


@settings(max_examples=3, phases=[Phase.explicit, Phase.generate], **CI)
@given(R.configs())
def test_a_drawn_regime_raises_no_false_alarm(cfg):
    keys = [reference_of(f).key for f in FAMILIES_DRAWN if reference_of(f) is not None]
    report = check_all(FAMILIES_DRAWN, {"drawn": cfg.check_fits("drawn")}, "cpu", ["float32"], variants=keys,
                       extras=False)
    assert report.specs and not report.failures, [f"{f.family}/{f.variant} {f.case}: {f.note}"[:200]
                                                   for f in report.failures][:3]


def test_explore_draws_n_configs_deterministically(tmp_path, capsys):
    outs = []
    for i in range(2):
        out = tmp_path / f"{i}.json"
        assert main(["check", "--family", "masks", "--explore", "2", "--seed", "7", "--json", str(out)]) == 0
        outs.append(json.loads(out.read_text()))
    configs = outs[0]["configs"]
    assert configs == outs[1]["configs"] and {"explore1", "explore2"} <= set(configs)
    assert set(configs) - {"explore1", "explore2"} == set(CONFIG_MATRIX)
    text = capsys.readouterr().out
    assert "explore2" in text   # reported like the matrix's configs
    assert R.explore(2, 8) != R.explore(2, 7) and R.explore(2, 7) == R.explore(2, 7)


@pytest.mark.parametrize("argv, says", [
    (["--explore", "-1"], "--explore -1 must be a number of configs from 0 to 100"),
    (["--explore", "101"], "--explore 101 must be"),
    (["--explore", "2", "--seed", "-3"], "--seed -3 must be an integer from 0"),
    (["--set", "padding=middle"], "padding='middle' must be one of right, left, arbitrary, per_row"),
    (["--set", "pad_idx=11"], "pad_idx=11 must be an integer from 0 to vocab-1=10"),
    (["--set", "scale=0"], "scale=0.0 must be a finite number > 0"),
])
def test_bad_regime_input_is_one_line(argv, says, capsys):
    assert main(["check", "--family", "masks", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1, err


def test_a_bad_regime_field_is_refused():
    with pytest.raises(ConfigError, match="factor"):
        Config(factor=float("nan"))


def test_check_runs_two_cached_sessions_per_cached_model():
    """``check`` (not only ``decode``) runs each cached model's two sessions against the full
    forward: a k/v cache never reset between sequences is a contradiction, the others pass."""
    from pathlib import Path

    from harness.check.results import CheckReport
    from harness.cli.check import cached_sessions
    from harness.registry import load_file, scratch

    with scratch():
        load_file(Path(__file__).with_name("regime_variants.py"))
        rows = cached_sessions(["decoder_only_model", "attention"], CONFIG_MATRIX, None)
    assert {r.variant for r in rows if not r.ok} == {"rg_kv_cache_not_reset"} and len(rows) > 1
    report = CheckReport(dict(CONFIG_MATRIX), ["float64"], caches=rows)
    assert [f.variant for f in report.failures] == ["rg_kv_cache_not_reset"] and report.as_dict()["caches"]


class LseAttention(torch.nn.Module):
    """Textbook attention (fill -1e9) whose softmax is written ``exp(s - logsumexp(s))`` (a
    correct reformulation, less precise in float32 at large logits), or, ``wrong``, whose
    float32 path zeroes the masked probabilities after a softmax over every key."""

    def __init__(self, d, h, wrong=False):
        super().__init__()
        self.h, self.wrong = h, wrong
        self.q, self.k, self.v, self.o = (torch.nn.Linear(d, d) for _ in range(4))

    def forward(self, query, key, value, mask):
        B, T, D = query.shape
        split = lambda x: x.view(B, -1, self.h, D // self.h).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.q(query)), split(self.k(key)), split(self.v(value))
        s = q @ k.transpose(-2, -1) / (D // self.h) ** 0.5
        keep = mask[:, None]
        if self.wrong and s.dtype == torch.float32:
            w = s.softmax(-1).masked_fill(~keep, 0.0)
        else:
            s = s.masked_fill(~keep, -1e9)
            w = torch.exp(s - torch.logsumexp(s, -1, keepdim=True))
        return self.o((w @ v).transpose(1, 2).reshape(B, T, D))


@pytest.mark.parametrize("strict", [False, True])
def test_precision_is_not_semantics(strict):
    """Where the float64 semantics hold, float32 makes a variant "less precise", not
    "different": the logsumexp softmax on ``self@large`` (logits of std ~140; ~37x the
    baseline's RMS error) is no contradiction, unless --strict-precision; a float32 path
    that computes another function stays a contradiction either way ("different" beyond
    bfloat16's tolerance at the tensor's scale and 10x the baseline's error)."""
    from harness import linear_entries, register
    from harness.check.spec import SpecChecker
    from harness.registry import scratch

    traits = {"sublayer": "attention", "fully_masked_row": "mean of V"}
    qkvo = linear_entries({"q": "q", "k": "k", "v": "v", "o": "o"})
    with scratch():
        made = {wrong: register(id=f"lse_{wrong}", family="attention", source="test", param_map=qkvo, traits=traits,
                                build=lambda cfg, w=wrong: LseAttention(cfg.d_model, cfg.heads, w),
                                call=lambda m, i: m(i["query"], i["key"], i["value"], i["mask"]))
                for wrong in (False, True)}
        checker = SpecChecker({"default": CONFIG_MATRIX["default"]}, strict=strict)
        control = {d: checker.check(made[False], "default", "self@large", d) for d in ("float64", "float32")}
        wrong = checker.check(made[True], "default", "self@large", "float32")
    assert control["float64"].ok and control["float32"].verdict == "less precise"
    assert control["float32"].ok != strict
    assert control["float32"].ratio > 10
    assert checker.check(made[True], "default", "self@large", "float64").ok
    assert not wrong.ok and (strict or wrong.verdict == "different"), (wrong.verdict, wrong.note)
