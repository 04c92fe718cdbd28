"""Float64 oracles: every family's function written from its definition, parametrized by
the family's semantic traits.

An oracle is ``oracle(traits, cfg, weights, inputs, dtype) -> Tensor``: ``weights`` are
the canonical parameters (float64 leaves), ``inputs`` the case's canonical inputs (float64
leaves where the family takes gradients), ``dtype`` the dtype the variant under test ran
in (only a trait that depends on it reads it: RMSNorm's default eps is that dtype's
machine epsilon). It computes in float64 with plain tensor operations, so autograd gives
the oracle's gradients too.

Every variant is checked against the oracle built from its *own* declared traits, so a
variant is verified whether or not another variant shares its traits. A trait value an
oracle cannot build raises ``SpecError`` naming it: a declaration the harness cannot
execute is an error, never a silent pass.

Shape legend: B batch, T query length, S key length, D width, H heads, d_k = D / H.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

import torch

from harness.base.config import Config
from harness.base.errors import SpecError
from harness.families import kernel_oracle
from harness.families.attention_spec import QK_NORMS, AttentionSpec, QkNorm, WindowDiagonal, score_scale  # noqa: F401
from harness.families.no_key_rows import FULLY_MASKED_ROWS, MASK_STYLES, kernel_dead_rows  # noqa: F401 (vocabulary)
from harness.families.rope import ROPE_LAYOUTS, rope  # noqa: F401 (ROPE_LAYOUTS: the attention family's vocabulary)

Tensor = torch.Tensor
Oracle = Callable[[Mapping[str, Any], Config, Mapping[str, Tensor], Mapping[str, Any], torch.dtype], Tensor]


def _unknown(trait: str, value: Any, known) -> SpecError:
    return SpecError(f"no oracle for {trait}={value!r}; known: {list(known)}")


def linear(x: Tensor, w: Mapping[str, Tensor], name: str) -> Tensor:
    return x @ w[f"{name}.weight"].T + w[f"{name}.bias"]


# -- norms ---------------------------------------------------------------------------------

EPS_NAMES = ("finfo(dtype).eps", "finfo(dtype).eps, float32's below float32")


def _eps(value: Any, dtype: torch.dtype) -> float:
    if value == "finfo(dtype).eps":
        return torch.finfo(dtype).eps
    if value == "finfo(dtype).eps, float32's below float32":  # computes half inputs in float32
        return torch.finfo(dtype if dtype.itemsize >= 4 else torch.float32).eps
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise _unknown("eps", value, ["a number", *EPS_NAMES])


NORM_FORMULAS = ("layernorm", "unbiased std, eps added to std", "rms")


def normalize(x: Tensor, weight: Tensor, bias: Tensor, formula: str, eps: float) -> Tensor:
    """Over the last dimension, then gain and bias. A half-precision ``x`` (the definition
    evaluated in bfloat16 or float16: the precision baseline) is normalised as a careful
    implementation does it, in float32, and rounded once to its dtype: its squares overflow
    float16 beyond |x| = 256, where a baseline computed in float16 would be all zeros too."""
    if x.dtype in (torch.float16, torch.bfloat16):
        return normalize(x.float(), weight.float(), bias.float(), formula, eps).to(x.dtype)
    if formula == "layernorm":  # biased variance, eps inside the square root
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        y = (x - mean) / torch.sqrt(var + eps)
    elif formula == "unbiased std, eps added to std":
        mean = x.mean(-1, keepdim=True)
        std = torch.sqrt(((x - mean) ** 2).sum(-1, keepdim=True) / (x.shape[-1] - 1))
        y = (x - mean) / (std + eps)
    elif formula == "rms":  # no centring
        y = x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + eps)
    else:
        raise _unknown("norm_formula", formula, NORM_FORMULAS)
    return y * weight + bias


def _norm(traits, w, name: str, x: Tensor, dtype) -> Tensor:
    return normalize(x, w[f"{name}.weight"], w[f"{name}.bias"], traits["norm_formula"],
                     _eps(traits["eps"], dtype))


def _unit_layernorm(x: Tensor, eps: float) -> Tensor:
    """A LayerNorm held at its init (gain 1, bias 0): the norm inside a post-norm sublayer
    module, whose parameters are outside the family."""
    return normalize(x, torch.ones((), dtype=x.dtype), torch.zeros((), dtype=x.dtype), "layernorm", eps)


NORM_GAINS = ("w", "1+w")
NORM_UPCASTS = ("none", "float32, cast back before the gain", "float32 through the gain")


def norm(traits, cfg, w, inputs, dtype) -> Tensor:
    """The norm with its gain: the canonical weight w as is, or 1 + w (Gemma's RMSNorm stores
    the offset from one). ``upcast``: a half-precision input normalised in float32 and cast
    back to its dtype before the gain multiplies (HF's LlamaRMSNorm: the rounding the oracle
    reproduces), or kept in float32 through the gain (Gemma: rounded once, at the output)."""
    gain, upcast = traits.get("gain", "w"), traits.get("upcast", "none")
    if gain == "w" and upcast == "none":
        return normalize(inputs["x"], w["weight"], w["bias"], traits["norm_formula"], _eps(traits["eps"], dtype))
    if gain not in NORM_GAINS:
        raise _unknown("gain", gain, NORM_GAINS)
    if upcast not in NORM_UPCASTS:
        raise _unknown("upcast", upcast, NORM_UPCASTS)
    one = torch.ones((), dtype=torch.float64)
    x = inputs["x"]
    y = normalize(x.float() if x.dtype in (torch.float16, torch.bfloat16) else x, one,  # the declared upcast
                  torch.zeros((), dtype=torch.float64), traits["norm_formula"], _eps(traits["eps"], dtype))
    if upcast == "float32, cast back before the gain" and dtype.itemsize < 4:
        y = y.to(dtype).to(torch.float64)
    # in the input's dtype: the definition computed in a lower dtype (the precision baseline)
    # rounds its output there, and the block oracles feed it to the next sublayer's weights
    return (y * (w["weight"] if gain == "w" else one + w["weight"]) + w["bias"]).to(inputs["x"].dtype)


# -- attention -------------------------------------------------------------------------------------



def multi_head_attention(
    w: Mapping[str, Tensor], prefix: str, query: Tensor, key: Tensor, value: Tensor, mask: Tensor,
    spec: AttentionSpec, *, positions: Tensor | None = None, key_positions: Tensor | None = None,
) -> Tensor:
    """The Q, K, V projections (K and V to ``spec.kv_heads`` heads, default ``spec.heads``), RoPE on q
    and k at their positions (default 0..L-1), the kernel oracle's attention over the heads
    (``harness.families.kernel_oracle``: softmax(q k^T / sqrt(d_k)) over the keys the mask
    allows, K/V heads grouped by ``gqa_grouping``, a (left, right) ``window`` on its diagonal),
    then the output projection. ``mask`` (B, T, S) bool, True = may attend. The head width d_k
    is the Q projection's width over ``heads`` (D / H unless the config sets ``head_dim``).
    What each option means (a row without keys, QK-norm, soft-capping, the scale, the window's
    diagonal): ``AttentionSpec``."""
    method, row, grad = spec.dead_rows
    B, T, D = query.shape
    S = key.shape[1]
    d_k = w[prefix + "q.weight"].shape[0] // spec.heads
    n_kv = spec.heads if spec.kv_heads is None else spec.kv_heads
    split = lambda x, n, h: x.view(B, n, h, d_k).transpose(1, 2)  # noqa: E731  (B, h, L, d_k)
    here = lambda n: torch.arange(n).expand(B, n)  # noqa: E731

    def normed(x: Tensor, name: str, per_head: bool) -> Tensor:  # (B, L, H d) or (B, h, L, d_k)
        if spec.qk_norm is not (QkNorm.PER_HEAD if per_head else QkNorm.ALL_HEADS):
            return x
        if prefix + name not in w:
            raise SpecError(f"qk_norm {spec.qk_norm.value!r} reads the canonical gain '{prefix}{name}', "
                            "which the weights lack")
        return normalize(x, w[prefix + name], torch.zeros((), dtype=x.dtype), "rms", spec.qk_eps)

    def roped(x: Tensor, at: Tensor | None, length: int) -> Tensor:
        return rope(x, here(length) if at is None else at, spec.rope_layout, spec.rope_fraction, spec.rope_base,
                    spec.rope_scaling)

    q = roped(normed(split(normed(linear(query, w, prefix + "q"), "q_norm.weight", False), T, spec.heads),
                     "q_norm.weight", True), positions, T)
    k = roped(normed(split(normed(linear(key, w, prefix + "k"), "k_norm.weight", False), S, n_kv),
                     "k_norm.weight", True), key_positions, S)
    v = split(linear(value, w, prefix + "v"), S, n_kv)
    traits = {"gqa_grouping": spec.gqa_grouping,
              "scale": 1.0 / math.sqrt(d_k) if spec.scale is None else float(spec.scale),
              **dict(spec.conventions),
              "window": kernel_oracle.AS_CALLED, "mask_method": method,
              # the window's diagonal: top-left, or bottom-right (no key padding here: both kinds agree)
              "causal": "none" if spec.window_diagonal is WindowDiagonal.TOP_LEFT else "bottom_right_padded",
              "fully_masked_row": row, "fully_masked_grad": grad}
    y = kernel_oracle.kernel_attention(traits, {
        "q": q, "k": k, "v": v, "mask": mask, "key_pad": torch.ones(B, S, dtype=torch.bool),
        "causal": False, "window": spec.window, "softcap": 0.0,
        "params": {n[len(prefix):]: t for n, t in w.items() if n.startswith(prefix)}})  # (B, H, T, d_k)
    return linear(y.transpose(1, 2).reshape(B, T, spec.heads * d_k), w, prefix + "o")


ATTENTION_SUBLAYERS = ("attention", "attention + residual + post-LayerNorm",
                       "pre-LayerNorm + attention + residual")


def attention(traits, cfg, w, inputs, dtype) -> Tensor:
    """The sublayer (RoPE, K/V heads, grouping and window as declared: see
    ``multi_head_attention``): attention alone; LayerNorm(query + attention) (BERT, the 003 blog); or
    query + attention(LayerNorm(query)), where self-attention reads the normalised query as
    key and value too and cross-attention reads key and value as given. The LayerNorm is the
    module's own, held at its init (outside the family), with the declared ``eps``."""
    query, key, value = inputs["query"], inputs["key"], inputs["value"]
    sublayer = traits["sublayer"]
    if sublayer not in ATTENTION_SUBLAYERS:
        raise _unknown("sublayer", sublayer, ATTENTION_SUBLAYERS)
    eps = _eps(traits["eps"], dtype)
    if sublayer == "pre-LayerNorm + attention + residual":
        normed = _unit_layernorm(query, eps)
        key = normed if key is query else key
        value = normed if value is query else value
        query = normed
    window = traits.get("window", "none")
    window = inputs.get("window") if window == kernel_oracle.AS_CALLED else (None if window == "none" else window)
    spec = AttentionSpec.from_traits(traits, cfg, eps=eps, window=None if window is None else tuple(window))
    out = multi_head_attention(w, "", query, key, value, inputs["mask"], spec,
                               positions=inputs.get("positions"), key_positions=inputs.get("key_positions"))
    if sublayer == "attention":
        return out
    if sublayer == "attention + residual + post-LayerNorm":
        return _unit_layernorm(inputs["query"] + out, eps)
    return inputs["query"] + out


