"""The Gemma 2 and Qwen 3 models that examples/checkpoint_ports.py registers as ports (the
classes and their parameter maps, written with the project's LLaMA-style pieces from
variants/llama.py); see that file for what each computes."""


import math

import torch
import torch.nn.functional as F
from torch import nn

from harness import Param, layers, nest
from variants.llama import (
    BLOCK,
    GatedFFN,
    KVCache,
    LlamaAttention,
    LlamaBlock,
    LlamaModel,
    RMSNorm,
    model_map,
)


class Gemma2Block(nn.Module):
    """Gemma2DecoderLayer: x + post_attn_norm(attention(attn_norm(x))), then
    x + post_ffn_norm(mlp(ffn_norm(x))), every norm Gemma's (gain 1 + w)."""

    def __init__(self, cfg, gemma_gain: bool = True):
        super().__init__()
        d = cfg.d_model
        self.attn_norm = RMSNorm(d, gemma=gemma_gain)
        self.self_attn = LlamaAttention(cfg, softcap=50.0)
        self.post_attn_norm = RMSNorm(d, gemma=gemma_gain)
        self.ffn_norm = RMSNorm(d, gemma=gemma_gain)
        self.mlp = GatedFFN(cfg, act=lambda x: F.gelu(x, approximate="tanh"))
        self.post_ffn_norm = RMSNorm(d, gemma=gemma_gain)

    def forward(self, x, mask, positions, cache=None):
        h = self.attn_norm(x)
        x = x + self.post_attn_norm(self.self_attn(h, h, h, mask, positions, positions, cache=cache))
        return x + self.post_ffn_norm(self.mlp(self.ffn_norm(x)))


class ScaledEmbedding(nn.Embedding):
    """Gemma's embedding: the lookup times ``scale`` (sqrt(D)), the factor rounded to the
    table's dtype first, as HF's Gemma2TextScaledWordEmbedding does."""

    def __init__(self, vocab: int, d: int, scale: float):
        super().__init__(vocab, d)
        self.scale = scale

    def forward(self, tokens):
        return super().forward(tokens) * torch.tensor(self.scale, dtype=self.weight.dtype)


class Gemma2Model(LlamaModel):
    """Embedding times sqrt(D) (``embed_scale``), Gemma 2 blocks, Gemma's final RMSNorm, the head (tied),
    logits soft-capped at ``final_softcap``."""

    def __init__(self, cfg, *, tied: bool = True, embed_scale: bool = True, gemma_gain: bool = True,
                 final_softcap: float = 30.0):
        super().__init__(cfg, block=lambda c: Gemma2Block(c, gemma_gain), tied=tied)
        self.embed = ScaledEmbedding(cfg.vocab, cfg.d_model, math.sqrt(cfg.d_model) if embed_scale else 1.0)
        self.norm = RMSNorm(cfg.d_model, gemma=gemma_gain)
        self.final_softcap = final_softcap

    def forward(self, tokens, pad, positions, cache: KVCache | None = None, segments=None):
        n = tokens.shape[1]
        past = 0 if cache is None or cache.pad is None else cache.pad.shape[1]
        keys = pad if past == 0 else torch.cat([cache.pad, pad], dim=1)
        if cache is not None:
            cache.pad = keys
        masks = self.masks(keys, n, past, segments)
        x = self.embed(tokens)
        for i, layer in enumerate(self.layers):
            x = layer(x, masks[i], positions, None if cache is None else cache.layers[i])
        x = self.norm(x)
        logits = x @ self.embed.weight.T if self.head is None else self.head(x)
        if self.final_softcap:
            logits = self.final_softcap * torch.tanh(logits / self.final_softcap)
        return logits.log_softmax(-1)


def gemma2_map(tied: bool = True):
    def entries(cfg):
        out = model_map(tied=tied)(cfg)
        for i in range(layers(cfg)):
            out.update(nest({"post_attn_norm.weight": Param("post_attn_norm.weight"),
                             "post_ffn_norm.weight": Param("post_ffn_norm.weight")}, f"layers.{i}.", f"layers.{i}."))
        return out
    return entries


class Qwen3Block(LlamaBlock):
    """LlamaDecoderLayer with Qwen 3's attention: q and k RMS-normalised per head before RoPE."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.self_attn = LlamaAttention(cfg, qk_norm="per head")


def qwen3_map(cfg):
    out = model_map()(cfg)
    for i in range(layers(cfg)):
        out.update(nest({"self_attn.q_norm.weight": Param("self_attn.q_norm.weight"),
                         "self_attn.k_norm.weight": Param("self_attn.k_norm.weight")}, f"layers.{i}.", f"layers.{i}."))
    return out


def needs(group: str, model: str):
    def supports(cfg):
        if group in getattr(cfg, "extensions", ()):
            return None
        return f"{model}'s {group} gains come from a checkpoint: compare it with `python -m harness parity`"
    return supports


GEMMA2 = {**BLOCK, "gain": "1+w", "upcast": "float32 through the gain", "activation": "gelu_tanh", "softcap": 50.0,
          "embedding_scale": "sqrt(D)", "tied_output": True,
          "note": "sandwich norms (post_attn_norm, post_ffn_norm) and final logits soft-capped at 30: outside the "
                  "family's oracle"}
