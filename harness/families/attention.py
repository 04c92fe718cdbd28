"""The attention family: multi-head attention with its projections, its cases (padding, cross,
causal, arbitrary and fully masked rows; decode offsets, left padding and a sliding window for
the LLaMA-era traits) and its oracle (``oracles.attention``: projections and RoPE around the
attention kernels' oracle)."""

from __future__ import annotations

import torch

from harness.base.config import Config
from harness.families import conventions, kernel_oracle, oracles, reach
from harness.families.attention_spec import AS_CONFIGURED, QK_NORMS, QkNorm
from harness.families.base import (
    EPS,
    Case,
    Family,
    ParamSpec,
    ScaleSpec,
    TraitSpec,
    _attn_params,
    activations,
    case_named,
    causal,
    convention_regimes,
    pad_pattern,
    regime_case,
)
from harness.families.rope_scaling import RopeScaling


def _attn_self(cfg: Config, gen: torch.Generator) -> dict:
    x = activations(gen, cfg.batch, cfg.tgt_len, cfg.d_model)
    pad = pad_pattern(cfg.padding, gen, cfg.batch, cfg.tgt_len)
    mask = pad[:, None, :].expand(cfg.batch, cfg.tgt_len, cfg.tgt_len)  # (B, T, T)
    return {"query": x, "key": x, "value": x, "mask": mask.clone(), "causal": False}


def _attn_query_is_key(cfg: Config, gen: torch.Generator) -> dict:
    """Self-attention whose query and key are one tensor and value another (a fused path
    keyed on ``query is key`` cannot pass)."""
    x, v = (activations(gen, cfg.batch, cfg.tgt_len, cfg.d_model) for _ in range(2))
    pad = pad_pattern(cfg.padding, gen, cfg.batch, cfg.tgt_len)
    mask = pad[:, None, :].expand(cfg.batch, cfg.tgt_len, cfg.tgt_len)
    return {"query": x, "key": x, "value": v, "mask": mask.clone(), "causal": False}


def _attn_self_kv(cfg: Config, gen: torch.Generator) -> dict:
    """Self-shaped (S = T) but query, key and value are three different tensors."""
    q, k, v = (activations(gen, cfg.batch, cfg.tgt_len, cfg.d_model) for _ in range(3))
    pad = pad_pattern(cfg.padding, gen, cfg.batch, cfg.tgt_len)
    mask = pad[:, None, :].expand(cfg.batch, cfg.tgt_len, cfg.tgt_len)
    return {"query": q, "key": k, "value": v, "mask": mask.clone(), "causal": False}


def _attn_cross(cfg: Config, gen: torch.Generator) -> dict:
    """T != S, and key and value are different tensors."""
    x = activations(gen, cfg.batch, cfg.tgt_len, cfg.d_model)
    key = activations(gen, cfg.batch, cfg.src_len, cfg.d_model)
    value = activations(gen, cfg.batch, cfg.src_len, cfg.d_model)
    pad = pad_pattern(cfg.padding, gen, cfg.batch, cfg.src_len)
    mask = pad[:, None, :].expand(cfg.batch, cfg.tgt_len, cfg.src_len)  # (B, T, S)
    return {"query": x, "key": key, "value": value, "mask": mask.clone(), "causal": False}


def _attn_cross_memory(cfg: Config, gen: torch.Generator) -> dict:
    """Encoder-decoder attention: T != S, key and value are the same encoder memory."""
    x = activations(gen, cfg.batch, cfg.tgt_len, cfg.d_model)
    memory = activations(gen, cfg.batch, cfg.src_len, cfg.d_model)
    pad = pad_pattern(cfg.padding, gen, cfg.batch, cfg.src_len)
    mask = pad[:, None, :].expand(cfg.batch, cfg.tgt_len, cfg.src_len)
    return {"query": x, "key": memory, "value": memory, "mask": mask.clone(), "causal": False}


