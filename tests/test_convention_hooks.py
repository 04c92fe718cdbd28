"""The conventions' hooks (``harness.families.conventions.core``) each do what they say:

- ``kernel_option``: ``register_kernel`` passes each convention's option to a function whose
  signature names it (the softcap as before, ALiBi's ``alibi_slopes``), and an ``as called``
  value reads it: a kernel taking the call's slopes checks clean (one writing flash-attention's
  bias among them), one that ignores them or flips their sign is caught and named;
- ``cases``: the cases a convention adds are its family case with the option set (``softcap``:
  ``cross`` with the cap; ``alibi``: ``causal_pad`` with the slopes), run only by the kernels
  that take the option;
- ``Regime.declared_only``: ALiBi's regimes (H = 6, key padding with holes) run only for the
  variants declaring ALiBi, so the default check catches the next power's slopes and positions
  over key indices, and nothing else in the registry gets them.
"""

from __future__ import annotations

import pytest
import torch
import wrong_alibi as W

from harness import register_kernel
from harness.base.config import CONFIG_MATRIX, Config
from harness.check.api import check_all
from harness.families import conventions
from harness.families import kernel as K
from harness.families.catalog import get_family
from harness.families.conventions import alibi as A
from harness.families.conventions.core import AS_CALLED, Context
from harness.registry import applicable, get_variant, scratch, variants_of
from harness.registry.kernels import OPTIONS, KernelModule, accepted_options
from harness.trace.kernel_explain import name_mistakes

KERNELS = get_family("attention_kernel")
ATTENTION = get_family("attention")
DEFAULT = CONFIG_MATRIX["default"]
ALIBI_REGIMES = {"attention": ("cross@heads6", "cross@holes"), "attention_kernel": ("self@heads6",)}


# -- kernel_option ---------------------------------------------------------------------------

def test_the_kernel_options_are_the_conventions():
    names = tuple(o.name for o in conventions.kernel_options())
    assert names == ("softcap", "alibi_slopes")
    assert OPTIONS == ("causal", "window", *names, "dropout_p", "block")
    assert accepted_options(lambda q, k, v, mask, **kw: q) == OPTIONS
    assert accepted_options(lambda q, k, v, mask, alibi_slopes=None: q) == ("alibi_slopes",)


def test_the_module_passes_each_option_as_the_kernel_takes_it():
    seen = {}

    def fn(q, k, v, mask, softcap=0.0, alibi_slopes=None):
        seen.update(softcap=softcap, alibi_slopes=alibi_slopes)
        return q

    module = KernelModule(fn, layout="BHSD", mask="bool", options=("softcap", "alibi_slopes"))
    q = torch.zeros(1, 2, 3, 4)
    mask, key_pad = torch.ones(1, 3, 3, dtype=torch.bool), torch.ones(1, 3, dtype=torch.bool)
    module(q, q, q, mask, key_pad, softcap=3)
    assert seen == {"softcap": 3.0, "alibi_slopes": None} and isinstance(seen["softcap"], float)
    module(q, q, q, mask, key_pad, alibi_slopes=torch.tensor([0.5, 0.25], dtype=torch.bfloat16))
    assert seen["softcap"] == 0.0 and seen["alibi_slopes"].dtype == torch.float32   # fp32, flash-attention's
    with pytest.raises(TypeError, match="unknown option"):
        module(q, q, q, mask, key_pad, alibi=1.0)


def test_as_called_reads_the_calls_slopes():
    s = torch.zeros(1, 2, 1, 3, dtype=torch.float64)
    called = torch.tensor([1.0, 0.5], dtype=torch.float64)
    out = A.with_alibi(AS_CALLED, s, Context({"alibi_slopes": called}))
    torch.testing.assert_close(out[0, :, 0], torch.tensor([[-2.0, -1.0, 0.0], [-1.0, -0.5, 0.0]], dtype=torch.float64))
    assert A.with_alibi(AS_CALLED, s, Context({"alibi_slopes": None})) is s


def test_a_kernel_taking_the_calls_slopes_checks_clean_and_misuses_are_named():
    checker_configs = {"default": DEFAULT, "heads8": CONFIG_MATRIX["heads8"]}
    with scratch():
        made = W.register_all()
        report = check_all(["attention_kernel"], checker_configs, "cpu", ["float64", "float32"],
                           variants=[made[v].key for v in ("control_alibi_called_flash", *W.WRONG_CALLED)],
                           extras=False)
        named = name_mistakes("attention_kernel", [made[v] for v in W.WRONG_CALLED], DEFAULT)
    mine = {}
    for s in report.specs:
        mine.setdefault(s.variant, []).append(s)
    control = mine["control_alibi_called_flash"]
    assert {s.case for s in control} >= {"alibi", "self@heads6", "causal_pad"}
    assert all(s.ok for s in control), [(s.case, s.note) for s in control if not s.ok]
    for vid, (_, label) in W.WRONG_CALLED.items():
        failing = {s.case for s in mine[vid] if not s.ok}
        assert failing == {"alibi"}, (vid, failing)
        assert named[vid].startswith(f"reads as {label} (declared alibi='as called')"), named[vid]


def test_flash_attentions_bias_differs_from_key_indices_without_causal():
    """flash-attention's ``-slope * |i + S - T - j|`` is symmetric about the diagonal: on a
    call that is not causal, keys after it are penalised too, which ``as called`` does not build."""
    with scratch():
        control = W.register_all()["control_alibi_called_flash"]
        inputs = KERNELS.inputs("cross", DEFAULT)
        inputs["alibi_slopes"] = A.slopes(DEFAULT.heads)
        out = control.build(DEFAULT)(inputs["q"], inputs["k"], inputs["v"], inputs["mask"], inputs["key_pad"],
                                     alibi_slopes=inputs["alibi_slopes"])
    traits = KERNELS.semantic_traits(control.traits)
    expected = KERNELS.oracle(traits, DEFAULT, {}, inputs, torch.float64)
    assert (out - expected).abs().max() > 1e-3