# -- feed-forward ------------------------------------------------------------------------------------

ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": torch.relu,
    "gelu": lambda x: 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0))),
    "gelu_tanh": lambda x: 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3))),
    "silu": lambda x: x * torch.sigmoid(x),
}


def feed_forward(w, prefix: str, x: Tensor, activation: str) -> Tensor:
    if activation not in ACTIVATIONS:
        raise _unknown("activation", activation, ACTIVATIONS)
    return linear(ACTIVATIONS[activation](linear(x, w, prefix + "w1")), w, prefix + "w2")


def gated_ffn(traits, cfg, w, inputs, dtype) -> Tensor:
    """down(act(gate x) * up x): SwiGLU with silu, GeGLU with gelu (Shazeer 2020); no biases."""
    activation = traits["activation"]
    if activation not in ACTIVATIONS:
        raise _unknown("activation", activation, ACTIVATIONS)
    x = inputs["x"]
    hidden = ACTIVATIONS[activation](x @ w["gate.weight"].T) * (x @ w["up.weight"].T)   # (B, T, F)
    return hidden @ w["down.weight"].T


FFN_SUBLAYERS = ("ffn", "ffn + residual + post-LayerNorm")


def ffn(traits, cfg, w, inputs, dtype) -> Tensor:
    x = inputs["x"]
    out = feed_forward(w, "", x, traits["activation"])
    if traits["sublayer"] == "ffn":
        return out
    if traits["sublayer"] == "ffn + residual + post-LayerNorm":
        return _unit_layernorm(x + out, _eps(traits["eps"], dtype))
    raise _unknown("sublayer", traits["sublayer"], FFN_SUBLAYERS)