def _attn_causal(cfg: Config, gen: torch.Generator) -> dict:
    inputs = _attn_self(cfg.replace(padding="right"), gen)  # another pattern leaves early rows without a key
    inputs["mask"] = inputs["mask"] & causal(cfg.tgt_len)
    return inputs


def _attn_causal_only(cfg: Config, gen: torch.Generator) -> dict:
    x = activations(gen, cfg.batch, cfg.tgt_len, cfg.d_model)
    mask = causal(cfg.tgt_len).expand(cfg.batch, cfg.tgt_len, cfg.tgt_len).clone()
    return {"query": x, "key": x, "value": x, "mask": mask, "causal": True}


def random_mask(gen: torch.Generator, batch: int, rows: int, cols: int) -> torch.Tensor:
    """(B, rows, cols) bool, each entry kept with probability 1/2, every row keeping at
    least one key: neither causal nor padding, so a mask applied along the wrong axis,
    transposed or broadcast from one row cannot pass."""
    mask = torch.rand(batch, rows, cols, generator=gen) < 0.5
    keep = torch.randint(0, cols, (batch, rows), generator=gen)
    mask.scatter_(-1, keep[..., None], True)
    return mask


def _attn_random_mask(cfg: Config, gen: torch.Generator) -> dict:
    x = activations(gen, cfg.batch, cfg.tgt_len, cfg.d_model)
    mask = random_mask(gen, cfg.batch, cfg.tgt_len, cfg.tgt_len)
    return {"query": x, "key": x, "value": x, "mask": mask, "causal": False}


def _attn_fully_masked(cfg: Config, gen: torch.Generator) -> dict:
    inputs = _attn_self(cfg, gen)
    mask = inputs["mask"]
    mask[-1, 0, :] = False          # one query row sees no key at all
    if cfg.batch > 1 and cfg.tgt_len > 1:
        mask[0, -1, :] = False
    return inputs


def _positions(make):
    """A case's inputs with token positions per row: ``positions`` (B, T) of the queries and
    ``key_positions`` (B, S) of the keys, 0.. L-1 unless the case sets them; and the window
    the call asks for (None unless the case sets one). Drawn from no generator: the other
    inputs stay as they were."""
    def with_positions(cfg: Config, gen: torch.Generator) -> dict:
        inputs = make(cfg, gen)
        B, T, S = inputs["query"].shape[0], inputs["query"].shape[1], inputs["key"].shape[1]
        inputs.setdefault("positions", torch.arange(T).expand(B, T).clone())
        inputs.setdefault("key_positions", torch.arange(S).expand(B, S).clone())
        inputs.setdefault("window", None)
        return inputs
    return with_positions


def _decode(cfg: Config, gen: torch.Generator, left_padded: bool) -> dict:
    """T new queries after a cache of P = cfg.src_len earlier tokens: keys and values are all
    S = P + T tokens, the queries the last T, at positions P .. P+T-1 (causal: query i sees
    keys .. P+i). ``left_padded``: the rows are left-padded (lengths >= T), and positions
    start at 0 on the first real token (HF: ``attention_mask.cumsum(-1) - 1``)."""
    P, T = cfg.src_len, cfg.tgt_len
    S = P + T
    x = activations(gen, cfg.batch, S, cfg.d_model)
    lens = torch.randint(T, S + 1, (cfg.batch,), generator=gen)
    lens[0] = S
    if cfg.batch > 1:
        lens[-1] = T
    real = torch.arange(S)[None, :] >= (S - lens)[:, None]                                  # (B, S) left padding
    if not left_padded:
        real = torch.ones(cfg.batch, S, dtype=torch.bool)
    mask = (torch.arange(S)[None, :] <= P + torch.arange(T)[:, None])[None] & real[:, None, :]   # (B, T, S)
    key_positions = (real.long().cumsum(-1) - 1).clamp(min=0)                                  # (B, S)
    return {"query": x[:, P:].clone(), "key": x, "value": x, "mask": mask.clone(), "causal": False,
            "positions": key_positions[:, P:].clone(), "key_positions": key_positions}


