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


OLD_FILE = '''
import torch
from torch import nn
from harness import Chunk, Param, register
from harness.adapt import causal_and_pad, key_pad_to_attn, masked


class MyAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.mha = nn.MultiheadAttention(cfg.d_model, cfg.heads, batch_first=True)

    def forward(self, query, key, value, mask):
        return self.mha(query, key, value, attn_mask=masked(mask).repeat_interleave(self.mha.num_heads, 0),
                        need_weights=False)[0]


assert key_pad_to_attn(torch.tensor([[True, False]]), 3).shape == (1, 3, 2)
assert causal_and_pad(torch.ones(1, 2, dtype=torch.bool)).tolist() == [[[True, False], [True, True]]]
register(id="torch_mha", family="attention", source="a user's file, written before the project's torch_mha",
         build=MyAttention, call=lambda m, i: m(i["query"], i["key"], i["value"], i["mask"]),
         param_map={**{f"{c}.{k}": Chunk(f"mha.in_proj_{k}", n, 3) for n, c in enumerate("qkv")
                       for k in ("weight", "bias")},
                    "o.weight": Param("mha.out_proj.weight"), "o.bias": Param("mha.out_proj.bias")},
         traits={"sublayer": "attention", "fully_masked_row": "NaN"})
'''


def test_an_old_user_file_keeps_loading(tmp_path, capsys):
    """A file written for an earlier version: its mask helpers from ``harness.adapt`` resolve
    (one deprecation line), and its id, a project variant's since, is loaded under the file's
    name, said in one line; the project's variant is untouched."""
    from harness.registry import load_packs

    load_packs()
    path = tmp_path / "old_file.py"
    path.write_text(OLD_FILE)
    with scratch():
        added = load_file(path)
        assert [v.key for v in added] == ["attention/old_file_torch_mha"]
        assert get_variant("attention", "torch_mha").origin != str(path.resolve())
    err = capsys.readouterr().err
    assert err.count("deprecated: harness.adapt") == 1
    assert ("note: variant 'attention/torch_mha' of old_file.py is a project variant's id" in err
            and "loaded as 'attention/old_file_torch_mha'" in err), err


OLD_QK_NORM = '''
import torch
from harness import register
from variants.llama import LLAMA, LlamaAttention, attention_map, call

QK = {**LLAMA, "qk_norm": "rms per head", "eps": 1e-6, "cases": ("self_kv",)}
HELD = {"q_norm.weight": "QK-norm gain, held at its init", "k_norm.weight": "QK-norm gain, held at its init"}


def gain_1_5(cfg):
    module = LlamaAttention(cfg, qk_norm="per head")
    with torch.no_grad():
        module.q_norm.weight.fill_(1.5)
    return module


register(id="old_qk_norm", family="attention", source="a user's file, gains in fixed", call=call,
         build=lambda cfg: LlamaAttention(cfg, qk_norm="per head"), param_map=attention_map(), traits=QK, fixed=HELD)
register(id="old_qk_norm_gain_1_5", family="attention", source="a user's file, gains in fixed", call=call,
         build=gain_1_5, param_map=attention_map(), traits=QK, fixed=HELD)
'''


def test_a_map_without_the_qk_norm_gains_keeps_its_meaning(tmp_path, capsys):
    """A QK-norm variant whose map was written before the gains were canonical (the module's
    gains in ``fixed``): it loads with one deprecation line per variant naming the new form,
    and its gains are held at one on both sides, as ``fixed`` held them: a module with unit
    gains is equivalent, one whose q gain is 1.5 is not."""
    from harness.base.config import CONFIG_MATRIX
    from harness.check.api import check_all

    path = tmp_path / "old_qk.py"
    path.write_text(OLD_QK_NORM)
    with scratch():
        added = load_file(path)
        variant = get_variant("attention", "old_qk_norm")
        assert set(variant.traits["not_learned"]) == {"q_norm.weight", "k_norm.weight"}
        report = check_all(["attention"], {"default": CONFIG_MATRIX["default"]}, "cpu", ["float32"],
                           variants=[v.key for v in added], extras=False)
    err = capsys.readouterr().err.strip().splitlines()
    assert len([line for line in err if line.startswith("deprecated: variant 'attention/old_qk_norm")]) == 2, err
    assert "(old_qk.py)" in err[0] and "k_norm.weight, q_norm.weight" in err[0] and "Param(" in err[0]
    verdicts = {}
    for spec in report.specs:
        verdicts.setdefault(spec.variant, []).append(spec.ok)
    assert verdicts["old_qk_norm"] and all(verdicts["old_qk_norm"]), report.specs
    assert not all(verdicts["old_qk_norm_gain_1_5"])
