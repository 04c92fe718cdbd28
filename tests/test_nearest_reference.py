"""The summary's verdict is taken against the nearest reference: the variant of the family
whose declared semantic traits are closest (then the one that takes most of the variant's
cases and configs, then the family's reference), named in the cell. A RoPE or NaN-row
variant is compared with one it can be equivalent to, not 'different: rope' from the plain
reference."""

from __future__ import annotations

from pathlib import Path

from harness import register
from harness.base.config import CONFIG_MATRIX
from harness.check.pairs import derive_pairs
from harness.check.results import Cell
from harness.check.spec import SpecChecker
from harness.cli.report import _checked_variants
from harness.registry import REGISTRY, get_variant, load_all, reference_of, scratch, variants_of
from harness.registry.nearest import differing_traits, nearest_reference, nearness, ranked_references
from harness.report.summary import reference_verdict, short_verdict

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "my_attention.py"
BASE = {"sublayer": "attention", "fully_masked_row": "zeros"}


def _declare(id: str, **traits):
    return register(id=id, family="attention", source="tests", build=lambda cfg: None,
                    call=lambda m, i: None, traits={**BASE, **traits})


def test_the_nearest_has_the_fewest_differing_traits_then_covers_most_then_is_the_reference():
    """Over the whole registry: no candidate is nearer than the one chosen, by the rule's
    order, and at a tie the family's reference wins."""
    load_all()
    for v in REGISTRY.values():
        ranked = ranked_references(v)
        if not ranked:
            continue
        first = ranked[0]
        assert first.candidate.key != v.key
        assert all((len(first.differing), first.uncovered) <= (len(n.differing), n.uncovered) for n in ranked), v.key
        ref = reference_of(v.family)
        tie = [n for n in ranked if (len(n.differing), n.uncovered) == (len(first.differing), first.uncovered)]
        if ref is not None and ref.key != v.key and any(n.candidate.key == ref.key for n in tie):
            assert first.candidate.key == ref.key, v.key
        assert first.differing == differing_traits(v, first.candidate)


def test_a_rope_variant_is_compared_with_a_rope_variant_and_a_gqa_one_with_one_taking_its_config():
    load_all()
    with scratch():
        rope = _declare("mine_rope", rope="half-split")
        near = nearest_reference(rope)
        assert near is not None and near.differing == () and near.candidate.traits.get("rope") == "half-split"
        assert near.candidate.key != reference_of("attention").key  # not 'different: rope' from the plain one
        # RoPE, GQA and a NaN row together, declared by no registered variant: the nearest differs in the
        # fewest traits, and takes the GQA config the variant runs where one that does is as near
        nan = _declare("mine_rope_nan", rope="half-split", gqa_grouping="consecutive", fully_masked_row="NaN")
        near = nearest_reference(nan)
        assert near is not None and near.differing == ("fully_masked_row",)
        fewest = min(len(differing_traits(nan, c)) for c in variants_of("attention") if c.key != nan.key)
        assert len(near.differing) == fewest
        assert near.uncovered == min(n.uncovered for n in ranked_references(nan) if len(n.differing) == fewest)
        # a variant of the reference's class is compared with the reference
        plain = _declare("mine_plain")
        assert nearest_reference(plain).candidate.key == reference_of("attention").key
        # one with no case in common is no candidate
        only_rope = _declare("mine_far_only", rope="half-split", cases=("far",))
        assert nearness(only_rope, get_variant("attention", "mine_plain")) is None


def test_report_of_my_variant_checks_and_names_its_nearest_reference():
    """`report --variant my_einsum`: the check covers my_einsum's nearest reference (a NaN for a
    row without keys, as it declares), and the summary's cell is 'equivalent vs' it, where
    against the family's reference it would read 'different: fully_masked_row'."""
    load_all([str(EXAMPLE)])
    mine = get_variant("attention", "my_einsum")
    near = nearest_reference(mine, "cpu")
    ref = reference_of("attention")
    assert near is not None and near.differing == () and near.candidate.key != ref.key
    keys = _checked_variants(["my_einsum"], ["attention"], "cpu")
    assert set(keys) == {mine.key, ref.key, near.candidate.key}
    engine = SpecChecker({"default": CONFIG_MATRIX["default"]}, "cpu")
    ids = [k.split("/")[1] for k in keys]
    specs = {Cell("attention", v, "default", "fully_masked", "float32"):
             engine.check(get_variant("attention", v), "default", "fully_masked", "float32") for v in ids}
    pairs = derive_pairs(engine.checkers, "attention", "default", "fully_masked", "float32", specs=specs,
                         device="cpu")
    assert short_verdict(reference_verdict("attention", "my_einsum", pairs)) == f"equivalent vs {near.candidate.id}"
    against_ref = [p for p in pairs if {p.a, p.b} == {ref.id, "my_einsum"}]
    assert [p.verdict for p in against_ref] == ["different"]
    # the check ran no pair with the nearest: the next one it ran, named
    without = [p for p in pairs if near.candidate.id not in (p.a, p.b)]
    assert short_verdict(reference_verdict("attention", "my_einsum", without)) == \
        f"different vs {ref.id}: fully_masked_row"
