"""Variants that hard-code a config field's default instead of reading the config, each
declaring a correct variant's traits, and their controls. Loaded inside
``harness.registry.scratch()`` by tests/test_config.py. ``WRONG`` maps each id to the mistake."""

from torch import nn

from harness import Param, register, register_kernel
from variants.kernels import eager
from variants.llama import LLAMA, LlamaAttention, attention_map, call, call_window

WRONG = {
    "wrong_rope_base_10000": "RoPE's base fixed at 10000 (LLaMA 2's) where the config sets it",
    "wrong_vocab_11": "the embedding table sized for V = 11 whatever the config's vocabulary",
    "wrong_window_3_0": "a sliding window of (3, 0) (HF's sliding_window=4) whatever window the call asks for",
    "wrong_softcap_2": "a kernel that caps the logits at 2.0 whenever a cap is asked for",
}
CONTROLS = ("control_rope_base", "control_vocab", "control_window", "control_softcap")
# where each mistake shows: the config or the regime case that moves the default it fixes
SHOWS_ON = {"wrong_rope_base_10000": "heads8", "wrong_vocab_11": "heads8", "wrong_window_3_0": "window@wide",
            "wrong_softcap_2": "softcap@cap5"}


class FixedBaseAttention(LlamaAttention):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.base = 10000.0


register(id="wrong_rope_base_10000", family="attention", source="test", build=FixedBaseAttention, call=call,
         param_map=attention_map(), traits=LLAMA)
register(id="control_rope_base", family="attention", source="test", build=LlamaAttention, call=call,
         param_map=attention_map(), traits=LLAMA)
register(id="wrong_vocab_11", family="embedding", source="test", build=lambda cfg: nn.Embedding(11, cfg.d_model),
         call=lambda m, i: m(i["tokens"]), param_map={"weight": Param("weight")},
         traits={"embedding_scale": "1", "pad_rows": "kept"})
register(id="control_vocab", family="embedding", source="test", build=lambda cfg: nn.Embedding(cfg.vocab, cfg.d_model),
         call=lambda m, i: m(i["tokens"]), param_map={"weight": Param("weight")},
         traits={"embedding_scale": "1", "pad_rows": "kept"})


def _window_fixed(m, i):
    return m(i["query"], i["key"], i["value"], i["mask"], i["positions"], i["key_positions"],
             None if i["window"] is None else (3, 0))


register(id="wrong_window_3_0", family="attention", source="test", build=LlamaAttention, call=_window_fixed,
         param_map=attention_map(), traits={**LLAMA, "window": "as called"})
register(id="control_window", family="attention", source="test", build=LlamaAttention, call=call_window,
         param_map=attention_map(), traits={**LLAMA, "window": "as called"})


def softcap_fixed(q, k, v, mask, causal=False, window=None, softcap=0.0):
    return eager(q, k, v, mask, causal, window, 2.0 if softcap else 0.0)


def softcap_read(q, k, v, mask, causal=False, window=None, softcap=0.0):
    return eager(q, k, v, mask, causal, window, softcap)


register_kernel(id="wrong_softcap_2", fn=softcap_fixed, traits={"causal": "top_left", "mask_method": "bool_fill_-inf"})
register_kernel(id="control_softcap", fn=softcap_read, traits={"causal": "top_left", "mask_method": "bool_fill_-inf"})
