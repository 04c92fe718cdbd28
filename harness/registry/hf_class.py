"""Any Hugging Face causal LM class, read from its own code rather than from a table kept
per model type.

``hf_class(hf)`` is the class a config names: ``architectures`` (a class transformers
has), else its ``model_type`` through ``AutoModelForCausalLM``. ``class_params(cls, hf)``
builds the class on the meta device (no memory) and reads its parameters: their names,
which are the checkpoint's tensor names (``save_pretrained`` writes the ``state_dict``,
a tied head once), their shapes, the embedding and the head (``get_input_embeddings`` /
``get_output_embeddings``), the decoder layers (the ``ModuleList`` of
``num_hidden_layers``) and which names are tied to which.

``family_map(params, cfg)`` places those parameters among a family's canonical names by
the names transformers' decoder layers share (``self_attn.{q,k,v,o}_proj``, a fused
``qkv_proj`` split by the q and K/V widths, ``mlp.{gate,up,down}_proj`` or a fused
``gate_up_proj``, ``input_layernorm`` / ``post_attention_layernorm`` /
``pre_feedforward_layernorm`` / ``post_feedforward_layernorm`` by which of them a layer
has, ``q_norm`` / ``k_norm`` per head; GPT-2's Conv1D ``c_attn`` for ``decoder_only_model``).
What the family cannot carry (a parallel residual, partial rotary, norms only after the
sublayers, a q/k norm over all heads, a tensor no canonical name holds) is a
``Unported`` error of one line naming each feature: such a class is compared with a port
that uses its own parameter names (``by_name_map``), not through the family.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

import torch

from harness.base.config import ModelConfig
from harness.base.errors import ConfigError
from harness.porting.entries import Absent, Chunk, MapEntry, Param, Tied, Transposed, Zero


class Unported(ConfigError):
    """A class whose computation a family's canonical parameters cannot carry: one line
    naming the features."""


def get(hf: Any, *names: str, default: Any = None) -> Any:
    """The first of ``names`` a config (its object, or ``config.json`` as a dict) sets."""
    for name in names:
        value = hf.get(name) if isinstance(hf, Mapping) else getattr(hf, name, None)
        if value is not None:
            return value
    return default


def hf_class(hf: Any):
    """The causal LM class the config names (``architectures``, else ``model_type``)."""
    import transformers

    names = list(get(hf, "architectures") or [])
    causal = _causal_classes()
    for name in names:
        cls = getattr(transformers, name, None)
        if cls is not None and cls in causal:
            return cls
    cls = causal_for(hf)
    if cls is not None:
        return cls
    raise ConfigError(f"config.json names architectures {names} and model_type '{get(hf, 'model_type', default='')}'"
                      ": transformers has no causal LM class for them (AutoModelForCausalLM)")


def _causal_classes() -> set:
    from transformers import AutoModelForCausalLM

    mapping = AutoModelForCausalLM._model_mapping
    out = set()
    for key in mapping.keys():
        try:
            value = mapping[key]
        except (KeyError, ImportError, AttributeError):
            continue
        out.update(value if isinstance(value, (tuple, list)) else (value,))
    return out


def causal_for(hf: Any):
    from transformers import AutoModelForCausalLM

    try:
        return AutoModelForCausalLM._model_mapping[type(hf)]
    except (KeyError, ImportError, AttributeError):
        return None


@dataclass
class ClassParams:
    """A class's parameters as its checkpoint holds them."""

    name: str                                  # the class's name
    shapes: dict[str, tuple[int, ...]]         # held names (a tied one once) -> shape
    ties: dict[str, str] = field(default_factory=dict)  # a tied name -> the held name it shares
    embed: str = ""                            # the input embedding's weight
    head: str = ""                             # the output head's weight
    layers: str = ""                           # the decoder layers' ModuleList path
    n_layers: int = 0
    saved: dict[str, str] = field(default_factory=dict)  # a held name -> the name save_pretrained writes
                                                         # it under, where they differ (GPT-NeoX's head)


def class_params(cls, hf: Any) -> ClassParams:
    """``cls`` built from ``hf`` on the meta device, read (nothing allocated)."""
    try:
        with torch.device("meta"):
            model = cls(hf)
    except Exception as exc:  # the library's own refusal of its config, one line
        text = str(exc).strip().splitlines()
        raise ConfigError(f"{cls.__name__} cannot be built from this config.json: {type(exc).__name__}: "
                          f"{text[0] if text else ''}") from None
    held: dict[int, str] = {}
    shapes, ties = {}, {}
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in held:
            ties[name] = held[id(p)]
        else:
            held[id(p)] = name
            shapes[name] = tuple(p.shape)
    out = ClassParams(cls.__name__, shapes, ties)
    paths = {id(m): n for n, m in model.named_modules()}
    for attr, getter in (("embed", "get_input_embeddings"), ("head", "get_output_embeddings")):
        module = getattr(model, getter, lambda: None)()
        if module is not None and id(module) in paths:
            setattr(out, attr, paths[id(module)] + ".weight")
    out.saved = _saved_names(model, {n: p for n, p in model.named_parameters()})
    n = get(hf, "num_hidden_layers", "n_layer", default=0)
    for path, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == n:
            out.layers, out.n_layers = path, n
            break
    return out


