"""LLaMA-style pieces written in this project's own code, and PyTorch's own as references.

Design followed: LLaMA (Touvron et al. 2023, Meta's ``llama/model.py``) as Hugging Face's
``LlamaAttention`` / ``LlamaRMSNorm`` / ``LlamaMLP`` restate it: bias-free q/k/v/o
projections, rotary position embeddings on q and k (base ``Config.rope_base``),
grouped-query attention (K/V heads repeated with ``repeat_interleave``, HF's ``repeat_kv``),
RMSNorm with a gain, a SwiGLU feed-forward. Deviations, each on purpose:

- tables and rotations are computed in the input's dtype where HF and Meta compute RoPE's
  inverse frequencies in float32 (and Meta rotates in complex64): in float64 they would be
  "less precise" by construction; for half inputs ``meta_llama`` rotates in float32 as
  Meta does;
- the RMSNorms upcast to ``promote_types(x.dtype, float32)``, not to float32 outright (a
  float64 input stays float64);
- attention is HF's eager path (matmul, softmax, matmul; ``sdpa_gqa`` is SDPA) with the
  call's bool mask filled with -inf where HF adds finfo.min: a row without keys is zeros
  (as SDPA gives it), declared. SDPA's math backward sends ~1e-7 into the q/k gradients of a
  row with one key (exactly 0: softmax of one score); the eager path gives 0 there;
- ``mistral`` takes the call's (left, right) window on the top-left diagonal (Mistral's
  model puts it in the mask); LLaMA has none;
- positions come from the call (``positions`` for queries, ``key_positions`` for keys, as
  HF's ``position_ids`` of a step after a cache).

Variants:
- ``attention/llama``: RoPE half-split (``rotate_half``), GQA by ``repeat_interleave``.
- ``attention/meta_llama``: RoPE interleaved as Meta's complex multiplication (pairs 2i,
  2i+1); its canonical q/k rows are its own (declared ``rope: interleaved``).
- ``attention/meta_llama_permuted``: the same module with q/k weights ported through
  ``RopePermuted`` (HF's converter's permutation): equivalent to ``llama``.
- ``attention/mistral``: ``llama`` with a sliding window.
- ``attention/qwen3`` and ``attention/olmo2_qk_norm``: ``llama`` with QK-norm (RMSNorm of q
  and k before RoPE, per head or over all heads; their gains the family's ``q_norm.weight``
  and ``k_norm.weight``);
  ``attention/gemma2_softcap``: ``llama`` with Gemma 2's logit soft-capping (50).
- ``attention/sdpa_gqa``: ``F.scaled_dot_product_attention(enable_gqa=True)`` with biases,
  no RoPE: PyTorch's own GQA as a reference (in ``torch_sdpa``'s class where kv_heads =
  heads).
- ``norm/llama_rmsnorm`` (gain w, cast back before the gain) and ``norm/gemma_rmsnorm``
  (gain 1 + w, float32 through the gain); ``nn.RMSNorm`` is ``norm/torch_rmsnorm``.
- ``gated_ffn/llama_mlp`` (SwiGLU), ``gated_ffn/geglu`` (GeGLU, tanh gelu) and
  ``gated_ffn/fused_swiglu`` (gate and up in one Linear, a layout control).
- ``llama_block/llama_block`` (HF's LlamaDecoderLayer: pre-RMSNorm, the attention above,
  pre-RMSNorm, SwiGLU) and ``llama_block/llama_block_fused`` (a control written fused);
  ``llama_model/llama_model`` (embedding, N blocks, final RMSNorm, untied head),
  ``llama_model_tied``, ``llama_model_fused`` and ``meta_llama_model`` (interleaved RoPE on
  q/k rows as given), ``mistral_model`` (a sliding window in its mask), and
  ``llama_model_flex`` / ``mistral_model_flex`` (flex_attention with block masks of causal,
  padding and window mask_mods; skipped by the check on CPU, where flex has no backward),
  each with a k/v cache and its decoding (see the section below for the block's and the
  model's own deviations).
"""

from __future__ import annotations

import inspect
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention.flex_attention import BlockMask, and_masks, create_block_mask, flex_attention

from harness import (
    Chunk,
    Param,
    RopePermuted,
    Tied,
    Zero,
    layers,
    nest,
    norm_entries,
    register,
    register_decoding,
    rope_frequencies,
)
from variants.pytorch_behaviour import SDPA_HALF_FULLY_MASKED

SOURCE = "torch"