def _attn_decode(cfg: Config, gen: torch.Generator) -> dict:
    return _decode(cfg, gen, left_padded=False)


def _attn_decode_left_pad(cfg: Config, gen: torch.Generator) -> dict:
    return _decode(cfg, gen, left_padded=True)


FAR = 4096  # the far case's queries sit thousands of positions after their first keys


def _attn_far(cfg: Config, gen: torch.Generator) -> dict:
    """T queries at positions FAR .. FAR+T-1 over S keys spread from position 0 to the
    queries' own, causal by position: relative distances in the thousands, where RoPE's
    inverse frequencies must be exact (rounded to bfloat16 they turn a key thousands back by
    radians too many)."""
    T, S = cfg.tgt_len, cfg.src_len + cfg.tgt_len
    q = activations(gen, cfg.batch, T, cfg.d_model)
    k = activations(gen, cfg.batch, S, cfg.d_model)
    v = activations(gen, cfg.batch, S, cfg.d_model)
    early = torch.sort(torch.randperm(FAR, generator=gen)[:S - T]).values           # S - T keys before FAR
    key_positions = torch.cat([early, FAR + torch.arange(T)])                     # the last T: the queries'
    positions = FAR + torch.arange(T)
    mask = key_positions[None, :] <= positions[:, None]                           # (T, S) causal by position
    return {"query": q, "key": k, "value": v, "mask": mask.expand(cfg.batch, T, S).clone(), "causal": False,
            "positions": positions.expand(cfg.batch, T).clone(),
            "key_positions": key_positions.expand(cfg.batch, S).clone()}


WINDOW = (3, 0)  # HF's sliding_window=4: keys i-3 .. i


