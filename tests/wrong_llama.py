"""Deliberately wrong LLaMA-era variants, each declaring the traits of a correct one, and the
controls that must stay equivalent. Loaded inside ``harness.registry.scratch()`` by
tests/test_llama.py. ``WRONG`` maps each id to the mistake; ``CONTROLS`` lists the controls."""

from harness import Absent, Param, Zero, register
from variants.llama import LLAMA, RMS, LlamaAttention, RMSNorm, attention_map, call

WRONG = {
    "wrong_rope_layout": "interleaved RoPE on half-split q/k rows (no RopePermuted in the map)",
    "wrong_kv_tiled": "K/V heads tiled (k.repeat) where repeat_interleave groups them",
    "wrong_window_off_by_one": "the sliding window keeps one key too many (i-w .. i)",
    "wrong_gain": "Gemma's gain 1 + w declared as w",
    "wrong_eps": "RMSNorm eps 1e-5 declared as 1e-6",
    "wrong_softcap_dropped": "Gemma 2's logit soft-capping declared (50) but not applied",
    "wrong_qk_norm_full_width": "QK-norm over all heads (OLMo2) declared per head (Qwen3)",
}
CONTROLS = ("control_rope_permuted", "control_llama")


def _window_plus_one(m, i):
    w = i["window"]
    return m(i["query"], i["key"], i["value"], i["mask"], i["positions"], i["key_positions"],
             None if w is None else (w[0] + 1, w[1]))


register(id="wrong_rope_layout", family="attention", source="test",
         build=lambda cfg: LlamaAttention(cfg, rope="interleaved"), call=call, param_map=attention_map(),
         traits=LLAMA)
register(id="wrong_kv_tiled", family="attention", source="test",
         build=lambda cfg: LlamaAttention(cfg, gqa="tile"), call=call, param_map=attention_map(), traits=LLAMA)
register(id="wrong_window_off_by_one", family="attention", source="test",
         build=lambda cfg: LlamaAttention(cfg), call=_window_plus_one, param_map=attention_map(),
         traits={**LLAMA, "window": "as called"})
register(id="control_rope_permuted", family="attention", source="test",
         build=lambda cfg: LlamaAttention(cfg, rope="interleaved"), call=call,
         param_map=attention_map(permuted=True), traits=LLAMA)
register(id="control_llama", family="attention", source="test",
         build=lambda cfg: LlamaAttention(cfg), call=call, param_map=attention_map(), traits=LLAMA)

NORM_MAP = {"weight": Param("weight"), "bias": Zero()}
register(id="wrong_gain", family="norm", source="test", build=lambda cfg: RMSNorm(cfg.d_model, gemma=True),
         call=lambda m, i: m(i["x"]), param_map=NORM_MAP,
         traits={**RMS, "gain": "w", "upcast": "float32 through the gain"})
register(id="wrong_eps", family="norm", source="test", build=lambda cfg: RMSNorm(cfg.d_model, eps=1e-5),
         call=lambda m, i: m(i["x"]), param_map=NORM_MAP,
         traits={**RMS, "gain": "w", "upcast": "float32, cast back before the gain"})


QK = {**LLAMA, "qk_norm": "rms per head", "eps": 1e-6, "cases": ("self_kv", "causal")}
register(id="wrong_softcap_dropped", family="attention", source="test", build=lambda cfg: LlamaAttention(cfg),
         call=call, param_map=attention_map(), traits={**LLAMA, "softcap": 50.0, "cases": ("self_kv", "causal")})
# its (H d_k,) gains cannot hold the declared (d_k,) ones: both read as one, declared not learned,
# so what is caught is the width the norm runs over
register(id="wrong_qk_norm_full_width", family="attention", source="test",
         build=lambda cfg: LlamaAttention(cfg, qk_norm="over all heads"), call=call,
         param_map=lambda cfg: {**attention_map()(cfg), "q_norm.weight": Absent(1.0), "k_norm.weight": Absent(1.0)},
         traits={**QK, "not_learned": ("q_norm.weight", "k_norm.weight")},
         fixed={"q_norm.weight": "held at its init (ones)", "k_norm.weight": "held at its init (ones)"})
