"""Verdicts that hold on real code: a registration that cannot honour a shape says so, and
the conventions real code uses are declarable (each with its wrong variant caught and its
correct control equivalent)."""

from __future__ import annotations

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
    ok = check_all(["attention"], {"tiny": Config(d_model=8, heads=2, batch=2, tgt_len=3, src_len=4, d_ff=8)},
                   "cpu", ["float32"], variants=["attention/gpt_neox"], extras=False)
    assert [s for s in ok.specs if s.variant == "gpt_neox"] and not ok.failures
