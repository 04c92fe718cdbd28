"""Naming a port's mistake on a checkpoint: each classic porting mistake undone on the
port's side in turn (``FIXES``); the one after which the port agrees with the checkpoint's
class names it; a mistake no change on the port's side undoes (a config value ignored or read
from the wrong field) is reproduced in the class instead (``CLASS_FIXES``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch

from harness.base.config import ModelConfig
from harness.porting.entries import Param, RopePermuted
from harness.systems.checkpoint_class_fixes import CLASS_FIXES, QK_NORM_AFTER_ROPE, class_with, norms_after_rope
from harness.systems.checkpoint_sides import Comparison, build_side, canonical_weights, logprobs, run
from harness.systems.parity import token_kl


@dataclass(frozen=True)
class Fix:
    """A classic porting mistake, and how to undo it on the port's side: ``weights``
    changes the canonical weights the port is loaded with, ``hook`` patches its module
    (returns the hook handles, or None where the port has no place for it)."""

    name: str
    explanation: str
    weights: Callable[[dict, ModelConfig], dict | None] | None = None
    hook: Callable[[Any, Any, ModelConfig], list | None] | None = None


def _per_layer(w: dict, suffix: str) -> list[str]:
    return [n for n in w if n.endswith(suffix) and n.startswith(("layers.", "blocks."))]


def _rope_rows(w: dict, cfg: ModelConfig, undo: bool) -> dict | None:
    if "llama" not in _kind(w):
        return None
    out = dict(w)
    for name in _per_layer(w, "self_attn.q.weight") + _per_layer(w, "self_attn.k.weight"):
        heads = cfg.heads if name.endswith("q.weight") else cfg.n_kv_heads
        index = RopePermuted(Param(name), heads).index(w[name].shape[0])
        if undo:
            out[name] = w[name][index]
        else:
            back = torch.empty_like(w[name])
            back[index] = w[name]
            out[name] = back
    return out


def _kind(w: dict) -> str:
    return "llama" if any(n.startswith("layers.") for n in w) else "gpt"


def _heads_regrouped(w: dict, cfg: ModelConfig) -> dict | None:
    """Query heads reordered so that a port giving query head p the K/V head p mod H_kv
    (tiled) computes what the class's consecutive grouping (p // (H / H_kv)) does."""
    h, kv = cfg.heads, cfg.n_kv_heads
    if kv in (h, 1) or "llama" not in _kind(w):
        return None
    group, d = h // kv, cfg.d_k
    sigma = torch.tensor([(p % kv) * group + p // kv for p in range(h)])
    out = dict(w)
    for name in _per_layer(w, "self_attn.q.weight"):
        prefix = name.removesuffix("q.weight")
        out[name] = w[name].view(h, d, -1)[sigma].reshape(h * d, -1)
        out[prefix + "q.bias"] = w[prefix + "q.bias"].view(h, d)[sigma].reshape(-1)
        o = w[prefix + "o.weight"]
        out[prefix + "o.weight"] = o.view(o.shape[0], h, d)[:, sigma].reshape(o.shape[0], h * d)
    return out


def _gains(w: dict, cfg: ModelConfig, delta: float) -> dict | None:
    names = [n for n in w if n.endswith("norm.weight")]
    return {**w, **{n: w[n] + delta for n in names}} if names else None


def _head_from_embedding(w: dict, cfg: ModelConfig) -> dict | None:
    return {**w, "head.weight": w["embed.weight"].clone()} if "head.weight" in w else None


def _embedding_module(module, portmap):
    entry = portmap.entries.get("embed.weight")
    if not isinstance(entry, Param) or not entry.path.endswith(".weight"):
        return None
    owner = entry.path.removesuffix(".weight")
    try:
        found = module.get_submodule(owner)
    except AttributeError:
        return None
    return found if isinstance(found, torch.nn.Embedding) else None


def _embedding_scaled(power: float):
    def hook(module, portmap, cfg):
        embedding = _embedding_module(module, portmap)
        if embedding is None:
            return None
        factor = math.sqrt(cfg.d_model) ** power
        return [embedding.register_forward_hook(lambda m, args, out: out * factor)]
    return hook


class _Restore:
    """A hook handle that puts a module's attribute back."""

    def __init__(self, module, name: str, value):
        self.module, self.name, self.value = module, name, value

    def remove(self) -> None:
        setattr(self.module, self.name, self.value)


def _eps_scaled(factor: float):
    """Every norm of the port (a module with a float ``eps``: RMSNorm, LayerNorm's) with its
    eps times ``factor``; None where the port has none."""
    def hook(module, portmap, cfg):
        handles = []
        for sub in module.modules():
            eps = getattr(sub, "eps", None)
            if isinstance(eps, float) and not isinstance(eps, bool):
                handles.append(_Restore(sub, "eps", eps))
                sub.eps = eps * factor
        return handles or None
    return hook


FIXES = (
    Fix("RoPE rows not permuted", "the port rotates pairs (2i, 2i+1) (Meta's interleaved RoPE) on q/k rows "
        "laid out for half-split RoPE (rotate_half): its map needs RopePermuted on q and k (HF's converter's "
        "permute)", weights=lambda w, cfg: _rope_rows(w, cfg, undo=False)),
    Fix("RoPE rows permuted where they are not", "the port's map permutes q/k rows (RopePermuted) for a "
        "module that rotates half-split", weights=lambda w, cfg: _rope_rows(w, cfg, undo=True)),
    Fix("K/V heads tiled", "query head h reads K/V head h mod H_kv (repeat/tile) where the class groups "
        "consecutive query heads on one K/V head (h // (H / H_kv): repeat_interleave, HF's repeat_kv)",
        weights=_heads_regrouped),
    Fix("norm gain 1 + w read as w", "the class's RMSNorm multiplies by 1 + w (Gemma stores the gain "
        "minus one); the port multiplies by w", weights=lambda w, cfg: _gains(w, cfg, 1.0)),
    Fix("norm gain w read as 1 + w", "the class's norm multiplies by w; the port by 1 + w (Gemma's form)",
        weights=lambda w, cfg: _gains(w, cfg, -1.0)),
    Fix("embedding scale missing", "the class multiplies token embeddings by sqrt(D) (Gemma's normalizer); "
        "the port does not", hook=_embedding_scaled(1.0)),
    Fix("embedding scale added", "the port multiplies token embeddings by sqrt(D); the class does not",
        hook=_embedding_scaled(-1.0)),
    Fix("norm eps 10x too small", "the port's norms add an eps ten times smaller than the class's "
        "(rms_norm_eps / layer_norm_eps read from another field, or a default)", hook=_eps_scaled(10.0)),
    Fix("norm eps 10x too large", "the port's norms add an eps ten times larger than the class's",
        hook=_eps_scaled(0.1)),
    Fix("untied head left at its init", "the checkpoint saves the head tied to the embedding, once "
        "(deduplicated); the port's own head matrix is not in it and keeps its initial values: tie it "
        "(Tied(\"embed.weight\") in its map)", weights=_head_from_embedding),
)


def name_mistakes(c: Comparison, tokens: torch.Tensor, reference: torch.Tensor, bound: float,
                  transform: Callable[[dict], dict] | None = None) -> list[dict]:
    """Each fix after which the port agrees with the reference (worst KL within the bound),
    with that KL; the untied-head fix only where the port kept a head at its init; then each
    mistake reproduced in the class (``class_mistakes``). ``transform``: the stress setting's
    change to both sides' canonical weights (``checkpoint_stress``)."""
    return _port_fixes(c, tokens, reference, bound, transform) + class_mistakes(c, tokens, bound, transform)


def class_mistakes(c: Comparison, tokens: torch.Tensor, bound: float,
                   transform: Callable[[dict], dict] | None = None) -> list[dict]:
    """Each of ``CLASS_FIXES`` whose change, made in the class's config, makes the class compute
    what the port, unchanged, computes (worst KL within the bound); the first candidate that
    does, per fix."""
    port = None
    found = []
    for fix in CLASS_FIXES:
        for changes, detail in fix.candidates(c.cfg):
            if port is None:
                port = run(c, c.port, tokens, transform)
            changed, side = class_with(c, changes)
            kl = float(token_kl(run(changed, side, tokens, transform), port).max())
            if kl <= bound:
                found.append({"name": fix.name, "explanation": f"{fix.explanation} {detail}", "kl_undone": kl,
                              "by": "reproduced in the class"})
                break
    return found + _norm_order(c, tokens, bound, transform)


def _norm_order(c: Comparison, tokens: torch.Tensor, bound: float, transform) -> list[dict]:
    """q/k norm after RoPE: the class run with its norms moved after the rotation agrees with
    the port (``norms_after_rope``); nothing where the class has no such norm."""
    weights = canonical_weights(c, c.reference, c.dtype)
    module, _ = build_side(c, c.reference, c.dtype, weights if transform is None else transform(weights))
    with norms_after_rope(module) as moved:
        if not moved:
            return []
        reference = logprobs(c.reference, module, c.family, tokens)
    kl = float(token_kl(reference, run(c, c.port, tokens, transform)).max())
    if kl > bound:
        return []
    name, explanation = QK_NORM_AFTER_ROPE
    return [{"name": name, "explanation": explanation, "kl_undone": kl, "by": "reproduced in the class"}]


def _port_fixes(c: Comparison, tokens: torch.Tensor, reference: torch.Tensor, bound: float,
                transform: Callable[[dict], dict] | None) -> list[dict]:
    found = []
    for fix in FIXES:
        if fix.name.startswith("untied head") and "head.weight" not in c.left_at_init:
            continue
        weights = canonical_weights(c, c.port, c.dtype)
        weights = weights if transform is None else transform(weights)
        if fix.weights is not None:
            weights = fix.weights(weights, c.cfg)
            if weights is None:
                continue
        module, portmap = build_side(c, c.port, c.dtype, weights)
        handles = []
        if fix.hook is not None:
            handles = fix.hook(module, portmap, c.cfg)
            if handles is None:
                continue
        try:
            kl = float(token_kl(reference, logprobs(c.port, module, c.family, tokens)).max())
        finally:
            for h in handles:
                h.remove()
        if kl <= bound:
            found.append({"name": fix.name, "explanation": fix.explanation, "kl_undone": kl})
    return found