# -- cases -------------------------------------------------------------------------------------

def test_a_conventions_case_is_its_base_with_the_option_set():
    cfg = Config()
    softcap, cross = KERNELS.inputs("softcap", cfg), KERNELS.inputs("cross", cfg)
    assert softcap["softcap"] == 2.0 and cross["softcap"] == 0.0
    assert all(torch.equal(softcap[n], cross[n]) for n in ("q", "k", "v", "mask", "key_pad"))
    assert KERNELS.inputs("softcap", Config(softcap=3.0))["softcap"] == 3.0
    alibi, causal_pad = KERNELS.inputs("alibi", Config(heads=6)), KERNELS.inputs("causal_pad", Config(heads=6))
    torch.testing.assert_close(alibi["alibi_slopes"], A.slopes(6))
    assert causal_pad["alibi_slopes"] is None and alibi["causal"] and torch.equal(alibi["q"], causal_pad["q"])
    assert K.CASE_NEEDS["softcap"] == ("softcap",) and K.CASE_NEEDS["alibi"] == ("causal", "alibi_slopes")
    assert K.CASE_MASKS["alibi"] == "right" and "alibi" in K.CAUSAL_CASES


def test_only_the_kernels_taking_the_option_run_its_case():
    traits = {"causal": "top_left", "alibi": AS_CALLED}
    with scratch():
        takes = register_kernel(id="takes", fn=lambda q, k, v, mask, causal=False, alibi_slopes=None: q, traits=traits)
        lacks = register_kernel(id="lacks", fn=lambda q, k, v, mask, causal=False, softcap=0.0: q, traits=traits)
    assert "alibi" in takes.traits["cases"] and "softcap" not in takes.traits["cases"]
    assert "alibi" not in lacks.traits["cases"] and "softcap" in lacks.traits["cases"]


# -- Regime.declared_only ------------------------------------------------------------------------

def test_the_default_check_catches_the_next_powers_slopes_and_positions_over_indices():
    wrong = ("wrong_alibi_next_power", "wrong_alibi_indices", "wrong_alibi_kernel_next_power")
    clean = ("bloom_alibi", "mpt_alibi_sdpa", "control_alibi_relative", "control_alibi_kernel_relative")
    with scratch():
        made = W.register_all()
        keys = [made[v].key for v in wrong + clean[2:]]
        keys += [get_variant("attention", "bloom_alibi").key, get_variant("attention_kernel", "mpt_alibi_sdpa").key]
        report = check_all(["attention", "attention_kernel"], CONFIG_MATRIX, "cpu", ["float64"], variants=keys,
                           extras=False)
    failing = {(s.variant, s.case) for s in report.specs if not s.ok}
    assert {v for v, _ in failing} == set(wrong), failing
    assert {c for v, c in failing if v == "wrong_alibi_next_power"} == {"cross@heads6"}
    assert {c for v, c in failing if v == "wrong_alibi_kernel_next_power"} == {"self@heads6"}
    # random_mask catches it on heads8 only (a key column no query attends); the holes regime on the default config
    assert {c for v, c in failing if v == "wrong_alibi_indices"} == {"cross@holes", "random_mask"}
    holes = {s.config for s in report.specs if s.variant == "wrong_alibi_indices" and s.case == "cross@holes"
             and not s.ok}
    assert "default" in holes, holes
    ran = {(s.variant, s.case) for s in report.specs}
    assert all((v, c) in ran for v in ("bloom_alibi", "control_alibi_relative") for c in ALIBI_REGIMES["attention"])


def test_no_variant_without_alibi_gets_its_cases():
    for family, regimes in ALIBI_REGIMES.items():
        for v in variants_of(family):
            declares = v.traits.get("alibi", "none") != "none"
            for case in (*regimes, *(["alibi"] if family == "attention_kernel" else [])):
                if not declares:
                    assert not applicable(v, case), (v.key, case)
        assert any(applicable(v, regimes[0]) for v in variants_of(family))       # BLOOM, MPT
    assert not KERNELS.declared_for("self@heads6", {"alibi": "none"})
    assert KERNELS.declared_for("self@heads6", {"alibi": "key indices"}) and KERNELS.declared_for("self", {})


def test_a_regime_case_config_has_six_heads_on_every_config():
    for name, cfg in CONFIG_MATRIX.items():
        changed = ATTENTION.case_config("cross@heads6", cfg)
        assert (changed.heads, changed.n_kv_heads, changed.d_k) == (6, 6, 8), name
    assert ATTENTION.case_config("cross@holes", DEFAULT).padding == "arbitrary"


def test_diff_on_a_regime_of_six_heads_builds_both_sides_for_it():
    """``diff`` on cross@heads6 runs both sides with six heads (built for the case's config):
    the next power's slopes differ from BLOOM's there, and nowhere on four heads."""
    from harness.base.verdicts import Verdict
    from harness.trace.pairs import diff_pair

    with scratch():
        made = W.register_all()
        bloom = get_variant("attention", "bloom_alibi")
        six = diff_pair("attention", made["wrong_alibi_next_power"], bloom, "cross@heads6", DEFAULT, "float64",
                        hints=False, attribution=False)
        four = diff_pair("attention", made["wrong_alibi_next_power"], bloom, "cross", DEFAULT, "float64",
                         hints=False, attribution=False)
    assert not six.errors and six.verdict == Verdict.DIFFERENT, (six.errors, six.verdict)
    assert four.verdict in (Verdict.IDENTICAL, Verdict.EQUIVALENT), four.verdict
