"""Variants that hard-code a config field's default instead of reading the config, each
declaring a correct variant's traits, and their controls. Loaded inside
``harness.registry.scratch()`` by tests/test_config.py. ``WRONG`` maps each id to the mistake."""

from torch import nn

from harness import Param, register
from variants.llama import LLAMA, LlamaAttention, attention_map, call

WRONG = {
    "wrong_rope_base_10000": "RoPE's base fixed at 10000 (LLaMA 2's) where the config sets it",
    "wrong_vocab_11": "the embedding table sized for V = 11 whatever the config's vocabulary",
}
CONTROLS = ("control_rope_base", "control_vocab")


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
