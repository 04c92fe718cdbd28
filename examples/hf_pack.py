"""Hugging Face transformers' own modules as variants: each registration is what
``python -m harness map <module path>:<Class> --family F`` printed for the class (GQA ones with
``--set kv_heads=2``), given an ``hf_`` id. Opt-in, not part of the project's registry:

    pip install -e ".[hf]"     # transformers==5.23.0
    python -m harness check --variants examples/hf_pack.py --family attention

What map found, and what each registration therefore says:

- Hugging Face's attention modules are self-attention on hidden states (the model passes
  the rotary tables and an additive mask): they run on the self-attention cases only
  (packed rows among them for the RoPE ones).
- Their rotary tables are computed in float32 whatever the input dtype, and LlamaRMSNorm
  and GemmaRMSNorm upcast to float32 outright (a float64 input is rounded to float32):
  ``internal_dtype: "float32"``, "less precise" in float64 by declaration.
- Their additive mask is the one their model builds in the dtype they are meant to run in
  (float32: ``additive_mask(mask, dtype, torch.float32)``). Llama, Mistral, Qwen2 and
  GPT-NeoX soften in float32, so a float64 ``finfo.min`` would become -inf there and a row
  with no key NaN: a float64 side effect. With float32's minimum every module here gives
  such a row the mean of V (an additive mask), declared, and keeps the fully masked case.
  (Called with the mask built in the call's own dtype instead, the row is NaN in float64 and
  the mean of V in float32: declarable as ``ByDtype(float64="NaN", other="mean of V")``,
  docs/declaring.md, tests/test_no_key_rows.py.)
- Their float32 rotary tables are not within float32's elementwise bound of the float64
  oracle at large logits (``self@large``: inputs x12, logits of std ~140, q/k weight
  gradients off by up to ~4e-3); their RMS error there stays under that of the definition
  computed in float32, which is what a declared ``internal_dtype`` is held to.
- MistralAttention leaves its sliding window to the model's mask (window ``none``).
- Qwen3Attention and Olmo2Attention normalise q and k before RoPE (``qk_norm``): Qwen3 each
  head over its d_k with one gain per dim shared by the heads, OLMo2 the whole projection with
  a gain per head and dim. Their ``q_norm``/``k_norm`` weights are the family's canonical
  QK-norm gains, ported like the projections.
- GPT-NeoX keeps q, k and v per head in one Linear (``PerHeadChunk``) and rotates a
  quarter of each head. With d_k * 0.25 odd (d_k = 12: the default config) HF rotates
  4 dims at base^(-2i/3), a convention no oracle has: the attention family refuses such a
  config for a ``rope_fraction`` that rotates an odd count, so it is checked where d_k * 0.25
  is even (the one-head config; map finds it with ``--set d_model=64``).
- BertSelfAttention has no output projection (it is in BertSelfOutput): ``Identity()``.
- LlamaDecoderLayer needs a LLaMA block family: not registered here.
"""

import torch
from transformers.models.bert.configuration_bert import BertConfig
from transformers.models.bert.modeling_bert import BertSelfAttention
from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
from transformers.models.gpt2.configuration_gpt2 import GPT2Config
from transformers.models.gpt2.modeling_gpt2 import GPT2Attention
from transformers.models.gpt_neox.configuration_gpt_neox import GPTNeoXConfig
from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXAttention
from transformers.models.llama.configuration_llama import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaAttention, LlamaMLP, LlamaRMSNorm
from transformers.models.mistral.configuration_mistral import MistralConfig
from transformers.models.mistral.modeling_mistral import MistralAttention
from transformers.models.olmo2.configuration_olmo2 import Olmo2Config
from transformers.models.olmo2.modeling_olmo2 import Olmo2Attention
from transformers.models.qwen2.configuration_qwen2 import Qwen2Config
from transformers.models.qwen2.modeling_qwen2 import Qwen2Attention
from transformers.models.qwen3.configuration_qwen3 import Qwen3Config
from transformers.models.qwen3.modeling_qwen3 import Qwen3Attention

from harness import (
    Chunk,
    Identity,
    Param,
    PerHeadChunk,
    Transposed,
    Zero,
    additive_mask,
    library_config,
    register,
    rotary_tables,
)

SELF_CASES = ("self", "causal", "causal_only", "random_mask", "window")
# what map declared for the modules that soften in float32 (see the docstring)
ROPE_TRAITS = {"sublayer": "attention", "rope": "half-split", "gqa_grouping": "consecutive",
               "fully_masked_row": "mean of V", "mask_style": "additive", "internal_dtype": "float32",
               "cases": SELF_CASES[:4] + ("fully_masked", "window", "packed")}
EAGER_TRAITS = {"sublayer": "attention", "fully_masked_row": "mean of V", "mask_style": "additive",
                "cases": SELF_CASES[:4] + ("fully_masked", "window", "packed")}


def rope_call(m, i):
    """The call map chose for a module with RoPE: hidden states, the module's own rotary
    tables at the call's positions, the additive mask."""
    return m(i["query"], position_embeddings=rotary_tables(m, i["query"], i["positions"]),
             attention_mask=additive_mask(i["mask"], i["query"].dtype, torch.float32))[0]


def eager_call(m, i):
    return m(i["query"], attention_mask=additive_mask(i["mask"], i["query"].dtype, torch.float32))[0]