def rope_tables(positions: torch.Tensor, dim: int, base: float, dtype: torch.dtype, scaling=None):
    """(cos, sin) of shape (B, 1, L, dim / 2) for ``positions`` (B, L); ``scaling`` a
    ``RopeScaling`` (a checkpoint's ``ModelConfig.rope_scaling``: its inverse frequencies, and
    its attention factor on cos and sin), None for the default RoPE."""
    if scaling is None or scaling.is_default:
        inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=dtype, device=positions.device) / dim))
        factor = 1.0
    else:
        inv, factor = rope_frequencies(scaling, base, dim, positions, dtype)
        inv = inv.to(positions.device)
    angle = positions.to(dtype)[:, None, :, None] * inv
    return angle.cos() * factor, angle.sin() * factor


def rotate_half(x: torch.Tensor, positions: torch.Tensor, base: float, scaling=None) -> torch.Tensor:
    """HF's apply_rotary_pos_emb: x * cos + rotate_half(x) * sin, (B, h, L, d); the tables
    computed in float32 at least (HF's rotary embedding: float32 angles, cast to x's dtype)."""
    cos, sin = rope_tables(positions, x.shape[-1], base, torch.promote_types(x.dtype, torch.float32), scaling)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    cos, sin = torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def rotate_complex(x: torch.Tensor, positions: torch.Tensor, base: float, scaling=None) -> torch.Tensor:
    """Meta's apply_rotary_emb: pairs (2i, 2i+1) as complex numbers times e^(i angle)."""
    work = torch.promote_types(x.dtype, torch.float32)
    cos, sin = rope_tables(positions, x.shape[-1], base, work, scaling)
    turns = torch.complex(cos, sin)
    pairs = torch.view_as_complex(x.to(work).reshape(*x.shape[:-1], -1, 2).contiguous())
    return torch.view_as_real(pairs * turns).flatten(-2).to(x.dtype)


class LlamaAttention(nn.Module):
    """q/k/v/o Linears (bias-free unless ``bias``), RoPE on q and k, K/V heads repeated per
    group, SDPA."""

    def __init__(self, cfg, rope: str = "half-split", bias: bool = False, gqa: str = "repeat_interleave",
                 qk_norm: str = "none", softcap: float = 0.0, layer: int = 0):
        super().__init__()
        self.h, self.h_kv, self.d = cfg.heads, cfg.n_kv_heads, cfg.d_k
        self.base, self.scaling = rope_of(cfg, layer)
        self.rope, self.gqa, self.softcap = rope, gqa, softcap
        self.score_scale = getattr(cfg, "score_scale", None)
        self.q_proj = nn.Linear(cfg.d_model, cfg.heads * cfg.d_k, bias=bias)
        self.k_proj = nn.Linear(cfg.d_model, self.h_kv * cfg.d_k, bias=bias)
        self.v_proj = nn.Linear(cfg.d_model, self.h_kv * cfg.d_k, bias=bias)
        self.o_proj = nn.Linear(cfg.heads * cfg.d_k, cfg.d_model, bias=bias)
        self.qk_norm = qk_norm
        if qk_norm != "none":  # before RoPE: over each head's d_k (Qwen3), or over all heads (OLMo2)
            width = cfg.d_k if qk_norm == "per head" else None
            self.q_norm = RMSNorm(width or cfg.heads * cfg.d_k, eps=eps_of(cfg))
            self.k_norm = RMSNorm(width or self.h_kv * cfg.d_k, eps=eps_of(cfg))

    def forward(self, query, key, value, mask, positions, key_positions, window=None, cache=None):
        """``cache``: a dict holding the rotated keys and values of earlier tokens ("k", "v",
        (B, H_kv, P, d)), or None; with one, ``key``/``value`` are the new tokens only, their
        rotated K/V are appended to it, and ``mask`` is (B, T, P + S)."""
        B, T, _ = query.shape
        S = key.shape[1]
        q, k = self.q_proj(query), self.k_proj(key)                            # (B, T, H d), (B, S, H_kv d)
        if self.qk_norm == "over all heads":
            q, k = self.q_norm(q), self.k_norm(k)
        q = q.view(B, T, self.h, self.d).transpose(1, 2)                        # (B, H, T, d)
        k = k.view(B, S, self.h_kv, self.d).transpose(1, 2)                     # (B, H_kv, S, d)
        v = self.v_proj(value).view(B, S, self.h_kv, self.d).transpose(1, 2)
        if self.qk_norm == "per head":
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rope == "half-split":
            q = rotate_half(q, positions, self.base, self.scaling)
            k = rotate_half(k, key_positions, self.base, self.scaling)
        elif self.rope == "interleaved":
            q = rotate_complex(q, positions, self.base, self.scaling)
            k = rotate_complex(k, key_positions, self.base, self.scaling)
        if cache is not None:
            if "k" in cache:
                k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)  # (B, H_kv, P+S, d)
            cache["k"], cache["v"] = k, v
            S = k.shape[2]
        if isinstance(mask, BlockMask):  # the model's block mask: flex_attention (a row without keys: zeros)
            y = flex_attention(q, k, v, block_mask=mask, enable_gqa=True)
            return self.o_proj(y.transpose(1, 2).reshape(B, T, self.h * self.d))
        keep = mask[:, None]                                                   # (B, 1, T, S)
        if window is not None:
            rel = torch.arange(S, device=mask.device)[None, :] - torch.arange(T, device=mask.device)[:, None]
            keep = keep & (rel >= -window[0]) & (rel <= window[1])
        if self.gqa == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, enable_gqa=True)
        else:
            group = self.h // self.h_kv
            if self.gqa == "repeat_interleave":
                k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
            else:  # "tile": a wrong grouping, for the tests
                k, v = k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)
            y = eager(q, k, v, keep, self.softcap, self.score_scale)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, self.h * self.d))


