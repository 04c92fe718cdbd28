"""A value that names one thing is never read as the list of its letters: the families a
command is limited to (a list from the repeatable ``--family``, one str from ``diff FAMILY``
or ``map --family F``) are typed once, and the declarations that take tuples of names refuse
a bare str, or take it as the one name it is."""

from __future__ import annotations

import argparse

import pytest

from harness import PathFinding, register
from harness.base.errors import RegistryError
from harness.bench.cases import BenchCase
from harness.cli.common import FamilyChoice, _families, _load
from harness.registry import scratch

MINE = '''
from harness import register
from torch import nn

register(id="mine_elsewhere", family="attention", source="mine", build=lambda cfg: nn.Identity(),
         call=lambda m, i: m(i["query"]), traits={"sublayer": "attention", "fully_masked_row": "zeros"})
'''


@pytest.mark.parametrize("family,said", [
    ("attention_kernel", "the family 'attention_kernel'"),   # diff's positional, map's --family: one str
    (["attention_kernel", "norm"], "--family attention_kernel,norm"),  # the repeatable option
])
def test_a_family_filter_names_the_families_not_their_letters(tmp_path, capsys, family, said):
    mine = tmp_path / "mine.py"
    mine.write_text(MINE)
    with scratch():
        _load(argparse.Namespace(family=family, variants=[str(mine)]))
    err = capsys.readouterr().err
    # 'attention' is a substring of 'attention_kernel', not one of the families asked for
    assert f"note: {said} leaves out mine_elsewhere (attention family)" in err, err
    assert "a,t,t" not in err
    assert FamilyChoice.of(argparse.Namespace(family=family)).names == ((family,) if isinstance(family, str)
                                                                         else tuple(family))


def test_the_families_of_a_one_family_command_are_that_family():
    assert _families(argparse.Namespace(family="norm")) == ["norm"]
    assert _families(argparse.Namespace(family=["norm", "ffn"])) == ["norm", "ffn"]


def test_a_path_finding_scoped_by_a_bare_str_is_refused_at_registration():
    with scratch(), pytest.raises(RegistryError, match="tuples of names"):
        register(id="scoped", family="attention", source="tests", build=lambda cfg: None, call=lambda m, i: None,
                 traits={"sublayer": "attention", "fully_masked_row": "zeros",
                         "path_findings": {"self": PathFinding("a fused kernel", devices="cuda")}})


def test_one_set_item_given_as_a_str_is_that_item():
    case = BenchCase("attention", "torch_mha", 2, 8, 16, 2, 32, "float32", "cpu", "fwd", sets="kv_heads=1")
    assert case.sets == ("kv_heads=1",) and case.key.endswith("|kv_heads=1")


def test_a_decoding_s_one_padding_side_given_as_a_str_is_that_side():
    from harness.families.models import DECODINGS, register_decoding

    saved = dict(DECODINGS)
    try:
        steps = {"prepare": lambda m, i, c: None, "step": lambda m, s, ys: None}
        assert register_decoding("llama_model", "one_side", padding="left", **steps).padding == ("left",)
        with pytest.raises(RegistryError, match="must name the sides"):
            register_decoding("llama_model", "no_side", padding=("up",), **steps)
    finally:
        DECODINGS.clear()
        DECODINGS.update(saved)
