"""Library modules built and called from the harness config: a model library's config object
filled from a ``Config`` (Hugging Face transformers' ``PreTrainedConfig`` subclasses, recognised
by their class names, so the harness never imports the library), a module's own rotary tables,
and the additive mask library attention takes.

What ``library_config`` fills, when the config class takes it: the width, heads, K/V heads,
head width, feed-forward width, vocabulary (a default token id past it: none), one layer, the
sliding window (HF's ``sliding_window = w`` keeps keys i-w+1 .. i: ``Config.window = (w-1, 0)``;
the layer a sliding one exactly when the window is set, where ``layer_types`` says which),
RoPE's base (``rope_theta`` and its older names, or every ``rope_theta`` of the
``rope_parameters`` the class builds, one per layer type where it keeps several); every dropout
probability 0; the eager attention implementation (the one that reads the mask it is given).
Keywords the caller passes win. The attention family reads a logit soft-cap and a score scale
from the module (its traits), not from ``Config``.
"""

from __future__ import annotations

import inspect
import sys
import weakref
from typing import Any

import torch

from harness.base.config import Config
from harness.base.errors import ConfigError

CONFIG_BASES = ("PreTrainedConfig", "PretrainedConfig")
KINDS = ("sliding_attention", "full_attention")  # layer types: the window's, or none


def is_library_config(obj: Any) -> bool:
    """Whether ``obj`` is a library config class (a subclass of transformers' PreTrainedConfig)."""
    return isinstance(obj, type) and any(c.__name__ in CONFIG_BASES for c in obj.__mro__[1:])


def _fields(cfg: Config) -> dict[str, Any]:
    window = cfg.window[0] + 1 if cfg.window is not None and cfg.window[1] == 0 else None
    return {
        "hidden_size": cfg.d_model, "n_embd": cfg.d_model,
        "num_attention_heads": cfg.heads, "n_head": cfg.heads,
        "num_key_value_heads": cfg.n_kv_heads, "num_kv_heads": cfg.n_kv_heads, "head_dim": cfg.d_k,
        "intermediate_size": cfg.d_ff, "n_inner": cfg.d_ff,
        "sliding_window": window, "use_sliding_window": window is not None,
        "rope_theta": cfg.rope_base, "rotary_emb_base": cfg.rope_base, "rotary_embedding_base": cfg.rope_base,
        "vocab_size": cfg.vocab,
        "num_hidden_layers": 1, "n_layer": 1,
    }


def library_config(config_cls: type, cfg: Config, **overrides: Any) -> Any:
    """An instance of ``config_cls`` sized by ``cfg`` (see the module docstring)."""
    if not is_library_config(config_cls):
        raise ConfigError(f"{getattr(config_cls, '__name__', config_cls)!r} is not a library config class "
                          f"(a subclass of {' or '.join(CONFIG_BASES)})")
    try:
        params = inspect.signature(config_cls.__init__).parameters  # type: ignore[misc]  # a class's own
    except (TypeError, ValueError):
        params = {}  # type: ignore[assignment]
    accepted = set(params) | set(getattr(config_cls, "attribute_map", {}) or {})
    kwargs = {k: v for k, v in _fields(cfg).items() if k in accepted}
    kwargs.update({k: 0.0 for k in accepted if "dropout" in k or "pdrop" in k})  # not norm_topk_prob, a bool
    if "vocab_size" in kwargs:  # a default token id past the vocabulary (Phi-3's pad 32000): none
        kwargs.update({k: None for k, p in params.items() if k.endswith("_token_id") and _past(p.default, cfg.vocab)})
    kwargs.update(overrides)
    config = _made(config_cls, kwargs)
    derived: dict[str, Any] = {}  # what the class derives from its own defaults: made to follow cfg
    rope, kinds = getattr(config, "rope_parameters", None), getattr(config, "layer_types", None)
    if "rope_parameters" in accepted and not {"rope_parameters", "rope_theta"} & set(overrides) \
            and isinstance(rope, dict):
        derived["rope_parameters"] = _with_base(rope, cfg.rope_base)
    if "layer_types" in accepted and "layer_types" not in overrides and isinstance(kinds, list) \
            and set(kinds) <= set(KINDS):
        derived["layer_types"] = [KINDS[0] if kwargs.get("sliding_window") else KINDS[1]] * len(kinds)
    if any(getattr(config, k) != v for k, v in derived.items()):
        config = _made(config_cls, {**kwargs, **derived})
    try:
        config._attn_implementation = "eager"
    except (AttributeError, ValueError):
        pass
    return config