def _saved_names(model, held: dict) -> dict[str, str]:
    """Held names renamed one to one by transformers' own conversion on saving
    (``revert_weight_conversion``); a conversion that splits or merges tensors is not read."""
    try:
        from transformers.core_model_loading import revert_weight_conversion

        out = revert_weight_conversion(model, dict(held))
    except Exception:
        return {}
    by_id = {id(t): n for n, t in held.items()}
    renamed = {by_id[id(t)]: n for n, t in dict(out).items() if id(t) in by_id}
    return {old: new for old, new in renamed.items() if old != new} if len(renamed) == len(held) else {}


def saved_map(entries: Mapping[str, MapEntry], params: ClassParams) -> dict[str, MapEntry]:
    """``entries`` over the class's parameter names, read over the names its checkpoint holds."""
    if not params.saved:
        return dict(entries)

    def rename(entry):
        if dataclasses.is_dataclass(entry) and hasattr(entry, "path"):
            return dataclasses.replace(entry, path=params.saved.get(entry.path, entry.path))
        if hasattr(entry, "inner"):
            return dataclasses.replace(entry, inner=rename(entry.inner))
        return entry
    return {n: rename(e) for n, e in entries.items()}


def by_name_map(params: ClassParams) -> dict[str, MapEntry]:
    """The class's own names as the canonical ones: every held parameter read as itself, a
    tied one as what it shares."""
    out: dict[str, MapEntry] = {n: Param(n) for n in params.shapes}
    out.update({n: Tied(to) for n, to in params.ties.items()})
    return out


def by_name_shapes(params: ClassParams) -> dict[str, tuple[int, ...]]:
    return {**params.shapes, **{n: params.shapes[to] for n, to in params.ties.items()}}


# -- a class's parameters among a family's canonical names ----------------------------------------

def family_of(params: ClassParams) -> str:
    """``decoder_only_model`` for GPT-2's layout (``transformer.wte`` / ``wpe``, a Conv1D
    ``attn.c_attn`` of (D, 3D)), else ``llama_model``."""
    c_attn = params.shapes.get("transformer.h.0.attn.c_attn.weight")
    d = params.shapes.get("transformer.wte.weight", (0, 0))[1]
    return "decoder_only_model" if c_attn == (d, 3 * d) and "transformer.wpe.weight" in params.shapes \
        else "llama_model"


def features(params: ClassParams, hf: Any, rope_fraction: float) -> list[str]:
    """What the llama_model family's canonical parameters (and its ports) cannot carry."""
    out = []
    if get(hf, "use_parallel_residual", "parallel_attn", default=False):
        out.append("a parallel residual (attention and MLP on the same input: use_parallel_residual)")
    if rope_fraction < 1:
        out.append(f"partial rotary (a fraction {rope_fraction:g} of each head turns)")
    local = _layer_names(params, 0)
    norms = {n.rsplit(".", 1)[0] for n in local if "norm" in n.rsplit(".", 1)[0]}
    if "input_layernorm" not in norms and "post_feedforward_layernorm" in norms:
        out.append("norms only after each sublayer (post_attention_layernorm, post_feedforward_layernorm; none "
                   "before)")
    q_norm = local.get("self_attn.q_norm.weight")
    heads = get(hf, "num_attention_heads", "n_head")
    if q_norm is not None and heads and q_norm[0] != _head_dim(hf):
        out.append("a q/k norm over all heads (q_norm of width H * d_k)")
    return out


