"""Weight porting: round trips between every pair of a family, and strict errors."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn

from harness import Chunk, Concat, Param, PortingError, Zero
from harness.base.config import Config
from harness.families.catalog import FAMILIES, get_family
from harness.porting.entries import (
    Identity,
    Offset,
    PerHeadChunk,
    Region,
    RopePermuted,
    Tied,
    Transposed,
    entry_code,
    nest,
)
from harness.porting.portmap import PortMap, port_weights, zero_unrepresented
from harness.registry import build, get_variant, variants_of

CFG = Config()


def _port_pairs():
    for family in FAMILIES.values():
        if not family.differentiable or not family.params(CFG):
            continue
        members = [v for v in variants_of(family.name) if not v.supports(CFG)]
        for a, b in itertools.permutations(members, 2):  # those holding the same canonical parameters
            if family.params_for(CFG, a.traits) == family.params_for(CFG, b.traits):
                yield pytest.param(family.name, a.id, b.id, id=f"{family.name}/{a.id}->{b.id}")


@pytest.mark.parametrize("family,a,b", list(_port_pairs()))
def test_round_trip_through_canonical(family, a, b):
    """a's canonical weights, written into b and read back, are unchanged wherever b
    represents them; where b cannot (a bias-free Linear, an absent norm), any value other
    than the one it reads as (zero, or one for an absent norm's scale) is refused."""
    fam = get_family(family)
    va, vb = get_variant(family, a), get_variant(family, b)
    weights = fam.canonical_weights(CFG, seed=123, traits=va.traits)
    _, map_b = build(vb, CFG, dtype=torch.float64)
    if map_b.zero_names():
        with pytest.raises(PortingError, match="cannot take another value"):
            map_b.load(weights)
    _, map_a = build(va, CFG, dtype=torch.float64)
    zero = map_a.zero_names() | map_b.zero_names()
    weights = zero_unrepresented(weights, zero)
    _, map_a = build(va, CFG, dtype=torch.float64, weights=weights)
    port_weights(map_a, map_b)
    back = map_b.export()
    for name, value in weights.items():
        if map_a.represented(name) or name in zero:
            torch.testing.assert_close(back[name], value, rtol=0, atol=0, msg=f"{name} changed")


def test_fused_rows_and_per_head_rows():
    """q.weight is rows 0:D of the fused Linear and head h is rows h*d_k:(h+1)*d_k."""
    fam = get_family("attention")
    weights = fam.canonical_weights(CFG)
    fused, _ = build(get_variant("attention", "fused_sdpa"), CFG, weights=weights)
    heads, _ = build(get_variant("attention", "per_head"), CFG, weights=weights)
    d, dk = CFG.d_model, CFG.d_k
    assert torch.equal(fused.c_attn.weight[d:2 * d], weights["k.weight"].float())
    assert torch.equal(heads.v_heads[3].weight, weights["v.weight"][3 * dk:4 * dk].float())
    assert torch.equal(heads.q_heads[0].bias, weights["q.bias"][:dk].float())


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.extra = nn.Parameter(torch.zeros(3))


SHAPES = {"w.weight": (4, 4), "w.bias": (4,)}


def test_parameter_without_counterpart_is_an_error():
    with pytest.raises(PortingError, match="'extra' has no canonical counterpart"):
        PortMap("tiny", Tiny(), {"w.weight": Param("a.weight"), "w.bias": Param("a.bias")}, SHAPES)


def test_fixed_parameters_are_allowed_when_declared():
    PortMap("tiny", Tiny(), {"w.weight": Param("a.weight"), "w.bias": Param("a.bias")}, SHAPES,
            fixed={"extra": "outside the family"})


def test_missing_and_unknown_canonical_names():
    with pytest.raises(PortingError, match=r"no entry for canonical \['w.bias'\]"):
        PortMap("tiny", nn.Linear(4, 4), {"w.weight": Param("weight")}, SHAPES)
    with pytest.raises(PortingError, match="maps to 'nope'"):
        PortMap("tiny", nn.Linear(4, 4), {"w.weight": Param("nope"), "w.bias": Param("bias")}, SHAPES)


def test_shape_mismatch_names_the_parameter():
    with pytest.raises(PortingError, match=r"'w.weight' maps to a tensor of shape \(2, 4\)"):
        PortMap("tiny", nn.Linear(4, 4), {"w.weight": Chunk("weight", 0, 2), "w.bias": Param("bias")}, SHAPES)
    pm = PortMap("tiny", nn.Linear(4, 4), {"w.weight": Param("weight"), "w.bias": Param("bias")}, SHAPES)
    with pytest.raises(PortingError, match=r"canonical 'w.weight' has shape \(3, 4\), expected \(4, 4\)"):
        pm.load({"w.weight": torch.zeros(3, 4), "w.bias": torch.zeros(4)})


def test_double_mapping_and_uncovered_chunks():
    with pytest.raises(PortingError, match="mapped more than once"):
        PortMap("tiny", nn.Linear(4, 4), {"w.weight": Param("weight"), "w.bias": Concat(["bias", "bias"])},
                {"w.weight": (4, 4), "w.bias": (8,)})
    lin = nn.Linear(4, 8)
    with pytest.raises(PortingError, match="'weight' has no canonical counterpart"):
        PortMap("tiny", lin, {"w.weight": Chunk("weight", 0, 2), "w.bias": Chunk("bias", 0, 2)}, SHAPES)


def test_zero_refuses_non_zero_and_accepts_zero():
    pm = PortMap("bias_free", nn.Linear(4, 4, bias=False),
                 {"w.weight": Param("weight"), "w.bias": Zero()}, SHAPES)
    with pytest.raises(PortingError, match="bias_free: has no 'w.bias'"):
        pm.load({"w.weight": torch.ones(4, 4), "w.bias": torch.full((4,), 0.5)})
    pm.load({"w.weight": torch.ones(4, 4), "w.bias": torch.zeros(4)})
    assert torch.equal(pm.export()["w.bias"], torch.zeros(4))


def test_missing_or_extra_canonical_weights_on_load():
    pm = PortMap("tiny", nn.Linear(4, 4), {"w.weight": Param("weight"), "w.bias": Param("bias")}, SHAPES)
    with pytest.raises(PortingError, match=r"lack \['w.bias'\]"):
        pm.load({"w.weight": torch.zeros(4, 4)})
    with pytest.raises(PortingError, match=r"unknown \['x'\]"):
        pm.load({"w.weight": torch.zeros(4, 4), "w.bias": torch.zeros(4), "x": torch.zeros(1)})


def test_an_entry_says_where_it_lies_as_regions_and_rebuilds_as_its_own_code():
    """A region is a type (whole, a chunk, a chunk inside each head's block), not a tagged
    tuple; an entry re-rooted under a prefix and written as code says the same entry."""
    assert Param("w").regions() == [Region("w")]
    assert Concat(["a", "b"], 1).regions() == [Region("a", 1), Region("b", 1)]
    per_head = PerHeadChunk("qkv", 1, 3, heads=2)
    [region] = per_head.regions()
    assert region == Region("qkv", 0, 1, 3, heads=2)
    w = torch.arange(12.0).reshape(12, 1)  # head 0: rows 0-5 (q 0-1, k 2-3, v 4-5), head 1: rows 6-11
    assert region.flat(region.view(w)).flatten().tolist() == [2.0, 3.0, 8.0, 9.0]
    assert torch.equal(region.shaped(region.flat(region.view(w)), region.view(w)), region.view(w))
    assert Region("c", 0, 2, 4).view(w).flatten().tolist() == [6.0, 7.0, 8.0]
    with pytest.raises(PortingError, match="cannot split size 12 into 5 equal chunks"):
        Region("c", 0, 0, 5).view(w)
    entries = {"q.weight": Transposed(Chunk("c_attn.weight", 0, 3, dim=1)), "k.weight": RopePermuted(per_head, 2),
               "lm_head.weight": Tied("embed.weight"), "o.weight": Identity(), "o.bias": Zero(),
               "g.weight": Offset(Param("ln.weight"), 1.0), "r.weight": RopePermuted(Param("r"), 2, 0.5)}
    nested = nest(entries, "layers.0.", "h.0.")
    assert {k: entry_code(e) for k, e in nested.items()} == {
        "layers.0.q.weight": 'Transposed(Chunk("h.0.c_attn.weight", 0, 3, dim=1))',
        "layers.0.k.weight": 'RopePermuted(PerHeadChunk("h.0.qkv", 1, 3, heads=2), heads=2)',
        "layers.0.lm_head.weight": 'Tied("layers.0.embed.weight")', "layers.0.o.weight": "Identity()",
        "layers.0.o.bias": "Zero()", "layers.0.g.weight": 'Offset(Param("h.0.ln.weight"), 1)',
        "layers.0.r.weight": 'RopePermuted(Param("h.0.r"), heads=2, fraction=0.5)'}