# -- layers -------------------------------------------------------------------------------------------

def _residual(traits, w, norm_name: str, x: Tensor, sublayer: Callable[[Tensor], Tensor], dtype) -> Tensor:
    placement = traits["norm_placement"]
    if placement == "pre":   # x + f(norm(x))
        return x + sublayer(_norm(traits, w, norm_name, x, dtype))
    if placement == "post":  # norm(x + f(x))
        return _norm(traits, w, norm_name, x + sublayer(x), dtype)
    raise _unknown("norm_placement", placement, ["pre", "post"])


def encoder_layer(traits, cfg, w, inputs, dtype) -> Tensor:
    x, pad = inputs["x"], inputs["pad"]
    mask = pad[:, None, :].expand(x.shape[0], x.shape[1], x.shape[1])  # (B, T, T)
    row = traits.get("fully_masked_row", "NaN")
    x = _residual(traits, w, "norm1", x, lambda h: multi_head_attention(
        w, "self_attn.", h, h, h, mask, AttentionSpec(heads=cfg.heads, fully_masked_row=row)), dtype)
    return _residual(traits, w, "norm2", x, lambda h: feed_forward(w, "ffn.", h, traits["activation"]), dtype)


def decoder_layer(traits, cfg, w, inputs, dtype) -> Tensor:
    x, memory = inputs["x"], inputs["memory"]
    cross_mask = inputs["src_pad"][:, None, :].expand(x.shape[0], x.shape[1], memory.shape[1])  # (B, T, S)
    x = _residual(traits, w, "norm1", x, lambda h: multi_head_attention(
        w, "self_attn.", h, h, h, inputs["tgt_mask"], AttentionSpec(heads=cfg.heads)), dtype)
    x = _residual(traits, w, "norm2", x, lambda h: multi_head_attention(
        w, "cross_attn.", h, memory, memory, cross_mask, AttentionSpec(heads=cfg.heads)), dtype)
    return _residual(traits, w, "norm3", x, lambda h: feed_forward(w, "ffn.", h, traits["activation"]), dtype)


