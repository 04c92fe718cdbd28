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
    "qwen3": lambda: transformers.Qwen3Config(**SMALL, head_dim=8),
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
def checkpoint_ports():
    with scratch():
        load_file(PORTS.parent / "checkpoint_ports.py")
        yield


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


@pytest.mark.parametrize("changes, name", [({"rope_base": 5e5}, "rope_theta read from the wrong field"),
                                           ({"norm_eps": 1e-5}, "norm eps 10x too large")])
def test_a_mistake_bfloat16_rounding_would_hide_is_caught_in_the_float32_run(folders, ports, changes, name):
    """bfloat16's own noise allows a per-token KL near 1e-4 here; these mistakes reach 2e-7 to
    4e-7 in float32 and would pass within it. The same weights' float32 run is held to the
    float32 bound, and the mistake is named there; the correct port stays clean."""
    comparison = prepare(folders["llama"], _wrong("llama_model", **changes), dtype="bfloat16")
    report = compare(comparison, sample_tokens(comparison.cfg, 3, 16, seed=0))
    kl, wide = report.metrics[0], report.metrics[1]
    assert kl.ok and not wide.ok and wide.name == "float32 run: per-token KL"
    assert not report.agrees and report.hidden_by_rounding
    assert [m["name"] for m in report.mistakes] == [name]
    control = compare(prepare(folders["llama"], "llama_model", dtype="bfloat16"),
                      sample_tokens(comparison.cfg, 3, 16, seed=0))
    assert control.agrees and not control.hidden_by_rounding and not control.mistakes


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


# -- stress inputs: the features the checkpoint's own tokens do not reach -------------------------

GEMMA2 = dict(head_dim=8, query_pre_attn_scalar=8, sliding_window=4)  # caps: Gemma 2's own 50 and 30


@pytest.fixture(scope="module")
def gemma2(tmp_path_factory):
    CONFIGS["gemma2"] = lambda: transformers.Gemma2Config(**SMALL, **GEMMA2)
    return _save("gemma2", tmp_path_factory.mktemp("stress") / "gemma2")


def _gemma2_port(window: bool = True, softcap: bool = True) -> Variant:
    """examples/checkpoint_ports.py's gemma2_port with the config's windows (it has none of
    its own), and without its attention cap where ``softcap`` is False."""
    from variants.llama import layer_windows
    base = get_variant("llama_model", "gemma2_port")

    def build(cfg):
        model = base.build(cfg)
        if window:
            model.window, model.windows = None, layer_windows(cfg)
        for layer in model.layers:
            layer.self_attn.softcap = layer.self_attn.softcap if softcap else 0.0
        return model
    return dataclasses.replace(base, id=f"gemma2_window{window}_cap{softcap}", build=build)


def _stressed(folder: Path, port, length: int = 16):
    comparison = prepare(folder, port)
    report = compare(comparison, sample_tokens(comparison.cfg, 3, length, seed=0))
    return report, {s["feature"]: s for s in report.reached}


def test_the_caps_are_reached_by_scaled_weights(gemma2, checkpoint_ports):
    report, reached = _stressed(gemma2, _gemma2_port())
    assert report.agrees and not report.mistakes, [(m.name, m.value) for m in report.metrics if not m.ok]
    cap = reached["attention softcap 50"]
    assert cap["reached"] and cap["how"].startswith("q scaled x")
    assert reached["final logit softcap 30"]["reached"] and reached["sliding window (3, 0)"]["reached"]
    stressed = [m for m in report.metrics if m.name == "per-token KL, attention softcap 50"]
    assert len(stressed) == 1 and stressed[0].ok


def test_a_cap_dropped_is_caught_and_named_on_the_stress(gemma2, checkpoint_ports):
    report, _ = _stressed(gemma2, _gemma2_port(softcap=False))
    plain = report.metrics[0]
    stressed = next(m for m in report.metrics if m.name == "per-token KL, attention softcap 50")
    assert plain.ok and not stressed.ok and not report.agrees  # the checkpoint's own scores stay below 50
    assert [m["name"] for m in report.mistakes] == ["attention softcap dropped"]


def test_sequences_longer_than_the_window(gemma2, checkpoint_ports):
    """On 4-token sequences (no longer than the window) the port without a window agrees;
    parity runs longer ones, catches it there and names it."""
    report, reached = _stressed(gemma2, _gemma2_port(window=False), length=4)
    window = reached["sliding window (3, 0)"]
    assert window["reached"] and window["how"] == "sequences of 10 tokens" and window["shape"] == (3, 10)
    assert report.metrics[0].ok and not report.agrees
    assert [m["name"] for m in report.mistakes] == ["sliding window ignored"]
    good, _ = _stressed(gemma2, _gemma2_port(), length=4)
    assert good.agrees


# -- a cache that does not offset positions ---------------------------------------------------------