def _head_dim(hf: Any) -> int:
    d, h = get(hf, "hidden_size", "n_embd"), get(hf, "num_attention_heads", "n_head")
    return int(get(hf, "head_dim", default=d // h))


def _layer_names(params: ClassParams, i: int) -> dict[str, tuple[int, ...]]:
    prefix = f"{params.layers}.{i}."
    return {n[len(prefix):]: s for n, s in params.shapes.items() if n.startswith(prefix)}


_PROJ = {"self_attn.q_proj": "self_attn.q", "self_attn.k_proj": "self_attn.k", "self_attn.v_proj": "self_attn.v",
         "self_attn.o_proj": "self_attn.o", "mlp.gate_proj": "mlp.gate", "mlp.up_proj": "mlp.up",
         "mlp.down_proj": "mlp.down"}


def _norm_roles(local: Mapping[str, Any]) -> dict[str, str]:
    """The class's layer norms -> the family's: the norm before attention, before the MLP,
    and Gemma's norms on the sublayers' outputs (``sandwich_norms``)."""
    have = {n.rsplit(".", 1)[0] for n in local}
    roles = {"input_layernorm": "attn_norm"}
    if "pre_feedforward_layernorm" in have:
        roles.update(pre_feedforward_layernorm="ffn_norm", post_attention_layernorm="post_attn_norm",
                     post_feedforward_layernorm="post_ffn_norm")
    else:
        roles["post_attention_layernorm"] = "ffn_norm"
    return roles


def llama_map(params: ClassParams, hf: Any, cfg: ModelConfig, rope_fraction: float = 1.0) -> dict[str, MapEntry]:
    """Canonical llama_model name -> entry over the class's parameter names; ``Unported``
    naming what the family cannot carry."""
    found = features(params, hf, rope_fraction)
    if found:
        raise Unported(_unported(params, found))
    out: dict[str, MapEntry] = {"embed.weight": Param(params.embed)}
    head = params.head
    out["head.weight"] = Tied("embed.weight") if params.ties.get(head) == params.embed else Param(head)
    used = {params.embed, head}
    rest = [n for n in params.shapes if not n.startswith(params.layers + ".") and n not in used]
    for n in rest:
        if n.endswith("norm.weight"):
            out["norm.weight"] = Param(n)
            used.add(n)
        elif n.endswith("norm.bias"):
            out["norm.bias"] = Param(n)
            used.add(n)
    out.setdefault("norm.weight", Absent(1.0))
    out.setdefault("norm.bias", Zero())
    sizes = (cfg.heads * cfg.d_k, cfg.n_kv_heads * cfg.d_k, cfg.n_kv_heads * cfg.d_k)
    for i in range(cfg.layers):
        c, p = f"layers.{i}.", f"{params.layers}.{i}."
        local = _layer_names(params, i)
        for name in local:
            module, kind = name.rsplit(".", 1)
            if module in _PROJ:
                out[c + f"{_PROJ[module]}.{kind}"] = Param(p + name)
            elif module == "self_attn.qkv_proj":
                for k, x in enumerate("qkv"):
                    out[c + f"self_attn.{x}.{kind}"] = Chunk(p + name, k, sizes=sizes)
            elif module == "mlp.gate_up_proj":
                for k, x in enumerate(("gate", "up")):
                    out[c + f"mlp.{x}.{kind}"] = Chunk(p + name, k, 2)
            elif module in ("self_attn.q_norm", "self_attn.k_norm"):
                out[c + name] = Param(p + name)
            elif module in _norm_roles(local):
                out[c + f"{_norm_roles(local)[module]}.{kind}"] = Param(p + name)
            else:
                continue
            used.add(p + name)
        for x in ("attn_norm", "ffn_norm"):  # a norm without a gain (OLMo's): a gain of ones
            out.setdefault(c + f"{x}.weight", Absent(1.0))
            out.setdefault(c + f"{x}.bias", Zero())
        for x in "qkvo":
            out.setdefault(c + f"self_attn.{x}.bias", Zero())
    left = [n for n in params.shapes if n not in used]
    if left:
        shown = ", ".join(repr(n) for n in left[:3]) + (", ..." if len(left) > 3 else "")
        raise Unported(_unported(params, [f"tensors the llama_model family has no canonical name for ({shown})"]))
    return out


def extensions_of(params: ClassParams) -> tuple[str, ...]:
    """The llama family's extension groups the class holds (``harness.families.llama.EXTENSIONS``)."""
    local = _layer_names(params, 0) if params.layers else {}
    groups = []
    if "self_attn.q_norm.weight" in local:
        groups.append("qk_norm")
    if "pre_feedforward_layernorm.weight" in local:
        groups.append("sandwich_norms")
    return tuple(groups)


def _unported(params: ClassParams, found: list[str]) -> str:
    return (f"{params.name} computes what no llama_model port can: {'; '.join(found)}. Compare it with a port "
            "that uses the class's own parameter names (mapped by name; docs/checkpoints.md)")


def gpt2_map(cfg: ModelConfig) -> dict[str, MapEntry]:
    """GPT-2's layout: Conv1D weights ``Transposed``, the fused ``c_attn`` three ``Chunk``s,
    the head tied to the token embedding."""
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