def _past(token: Any, vocab: int) -> bool:
    ids = token if isinstance(token, (list, tuple)) else [token]
    return any(isinstance(t, int) and not 0 <= t < vocab for t in ids)


def _made(config_cls: type, kwargs: dict[str, Any]) -> Any:
    try:
        return config_cls(**kwargs)
    except Exception as exc:  # the library's own validation: one line
        raise ConfigError(f"{config_cls.__name__}(...) refused the harness config: {type(exc).__name__}: {exc}") \
            from None


def _with_base(rope: dict[str, Any], base: float) -> dict[str, Any]:
    """``rope`` (transformers' ``rope_parameters``) with its ``rope_theta`` at ``base``; one
    dict per layer type (Gemma 3's full and sliding attention): each of them."""
    if any(isinstance(v, dict) for v in rope.values()):
        return {k: _with_base(v, base) if isinstance(v, dict) else v for k, v in rope.items()}
    return {**rope, "rope_theta": base}


def _rotary_class(module: torch.nn.Module) -> type:
    """The rotary embedding class beside the module's class (``LlamaRotaryEmbedding`` in
    ``modeling_llama``): the model builds it from the same config."""
    home = sys.modules.get(type(module).__module__)
    found = [v for k, v in vars(home).items() if k.endswith("RotaryEmbedding") and isinstance(v, type)] if home else []
    own = [c for c in found if c.__module__ == type(module).__module__]
    pick = own or found
    if len(pick) != 1:
        raise ConfigError(f"{type(module).__name__}: no single *RotaryEmbedding class in {type(module).__module__} "
                          f"to compute its rotary tables with ({len(pick)} found)")
    return pick[0]


_ROTARY: "weakref.WeakKeyDictionary[torch.nn.Module, torch.nn.Module]" = weakref.WeakKeyDictionary()


def rotary_tables(module: torch.nn.Module, x: torch.Tensor, positions: torch.Tensor) -> Any:
    """The module's own (cos, sin) at ``positions`` (B, L), as its model computes them and
    passes them in (``position_embeddings``): the library's rotary embedding class built
    from the module's config (kept beside the module, built once)."""
    rotary = _ROTARY.get(module)
    if rotary is None:
        config = next((getattr(m, "config") for m in module.modules() if getattr(m, "config", None) is not None),
                      None)  # its own, or its attention's (a decoder layer keeps none)
        if config is None:
            raise ConfigError(f"{type(module).__name__} keeps no .config to build its rotary embedding from")
        rotary = _ROTARY[module] = _rotary_class(module)(config).to(x.device)
    return rotary(x, positions.to(x.device))


def config_class_for(cls: type, annotation: Any = None) -> type | None:
    """The library config class a module class's constructor takes: its ``config`` argument's
    annotation, else the one config class its own module holds (the one whose name shares
    the longest prefix with the module class's, when there are several)."""
    if is_library_config(annotation):
        return annotation
    home = sys.modules.get(cls.__module__)
    found = {v for v in vars(home).values() if is_library_config(v)} if home else set()
    if not found:
        return None

    def shared(c: type) -> int:
        n = 0
        for a, b in zip(c.__name__, cls.__name__):
            if a != b:
                break
            n += 1
        return n
    best = max(found, key=lambda c: (shared(c), c.__name__))
    return best if shared(best) > 0 or len(found) == 1 else None
