"""The classes a checkpoint can belong to, as model sides of a comparison: a Hugging Face
model folder's own class (``config.json``'s ``architectures``, built by transformers from
that config), or a registered variant.

For each Hugging Face model type the harness reads, its *class map*: where each canonical
parameter of the family (``llama_model`` or ``decoder_only_model``) lives among the
class's parameters, which are the checkpoint's tensor names (``save_pretrained`` writes the
model's ``state_dict``). The conversions are map entries: GPT-2's Conv1D weights are
``Transposed``, its fused ``c_attn`` is three ``Chunk``s; Llama's ``post_attention_layernorm``
is the norm before the feed-forward (``ffn_norm``), Gemma 2's is the norm after attention
(the ``sandwich_norms`` group); a head tied to the embedding (``tie_word_embeddings``)
is ``Tied``: the checkpoint holds it once.

``model_config`` reads the sizes from the folder's ``config.json`` into a ``ModelConfig``
and refuses, in one line, what the family's canonical shapes cannot hold (a head width
other than D / H, a model type the harness has no map for).
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from harness.base.config import ModelConfig
from harness.base.errors import ConfigError
from harness.families.models import Decoding
from harness.porting.entries import Chunk, MapEntry, Param, Tied, Transposed, Zero
from harness.registry import Variant

LLAMA_TYPES = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2")
GPT2_TYPES = ("gpt2",)
MODEL_TYPES = LLAMA_TYPES + GPT2_TYPES


def family_of(model_type: str) -> str:
    if model_type in LLAMA_TYPES:
        return "llama_model"
    if model_type in GPT2_TYPES:
        return "decoder_only_model"
    raise ConfigError(f"no class map for model_type '{model_type}'; the harness reads {list(MODEL_TYPES)} "
                      "(or give the checkpoint's class as a registered variant with --reference)")


def _get(hf: Any, *names: str, default: Any = None) -> Any:
    for name in names:
        value = hf.get(name) if isinstance(hf, Mapping) else getattr(hf, name, None)
        if value is not None:
            return value
    return default


def _rope_base(hf: Any) -> float:
    params = _get(hf, "rope_parameters", "rope_scaling")
    if isinstance(params, Mapping) and params.get("rope_type", "default") not in ("default", None):
        raise ConfigError(f"RoPE type '{params['rope_type']}' (scaled rotary tables) is not what the llama "
                          "family's ports compute: only the default RoPE")
    base = params.get("rope_theta") if isinstance(params, Mapping) else None
    return float(base or _get(hf, "rope_theta", default=10000.0))


def model_config(hf: Any, **changes: Any) -> tuple[str, ModelConfig]:
    """(family, config) from a Hugging Face config (its object, or ``config.json`` as a dict)."""
    model_type = _get(hf, "model_type", default="")
    family = family_of(model_type)
    if family == "decoder_only_model":
        d = _get(hf, "n_embd", "hidden_size")
        fields = dict(d_model=d, heads=_get(hf, "n_head", "num_attention_heads"), d_ff=_get(hf, "n_inner") or 4 * d,
                      vocab=_get(hf, "vocab_size"), tgt_len=_get(hf, "n_positions", "max_position_embeddings"),
                      layers=_get(hf, "n_layer", "num_hidden_layers"))
    else:
        d, heads = _get(hf, "hidden_size"), _get(hf, "num_attention_heads")
        head_dim = _get(hf, "head_dim", default=d // heads)
        if head_dim * heads != d:
            raise ConfigError(f"{model_type}: head_dim={head_dim} with {heads} heads is not hidden_size={d}: the "
                              "llama family's canonical q/k/v are (H * D/H, D)")
        groups = []
        if model_type == "qwen3":
            groups.append("qk_norm")
        if model_type == "gemma2":
            groups.append("sandwich_norms")
        fields = dict(d_model=d, heads=heads, kv_heads=_get(hf, "num_key_value_heads", default=heads),
                      d_ff=_get(hf, "intermediate_size"), vocab=_get(hf, "vocab_size"), rope_base=_rope_base(hf),
                      layers=_get(hf, "num_hidden_layers"), extensions=tuple(groups))
    fields.update(changes)
    try:
        return family, ModelConfig(**fields)
    except (TypeError, ConfigError) as exc:
        raise ConfigError(f"{model_type} config does not give a model config: {exc}") from None


def tied(hf: Any) -> bool:
    return bool(_get(hf, "tie_word_embeddings", default=False))


def class_map(hf: Any, cfg: ModelConfig) -> dict[str, MapEntry]:
    """Canonical name -> entry over the class's (and its checkpoint's) tensor names."""
    model_type = _get(hf, "model_type", default="")
    if family_of(model_type) == "decoder_only_model":
        return _gpt2_map(cfg)
    qkv_bias = model_type == "qwen2" or bool(_get(hf, "attention_bias", default=False))
    o_bias = model_type != "qwen2" and bool(_get(hf, "attention_bias", default=False))
    gemma2 = model_type == "gemma2"
    out: dict[str, MapEntry] = {"embed.weight": Param("model.embed_tokens.weight"),
                                "norm.weight": Param("model.norm.weight"), "norm.bias": Zero(),
                                "head.weight": Tied("embed.weight") if tied(hf) else Param("lm_head.weight")}
    for i in range(cfg.layers):
        c, p = f"layers.{i}.", f"model.layers.{i}."
        out[c + "attn_norm.weight"], out[c + "attn_norm.bias"] = Param(p + "input_layernorm.weight"), Zero()
        ffn_norm = "pre_feedforward_layernorm" if gemma2 else "post_attention_layernorm"
        out[c + "ffn_norm.weight"], out[c + "ffn_norm.bias"] = Param(p + f"{ffn_norm}.weight"), Zero()
        for x in "qkvo":
            out[c + f"self_attn.{x}.weight"] = Param(p + f"self_attn.{x}_proj.weight")
            has_bias = o_bias if x == "o" else qkv_bias
            out[c + f"self_attn.{x}.bias"] = Param(p + f"self_attn.{x}_proj.bias") if has_bias else Zero()
        for x in ("gate", "up", "down"):
            out[c + f"mlp.{x}.weight"] = Param(p + f"mlp.{x}_proj.weight")
        if "qk_norm" in cfg.extensions:
            for x in "qk":
                out[c + f"self_attn.{x}_norm.weight"] = Param(p + f"self_attn.{x}_norm.weight")
        if "sandwich_norms" in cfg.extensions:
            out[c + "post_attn_norm.weight"] = Param(p + "post_attention_layernorm.weight")
            out[c + "post_ffn_norm.weight"] = Param(p + "post_feedforward_layernorm.weight")
    return out


def _gpt2_map(cfg: ModelConfig) -> dict[str, MapEntry]:
    out: dict[str, MapEntry] = {"embed.weight": Param("transformer.wte.weight"),
                                "pos.weight": Param("transformer.wpe.weight"),
                                "norm.weight": Param("transformer.ln_f.weight"),
                                "norm.bias": Param("transformer.ln_f.bias"),
                                "head.weight": Tied("embed.weight"), "head.bias": Zero()}
    for i in range(cfg.layers):
        c, p = f"blocks.{i}.", f"transformer.h.{i}."
        for n, x in enumerate("qkv"):
            out[c + f"self_attn.{x}.weight"] = Transposed(Chunk(p + "attn.c_attn.weight", n, 3, dim=1))
            out[c + f"self_attn.{x}.bias"] = Chunk(p + "attn.c_attn.bias", n, 3)
        out[c + "self_attn.o.weight"] = Transposed(Param(p + "attn.c_proj.weight"))
        out[c + "self_attn.o.bias"] = Param(p + "attn.c_proj.bias")
        for w, name in (("w1", "c_fc"), ("w2", "c_proj")):
            out[c + f"ffn.{w}.weight"] = Transposed(Param(p + f"mlp.{name}.weight"))
            out[c + f"ffn.{w}.bias"] = Param(p + f"mlp.{name}.bias")
        for norm, name in (("norm1", "ln_1"), ("norm2", "ln_2")):
            out[c + f"{norm}.weight"], out[c + f"{norm}.bias"] = Param(p + f"{name}.weight"), Param(p + f"{name}.bias")
    return out


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


def _hf_class(hf: Any):
    import transformers
    names = _get(hf, "architectures") or []
    for name in names:
        cls = getattr(transformers, name, None)
        if cls is not None:
            return cls
    raise ConfigError(f"config.json names architectures {names}, none of which transformers has")


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


def hf_variant(hf: Any, cfg: ModelConfig) -> Variant:
    """The checkpoint's own class as a (not registered) variant of its family: built from
    the config (random weights, replaced through the class map), eager attention, called
    with the family's inputs, log-softmax of its logits."""
    cls = _hf_class(hf)
    family = family_of(_get(hf, "model_type", default=""))

    def build(_cfg):
        model = cls(hf)
        return model.eval()

    return Variant(id=f"{cls.__name__}", family=family, source=f"transformers.{cls.__name__}", build=build,
                   call=_hf_call, param_map=class_map(hf, cfg),
                   summary=f"{cls.__name__} from the checkpoint's config.json (transformers)")

