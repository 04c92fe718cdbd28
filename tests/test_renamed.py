"""A trait value under an old (or another library's) name still loads: it is read as its
name here, with one deprecation line on stderr."""

from __future__ import annotations

from harness.families.catalog import get_family
from harness.registry import get_variant, load_file, scratch

OLD_NAMES = '''
from torch import nn
import torch.nn.functional as F
from harness import Param, register


class GeGLU(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gate = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.up = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.down = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

    def forward(self, x):
        return self.down(F.gelu(self.gate(x), approximate="tanh") * self.up(x))


register(id="old_geglu", family="gated_ffn", source="a user's file", build=GeGLU, call=lambda m, i: m(i["x"]),
         param_map={n: Param(n) for n in ("gate.weight", "up.weight", "down.weight")},
         traits={"activation": "gelu_pytorch_tanh"})
'''


def test_renamed_value_loads_with_one_deprecation_line(tmp_path, capsys):
    path = tmp_path / "old_names.py"
    path.write_text(OLD_NAMES)
    with scratch():
        load_file(path)
        assert get_variant("gated_ffn", "old_geglu").traits["activation"] == "gelu_tanh"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("deprecated: variant 'gated_ffn/old_geglu'")
    assert "'gelu_pytorch_tanh'" in err[0] and "'gelu_tanh'" in err[0]


def test_renamed_values_name_known_values():
    for family in ("ffn", "gated_ffn", "encoder_layer"):
        spec = get_family(family).traits["activation"]
        assert spec.renamed and all(new in spec.values for new in spec.renamed.values())
        assert not set(spec.renamed) & set(spec.values)
