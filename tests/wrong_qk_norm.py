"""Deliberately wrong QK-norm attention variants, each declaring the traits of a correct one,
and correct controls that compute QK-norm another way. The QK-norm gains are the attention
family's canonical ``q_norm.weight`` and ``k_norm.weight`` where a variant declares
``qk_norm``, ported and drawn away from one, so the order of norm and RoPE, which gain
normalises which projection and how a gain is laid out over the heads all show. Loaded inside
``harness.registry.scratch()`` by tests/test_verdicts_hold.py. ``WRONG`` maps each id to its
mistake; ``CONTROLS`` lists the controls."""

import torch
import torch.nn.functional as F
from torch import nn

from harness import Offset, Param, register
from variants.llama import LLAMA, RMSNorm, attention_map, rotate_half

WRONG = {
    "wrong_qk_norm_after_rope": "per-head QK-norm (Qwen3) applied after RoPE",
    "wrong_qk_norm_all_heads_after_rope": "QK-norm over all heads (OLMo2) applied after RoPE",
    "wrong_qk_norm_k_with_q_gain": "k normalised with q's gain",
    "wrong_qk_norm_gains_swapped": "q normalised with k's gain and k with q's",
    "wrong_qk_norm_gain_shared": "one head's gain for every head where a gain per head and dim is declared (OLMo2)",
    "wrong_qk_norm_gain_unused": "the gains held but never applied (a unit gain)",
}
CONTROLS = ("control_qk_norm_rms_norm", "control_qk_norm_folded_gain", "control_qk_norm_all_heads_by_hand")

PER_HEAD = {**LLAMA, "qk_norm": "rms per head", "eps": 1e-6, "cases": ("self_kv", "causal")}
ALL_HEADS = {**PER_HEAD, "qk_norm": "rms over all heads"}


class QKNormAttention(nn.Module):
    """Bias-free q/k/v/o, QK-norm, RoPE half-split, SDPA with the K/V heads grouped
    consecutively; ``how`` says how QK-norm is computed (a mistake or a correct other way)."""

    def __init__(self, cfg, how: str, all_heads: bool = False):
        super().__init__()
        self.h, self.h_kv, self.d, self.base, self.how = cfg.heads, cfg.n_kv_heads, cfg.d_k, cfg.rope_base, how
        self.q_proj = nn.Linear(cfg.d_model, cfg.heads * cfg.d_k, bias=False)
        self.k_proj = nn.Linear(cfg.d_model, self.h_kv * cfg.d_k, bias=False)
        self.v_proj = nn.Linear(cfg.d_model, self.h_kv * cfg.d_k, bias=False)
        self.o_proj = nn.Linear(cfg.heads * cfg.d_k, cfg.d_model, bias=False)
        self.all_heads = all_heads
        self.q_norm = RMSNorm(cfg.heads * cfg.d_k if all_heads else cfg.d_k, gemma=how == "folded gain")
        self.k_norm = RMSNorm(self.h_kv * cfg.d_k if all_heads else cfg.d_k, gemma=how == "folded gain")

    def _norm(self, x: torch.Tensor, which: str) -> torch.Tensor:
        """RMSNorm of x (B, h, L, d) per head, or over all its heads, with the gain ``which``."""
        gain = {"q": self.q_norm, "k": self.k_norm}[which].weight
        if self.how == "folded gain":
            gain = 1.0 + gain
        if self.how == "gain unused":
            gain = torch.ones_like(gain)
        if not self.all_heads:
            return F.rms_norm(x, (self.d,), gain, eps=1e-6)
        h = x.shape[1]
        if self.how == "gain shared":
            gain = gain[:self.d].repeat(h)
        if self.how == "by hand":  # the mean square over every head's dims, the gain (h, 1, d)
            ms = x.pow(2).mean(dim=(1, 3), keepdim=True)
            return x * torch.rsqrt(ms + 1e-6) * gain.view(h, 1, self.d)
        flat = x.transpose(1, 2).flatten(2)                                      # (B, L, h d)
        return F.rms_norm(flat, (h * self.d,), gain, eps=1e-6).unflatten(2, (h, self.d)).transpose(1, 2)

    def forward(self, query, key, value, mask, positions, key_positions):
        B, T, _ = query.shape
        S = key.shape[1]
        q = self.q_proj(query).view(B, T, self.h, self.d).transpose(1, 2)       # (B, H, T, d)
        k = self.k_proj(key).view(B, S, self.h_kv, self.d).transpose(1, 2)     # (B, H_kv, S, d)
        v = self.v_proj(value).view(B, S, self.h_kv, self.d).transpose(1, 2)
        after = self.how == "after rope"
        gains = {"k with q gain": ("q", "q"), "gains swapped": ("k", "q")}.get(self.how, ("q", "k"))
        if not after:
            q, k = self._norm(q, gains[0]), self._norm(k, gains[1])
        q, k = rotate_half(q, positions, self.base), rotate_half(k, key_positions, self.base)
        if after:
            q, k = self._norm(q, "q"), self._norm(k, "k")
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None], enable_gqa=True)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, self.h * self.d))


def call(m, i):
    return m(i["query"], i["key"], i["value"], i["mask"], i["positions"], i["key_positions"])


def _register(vid: str, how: str, traits: dict, param_map=None) -> None:
    register(id=vid, family="attention", source="test", call=call, traits=traits,
             build=lambda cfg: QKNormAttention(cfg, how, all_heads=traits["qk_norm"] == "rms over all heads"),
             param_map=param_map or attention_map(qk_norm=True))


def _folded(cfg):  # Gemma 3's RMSNorm holds w where the gain is 1 + w: the canonical gain minus one
    return {**attention_map()(cfg), **{f"{c}_norm.weight": Offset(Param(f"{c}_norm.weight"), -1.0) for c in "qk"}}


_register("wrong_qk_norm_after_rope", "after rope", PER_HEAD)
_register("wrong_qk_norm_all_heads_after_rope", "after rope", ALL_HEADS)
_register("wrong_qk_norm_k_with_q_gain", "k with q gain", PER_HEAD)
_register("wrong_qk_norm_gains_swapped", "gains swapped", PER_HEAD)
_register("wrong_qk_norm_gain_shared", "gain shared", ALL_HEADS)
_register("wrong_qk_norm_gain_unused", "gain unused", PER_HEAD)
_register("control_qk_norm_rms_norm", "rms_norm", PER_HEAD)
_register("control_qk_norm_folded_gain", "folded gain", PER_HEAD, _folded)
_register("control_qk_norm_all_heads_by_hand", "by hand", ALL_HEADS)