def rope_of(cfg, layer: int = 0):
    """(RoPE base, scaling) of ``layer``: a checkpoint's config (``ModelConfig``) says them per
    layer type where they differ (Gemma 3); a plain ``Config`` has the base and no scaling."""
    if hasattr(cfg, "layer_rope_of"):
        return cfg.layer_rope_of(layer)
    return cfg.rope_base, None


def eps_of(cfg) -> float:
    """The norms' eps: a checkpoint's (``ModelConfig.norm_eps``), else LLaMA's 1e-6."""
    return getattr(cfg, "norm_eps", 1e-6)


def eager(q, k, v, keep, softcap: float = 0.0, scale: float | None = None):
    """HF's eager_attention_forward: q k^T / sqrt(d) (or times ``scale``: Gemma's
    query_pre_attn_scalar ** -0.5), soft-capped when ``softcap`` (Gemma 2: c tanh(s / c)),
    masked, softmax, times v; a row without keys is zeros (as SDPA gives it), with no gradient."""
    s = q @ k.transpose(-2, -1) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)  # (B, H, T, S)
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    dead = ~keep.any(-1, keepdim=True)
    p = s.masked_fill(~keep, float("-inf")).masked_fill(dead, 0.0).softmax(-1).masked_fill(dead, 0.0)
    return p @ v


def call(m, i):
    return m(i["query"], i["key"], i["value"], i["mask"], i["positions"], i["key_positions"])


def call_window(m, i):
    return m(i["query"], i["key"], i["value"], i["mask"], i["positions"], i["key_positions"], i["window"])


def attention_map(permuted: bool = False, bias: bool = False, qk_norm: bool = False):
    """Canonical q/k/v/o to the ``*_proj`` Linears; ``permuted``: q and k through
    ``RopePermuted`` (the module's rows are for interleaved RoPE); ``qk_norm``: the QK-norm
    gains to ``q_norm``'s and ``k_norm``'s."""
    def entries(cfg):
        out = {f"{c}_norm.weight": Param(f"{c}_norm.weight") for c in "qk"} if qk_norm else {}
        for c, name in zip("qkvo", ("q_proj", "k_proj", "v_proj", "o_proj")):
            weight = Param(f"{name}.weight")
            if permuted and c in "qk":
                weight = RopePermuted(weight, heads=cfg.heads if c == "q" else cfg.n_kv_heads)
            out[f"{c}.weight"] = weight
            out[f"{c}.bias"] = Param(f"{name}.bias") if bias else Zero()
        return out
    return entries


LLAMA = {"sublayer": "attention", "rope": "half-split", "gqa_grouping": "consecutive", "fully_masked_row": "zeros",
         "qkv_layout": "4 Linear", "bias": False, "scale": "divides the scores",
         "mask_convention": "bool True = may attend", "fill": float("-inf")}

# The variants beside ``llama`` run the cases that tell them apart (check time is shared).
ROPE_CASES = ("self_kv", "causal", "decode", "decode_left_pad")

