"""The classes a checkpoint can belong to, as model sides of a comparison: a Hugging Face
model folder's own class (``config.json``'s ``architectures`` or ``model_type``, whichever
causal LM class transformers has for it, built from that config), or a registered variant.

``model_config`` reads the class's config into a ``ModelConfig``: the sizes, and the values
a port builds from (norm eps, RoPE base, scaling and rotating fraction, per-layer types
and RoPE, window, soft caps, score scale, tied head, the extension groups its parameters
hold); ``harness.registry.hf_class`` reads the class's parameters and places them among
a family's canonical names, or as themselves for a port that uses the class's names.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import torch

from harness.base.config import ModelConfig
from harness.base.errors import ConfigError
from harness.families.models import Decoding
from harness.families.rope_scaling import rope_settings_by_layer
from harness.porting.entries import MapEntry
from harness.registry import Variant
from harness.registry.hf_class import get, hf_class


def rope_of(hf: Any) -> dict:
    """{layer type: RopeSettings} ("" when one for all layers); one line on what the
    harness does not read."""
    try:
        return rope_settings_by_layer(hf)
    except (ConfigError, TypeError, ValueError) as exc:
        raise ConfigError(f"{get(hf, 'model_type', default='the')} config's RoPE: {exc}") from None


def _window(hf: Any) -> tuple[int, int] | None:
    """HF's ``sliding_window=w`` (keys i-w+1 .. i) as (w-1, 0); none where the config turns it off."""
    w = get(hf, "sliding_window")
    if not w or get(hf, "use_sliding_window", default=True) is False:
        return None
    return (int(w) - 1, 0)


def model_config(hf: Any, *, extensions: tuple[str, ...] = (), gpt2: bool | None = None,
                 **changes: Any) -> ModelConfig:
    """The config of a Hugging Face config (its object, or ``config.json`` as a dict);
    ``gpt2``: GPT-2's field names and sizes (default: where the config uses ``n_embd``)."""
    model_type = get(hf, "model_type", default="")
    gpt2 = get(hf, "n_embd") is not None if gpt2 is None else gpt2
    d, heads = get(hf, "hidden_size", "n_embd"), get(hf, "num_attention_heads", "n_head")
    if gpt2:
        fields = dict(d_model=d, heads=heads, d_ff=get(hf, "n_inner") or 4 * d, vocab=get(hf, "vocab_size"),
                      tgt_len=get(hf, "n_positions", "max_position_embeddings"), layers=get(hf, "n_layer"),
                      norm_eps=get(hf, "layer_norm_epsilon", default=1e-5))
    else:
        fields = _llama_fields(hf, d, heads)
    fields.update(extensions=tuple(extensions), model_type=model_type, class_config=hf,
                  tied=bool(get(hf, "tie_word_embeddings", default=False)),
                  max_positions=get(hf, "max_position_embeddings"))
    fields.update(changes)
    try:
        return ModelConfig(**fields)
    except (TypeError, ConfigError) as exc:
        raise ConfigError(f"{model_type} config does not give a model config: {exc}") from None


def _llama_fields(hf: Any, d: int, heads: int) -> dict:
    head_dim = get(hf, "head_dim", default=d // heads if d and heads else None)
    if d and heads and head_dim * heads != d:
        raise ConfigError(f"{get(hf, 'model_type', default='')}: head_dim={head_dim} with {heads} heads is not "
                          f"hidden_size={d}: the llama family's canonical q/k/v are (H * D/H, D)")
    rope = rope_of(hf)
    main = rope.get("") or rope.get("full_attention") or next(iter(rope.values()))
    layer_types = tuple(get(hf, "layer_types", default=()) or ())
    by_type = tuple((kind, s.theta, s.scaling) for kind, s in rope.items() if kind)
    scalar = get(hf, "query_pre_attn_scalar")
    return dict(d_model=d, heads=heads, kv_heads=get(hf, "num_key_value_heads", default=heads),
                d_ff=get(hf, "intermediate_size"), vocab=get(hf, "vocab_size"), layers=get(hf, "num_hidden_layers"),
                rope_base=main.theta, rope_scaling=main.scaling, layer_types=layer_types, layer_rope=by_type,
                norm_eps=float(get(hf, "rms_norm_eps", "layer_norm_eps", "norm_eps", "layer_norm_epsilon",
                                   default=1e-6)),
                window=_window(hf), softcap=float(get(hf, "attn_logit_softcapping", default=0.0)),
                final_softcap=float(get(hf, "final_logit_softcapping", default=0.0)),
                score_scale=None if scalar is None else 1 / math.sqrt(scalar))


def rope_fraction(hf: Any) -> float:
    return min(s.fraction for s in rope_of(hf).values())


# -- a Hugging Face class as a side ------------------------------------------------------------

def load_hf_config(folder) -> Any:
    """The folder's config object, through transformers (the ``hf`` extra)."""
    try:
        import transformers
    except ImportError:
        raise ConfigError("building the checkpoint's own class needs transformers (pip install -e '.[hf]'); "
                          "without it, give the class as a registered variant with --reference") from None
    try:
        return transformers.AutoConfig.from_pretrained(str(folder), attn_implementation="eager")
    except Exception as exc:  # the library's own refusal, one line
        first = str(exc).strip().splitlines()
        raise ConfigError(f"{folder}: transformers cannot read its config.json: {type(exc).__name__}: "
                          f"{first[0] if first else ''}") from None


def _hf_call(module, inputs: Mapping[str, torch.Tensor]) -> torch.Tensor:
    kwargs = {"attention_mask": inputs["pad"].long()}
    if "positions" in inputs:
        kwargs["position_ids"] = inputs["positions"]
    logits = module(input_ids=inputs["tokens"], use_cache=False, **kwargs).logits
    return logits.log_softmax(-1)


def _hf_prepare(module, inputs, cached: bool) -> dict:
    return {"cached": cached, "cache": None, "fed": 0}


def _hf_step(module, state: dict, ys: torch.Tensor) -> torch.Tensor:
    """Log-probabilities of the token after ``ys``: the whole prefix, or with the model's own
    cache (HF's ``past_key_values``) what it has not seen, at positions after it."""
    if not state["cached"]:
        return module(input_ids=ys, use_cache=False).logits[:, -1].log_softmax(-1)
    fed, k = state["fed"], ys.shape[1]
    positions = torch.arange(fed, k, device=ys.device)[None].expand(ys.shape[0], -1)
    out = module(input_ids=ys[:, fed:], past_key_values=state["cache"], use_cache=True, position_ids=positions)
    state["cache"], state["fed"] = out.past_key_values, k
    return out.logits[:, -1].log_softmax(-1)


HF_DECODING = Decoding(prepare=_hf_prepare, step=_hf_step, cache="past_key_values (the model's own cache)")


def hf_variant(hf: Any, family: str, param_map: Mapping[str, MapEntry]) -> Variant:
    """The checkpoint's own class as a (not registered) variant of ``family``: built from
    the config (random weights, replaced through ``param_map``), eager attention, called
    with the family's inputs, log-softmax of its logits."""
    cls = hf_class(hf)

    def build(_cfg):
        model = cls(hf)
        return model.eval()

    return Variant(id=f"{cls.__name__}", family=family, source=f"transformers.{cls.__name__}", build=build,
                   call=_hf_call, param_map=dict(param_map),
                   summary=f"{cls.__name__} from the checkpoint's config.json (transformers)")