def _step_from_zero(model, state, ys):
    """llama_step with the mistake: the tokens it feeds numbered from 0 each call."""
    from variants.llama import positions_of
    k, fed = ys.shape[1], state["fed"]
    pad = torch.ones_like(ys, dtype=torch.bool)
    if state["cache"] is None:
        return model(ys, pad, positions_of(pad))[:, -1]
    state["fed"] = k
    return model(ys[:, fed:], pad[:, fed:], positions_of(pad[:, fed:]), cache=state["cache"])[:, -1]


def _step_one_ahead(model, state, ys):
    """Another cache mistake (each step's positions one too far), not to be named so."""
    from variants.llama import positions_of
    k, fed = ys.shape[1], state["fed"]
    pad = torch.ones_like(ys, dtype=torch.bool)
    state["fed"] = k
    return model(ys[:, fed:], pad[:, fed:], positions_of(pad)[:, fed:] + (fed > 0), cache=state["cache"])[:, -1]


@pytest.mark.parametrize("step, named", [(None, False), (_step_from_zero, True), (_step_one_ahead, False)])
def test_a_cache_that_does_not_offset_positions_is_named(folders, step, named):
    from harness.families.models import DECODINGS
    correct = DECODINGS["llama_model/llama_model"]
    decoding = correct if step is None else dataclasses.replace(correct, step=step)
    comparison = prepare(folders["llama"], "llama_model", port_decoding=decoding)
    report = compare(comparison, sample_tokens(comparison.cfg, 2, 12, seed=0))
    port = [c for c in report.cache if c.side == "port"]
    assert len(port) == 2 and all(c.ok for c in port) is (step is None)
    assert [m["name"] for m in report.mistakes] == (["KV cache does not offset positions"] if named else [])
    assert report.metrics[0].ok  # the full forward is right: only the cache is wrong


# -- q/k norm after RoPE ----------------------------------------------------------------------------

def _norms_after_rope(port: str, monkeypatch) -> Variant:
    """``port`` (its attention variants/llama.py's LlamaAttention with per-head q/k norms) with
    the norms moved after RoPE: not applied where the attention applies them, applied to the
    rotated q and k that reach its ``eager`` product."""
    import variants.llama as llama
    base, state, product = get_variant("llama_model", port), {"attention": None}, llama.eager

    def eager(q, k, v, keep, *args):
        a = state["attention"]
        return product(a.q_norm(q), a.k_norm(k), v, keep, *args)

    def build(cfg):
        model = base.build(cfg)
        for layer in model.layers:
            layer.self_attn.qk_norm = "moved"
            layer.self_attn.register_forward_pre_hook(lambda m, args, kwargs=None: state.__setitem__("attention", m))
        return model
    monkeypatch.setattr(llama, "eager", eager)
    return dataclasses.replace(base, id=port + "_norm_after_rope", build=build)


@pytest.mark.parametrize("kind, port, loaded", [("qwen3", "qwen3_port", "checkpoint_ports"),
                                                ("gemma3", "gemma3_port", "ports")])
def test_a_qk_norm_after_rope_is_named(folders, request, monkeypatch, kind, port, loaded):
    request.getfixturevalue(loaded)
    good, names = _names(folders[kind], port)
    assert good.agrees and names == []
    report, names = _names(folders[kind], _norms_after_rope(port, monkeypatch))
    assert not report.agrees and names == ["q/k norm after RoPE"]


def test_stress_rows_in_bfloat16_hold_the_setting_to_its_own_rounding(gemma2, checkpoint_ports):
    """Scaled weights round differently: each stress row's bound is the class's own bfloat16
    KL against its float32 run on that setting; a correct port stays clean."""
    comparison = prepare(gemma2, _gemma2_port(), dtype="bfloat16")
    report = compare(comparison, sample_tokens(comparison.cfg, 3, 16, seed=0))
    stressed = [m for m in report.metrics if m.name.startswith("per-token KL, ")]
    assert report.agrees and stressed and all("on this setting" in m.bound for m in stressed)
    assert {s["feature"] for s in report.reached} >= {"attention softcap 50", "final logit softcap 30"}


def test_a_registered_class_gets_the_mistake_through_its_model_config(tmp_path):
    """A state_dict of a registered variant (no config.json): the class fix reaches it as a
    changed ModelConfig (rope_base); the mistaken port is named, the correct one is clean."""
    from harness.base.config import ModelConfig
    from harness.registry import build
    sizes = dict(layers=2, d_model=32, heads=4, kv_heads=2, d_ff=64, vocab=96, rope_base=1e6)
    module, _ = build(get_variant("llama_model", "llama_model"), ModelConfig(**sizes))
    torch.save(module.state_dict(), tmp_path / "model.pt")
    for port, names in ((_wrong("llama_model", rope_base=10000.0), ["rope_theta read from the wrong field"]),
                        ("llama_model", [])):
        comparison = prepare(tmp_path / "model.pt", port, reference="llama_model", family="llama_model",
                             changes=sizes)
        report = compare(comparison, sample_tokens(comparison.cfg, 2, 16, seed=0))
        assert [m["name"] for m in report.mistakes] == names and report.agrees == (not names)