def proj_map(q="q_proj", k="k_proj", v="v_proj", o="o_proj", bias=()):
    return {f"{c}.{kind}": (Param(f"{name}.{kind}") if kind == "weight" or c in bias else Zero())
            for c, name in zip("qkvo", (q, k, v, o)) for kind in ("weight", "bias")}


QK_NORM_MAP = {**proj_map(), "q_norm.weight": Param("q_norm.weight"), "k_norm.weight": Param("k_norm.weight")}


register(
    id="hf_llama", family="attention", source="transformers.models.llama.modeling_llama.LlamaAttention",
    build=lambda cfg: LlamaAttention(config=library_config(LlamaConfig, cfg), layer_idx=0),
    call=rope_call, param_map=proj_map(), traits=ROPE_TRAITS,
)
register(
    id="hf_mistral", family="attention", source="transformers.models.mistral.modeling_mistral.MistralAttention",
    build=lambda cfg: MistralAttention(config=library_config(MistralConfig, cfg), layer_idx=0),
    call=rope_call, param_map=proj_map(), traits=ROPE_TRAITS,
)
register(
    id="hf_qwen2", family="attention", source="transformers.models.qwen2.modeling_qwen2.Qwen2Attention",
    build=lambda cfg: Qwen2Attention(config=library_config(Qwen2Config, cfg), layer_idx=0),
    call=rope_call, param_map=proj_map(bias="qkv"), traits=ROPE_TRAITS,
)

register(
    id="hf_qwen3", family="attention", source="transformers.models.qwen3.modeling_qwen3.Qwen3Attention",
    build=lambda cfg: Qwen3Attention(config=library_config(Qwen3Config, cfg), layer_idx=0),
    call=rope_call, param_map=QK_NORM_MAP, traits={**ROPE_TRAITS, "eps": 1e-06, "qk_norm": "rms per head"},
)
register(
    id="hf_olmo2", family="attention", source="transformers.models.olmo2.modeling_olmo2.Olmo2Attention",
    build=lambda cfg: Olmo2Attention(config=library_config(Olmo2Config, cfg), layer_idx=0),
    call=rope_call, param_map=QK_NORM_MAP, traits={**ROPE_TRAITS, "qk_norm": "rms over all heads"},
)



register(
    id="hf_gpt_neox", family="attention", source="transformers.models.gpt_neox.modeling_gpt_neox.GPTNeoXAttention",
    build=lambda cfg: GPTNeoXAttention(config=library_config(GPTNeoXConfig, cfg), layer_idx=0),
    call=rope_call,
    param_map=lambda cfg: {
        **{f"{c}.{kind}": PerHeadChunk(f"query_key_value.{kind}", n, 3, heads=cfg.heads)
           for n, c in enumerate("qkv") for kind in ("weight", "bias")},
        "o.weight": Param("dense.weight"), "o.bias": Param("dense.bias"),
    },
    traits={**{k: v for k, v in ROPE_TRAITS.items() if k != "gqa_grouping"}, "rope_fraction": 0.25},
)
register(
    id="hf_gpt2", family="attention", source="transformers.models.gpt2.modeling_gpt2.GPT2Attention",
    build=lambda cfg: GPT2Attention(config=library_config(GPT2Config, cfg), layer_idx=0),
    call=eager_call,
    param_map={
        **{f"{c}.weight": Transposed(Chunk("c_attn.weight", n, 3, dim=1)) for n, c in enumerate("qkv")},
        **{f"{c}.bias": Chunk("c_attn.bias", n, 3) for n, c in enumerate("qkv")},
        "o.weight": Transposed(Param("c_proj.weight")), "o.bias": Param("c_proj.bias"),
    },
    traits=EAGER_TRAITS,
)
register(
    id="hf_bert", family="attention", source="transformers.models.bert.modeling_bert.BertSelfAttention",
    build=lambda cfg: BertSelfAttention(config=library_config(BertConfig, cfg), layer_idx=0),
    call=eager_call,
    param_map={**proj_map("query", "key", "value", "o", bias="qkv"), "o.weight": Identity()},
    traits=EAGER_TRAITS,
)
register(
    id="hf_llama_rmsnorm", family="norm", source="transformers.models.llama.modeling_llama.LlamaRMSNorm",
    build=lambda cfg: LlamaRMSNorm(hidden_size=cfg.d_model), call=lambda m, i: m(i["x"]),
    param_map={"weight": Param("weight"), "bias": Zero()},
    traits={"norm_formula": "rms", "eps": 1e-06, "internal_dtype": "float32"},
)
register(
    id="hf_gemma_rmsnorm", family="norm", source="transformers.models.gemma.modeling_gemma.GemmaRMSNorm",
    build=lambda cfg: GemmaRMSNorm(dim=cfg.d_model), call=lambda m, i: m(i["x"]),
    param_map={"weight": Param("weight"), "bias": Zero()},
    traits={"norm_formula": "rms", "eps": 1e-06, "gain": "1+w", "internal_dtype": "float32"},
)
register(
    id="hf_llama_mlp", family="gated_ffn", source="transformers.models.llama.modeling_llama.LlamaMLP",
    build=lambda cfg: LlamaMLP(config=library_config(LlamaConfig, cfg)), call=lambda m, i: m(i["x"]),
    param_map={"gate.weight": Param("gate_proj.weight"), "up.weight": Param("up_proj.weight"),
               "down.weight": Param("down_proj.weight")},
    traits={"activation": "silu"},
)