register(
    id="llama", family="attention", source=SOURCE,
    summary="LLaMA-style: bias-free q/k/v/o, RoPE half-split, GQA by repeat_interleave, eager softmax",
    build=lambda cfg: LlamaAttention(cfg), call=call, param_map=attention_map(), traits=LLAMA,
)
register(
    id="meta_llama", family="attention", source=SOURCE,
    summary="RoPE interleaved as Meta's complex multiplication; its own q/k row order",
    build=lambda cfg: LlamaAttention(cfg, rope="interleaved"), call=call, param_map=attention_map(),
    traits={**LLAMA, "rope": "interleaved", "cases": ROPE_CASES},
)
register(
    id="meta_llama_permuted", family="attention", source=SOURCE,
    summary="meta_llama with q/k rows ported through RopePermuted (HF's converter): = llama",
    build=lambda cfg: LlamaAttention(cfg, rope="interleaved"), call=call, param_map=attention_map(permuted=True),
    traits={**LLAMA, "note": "interleaved RoPE on permuted q/k rows computes half-split RoPE", "cases": ROPE_CASES},
)
register(
    id="mistral", family="attention", source=SOURCE,
    summary="llama with the call's sliding window (Mistral: keys i-w+1 .. i is window (w-1, 0))",
    build=lambda cfg: LlamaAttention(cfg), call=call_window, param_map=attention_map(),
    traits={**LLAMA, "window": "as called", "cases": ("causal", "fully_masked", "decode", "window")},
)
register(
    id="qwen3", family="attention", source=SOURCE,
    summary="llama with QK-norm: RMSNorm over each head's q and k before RoPE, one gain per dim shared by the "
            "heads (Qwen3)",
    build=lambda cfg: LlamaAttention(cfg, qk_norm="per head"), call=call, param_map=attention_map(qk_norm=True),
    traits={**LLAMA, "qk_norm": "rms per head", "eps": 1e-6, "cases": ROPE_CASES},
)
register(
    id="olmo2_qk_norm", family="attention", source=SOURCE,
    summary="llama with QK-norm over all heads: RMSNorm of the whole q and k projections, a gain per head and "
            "dim (OLMo2)",
    build=lambda cfg: LlamaAttention(cfg, qk_norm="over all heads"), call=call,
    param_map=attention_map(qk_norm=True),
    traits={**LLAMA, "qk_norm": "rms over all heads", "eps": 1e-6, "cases": ("self_kv", "causal")},
)
register(
    id="gemma2_softcap", family="attention", source=SOURCE,
    summary="llama with Gemma 2's attention logit soft-capping, 50 tanh(s / 50)",
    build=lambda cfg: LlamaAttention(cfg, softcap=50.0), call=call, param_map=attention_map(),
    traits={**LLAMA, "softcap": 50.0, "cases": ("self_kv", "causal", "decode")},
)
register(
    id="sdpa_gqa", family="attention", source=SOURCE,
    summary="F.scaled_dot_product_attention(enable_gqa=True) + 4 Linear, no RoPE",
    build=lambda cfg: LlamaAttention(cfg, rope="none", bias=True, gqa="sdpa"), call=call,
    param_map=attention_map(bias=True),
    traits={**LLAMA, "rope": "none", "bias": True, "scale": "inside SDPA", "fill": "sdpa",
            "cases": ("self_kv", "cross", "causal", "random_mask", "fully_masked", "decode"),
            "path_findings": {"fully_masked": SDPA_HALF_FULLY_MASKED}},
)


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) in at least float32, then the gain: LLaMA's (cast back to the
    input dtype, times w) or Gemma's (times 1 + w in float32, cast at the end)."""

    def __init__(self, d: int, eps: float = 1e-6, gemma: bool = False):
        super().__init__()
        self.eps, self.gemma = eps, gemma
        self.weight = nn.Parameter(torch.zeros(d) if gemma else torch.ones(d))

    def forward(self, x):
        work = torch.promote_types(x.dtype, torch.float32)
        h = x.to(work)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        if self.gemma:
            return (h * (1.0 + self.weight.to(work))).to(x.dtype)
        return self.weight * h.to(x.dtype)


RMS = {"norm_formula": "rms", "eps": 1e-6, "std": "root mean square, no centring"}
register(
    id="llama_rmsnorm", family="norm", source=SOURCE, summary="LlamaRMSNorm: float32, cast back, times w (eps 1e-6)",
    build=lambda cfg: RMSNorm(cfg.d_model), call=lambda m, i: m(i["x"]),
    param_map={"weight": Param("weight"), "bias": Zero()},
    traits={**RMS, "gain": "w", "upcast": "float32, cast back before the gain"},
)
register(
    id="gemma_rmsnorm", family="norm", source=SOURCE, summary="GemmaRMSNorm: gain 1 + w in float32 (eps 1e-6)",
    build=lambda cfg: RMSNorm(cfg.d_model, gemma=True), call=lambda m, i: m(i["x"]),
    param_map={"weight": Param("weight"), "bias": Zero()},
    traits={**RMS, "gain": "1+w", "upcast": "float32 through the gain"},
)