def decoder_only_block(traits, cfg, w, inputs, dtype) -> Tensor:
    x, pad = inputs["x"], inputs["pad"]
    t = x.shape[1]
    mask = torch.ones(t, t, dtype=torch.bool).tril()[None] & pad[:, None, :]  # (B, T, T) causal & real key
    x = _residual(traits, w, "norm1", x, lambda h: multi_head_attention(
        w, "self_attn.", h, h, h, mask, AttentionSpec(heads=cfg.heads, fully_masked_row=traits["fully_masked_row"])),
        dtype)
    return _residual(traits, w, "norm2", x, lambda h: feed_forward(w, "ffn.", h, traits["activation"]), dtype)


# -- positions, embeddings, masks -----------------------------------------------------------------------

PE_FREQUENCIES = {
    "10000^(-2i/D)": lambda d: torch.exp(torch.arange(d // 2, dtype=torch.float64) * (-2.0 * math.log(1e4) / d)),
    "exp(-i ln(1e4) / (D/2 - 1))": lambda d: torch.exp(
        torch.arange(d // 2, dtype=torch.float64) * (-math.log(1e4) / max(d // 2 - 1, 1))),
}
PE_LAYOUTS = ("interleaved sin/cos", "[sin | cos] concatenated")


def positional_table(length: int, d: int, layout: str, frequencies: str) -> Tensor:
    """(length, D) sinusoidal table in float64."""
    if frequencies not in PE_FREQUENCIES:
        raise _unknown("pe_frequencies", frequencies, PE_FREQUENCIES)
    angle = torch.arange(length, dtype=torch.float64)[:, None] * PE_FREQUENCIES[frequencies](d)[None]
    if layout == "interleaved sin/cos":  # pe[:, 2i] = sin, pe[:, 2i+1] = cos
        return torch.stack([angle.sin(), angle.cos()], dim=-1).reshape(length, d)
    if layout == "[sin | cos] concatenated":
        return torch.cat([angle.sin(), angle.cos()], dim=-1)
    raise _unknown("pe_layout", layout, PE_LAYOUTS)


def positional_encoding(traits, cfg, w, inputs, dtype) -> Tensor:
    x = inputs["x"]
    return x + positional_table(x.shape[1], x.shape[2], traits["pe_layout"], traits["pe_frequencies"]).to(x.dtype)


EMBEDDING_SCALES = {"1": lambda d: 1.0, "sqrt(D)": math.sqrt}


def embedding(traits, cfg, w, inputs, dtype) -> Tensor:
    tokens = inputs["tokens"]
    out = w["weight"][tokens]                                     # (B, T, D)
    rows = traits["pad_rows"]
    if rows == "zeroed":
        out = out.masked_fill((tokens == inputs["pad_idx"])[..., None], 0.0)
    elif rows != "kept":
        raise _unknown("pad_rows", rows, ["kept", "zeroed"])
    scale = traits["embedding_scale"]
    if scale not in EMBEDDING_SCALES:
        raise _unknown("embedding_scale", scale, EMBEDDING_SCALES)
    return out * EMBEDDING_SCALES[scale](out.shape[-1])


TARGET_MASKS = ("causal & key not pad", "causal only (pad embeddings zeroed)", "causal & query not pad")


def masks(traits, cfg, w, inputs, dtype) -> Tensor:
    tokens, case = inputs["tokens"], inputs["case"]
    b, t = tokens.shape
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    real = tokens != inputs["pad_idx"]                            # (B, T)
    if case == "causal":
        if traits["causal_mask"] != "tril":
            raise _unknown("causal_mask", traits["causal_mask"], ["tril"])
        return causal
    if case == "pad":
        if traits["pad_mask"] != "tokens != pad":
            raise _unknown("pad_mask", traits["pad_mask"], ["tokens != pad"])
        return real
    target = traits["target_mask"]
    if target == "causal & key not pad":
        return causal[None] & real[:, None, :]
    if target == "causal only (pad embeddings zeroed)":
        return causal.expand(b, t, t)
    if target == "causal & query not pad":
        return causal[None] & real[:, :, None]
    raise _unknown("target_mask", target, TARGET_MASKS)


ORACLES: dict[str, Oracle] = {
    "attention": attention,
    "norm": norm,
    "ffn": ffn,
    "gated_ffn": gated_ffn,
    "encoder_layer": encoder_layer,
    "decoder_layer": decoder_layer,
    "decoder_only_block": decoder_only_block,
    "positional_encoding": positional_encoding,
    "embedding": embedding,
    "masks": masks,
}
