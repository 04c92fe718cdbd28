"""Ports of Gemma 3, OLMo 2 and GPT-NeoX written with the project's pieces (variants/llama.py,
variants/gpt_neox.py), for ``python -m harness parity --variants examples/class_ports.py``.

- ``gemma3_port``: Gemma 3 (text, HF's ``Gemma3ForCausalLM``) over the llama family's
  canonical names: embeddings times sqrt(D), RMSNorms with the gain 1 + w, sandwich norms, a
  per-head q/k norm (gain 1 + w) before RoPE, each layer's window and RoPE base by its layer
  type (``ModelConfig.layer_window`` / ``layer_rope_of``), the score scale
  ``query_pre_attn_scalar ** -0.5``, the config's soft caps, GeGLU, the head tied.
- ``olmo2_by_name``: OLMo 2 (``Olmo2ForCausalLM``) with the class's own parameter names
  (mapped by name): norms only after each sublayer (x + norm(sublayer(x))), a q/k RMSNorm over
  all heads before RoPE; the llama family has no place for either.
- ``gpt_neox_by_name``: GPT-NeoX (``GPTNeoXForCausalLM``) with the class's own names: the
  per-head fused ``query_key_value``, partial rotary (the config's fraction), LayerNorms with
  biases, a parallel residual (x + attn(ln1(x)) + mlp(ln2(x))), a GELU MLP, an untied head.

The two by-name ports keep no cache (their cache rows are not measured) and are skipped by
``check`` (their names are not the family's).
"""

import math

import torch
import torch.nn.functional as F
from checkpoint_models import ScaledEmbedding, gemma2_map
from torch import nn

from harness import Param, layers, nest, register, register_decoding
from variants.gpt_neox import GPTNeoXAttention
from variants.llama import (
    BLOCK,
    CACHE,
    GatedFFN,
    LlamaAttention,
    LlamaModel,
    RMSNorm,
    call_model,
    layer_windows,
    llama_prepare,
    llama_step,
)


def _eps(cfg) -> float:
    return getattr(cfg, "norm_eps", 1e-6)


class Gemma3Block(nn.Module):
    def __init__(self, cfg, layer: int = 0):
        super().__init__()
        d, eps = cfg.d_model, _eps(cfg)
        self.attn_norm, self.post_attn_norm = RMSNorm(d, eps, gemma=True), RMSNorm(d, eps, gemma=True)
        self.ffn_norm, self.post_ffn_norm = RMSNorm(d, eps, gemma=True), RMSNorm(d, eps, gemma=True)
        self.self_attn = LlamaAttention(cfg, qk_norm="per head", softcap=cfg.softcap, layer=layer)
        self.self_attn.q_norm, self.self_attn.k_norm = RMSNorm(cfg.d_k, eps, gemma=True), RMSNorm(cfg.d_k, eps,
                                                                                               gemma=True)
        self.mlp = GatedFFN(cfg, act=lambda x: F.gelu(x, approximate="tanh"))

    def forward(self, x, mask, positions, cache=None):
        h = self.attn_norm(x)
        x = x + self.post_attn_norm(self.self_attn(h, h, h, mask, positions, positions, cache=cache))
        return x + self.post_ffn_norm(self.mlp(self.ffn_norm(x)))


class Gemma3Model(LlamaModel):
    def __init__(self, cfg):
        super().__init__(cfg, block=Gemma3Block, tied=True, windows=layer_windows(cfg),
                         final_softcap=getattr(cfg, "final_softcap", 0.0))
        self.embed = ScaledEmbedding(cfg.vocab, cfg.d_model, math.sqrt(cfg.d_model))
        self.norm = RMSNorm(cfg.d_model, _eps(cfg), gemma=True)


def gemma3_map(cfg):
    out = gemma2_map()(cfg)
    for i in range(layers(cfg)):
        out.update(nest({f"self_attn.{c}_norm.weight": Param(f"self_attn.{c}_norm.weight") for c in "qk"},
                        f"layers.{i}.", f"layers.{i}."))
    return out


def _needs_class(cfg):
    if getattr(cfg, "class_config", None) is None:
        return "built from a checkpoint's config (python -m harness parity)"
    return None


def _causal(pad: torch.Tensor, segments=None) -> torch.Tensor:
    n = pad.shape[1]
    mask = torch.ones(n, n, dtype=torch.bool, device=pad.device).tril()[None] & pad[:, None, :]
    if segments is not None:
        mask = mask & (segments[:, :, None] == segments[:, None, :])
    return mask


class _Named(nn.Module):
    """Parameter names as the class's: ``inner`` under ``prefix`` and the head."""

    def __init__(self, cfg, prefix: str, inner: nn.Module, head: str):
        super().__init__()
        self.prefix, self.head_name = prefix, head
        self.add_module(prefix, inner)
        self.add_module(head, nn.Linear(cfg.d_model, cfg.vocab, bias=False))

    def forward(self, tokens, pad, positions, cache=None, segments=None):
        inner = getattr(self, self.prefix)
        x = inner(tokens, _causal(pad, segments), positions)
        return getattr(self, self.head_name)(x).log_softmax(-1)


class HFMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.up_proj = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.down_proj = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Olmo2Layer(nn.Module):
    def __init__(self, cfg, layer: int):
        super().__init__()
        self.self_attn = LlamaAttention(cfg, qk_norm="over all heads", layer=layer)
        self.mlp = HFMLP(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.d_model, _eps(cfg))
        self.post_feedforward_layernorm = RMSNorm(cfg.d_model, _eps(cfg))

    def forward(self, x, mask, positions):
        x = x + self.post_attention_layernorm(self.self_attn(x, x, x, mask, positions, positions))
        return x + self.post_feedforward_layernorm(self.mlp(x))


class Olmo2Inner(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab, cfg.d_model)
        self.layers = nn.ModuleList([Olmo2Layer(cfg, i) for i in range(layers(cfg))])
        self.norm = RMSNorm(cfg.d_model, _eps(cfg))

    def forward(self, tokens, mask, positions):
        x = self.embed_tokens(tokens)
        for layer in self.layers:
            x = layer(x, mask, positions)
        return self.norm(x)


def _rotary_fraction(cfg) -> float:
    hf = cfg.class_config
    params = getattr(hf, "rope_parameters", None) or {}
    return float(params.get("partial_rotary_factor") or getattr(hf, "rotary_pct", None) or 1.0)


class NeoXLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        eps = _eps(cfg)
        self.input_layernorm = nn.LayerNorm(cfg.d_model, eps=eps)
        self.post_attention_layernorm = nn.LayerNorm(cfg.d_model, eps=eps)
        self.attention = GPTNeoXAttention(cfg, rotary_pct=_rotary_fraction(cfg))
        self.mlp = nn.Module()
        self.mlp.dense_h_to_4h = nn.Linear(cfg.d_model, cfg.d_ff)
        self.mlp.dense_4h_to_h = nn.Linear(cfg.d_ff, cfg.d_model)
        self.parallel = bool(getattr(cfg.class_config, "use_parallel_residual", True))

    def mlp_out(self, x):
        return self.mlp.dense_4h_to_h(F.gelu(self.mlp.dense_h_to_4h(x)))

    def forward(self, x, mask, positions):
        a = self.attention(self.input_layernorm(x), mask, positions)
        if self.parallel:
            return x + a + self.mlp_out(self.post_attention_layernorm(x))
        x = x + a
        return x + self.mlp_out(self.post_attention_layernorm(x))


class NeoXInner(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_in = nn.Embedding(cfg.vocab, cfg.d_model)
        self.layers = nn.ModuleList([NeoXLayer(cfg) for _ in range(layers(cfg))])
        self.final_layer_norm = nn.LayerNorm(cfg.d_model, eps=_eps(cfg))

    def forward(self, tokens, mask, positions):
        x = self.embed_in(tokens)
        for layer in self.layers:
            x = layer(x, mask, positions)
        return self.final_layer_norm(x)


register(
    id="gemma3_port", family="llama_model", source="transformers.Gemma3ForCausalLM",
    summary="Gemma 3 (text): sqrt(D) embedding, 1 + w RMSNorms, sandwich and per-head q/k norms, windows and RoPE "
            "by layer type, score scale, GeGLU, tied",
    build=Gemma3Model, call=call_model, param_map=gemma3_map,
    traits={**BLOCK, "gain": "1+w", "activation": "gelu_tanh", "tied_output": True}, supports=_needs_class,
)
register_decoding("llama_model", "gemma3_port", prepare=llama_prepare, step=llama_step, cache=CACHE,
                  padding=("right", "left"))
OLMO2 = {**BLOCK, "qk_norm": "rms over all heads", "tied_output": False,
         "note": "norms on each sublayer's output before its residual add (OLMo 2), none before"}
NEOX = {**BLOCK, "norm_formula": "layernorm", "eps": 1e-5, "activation": "gelu", "bias": True, "tied_output": False,
        "note": "parallel residual, partial rotary, a GELU MLP (GPT-NeoX)"}
for vid, source, prefix, inner, head, traits in (
    ("olmo2_by_name", "Olmo2ForCausalLM", "model", Olmo2Inner, "lm_head", OLMO2),
    ("gpt_neox_by_name", "GPTNeoXForCausalLM", "gpt_neox", NeoXInner, "lm_head", NEOX),
):
    register(
        id=vid, family="llama_model", source=f"transformers.{source}",
        summary=f"{source} in the project's pieces, with the class's own parameter names (mapped by name)",
        build=lambda cfg, p=prefix, m=inner, h=head: _Named(cfg, p, m(cfg), h), call=call_model, param_map={},
        traits=traits, supports=_needs_class,
    )
