"""``parity`` on classes no table names: tiny checkpoints of Phi-3, a Llama 3.1 config with
``llama3`` RoPE scaling, Gemma 3 (text), OLMo 2 and GPT-NeoX, each built from a small config
with a fixed seed (its norm gains moved off their init) and saved with ``save_pretrained``
into tmp_path (no download).

- Phi-3 (fused ``qkv_proj`` and ``gate_up_proj``) and Llama 3.1 agree with ``llama_model``;
  Gemma 3 with ``gemma3_port`` (examples/class_ports.py): each class read from its own
  parameters, its config values reaching the port;
- controls that must be caught: the Llama 3.1 port without its RoPE scaling, Gemma 3's port
  without its windows;
- OLMo 2 and GPT-NeoX into ``llama_model``: one line naming the features the family cannot
  carry; into the ports that use the classes' own names (mapped by name): they agree, and a
  GPT-NeoX port without its parallel residual does not.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="transformers is not installed: pip install -e '.[hf]'")

from harness.cli.main import main  # noqa: E402
from harness.registry import Variant, get_variant, load_file, scratch  # noqa: E402
from harness.systems.checkpoint_parity import KL_BOUND, compare, prepare, sample_tokens  # noqa: E402

PORTS = Path(__file__).resolve().parents[1] / "examples" / "class_ports.py"
SMALL = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2)
CONFIGS = {
    "phi3": lambda: transformers.Phi3Config(**SMALL),
    "llama31": lambda: transformers.LlamaConfig(**SMALL, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8}),
    "gemma3": lambda: transformers.Gemma3TextConfig(**SMALL, head_dim=8, sliding_window=4, query_pre_attn_scalar=8,
                                                    layer_types=["sliding_attention", "full_attention"]),
    "olmo2": lambda: transformers.Olmo2Config(**SMALL),
    "gpt_neox": lambda: transformers.GPTNeoXConfig(**{**SMALL, "hidden_size": 64, "intermediate_size": 128,
                                                      "num_key_value_heads": None}),
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
            elif p.dim() == 2:  # sharper distributions than the init's, as a trained model's
                p.mul_(3.0)
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("classes")
    return {kind: _save(kind, root / kind) for kind in CONFIGS}


@pytest.fixture(scope="module")
def ports():
    with scratch():
        load_file(PORTS)
        yield


def _run(folder: Path, port):
    comparison = prepare(folder, port)
    tokens = sample_tokens(comparison.cfg, 3, 16, seed=0)
    return comparison, compare(comparison, tokens)


@pytest.mark.parametrize("kind, port", [("phi3", "llama_model"), ("llama31", "llama_model"),
                                        ("gemma3", "gemma3_port")])
def test_classes_through_the_family_agree(folders, ports, kind, port):
    comparison, report = _run(folders[kind], port)
    assert report.agrees, [(m.name, m.value) for m in report.metrics if not m.ok]
    assert report.kl_worst <= KL_BOUND and not comparison.by_name
    held = {r.path for e in comparison.reader.entries.values() for r in e.regions()}
    assert held == set(comparison.checkpoint.names)


def test_class_values_reach_the_port(folders, ports):
    """Phi-3's fused tensors are split by the q and K/V widths; Llama 3.1's llama3 scaling,
    Gemma 3's layer types, windows, RoPE bases and score scale are in the config."""
    phi3 = prepare(folders["phi3"], "llama_model")
    k = phi3.reader.entries["layers.0.self_attn.k.weight"]
    assert k.path == "model.layers.0.self_attn.qkv_proj.weight" and k.sizes == (32, 16, 16)
    llama = prepare(folders["llama31"], "llama_model").cfg
    assert llama.rope_scaling.type.value == "llama3" and llama.rope_scaling.factor == 8.0
    gemma = prepare(folders["gemma3"], "gemma3_port").cfg
    assert gemma.layer_types == ("sliding_attention", "full_attention") and gemma.window == (3, 0)
    assert gemma.layer_rope_of(0)[0] == 10000.0 and gemma.layer_rope_of(1)[0] == 1e6
    assert gemma.score_scale == pytest.approx(8 ** -0.5) and set(gemma.extensions) == {"qk_norm", "sandwich_norms"}


def _without(variant: Variant, **changes) -> Variant:
    build = variant.build
    return dataclasses.replace(variant, id=variant.id + "_wrong",
                               build=lambda cfg: build(dataclasses.replace(cfg, **changes)))


@pytest.mark.parametrize("kind, port, changes", [
    ("llama31", "llama_model", {"rope_scaling": None}),
    ("gemma3", "gemma3_port", {"window": None}),
])
def test_a_dropped_class_value_is_caught(folders, ports, kind, port, changes):
    wrong = _without(get_variant("llama_model", port), **changes)
    _, report = _run(folders[kind], wrong)
    assert not report.agrees and report.kl_worst > 100 * KL_BOUND


@pytest.mark.parametrize("kind, features", [
    ("olmo2", ("norms only after each sublayer", "q/k norm over all heads")),
    ("gpt_neox", ("parallel residual", "partial rotary (a fraction 0.25")),
])
def test_what_the_family_cannot_carry_is_one_line(folders, capsys, kind, features):
    assert main(["parity", str(folders[kind]), "--port", "llama_model"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err
    assert all(f in err for f in features) and "mapped by name" in err


@pytest.mark.parametrize("kind, port", [("olmo2", "olmo2_by_name"), ("gpt_neox", "gpt_neox_by_name")])
def test_ports_by_the_class_names_agree(folders, ports, kind, port):
    comparison, report = _run(folders[kind], port)
    assert comparison.by_name and report.agrees and report.kl_worst <= KL_BOUND
    held = {r.path for e in comparison.reader.entries.values() for r in e.regions()}
    assert held == set(comparison.checkpoint.names)
    if kind == "gpt_neox":  # the class's lm_head is saved as embed_out (transformers' own renaming)
        assert comparison.reader.entries["lm_head.weight"].path == "embed_out.weight"


def test_neox_without_its_parallel_residual_is_caught(folders, ports):
    def build(cfg):
        hf = cfg.class_config.to_dict()
        hf["use_parallel_residual"] = False
        return base.build(dataclasses.replace(cfg, class_config=type(cfg.class_config)(**hf)))

    base = get_variant("llama_model", "gpt_neox_by_name")
    _, report = _run(folders["gpt_neox"], dataclasses.replace(base, id="serial", build=build))
    assert not report.agrees and report.kl_worst > 100 * KL_BOUND


def test_command_by_name(folders, ports, capsys):
    assert main(["parity", str(folders["olmo2"]), "--port", "olmo2_by_name", "--length", "12"]) == 0
    assert "agrees: olmo2_by_name computes what Olmo2ForCausalLM computes" in capsys.readouterr().out


def test_an_eps_off_tenfold_is_named(tmp_path, ports):
    """A Llama whose rms_norm_eps matters (0.05 on activations scaled down) and a port that
    reads it ten times smaller: caught, and named by undoing it."""
    cfg = transformers.LlamaConfig(**SMALL, rms_norm_eps=0.05)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(0.01)
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.mul_(0.01)
            layer.mlp.down_proj.weight.mul_(0.01)
        model.lm_head.weight.mul_(30.0)
    model.save_pretrained(tmp_path / "eps")
    wrong = _without(get_variant("llama_model", "llama_model"), norm_eps=0.005)
    _, report = _run(tmp_path / "eps", wrong)
    assert not report.agrees and [m["name"] for m in report.mistakes] == ["norm eps 10x too small"]
    _, good = _run(tmp_path / "eps", "llama_model")
    assert good.agrees and not good.mistakes