class GatedFFN(nn.Module):
    """down(act(gate x) * up x), bias-free; ``fused``: gate and up in one Linear(D, 2F)."""

    def __init__(self, cfg, act=F.silu, fused: bool = False):
        super().__init__()
        self.act, self.fused = act, fused
        if fused:
            self.gate_up = nn.Linear(cfg.d_model, 2 * cfg.d_ff, bias=False)
        else:
            self.gate = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
            self.up = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.down = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

    def forward(self, x):
        if self.fused:
            gate, up = self.gate_up(x).chunk(2, dim=-1)
        else:
            gate, up = self.gate(x), self.up(x)
        return self.down(self.act(gate) * up)


GATED_MAP = {"gate.weight": Param("gate.weight"), "up.weight": Param("up.weight"), "down.weight": Param("down.weight")}
register(
    id="llama_mlp", family="gated_ffn", source=SOURCE, reference=True, summary="LlamaMLP: SwiGLU",
    build=lambda cfg: GatedFFN(cfg), call=lambda m, i: m(i["x"]), param_map=GATED_MAP,
    traits={"activation": "silu"},
)
register(
    id="geglu", family="gated_ffn", source=SOURCE, summary="GeGLU with tanh gelu (Gemma's MLP)",
    build=lambda cfg: GatedFFN(cfg, act=lambda x: F.gelu(x, approximate="tanh")), call=lambda m, i: m(i["x"]),
    param_map=GATED_MAP, traits={"activation": "gelu_tanh"},
)
register(
    id="fused_swiglu", family="gated_ffn", source=SOURCE, summary="SwiGLU with gate and up in one Linear(D, 2F)",
    build=lambda cfg: GatedFFN(cfg, fused=True), call=lambda m, i: m(i["x"]),
    param_map={"gate.weight": Chunk("gate_up.weight", 0, 2), "up.weight": Chunk("gate_up.weight", 1, 2),
               "down.weight": Param("down.weight")},
    traits={"activation": "silu", "qkv_layout": "gate and up fused"},
)


# == The LLaMA-style decoder block and model =================================================
# ``LlamaBlock``: HF's LlamaDecoderLayer restated: x + attention(RMSNorm(x)) at the call's
# positions, then x + SwiGLU(RMSNorm(x)). ``LlamaModel``: embedding, N blocks, final RMSNorm,
# a bias-free head (or the embedding table, tied: Gemma, small LLaMA 3.2). Deviations: the
# layer count, widths and heads come from the config; the model returns log-probabilities
# (HF returns logits); the causal & pad mask is built inside the model from the call's pad
# (HF builds it in the model too, as an additive finfo.min mask: a left-pad row there is
# the mean of V, here zeros, declared). The cache is this file's own (HF's DynamicCache
# keeps the same thing): per layer the *rotated* keys and the values of the tokens fed so
# far, and their pad mask; a step's queries and keys turn at the positions the caller
# counts (``positions_of``: from each row's first real token, so left padding and the
# offset after a prefill are the caller's positions, not 0..n-1 of the step).
#
# ``FusedLlamaBlock`` is the control written differently: K and V in one Linear, q/k rows
# for Meta's interleaved RoPE ported through ``RopePermuted``, gate and up in one Linear,
# the scale on q before the product, K/V heads grouped by ``expand``, an additive mask.


class LlamaBlock(nn.Module):
    def __init__(self, cfg, rope: str = "half-split", layer: int = 0):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model, eps=eps_of(cfg))
        self.self_attn = LlamaAttention(cfg, rope=rope, layer=layer)
        self.ffn_norm = RMSNorm(cfg.d_model, eps=eps_of(cfg))
        self.mlp = GatedFFN(cfg)

    def forward(self, x, mask, positions, cache=None):
        h = self.attn_norm(x)
        x = x + self.self_attn(h, h, h, mask, positions, positions, cache=cache)
        return x + self.mlp(self.ffn_norm(x))


class FusedAttention(nn.Module):
    """q, fused kv and o Linears (bias-free), interleaved RoPE, the scale on q, K/V heads
    expanded per group, an additive mask (a row without keys: zeros)."""

    def __init__(self, cfg):
        super().__init__()
        self.h, self.h_kv, self.d, self.base = cfg.heads, cfg.n_kv_heads, cfg.d_k, cfg.rope_base
        self.q_proj = nn.Linear(cfg.d_model, cfg.heads * cfg.d_k, bias=False)
        self.kv_proj = nn.Linear(cfg.d_model, 2 * self.h_kv * cfg.d_k, bias=False)
        self.o_proj = nn.Linear(cfg.heads * cfg.d_k, cfg.d_model, bias=False)

    def forward(self, x, mask, positions, cache=None):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.h, self.d).transpose(1, 2)           # (B, H, T, d)
        k, v = self.kv_proj(x).view(B, T, 2, self.h_kv, self.d).permute(2, 0, 3, 1, 4)  # (B, H_kv, T, d) each
        q, k = rotate_complex(q, positions, self.base), rotate_complex(k, positions, self.base)
        if cache is not None:
            if "k" in cache:
                k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v
        S, group = k.shape[2], self.h // self.h_kv
        k = k[:, :, None].expand(B, self.h_kv, group, S, self.d).reshape(B, self.h, S, self.d)
        v = v[:, :, None].expand(B, self.h_kv, group, S, self.d).reshape(B, self.h, S, self.d)
        keep = mask[:, None]                                                   # (B, 1, T, S)
        dead = ~keep.any(-1, keepdim=True)
        bias = torch.zeros(keep.shape, dtype=q.dtype, device=q.device).masked_fill(~(keep | dead), float("-inf"))
        p = torch.softmax((q / math.sqrt(self.d)) @ k.transpose(-2, -1) + bias, dim=-1) * ~dead
        return self.o_proj((p @ v).transpose(1, 2).reshape(B, T, self.h * self.d))


class FusedLlamaBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model)
        self.self_attn = FusedAttention(cfg)
        self.ffn_norm = RMSNorm(cfg.d_model)
        self.mlp = GatedFFN(cfg, fused=True)

    def forward(self, x, mask, positions, cache=None):
        x = x + self.self_attn(self.attn_norm(x), mask, positions, cache)
        return x + self.mlp(self.ffn_norm(x))


FUSED_GATED_MAP = {"gate.weight": Chunk("gate_up.weight", 0, 2), "up.weight": Chunk("gate_up.weight", 1, 2),
                   "down.weight": Param("down.weight")}


def block_map(fused: bool = False):
    """The block's canonical parameters: RMSNorm gains (no bias), the attention map (or the
    fused one: q/k through ``RopePermuted``, k and v halves of ``kv_proj``), the gated FFN's."""
    def entries(cfg):
        out = {**norm_entries("attn_norm", "attn_norm", bias=None), **norm_entries("ffn_norm", "ffn_norm", bias=None)}
        if not fused:
            return {**out, **nest(attention_map()(cfg), "self_attn.", "self_attn."),
                    **nest(GATED_MAP, "mlp.", "mlp.")}
        return {**out, **nest({
            "q.weight": RopePermuted(Param("q_proj.weight"), heads=cfg.heads),
            "k.weight": RopePermuted(Chunk("kv_proj.weight", 0, 2), heads=cfg.n_kv_heads),
            "v.weight": Chunk("kv_proj.weight", 1, 2), "o.weight": Param("o_proj.weight"),
            **{f"{c}.bias": Zero() for c in "qkvo"}}, "self_attn.", "self_attn."),
            **nest(FUSED_GATED_MAP, "mlp.", "mlp.")}
    return entries


def positions_of(pad: torch.Tensor) -> torch.Tensor:
    """(B, L) positions from each row's first real token (HF's ``cumsum(-1) - 1``), 0 on
    left padding."""
    return (pad.long().cumsum(-1) - 1).clamp(min=0)


class KVCache:
    """What a decoding session has fed: per layer the rotated keys and the values, and the
    pad mask of those tokens (B, P)."""

    def __init__(self, n_layers: int):
        self.layers: list[dict] = [{} for _ in range(n_layers)]
        self.pad: torch.Tensor | None = None