def packed_segments(gen: torch.Generator, batch: int, length: int) -> torch.Tensor:
    """(B, L) segment ids of rows that pack several sequences: each row cut at 1 .. 3 random
    places (row 0 always at L // 2 when L > 1), segments numbered 0, 1, ... along the row."""
    seg = torch.zeros(batch, length, dtype=torch.long)
    for b in range(batch):
        cuts = torch.randperm(max(length - 1, 1), generator=gen)[:int(torch.randint(1, 4, (1,), generator=gen))] + 1
        if b == 0 and length > 1:
            cuts = torch.cat([cuts, torch.tensor([length // 2])])
        for c in cuts.tolist():
            if c < length:
                seg[b, c:] += 1
    return seg


def packed_positions(seg: torch.Tensor) -> torch.Tensor:
    """(B, L) positions restarting at 0 where each segment starts."""
    idx = torch.arange(seg.shape[1]).expand_as(seg)
    new = torch.ones_like(seg, dtype=torch.bool)
    new[:, 1:] = seg[:, 1:] != seg[:, :-1]
    start = torch.where(new, idx, torch.zeros_like(idx)).cummax(-1).values
    return idx - start


def _attn_packed(cfg: Config, gen: torch.Generator) -> dict:
    """Packed rows: several sequences in one row, positions restarting at each, causal within a
    sequence only (a block-diagonal causal mask): positions taken from the call, not counted
    along the row, is what a packed batch needs."""
    inputs = _attn_causal_only(cfg, gen)
    seg = packed_segments(gen, cfg.batch, cfg.tgt_len)
    inputs["mask"] = inputs["mask"] & (seg[:, :, None] == seg[:, None, :])
    inputs["causal"] = False
    inputs["positions"] = packed_positions(seg)
    inputs["key_positions"] = inputs["positions"].clone()
    return inputs


def _attn_decode_window(cfg: Config, gen: torch.Generator) -> dict:
    """Decode after a cache of P = S tokens with a sliding window (3, 0) (or the config's)
    asked for: the window sits on query i's own position P + i (the bottom-right diagonal),
    where one counted from the first new query keeps the wrong keys."""
    inputs = _decode(cfg, gen, left_padded=False)
    inputs["window"] = cfg.window if cfg.window is not None else WINDOW
    return inputs


def _attn_window(cfg: Config, gen: torch.Generator) -> dict:
    """Causal self-attention over T + S tokens (longer than the window), the window the
    config sets or (3, 0), asked for in the call (a module whose window is its own reads it)."""
    length = cfg.tgt_len + cfg.src_len
    x = activations(gen, cfg.batch, length, cfg.d_model)
    mask = causal(length).expand(cfg.batch, length, length).clone()
    return {"query": x, "key": x, "value": x, "mask": mask, "causal": True,
            "window": cfg.window if cfg.window is not None else WINDOW}


def reach_plan(trait: str, value, worst: reach.Reach) -> reach.ReachPlan | None:
    """A case that reaches a declaration no case reached: for a window (left, right) of its
    own, causal self-attention over left + right + 1 + ``reach.MARGIN`` tokens at B = 1, H = 2,
    d_k = 8 (the ``window`` case, or ``causal_only``); a convention's own plan otherwise."""
    if trait == "window" and isinstance(value, tuple):
        keys = value[0] + value[1] + 1 + reach.MARGIN
        return reach.ReachPlan(("window", "causal_only"), {"d_model": 16, "heads": 2, "d_ff": 64, "batch": 1,
                                                           "tgt_len": keys - 8, "src_len": 8, "window": value},
                               keys)
    return conventions.reach_plan("attention", trait, value, worst)


def _attention_requires(traits, cfg: Config) -> str | None:
    """A variant that declares no ``gqa_grouping`` is multi-head only; a partial rotary
    (``rope_fraction``) needs an even number of rotated dims: int(d_k * fraction) odd (1 at
    d_k = 2 and a fraction of 0.5) has no declared convention (HF GPT-NeoX then rotates one
    dim more at another frequency; a hand-written port rotates half a pair)."""
    if cfg.n_kv_heads < cfg.heads and "gqa_grouping" not in traits:
        return (f"kv_heads={cfg.n_kv_heads} < heads={cfg.heads}: the variant declares no gqa_grouping "
                f"(one K/V head per query head)")
    fraction = traits.get("rope_fraction", 1.0)
    if traits.get("rope", "none") != "none" and isinstance(fraction, (int, float)):
        dims = int(cfg.d_k * fraction)
        if dims % 2:
            return (f"rope_fraction {fraction:g} of d_k={cfg.d_k} rotates {dims} dim(s): an odd count has "
                    f"no declared rotary convention (choose d_model so that d_k * {fraction:g} is even)")
    return None


def qk_norm_params(traits, cfg: Config) -> ParamSpec:
    """The QK-norm gains, canonical when the variant declares QK-norm: ``q_norm.weight`` and
    ``k_norm.weight``, one per dim of a head and shared by every head, (d_k,), for "rms per
    head" (Qwen3's RMSNorm(head_dim)); one per head and dim, (H d_k,) and (H_kv d_k,), for
    "rms over all heads" (OLMo2's RMSNorm(H * head_dim)); none otherwise."""
    declared = traits.get("qk_norm", "none")
    qk_norm = QkNorm.of(declared) if declared in QK_NORMS else QkNorm.NONE  # an unknown one: its error comes later
    if qk_norm is QkNorm.PER_HEAD:
        return {"q_norm.weight": ((cfg.d_k,), "norm_weight"), "k_norm.weight": ((cfg.d_k,), "norm_weight")}
    if qk_norm is QkNorm.ALL_HEADS:
        return {"q_norm.weight": ((cfg.heads * cfg.d_k,), "norm_weight"),
                "k_norm.weight": ((cfg.n_kv_heads * cfg.d_k,), "norm_weight")}
    return {}


def trait_params(traits, cfg: Config) -> ParamSpec:
    """The parameters declared traits bring: QK-norm's gains, then the conventions' (a sink per head)."""
    return {**qk_norm_params(traits, cfg), **conventions.trait_params("attention", traits, cfg)}


class _WindowSpec(TraitSpec):
    """``none``, ``as called`` or a (left, right) pair of integers >= 0."""

    def accepts(self, value) -> bool:
        if value in ("none", "as called"):
            return True
        return (isinstance(value, tuple) and len(value) == 2
                and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in value))

    def known(self) -> str:
        return "'none', 'as called', (left, right) integers >= 0"


class _RopeScalingSpec(TraitSpec):
    """``none``, ``as configured`` (the config's ``rope_scaling``: a checkpoint's) or a
    ``RopeScaling`` (``harness.families.rope_scaling``)."""

    def accepts(self, value) -> bool:
        return value in ("none", AS_CONFIGURED) or isinstance(value, RopeScaling)

    def known(self) -> str:
        return "'none', 'as configured', a RopeScaling (harness.families.rope_scaling)"


CASES = tuple(Case(c.name, c.note, _positions(c.make)) for c in (
    Case("self", "query = key = value, random key padding", _attn_self),
    Case("self_kv", "S = T but query, key and value all different (K/V roles apart)", _attn_self_kv),
    Case("cross", "T != S, key != value, random source padding", _attn_cross),
    Case("cross_memory", "T != S, key = value = encoder memory, source padding", _attn_cross_memory),
    Case("causal", "causal self-attention with key padding", _attn_causal),
    Case("causal_only", "causal mask only (is_causal hint allowed)", _attn_causal_only),
    Case("random_mask", "an arbitrary mask, every row keeps a key (axes and polarity)", _attn_random_mask),
    Case("fully_masked", "rows whose keys are all masked", _attn_fully_masked),
    Case("decode", "T queries at positions P..P+T-1 after a cache of P = S tokens (RoPE offsets)", _attn_decode),
    Case("decode_left_pad", "decode over left-padded rows, positions from the first real token",
         _attn_decode_left_pad),
    Case("window", "causal, T + S tokens, a sliding window (3, 0) asked for (or the config's)", _attn_window),
    Case("decode_window", "decode after a cache of P = S tokens with a sliding window (3, 0) asked for: "
         "top-left and bottom-right diagonals differ", _attn_decode_window),
    Case("far", f"T queries at positions {FAR}.. over keys from position 0: RoPE over thousands of positions",
         _attn_far),
    Case("packed", "packed rows: sequences back to back, positions restarting at each, block-diagonal causal mask",
         _attn_packed),
    Case("query_is_key", "query and key one tensor, value another", _attn_query_is_key),
))

# The fixed regimes of the default matrix (drawn from harness.base.regimes' strategies):
# logits in the hundreds (a softmax without its max subtracted overflows in float32), and T, S
# >= 130 crossing 64- and 128-wide key blocks (a blocked softmax's rescale between blocks),
# both over per-row padding (right, left, arbitrary).
_SELF, _CROSS = case_named(CASES, "self"), case_named(CASES, "cross")
REGIME_CASES = (
    regime_case(_SELF, "large", "inputs x12: logits of std ~140, per-row padding", scale=12.0, padding="per_row"),
    regime_case(_CROSS, "long", "B = 2, T = 131, S = 140: three key blocks of 64, two of 128; a right- and a "
                "left-padded row", batch=2, tgt_len=131, src_len=140, padding="per_row"),
    # the config's window, off the case's own (3, 0): a module that fixes the window passes that one
    regime_case(case_named(CASES, "window"), "wide", "the config's window (5, 0)", window=(5, 0)),
    *convention_regimes("attention", CASES),
)

FULLY_MASKED_ROW = TraitSpec("what a query row that sees no key becomes", oracles.FULLY_MASKED_ROWS)

ATTENTION = Family(
    name="attention",
    call="(query (B,T,D), key (B,S,D), value (B,S,D), mask (B,T,S) bool True=may attend) -> (B,T,D)",
    doc="Multi-head attention with its Q, K, V and output projections.",
    params=lambda cfg: _attn_params("", cfg.d_model, cfg.n_kv_heads * cfg.d_k, cfg.heads * cfg.d_k),
    trait_params=trait_params,
    cases=CASES + REGIME_CASES,
    traits={
        "sublayer": TraitSpec("what the module returns", oracles.ATTENTION_SUBLAYERS),
        "fully_masked_row": FULLY_MASKED_ROW,
        "mask_style": TraitSpec("masked scores replaced (fill) or added to (additive)",
                                oracles.MASK_STYLES, default="fill"),
        "eps": TraitSpec("eps of a LayerNorm inside the sublayer", EPS.values, True, default=1e-5),
        "rope": TraitSpec("rotary embedding of q and k at the call's positions: none, half-split (HF "
                          "rotate_half) or interleaved pairs (Meta's complex form)", oracles.ROPE_LAYOUTS,
                          default="none"),
        "rope_scaling": _RopeScalingSpec("the RoPE scaling of q and k's rotation (linear, dynamic NTK, YaRN with "
                                         "its attention factor, llama3, LongRoPE): a RopeScaling, or 'as "
                                         "configured' (the config's rope_scaling)", default="none"),
        "rope_fraction": TraitSpec("the fraction of each head's dims that rotate (GPT-NeoX's rotary_pct)",
                                   number=True, default=1.0),
        "gqa_grouping": TraitSpec("query head h reads K/V head h // (H / H_kv) (consecutive: repeat_interleave)"
                                  " or h % H_kv (tiled); declaring it says the variant takes kv_heads < heads",
                                  kernel_oracle.GQA_GROUPINGS, default="consecutive"),
        "window": _WindowSpec("the keys diag-left .. diag+right a query keeps, its own or the call's "
                              "(HF sliding_window=w: (w-1, 0))", default="none"),
        "window_diagonal": TraitSpec("the diagonal a window sits on when T < S (decoding after a cache): "
                                     "top_left (query i faces key i) or bottom_right (query i faces key S - T + i, "
                                     "its own position: HF, Mistral)", kernel_oracle.CAUSAL[:2], default="top_left"),
        "qk_norm": TraitSpec("q and k RMS-normalised before RoPE, per head over d_k (Qwen3) or over all heads "
                             "(OLMo2), times their gains q_norm.weight and k_norm.weight (canonical parameters "
                             "when declared); eps the 'eps' trait", oracles.QK_NORMS, default="none"),
        **conventions.trait_specs("attention"),   # the softcap, attention sinks
        "score_scale": ScaleSpec("the factor on q k^T: '1/sqrt(d)' (d the head width) or a number (Gemma 2: "
                                 "query_pre_attn_scalar ** -0.5)", default=kernel_oracle.DEFAULT_SCALE),
    },
    oracle=oracles.attention,
    case_semantic={"fully_masked": ("fully_masked_row", "mask_style")},
    grad_inputs=("query", "key", "value"),
    # GQA (two query heads per K/V head) and MQA (one K/V head for all four); multi-head-only
    # variants skip both (``_attention_requires``)
    extra_configs={"gqa": Config(kv_heads=2, batch=2), "mqa": Config(kv_heads=1, batch=2)},
    case_declarers={**dict.fromkeys(("decode", "decode_left_pad", "window"), ("rope", "window", "gqa_grouping")),
                    "far": ("rope",), "packed": ("rope",), "decode_window": ("window",)},
    requires=_attention_requires,
    reach_plan=reach_plan,
    dropout_stats=lambda t: "mean" if t.get("sublayer") == "attention" else ("o.weight", "o.bias"),
)
