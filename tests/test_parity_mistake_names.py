"""``parity`` names the porting mistakes no change on the port's side undoes, by reproducing
each in the class: the sliding window ignored, a soft cap dropped (attention or final
logits), ``rope_theta`` read from the wrong field. Tiny Gemma 3 and Llama checkpoints built
from configs here (fixed seeds) and saved into tmp_path; each wrong port is the correct one
built from a config with the feature changed, and the correct ports stay clean.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="transformers is not installed: pip install -e '.[hf]'")

from harness.cli.main import main  # noqa: E402
from harness.registry import Variant, get_variant, load_file, scratch  # noqa: E402
from harness.systems.checkpoint_parity import compare, prepare, sample_tokens  # noqa: E402

PORTS = Path(__file__).resolve().parents[1] / "examples" / "class_ports.py"
SMALL = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2)
CONFIGS = {
    # a cap small enough that the checkpoint's own logits reach it (Gemma 3 has no attention cap)
    "gemma3": lambda: transformers.Gemma3TextConfig(
        **SMALL, head_dim=8, sliding_window=4, query_pre_attn_scalar=8, final_logit_softcapping=3.0,
        layer_types=["sliding_attention", "full_attention"]),
    "llama": lambda: transformers.LlamaConfig(**SMALL, rope_parameters={"rope_type": "default",
                                                                         "rope_theta": 1e6}),
}


def _save(kind: str, folder: Path) -> Path:
    cfg = CONFIGS[kind]()
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and "norm" in name and name.endswith("weight"):
                p.add_(0.3 * torch.randn(p.shape, generator=gen))
            elif p.dim() == 2:
                p.mul_(3.0)
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("named")
    return {kind: _save(kind, root / kind) for kind in CONFIGS}


@pytest.fixture(scope="module")
def ports():
    with scratch():
        load_file(PORTS)
        yield


def _wrong(port: str, **changes) -> Variant:
    variant = get_variant("llama_model", port)
    build = variant.build
    return dataclasses.replace(variant, id=port + "_wrong",
                               build=lambda cfg: build(dataclasses.replace(cfg, **changes)))


def _names(folder: Path, port):
    comparison = prepare(folder, port)
    report = compare(comparison, sample_tokens(comparison.cfg, 3, 16, seed=0))
    return report, [m["name"] for m in report.mistakes]


@pytest.mark.parametrize("kind, port, changes, name", [
    ("gemma3", "gemma3_port", {"window": None}, "sliding window ignored"),
    ("gemma3", "gemma3_port", {"final_softcap": 0.0}, "final logit softcap dropped"),
    ("gemma3", "gemma3_port", {"layer_rope": ()}, "rope_theta read from the wrong field"),
    ("llama", "llama_model", {"rope_base": 10000.0}, "rope_theta read from the wrong field"),
])
def test_a_config_value_the_port_ignores_is_named(folders, ports, kind, port, changes, name):
    report, names = _names(folders[kind], _wrong(port, **changes))
    assert not report.agrees and names == [name]
    assert report.mistakes[0]["by"] == "reproduced in the class"


@pytest.mark.parametrize("kind, port", [("gemma3", "gemma3_port"), ("llama", "llama_model")])
def test_correct_ports_name_nothing(folders, ports, kind, port):
    report, names = _names(folders[kind], port)
    assert report.agrees and names == []


def test_the_name_in_the_command_output(folders, ports, capsys):
    with scratch():
        load_file(PORTS)
        from harness.registry import register  # the wrong port registered as a user's would be
        wrong = _wrong("gemma3_port", final_softcap=0.0)
        register(id="gemma3_nocap", family="llama_model", source="test", summary="Gemma 3 without its final cap",
                 build=wrong.build, call=wrong.call, param_map=wrong.param_map, supports=wrong.supports,
                 traits=wrong.traits)
        assert main(["parity", str(folders["gemma3"]), "--port", "gemma3_nocap", "--length", "12"]) == 1
    out = capsys.readouterr().out
    assert "mistake: final logit softcap dropped" in out and "(reproduced in the class, the worst KL" in out