class LlamaModel(nn.Module):
    """``window`` (left, right): Mistral's sliding window over token indices, built into the
    mask; ``flex``: the mask is a flex_attention block mask composed of mask_mods (causal,
    padding, the window) and every block runs flex_attention."""

    def __init__(self, cfg, block=LlamaBlock, tied: bool = False, window: tuple[int, int] | None = None,
                 flex: bool = False, final_softcap: float = 0.0, windows: list | None = None):
        super().__init__()
        self.window, self.flex, self.final_softcap = window, flex, final_softcap
        self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
        self.layers = nn.ModuleList([_block(block, cfg, i) for i in range(layers(cfg))])
        # each layer's window (``windows``: a checkpoint's per layer type, ``layer_windows``), else ``window``
        self.windows = windows if windows is not None else [window] * len(self.layers)
        self.norm = RMSNorm(cfg.d_model, eps=eps_of(cfg))
        self.head = None if tied else nn.Linear(cfg.d_model, cfg.vocab, bias=False)

    def forward(self, tokens, pad, positions, cache: KVCache | None = None, segments=None):
        """Log-probabilities (B, n, V) of the token after each of ``tokens`` (B, n); with a
        ``cache``, ``tokens`` follow what it holds and are appended to it; ``segments`` (B, n)
        numbers the sequences a row packs (no attention across them; a full forward only)."""
        n = tokens.shape[1]
        past = 0 if cache is None or cache.pad is None else cache.pad.shape[1]
        keys = pad if past == 0 else torch.cat([cache.pad, pad], dim=1)          # (B, P + n)
        if cache is not None:
            cache.pad = keys
        masks = self.masks(keys, n, past, segments)
        x = self.embed(tokens)                                                  # (B, n, D)
        for i, layer in enumerate(self.layers):
            x = layer(x, masks[i], positions, None if cache is None else cache.layers[i])
        x = self.norm(x)
        logits = x @ self.embed.weight.T if self.head is None else self.head(x)
        if self.final_softcap:  # Gemma 2's final_logit_softcapping
            logits = self.final_softcap * torch.tanh(logits / self.final_softcap)
        return logits.log_softmax(-1)

    def masks(self, keys: torch.Tensor, n: int, past: int, segments=None) -> list:
        """Each layer's mask (one per distinct window): ``dense_mask`` or ``block_mask``."""
        made: dict = {}
        make = self.block_mask if self.flex else self.dense_mask
        for w in self.windows:
            if w not in made:  # the model's own window: the call a subclass's mask may override
                made[w] = make(keys, n, past, segments) if w == self.window else make(keys, n, past, segments,
                                                                                        window=w)
        return [made[w] for w in self.windows]

    def dense_mask(self, keys: torch.Tensor, n: int, past: int, segments=None, window="model") -> torch.Tensor:
        """(B, n, P+n) bool, True = may attend: queries past .. past+n-1 over keys 0 .. past+n-1,
        causal, not padding, in the window (the model's, or ``window``), in the query's segment."""
        window = self.window if window == "model" else window
        rows = torch.arange(n, device=keys.device)[:, None] + past
        cols = torch.arange(past + n, device=keys.device)[None, :]
        mask = (cols <= rows)[None] & keys[:, None, :]
        if window is not None:
            mask = mask & ((cols >= rows - window[0]) & (cols <= rows + window[1]))[None]
        if segments is not None:
            mask = mask & (segments[:, :, None] == segments[:, None, :])
        return mask

    def block_mask(self, keys: torch.Tensor, n: int, past: int, segments=None, window="model") -> BlockMask:
        """Queries past .. past+n-1 over keys 0 .. past+n-1: causal, not padding, in the window,
        in the query's segment."""
        window = self.window if window == "model" else window
        def causal(b, h, i, j):
            return j <= i + past

        def padding(b, h, i, j):
            return keys[b, j]

        mods = [causal, padding]
        if window is not None:
            left, right = window
            mods.append(lambda b, h, i, j: (j >= i + past - left) & (j <= i + past + right))
        if segments is not None:
            mods.append(lambda b, h, i, j: segments[b, i] == segments[b, j])
        return create_block_mask(and_masks(*mods), keys.shape[0], None, n, past + n, device=keys.device)


def _block(block, cfg, i: int):
    """Layer ``i`` of ``block``: told its index where it takes one (its RoPE by layer type)."""
    try:
        takes = "layer" in inspect.signature(block).parameters
    except (TypeError, ValueError):
        takes = False
    return block(cfg, layer=i) if takes else block(cfg)


def layer_windows(cfg) -> list:
    """Each layer's window from a checkpoint's config: the config's on its sliding layers
    (``ModelConfig.layer_window``), else the config's window on every layer."""
    if hasattr(cfg, "layer_window"):
        return [cfg.layer_window(i) for i in range(layers(cfg))]
    return [cfg.window] * layers(cfg)


def model_map(fused: bool = False, tied: bool = False):
    def entries(cfg):
        out = {"embed.weight": Param("embed.weight"), **norm_entries("norm", "norm", bias=None),
               "head.weight": Tied("embed.weight") if tied else Param("head.weight")}
        for i in range(layers(cfg)):
            out.update(nest(block_map(fused)(cfg), f"layers.{i}.", f"layers.{i}."))
        return out
    return entries


def _pad_upto(pad: torch.Tensor, k: int) -> torch.Tensor:
    """The session's pad mask over its first k tokens (generated tokens past the case are real)."""
    if pad.shape[1] < k:
        pad = torch.cat([pad, pad.new_ones(pad.shape[0], k - pad.shape[1])], dim=1)
    return pad[:, :k]


def llama_prepare(model, inputs, cached):
    tokens = inputs["tokens"]
    return {"cache": KVCache(len(model.layers)) if cached else None, "fed": 0,
            "pad": inputs.get("pad", torch.ones_like(tokens, dtype=torch.bool))}


