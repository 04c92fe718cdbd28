"""Porting mistakes that no change on the port's side can undo: a port that ignores a config
value (the sliding window, a soft cap) or reads it from the wrong field (``rope_theta``) is
not changed by handing it another value. Such a mistake is named the other way round: the
class is rebuilt with the mistake reproduced in its config (the window, the cap taken out;
the RoPE base another one) and the port, unchanged, agrees with it.

``CLASS_FIXES``: each a name, an explanation and the candidate changes to the model config
(``ModelConfig`` fields) of a checkpoint that has the feature. A class built from the
checkpoint's ``config.json`` gets them as its own config's fields (``sliding_window``,
``attn_logit_softcapping``, ``final_logit_softcapping``, ``rope_parameters``); a registered
reference gets the changed ``ModelConfig``.

A q/k norm applied after RoPE where the class applies it before is no config value: it is
reproduced by running the class's own attention in the other order (``norms_after_rope``:
its per-head ``q_norm``/``k_norm`` made the identity where the class calls them, and applied to
what its ``apply_rotary_pos_emb`` returns).
"""

from __future__ import annotations

import copy
import dataclasses
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from torch import nn

from harness.base.config import ModelConfig
from harness.registry.checkpoints import hf_variant
from harness.registry.hf_class import hf_class

COMMON_BASES = (10000.0, 500000.0, 1000000.0)  # the defaults and the usual trained RoPE bases


@dataclass(frozen=True)
class ClassFix:
    """``candidates(cfg)``: [(changes to the ModelConfig, what they say)], empty where the
    checkpoint has no such feature."""

    name: str
    explanation: str
    candidates: Callable[[ModelConfig], list[tuple[dict, str]]]


def _window(cfg: ModelConfig) -> list[tuple[dict, str]]:
    return [] if cfg.window is None else [({"window": None}, f"window {cfg.window})")]


def _cap(field: str):
    def candidates(cfg: ModelConfig) -> list[tuple[dict, str]]:
        value = getattr(cfg, field)
        return [({field: 0.0}, f"cap {value:g})")] if value else []
    return candidates


def _bases(cfg: ModelConfig) -> set[float]:
    return {float(cfg.rope_base)} | {float(b) for _, b, _ in cfg.layer_rope}


def _theta(cfg: ModelConfig) -> list[tuple[dict, str]]:
    own = _bases(cfg)
    shown = " / ".join(f"{b:g}" for b in sorted(own))
    out = []
    for base in sorted(set(COMMON_BASES) | own):
        if own == {base} and not cfg.layer_rope:
            continue
        out.append(({"rope_base": base, "layer_rope": ()}, f"the port turns by {base:g} on every layer, "
                    f"the class by {shown})"))
    return out


CLASS_FIXES = (
    ClassFix("sliding window ignored", "the port attends to every earlier key where the class keeps only its "
             "sliding window (read the config's sliding_window: ModelConfig.window / layer_window;", _window),
    ClassFix("attention softcap dropped", "the port does not soft-cap attention scores (cap * tanh(s / cap): "
             "attn_logit_softcapping, ModelConfig.softcap;", _cap("softcap")),
    ClassFix("final logit softcap dropped", "the port does not soft-cap the logits (final_logit_softcapping, "
             "ModelConfig.final_softcap;", _cap("final_softcap")),
    ClassFix("rope_theta read from the wrong field", "the port's RoPE base is not the config's (rope_theta / "
             "rope_parameters, ModelConfig.rope_base and layer_rope_of:", _theta),
)


def _hf_changed(hf: Any, changes: dict, cfg: ModelConfig) -> Any:
    """A copy of the class's config with ``changes`` (ModelConfig fields) as its own fields."""
    out = copy.deepcopy(hf)
    if "window" in changes:  # longer than any sequence: every earlier key kept
        out.sliding_window = max(cfg.max_positions or 0, 1 << 20)
    if "softcap" in changes:
        out.attn_logit_softcapping = None
    if "final_softcap" in changes:
        out.final_logit_softcapping = None
    if "norm_eps" in changes:
        for name in ("rms_norm_eps", "layer_norm_eps", "norm_eps", "layer_norm_epsilon"):
            if getattr(out, name, None) is not None:
                setattr(out, name, changes["norm_eps"])
    if "rope_base" in changes:
        base = changes["rope_base"]
        params = copy.deepcopy(getattr(out, "rope_parameters", None))
        if isinstance(params, dict):
            for p in ([params] if "rope_theta" in params or "rope_type" in params else params.values()):
                if isinstance(p, dict):
                    p["rope_theta"] = base
            out.rope_parameters = params
        if hasattr(out, "rope_theta"):
            out.rope_theta = base
    return out


def class_with(c, changes: dict):
    """(the comparison with its reference rebuilt from its config with ``changes``, the
    reference side): the class built from ``config.json`` with them in that config, a registered
    reference from the changed ModelConfig."""
    cfg = dataclasses.replace(c.cfg, **changes)
    side = c.reference
    hf = c.cfg.class_config
    if hf is not None and side.variant.id == hf_class(hf).__name__:
        variant = hf_variant(_hf_changed(hf, changes, c.cfg), side.variant.family, side.variant.param_map)
        side = dataclasses.replace(side, variant=variant)
        return c, side
    return dataclasses.replace(c, cfg=cfg), side


QK_NORM_AFTER_ROPE = ("q/k norm after RoPE", "the port normalises q and k after rotating them (RoPE); the class "
                      "normalises them first (q_norm / k_norm, then the rotation): RMS is the same either way, the "
                      "gains are not")


def _qk_attentions(module: nn.Module) -> list[nn.Module]:
    """The class's attention modules with per-head q/k norms (gain over the head width) and a
    module-level ``apply_rotary_pos_emb`` to wrap; empty where it has none."""
    out = []
    for m in module.modules():
        q, k, d = getattr(m, "q_norm", None), getattr(m, "k_norm", None), getattr(m, "head_dim", None)
        if not (isinstance(q, nn.Module) and isinstance(k, nn.Module) and isinstance(d, int)):
            continue
        gains = [getattr(n, "weight", None) for n in (q, k)]
        if any(g is None or g.shape[-1] != d for g in gains):
            return []
        if not hasattr(sys.modules.get(type(m).__module__), "apply_rotary_pos_emb"):
            return []
        out.append(m)
    return out


@contextmanager
def norms_after_rope(module: nn.Module) -> Iterator[bool]:
    """Within: the class ``module`` (a transformers model) normalises q and k after RoPE.
    Yields False (nothing changed) where its attention has no per-head q/k norm to move."""
    attentions = _qk_attentions(module)
    if not attentions:
        yield False
        return
    state: dict[str, Any] = {"attention": None, "bypass": False}
    namespace = sys.modules[type(attentions[0]).__module__]
    rotate = getattr(namespace, "apply_rotary_pos_emb")

    def rotated(q, k, *args, **kwargs):
        q, k = rotate(q, k, *args, **kwargs)
        attention, state["bypass"] = state["attention"], True
        try:
            return attention.q_norm(q), attention.k_norm(k)
        finally:
            state["bypass"] = False

    handles = []
    for a in attentions:
        handles.append(a.register_forward_pre_hook(lambda m, args: state.__setitem__("attention", m)))
        for norm in (a.q_norm, a.k_norm):
            handles.append(norm.register_forward_hook(lambda m, args, out: out if state["bypass"] else args[0]))
    setattr(namespace, "apply_rotary_pos_emb", rotated)
    try:
        yield True
    finally:
        setattr(namespace, "apply_rotary_pos_emb", rotate)
        for h in handles:
            h.remove()
