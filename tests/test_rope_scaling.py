"""harness.families.rope_scaling against transformers' own ROPE_INIT_FUNCTIONS, to 1e-12 in
float64: every scaling type on several configs (head widths, bases, partial rotary,
the older ``rope_scaling`` form with ``type``), the dynamic and LongRoPE types at lengths
below and beyond their thresholds; transformers' functions are run in float64 (their
``torch.float`` and ``Tensor.float`` read as float64 for the call), so the formulas are compared, not float32's
rounding. Then the oracle: the attention family's ``rope_scaling`` trait turns q and k as
transformers' rotary embedding does, and a bad scaling is one line."""

from __future__ import annotations

import pytest
import torch

from harness import register
from harness.base.config import ModelConfig
from harness.base.errors import ConfigError
from harness.families.rope import rope
from harness.families.rope_scaling import RopeScaling, RopeType, frequencies, rope_settings, rope_settings_by_layer
from harness.registry import get_variant

transformers = pytest.importorskip("transformers", reason="transformers is not installed: pip install -e '.[hf]'")
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 1024}
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512}
# (name, config class, config kwargs, sequence lengths the call reaches)
CONFIGS = [
    ("linear", "LlamaConfig", dict(hidden_size=256, num_attention_heads=4, rope_parameters={
        "rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}), [None]),
    ("linear_old_form", "LlamaConfig", dict(hidden_size=512, num_attention_heads=4, rope_theta=1e6,
                                            rope_scaling={"type": "linear", "factor": 4.0}), [None]),
    ("dynamic", "LlamaConfig", dict(hidden_size=256, num_attention_heads=2, max_position_embeddings=256,
                                    rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}),
     [None, 100, 256, 257, 1000]),
    ("yarn", "LlamaConfig", dict(hidden_size=256, num_attention_heads=4, max_position_embeddings=2048,
                                 rope_parameters={**YARN, "rope_theta": 10000.0}), [None]),
    ("yarn_mscale", "LlamaConfig", dict(hidden_size=384, num_attention_heads=6, max_position_embeddings=4096,
                                        rope_parameters={**YARN, "rope_theta": 50000.0, "mscale": 0.707,
                                                         "mscale_all_dim": 1.0, "beta_fast": 16, "beta_slow": 2}),
     [None]),
    ("yarn_untruncated", "LlamaConfig", dict(hidden_size=256, num_attention_heads=2, max_position_embeddings=4096,
                                             rope_parameters={**YARN, "rope_theta": 10000.0, "truncate": False,
                                                              "attention_factor": 1.3}), [None]),
    ("llama3", "LlamaConfig", dict(hidden_size=512, num_attention_heads=4, max_position_embeddings=8192,
                                   rope_parameters={**LLAMA3, "rope_theta": 500000.0}), [None]),
    ("llama3_small_head", "LlamaConfig", dict(hidden_size=256, num_attention_heads=8, max_position_embeddings=4096,
                                              rope_parameters={**LLAMA3, "rope_theta": 10000.0, "factor": 32.0,
                                                               "original_max_position_embeddings": 64}), [None]),
    ("longrope", "Phi3Config", dict(hidden_size=256, num_attention_heads=4, max_position_embeddings=4096,
                                    original_max_position_embeddings=1024, rope_parameters={
                                        "rope_type": "longrope", "short_factor": [1.0 + i / 40 for i in range(32)],
                                        "long_factor": [1.0 + i / 4 for i in range(32)]}), [None, 1024, 1025]),
    ("longrope_partial", "Phi3Config", dict(hidden_size=256, num_attention_heads=4, max_position_embeddings=4096,
                                            original_max_position_embeddings=1024, rope_parameters={
                                                "rope_type": "longrope", "partial_rotary_factor": 0.5,
                                                "short_factor": [1.0] * 16, "long_factor": [3.0] * 16}),
     [None, 2000]),
    ("linear_partial", "GPTNeoXConfig", dict(hidden_size=256, num_attention_heads=4, rope_parameters={
        "rope_type": "linear", "factor": 3.0, "rope_theta": 10000.0, "partial_rotary_factor": 0.25}), [None]),
]


def _hf(cls: str, kwargs: dict):
    return getattr(transformers, cls)(**kwargs)


def _theirs(config, kind: str, seq_len, monkeypatch) -> tuple[torch.Tensor, float]:
    """transformers' function with its float32 read as float64 (the formula, not the rounding)."""
    with monkeypatch.context() as m:
        m.setattr(torch, "float", torch.float64)
        m.setattr(torch, "float32", torch.float64)
        m.setattr(torch.Tensor, "float", torch.Tensor.double)
        inv, factor = ROPE_INIT_FUNCTIONS[kind](config, seq_len=seq_len)
    assert inv.dtype == torch.float64
    return inv, float(factor)


@pytest.mark.parametrize("name, cls, kwargs, lengths", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_inverse_frequencies_and_attention_factor_match_transformers(name, cls, kwargs, lengths, monkeypatch):
    config = _hf(cls, kwargs)
    ours = rope_settings(config)
    kind = ours.scaling.type.value
    head = config.hidden_size // config.num_attention_heads
    dim = int(head * ours.fraction)
    assert ours.theta == config.rope_parameters["rope_theta"]
    for seq_len in lengths:
        inv, factor = _theirs(config, kind, seq_len, monkeypatch)
        mine = ours.scaling.inv_freq(ours.theta, dim, seq_len)
        torch.testing.assert_close(mine, inv, rtol=1e-12, atol=0, msg=f"{name} at seq_len={seq_len}")
        assert ours.scaling.attention() == pytest.approx(factor, rel=1e-12, abs=0)


def test_the_same_from_config_json_as_a_dict(monkeypatch):
    """config.json's dict (what a checkpoint folder holds) reads as its config object does."""
    for name, cls, kwargs, _ in CONFIGS:
        config = _hf(cls, kwargs)
        assert rope_settings(config.to_dict()) == rope_settings(config), name


def test_scaled_types_differ_from_the_default_where_they_should():
    """Each type moves what it scales and keeps the rest: llama3 keeps the highest
    frequencies and divides the lowest by its factor; dynamic is the default up to
    max_positions; linear divides every one."""
    s = rope_settings({"rope_parameters": {**LLAMA3, "rope_theta": 500000.0}, "max_position_embeddings": 8192})
    default = RopeScaling().inv_freq(500000.0, 128)
    scaled = s.scaling.inv_freq(500000.0, 128)
    assert scaled[0] == default[0] and torch.allclose(scaled[-1], default[-1] / 8)
    dyn = RopeScaling(RopeType.DYNAMIC, factor=2.0, max_positions=64)
    assert torch.equal(dyn.inv_freq(1e4, 32, 64), RopeScaling().inv_freq(1e4, 32))
    assert (dyn.inv_freq(1e4, 32, 200)[1:] < RopeScaling().inv_freq(1e4, 32)[1:]).all()


def test_the_oracle_turns_q_and_k_as_transformers_does():
    """``rope`` with a scaling: HF's apply_rotary_pos_emb with its rotary embedding's cos and
    sin (the attention factor on both), in float64."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    for params in ({**LLAMA3, "rope_theta": 500000.0, "original_max_position_embeddings": 16},
                   {**YARN, "rope_theta": 10000.0, "original_max_position_embeddings": 16},
                   {"rope_type": "dynamic", "factor": 3.0, "rope_theta": 10000.0}):
        config = transformers.LlamaConfig(hidden_size=64, num_attention_heads=2, max_position_embeddings=32,
                                          rope_parameters=dict(params))
        gen = torch.Generator().manual_seed(0)
        q = torch.randn(2, 2, 40, 32, generator=gen, dtype=torch.float64)
        positions = torch.arange(40).expand(2, 40) + torch.tensor([[0], [7]])
        settings = rope_settings(config)
        ours = rope(q, positions, "half-split", 1.0, settings.theta, settings.scaling)
        emb = LlamaRotaryEmbedding(config).double()
        emb.inv_freq = emb.inv_freq.double()
        emb.original_inv_freq = emb.original_inv_freq.double()
        cos, sin = emb(q, positions)
        theirs, _ = apply_rotary_pos_emb(q, q, cos, sin)
        torch.testing.assert_close(ours, theirs, rtol=0, atol=2e-5, msg=params["rope_type"])  # HF's angles: float32
        assert (ours - rope(q, positions, "half-split", 1.0, settings.theta)).abs().max() > 1e-3


def test_layer_types_and_theta_fields():
    """Gemma 3's rope parameters nested by layer type read per layer type; the base read from
    inside the rope parameters says so (a port that reads the top-level rope_theta reads
    another field)."""
    nested = {"rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                                  "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}}
    by_layer = rope_settings_by_layer(nested)
    assert by_layer["full_attention"].scaling.factor == 8.0 and by_layer["sliding_attention"].theta == 1e4
    with pytest.raises(ConfigError, match="nested by layer type"):
        rope_settings(nested)
    assert rope_settings({"rope_theta": 5e5}).theta_from == "rope_theta"
    assert rope_settings({"rope_parameters": {"rope_theta": 5e5}}).theta_from == "rope_parameters.rope_theta"


@pytest.mark.parametrize("params, match", [
    ({"rope_type": "llama3", "factor": 8.0}, "needs low_freq_factor, high_freq_factor"),
    ({"rope_type": "ntk-by-parts", "factor": 2.0}, "RoPE type 'ntk-by-parts'"),
    ({"rope_type": "linear"}, "needs factor"),
    ({"rope_type": "linear", "factor": 2.0, "fctor": 3}, r"unknown parameter\(s\) \['fctor'\]"),
])
def test_bad_scalings_are_one_line(params, match):
    with pytest.raises(ConfigError, match=match) as info:
        rope_settings({"rope_parameters": params, "max_position_embeddings": 128})
    assert "\n" not in str(info.value)


def test_frequencies_reads_the_calls_positions():
    dyn = RopeScaling(RopeType.DYNAMIC, factor=2.0, max_positions=8)
    inv_short, _ = frequencies(dyn, 1e4, 16, torch.arange(8)[None], torch.float64)
    inv_long, _ = frequencies(dyn, 1e4, 16, torch.arange(20)[None], torch.float64)
    assert torch.equal(inv_short, RopeScaling().inv_freq(1e4, 16)) and not torch.equal(inv_short, inv_long)


LLAMA3_CFG = ModelConfig(d_model=48, heads=4, kv_heads=2, d_ff=64, batch=2, tgt_len=9, vocab=13, layers=2,
                         rope_base=500000.0, rope_scaling=RopeScaling(
                             RopeType.LLAMA3, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                             original_max_positions=8, max_positions=64))
YARN_CFG = LLAMA3_CFG.replace(rope_scaling=RopeScaling(RopeType.YARN, factor=4.0, original_max_positions=8,
                                                       max_positions=64))


def test_a_model_that_reads_its_configs_scaling_checks_clean_and_one_that_drops_it_is_caught():
    """``llama_model`` declares ``rope_scaling='as configured'``: on a checkpoint-like config
    with llama3 (or YaRN) scaling the oracle turns q and k as the config says, and so does the
    model; the same model built without the scaling contradicts it."""
    from harness.check.api import check_one_variant
    from harness.registry import load_all, scratch
    from variants.llama import BLOCK, LlamaModel, call_model, model_map

    load_all()
    configs = {"llama3": LLAMA3_CFG, "yarn": YARN_CFG}
    good = [r for r in check_one_variant(get_variant("llama_model", "llama_model"), configs) if not r.ok]
    assert not good, [(r.case, r.config, r.dtype) for r in good]
    with scratch():
        register(id="llama_scaling_dropped", family="llama_model", source="test",
                 build=lambda cfg: LlamaModel(cfg.replace(rope_scaling=None)), call=call_model,
                 param_map=model_map(), traits={**BLOCK, "tied_output": False})
        bad = check_one_variant(get_variant("llama_model", "llama_scaling_dropped"), configs)
        assert {"llama3", "yarn"} <= {r.config for r in bad if not r.ok}