def llama_step(model, state, ys):
    """Log-probabilities of the token after ``ys``: re-running the prefix, or feeding what the
    cache has not seen at the positions counted over the whole prefix."""
    k = ys.shape[1]
    pad = _pad_upto(state["pad"], k)
    positions = positions_of(pad)
    if state["cache"] is None:
        return model(ys, pad, positions)[:, -1]
    fed, state["fed"] = state["fed"], k
    return model(ys[:, fed:], pad[:, fed:], positions[:, fed:], cache=state["cache"])[:, -1]


BLOCK = {"norm_placement": "pre", **RMS, "gain": "w", "upcast": "float32, cast back before the gain",
         "rope": "half-split", "rope_scaling": "as configured", "gqa_grouping": "consecutive",
         "fully_masked_row": "zeros", "activation": "silu",
         "qkv_layout": "4 Linear", "bias": False, "mask_convention": "bool True = may attend"}
FUSED = {**BLOCK, "qkv_layout": "q, fused kv (interleaved-RoPE rows, RopePermuted), fused gate/up",
         "scale": "on q before the product", "fill": "additive -inf"}


def call_block(m, i):
    return m(i["x"], i["mask"], i["positions"])


def call_model(m, i):
    return m(i["tokens"], i["pad"], i["positions"], segments=i["segments"])


register(
    id="llama_block", family="llama_block", source=SOURCE, reference=True,
    summary="LlamaDecoderLayer: pre-RMSNorm, RoPE half-split + GQA attention, pre-RMSNorm, SwiGLU",
    build=lambda cfg: LlamaBlock(cfg), call=call_block, param_map=block_map(), traits=BLOCK,
)
register(
    id="llama_block_fused", family="llama_block", source=SOURCE,
    summary="the same block written fused: kv and gate/up Linears, interleaved RoPE on permuted rows",
    build=lambda cfg: FusedLlamaBlock(cfg), call=call_block, param_map=block_map(fused=True), traits=FUSED,
)
CACHE = "rotated k and v per layer, and the pad mask (KVCache, this file's)"
for vid, block, fused, tied, traits, summary in (
    ("llama_model", LlamaBlock, False, False, BLOCK, "embedding, llama blocks, RMSNorm, untied head"),
    ("llama_model_tied", LlamaBlock, False, True, BLOCK, "the same with the head tied to the embedding"),
    ("llama_model_fused", FusedLlamaBlock, True, False, FUSED, "embedding, fused blocks, RMSNorm, untied head"),
    ("meta_llama_model", lambda cfg: LlamaBlock(cfg, rope="interleaved"), False, False,
     {**BLOCK, "rope": "interleaved"}, "interleaved RoPE on q/k rows as given (no RopePermuted): Meta's layout"),
):
    register(
        id=vid, family="llama_model", source=SOURCE, reference=vid == "llama_model", summary=summary,
        build=lambda cfg, b=block, t=tied: LlamaModel(cfg, block=b, tied=t), call=call_model,
        param_map=model_map(fused, tied), traits={**traits, "tied_output": tied},
    )
    register_decoding("llama_model", vid, prepare=llama_prepare, step=llama_step, cache=CACHE,
                      padding=("right", "left"))

MISTRAL_WINDOW = (3, 0)   # Mistral's sliding_window = 4 at this harness's lengths (T = 7), where the config has none
FLEX_SKIP = ("flex_attention has no backward on CPU (NotImplementedError in torch 2.13); its forward is held "
             "to the oracle by tests/test_llama_model.py")
FLEX_NOT_YET = ("flex_attention's higher-order op does not run under the check's kernel-path recorder: "
                "not checked yet")
for vid, window, flex, summary in (
    ("mistral_model", MISTRAL_WINDOW, False, "llama_model with Mistral's sliding window (3, 0) in its mask"),
    ("llama_model_flex", None, True, "llama_model on flex_attention: block mask of causal and padding mask_mods"),
    ("mistral_model_flex", MISTRAL_WINDOW, True,
     "mistral_model on flex_attention: block mask of causal, padding and window mask_mods"),
):
    register(
        id=vid, family="llama_model", source=SOURCE, summary=summary,
        build=lambda cfg, w=window, f=flex: LlamaModel(cfg, window=w and (cfg.window or w), flex=f,
                                                       windows=w and layer_windows(cfg) if cfg.window else None),
        call=call_model,
        param_map=model_map(), traits={**BLOCK, "tied_output": False, "window": window or "none",
                                       **({"note": "attention: flex_attention, eager"} if flex else {})},
        supports=(lambda cfg: FLEX_NOT_YET if torch.cuda.is_available() else FLEX_SKIP) if flex else (lambda cfg: None),
    )
    register_decoding("llama_model", vid, prepare=llama_prepare, step=llama_step, cache=CACHE,
                      padding=("right", "left"))
