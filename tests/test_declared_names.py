"""A declaration in names the harness does not use is refused in one line that names the one it
does: another library's name for a trait value (Hugging Face's ``hidden_act``), and a map that
leaves out the canonical parameters its traits bring (QK-norm's gains). Nothing is read under an
old or foreign name (the package is unreleased: CHANGELOG.md records each rename)."""

from __future__ import annotations

import pytest

from harness.base.config import CONFIG_MATRIX
from harness.base.errors import VariantFileError
from harness.check.api import check_all
from harness.registry import load_file, scratch

HF_ACTIVATION = '''
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


register(id="hf_named_geglu", family="gated_ffn", source="a user's file", build=GeGLU, call=lambda m, i: m(i["x"]),
         param_map={n: Param(n) for n in ("gate.weight", "up.weight", "down.weight")},
         traits={"activation": "gelu_pytorch_tanh"})
'''


def test_another_librarys_activation_name_is_refused_naming_ours(tmp_path):
    path = tmp_path / "hf_names.py"
    path.write_text(HF_ACTIVATION)
    with scratch(), pytest.raises(VariantFileError) as err:
        load_file(path)
    said = str(err.value)
    assert "activation='gelu_pytorch_tanh' has no oracle" in said, said
    assert "another library's name for 'gelu_tanh'" in said, said


NO_GAINS = '''
from harness import register
from variants.llama import LLAMA, LlamaAttention, attention_map, call

QK = {**LLAMA, "qk_norm": "rms per head", "eps": 1e-6, "cases": ("self_kv",)}
register(id="qk_norm_no_gains", family="attention", source="a user's file, gains left out of its map", call=call,
         build=lambda cfg: LlamaAttention(cfg, qk_norm="per head"), param_map=attention_map(), traits=QK)
'''


def test_a_map_without_the_qk_norm_gains_is_a_porting_error_naming_them(tmp_path):
    path = tmp_path / "no_gains.py"
    path.write_text(NO_GAINS)
    with scratch():
        added = load_file(path)
        report = check_all(["attention"], {"default": CONFIG_MATRIX["default"]}, "cpu", ["float32"],
                           variants=[v.key for v in added], extras=False)
    assert report.specs and not any(s.ok for s in report.specs)
    assert all("no entry for canonical ['k_norm.weight', 'q_norm.weight']" in s.note for s in report.specs)
