"""Subtly wrong components that hide outside a single input regime (one length, right
padding only, small activations, ...), and correct-but-differently-computed controls.

Each wrong variant makes a one-line mistake that real code makes and declares the traits of
the correct design it imitates, so a harness that exercised the regime would contradict
it. ``REGIME_WRONG`` maps each id to the class of mistake it stands for; ``REGIME_CONTROLS``
maps each control to why it must stay equivalent. ``benchmarks/regime_caught.py`` prints
which are caught and ``tests/test_regime_variants.py`` asserts it (strict xfail where the
mechanism that would catch one is not built).

Public API used: ``harness.register``, ``Param``, ``Zero``, ``Absent``, ``nest``,
``linear_entries``, ``fused_entries``, ``norm_entries``, ``register_decoding`` (the only way to
give a model a cache or its own greedy loop), ``smoothed_target``, ``SPREADS``, ``STEP_COUNTS``
(the trait values of the loss and schedule families); and the project's own ``variants``
package (``variants.decoder_only``, ``variants.torch_reference``): the whole models and their
maps are reused rather than rewritten, as a user's file would import its own models.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from harness import (
    SPREADS,
    STEP_COUNTS,
    Absent,
    Config,
    Param,
    Zero,
    dropout_sites,
    fused_entries,
    layers,
    linear_entries,
    nest,
    norm_entries,
    register,
    register_decoding,
    smoothed_target,
)

REGIME_WRONG = {  # id -> the class of mistake it stands for
    # 1. state across calls
    "rg_pe_cached_first_len": "state across calls: PE table cached at the first call's length",
    "rg_mask_cached_by_length": "state across calls: key padding mask cached, keyed on the length only",
    "rg_causal_buffer_first_T": "state across calls: causal mask buffer built at the first T",
    "rg_kv_cache_not_reset": "state across calls: k/v cache never reset between sequences",
    # 2. inputs changed in place
    "rg_pad_flipped_inplace": "input changed in place: pad mask flipped with logical_not_()",
    "rg_target_filled_inplace": "input changed in place: loss target filled in place",
    "rg_query_scaled_inplace": "input changed in place: query scaled in place (key too when query is key)",
    # 3. regimes
    "rg_softmax_no_max": "regime: softmax without max subtraction (NaN at large logits)",
    "rg_log_softmax_loss": "regime: log(softmax(x)) in a loss (inf/NaN at large logits)",
    "rg_flash_no_rescale": "regime: blocked online softmax missing its rescale (only wrong when S > 64)",
    "rg_pad_from_lengths": "regime: padding mask rebuilt from lengths (wrong on left padding)",
    "rg_fused_query_is_key": "regime: fused path keyed on `query is key` (wrong when query = key != value)",
    "rg_pad_idx_zero": "regime: pad index hard-coded to 0 (embedding)",
    "rg_mask_pad_zero": "regime: pad index hard-coded to 0 (mask builder)",
    "rg_lr_ignores_factor": "regime: lr schedule ignores its factor",
    # 4. the inference path
    "rg_eval_fast_path_drops_padding": "inference path: no-grad eval fast path drops key padding",
    # 5. dropout
    "rg_dropout_on_scores": "dropout: on the scores instead of the weights",
    "rg_dropout_whole_residual": "dropout: on the whole residual sum",
    "rg_dropout_hardcoded_rate": "dropout: rate hard-coded to 0.1 instead of the config's",
    # 6. half precision
    "rg_half_zero_after_softmax": "half precision: masked probabilities zeroed after the softmax",
    "rg_norm_finfo_eps": "half precision: eps = finfo(x.dtype).eps instead of the declared one",
    # 10. greedy decoding
    "rg_greedy_newest_token": "greedy decoding: the loop feeds only the newest token",
    # 11. a learnable parameter left out
    "rg_layer_norm_no_affine": "parameter left out: post-LN with F.layer_norm, no gain or bias",
}

REGIME_CONTROLS = {  # id -> why it must stay equivalent
    "ctl_rand_like_dropout": "correct inverted dropout written with torch.rand_like(x) < keep (one draw per site)",
    "ctl_float32_internal": "correct LayerNorm computed in float32 inside, declares internal_dtype='float32'",
    "ctl_lr_sqrt_last": "the same Noam schedule with 1/sqrt(d) applied last: last-ulp differences only",
    "ctl_flash_rescaled": "a correct blocked (flash-style) online softmax over key blocks of 64",
    "ctl_layer_norm_declared": "post-LN with F.layer_norm, no gain or bias, declared (traits['not_learned'])",
}

BLOCK = 64  # key block of the flash-style softmax

# -- attention ---------------------------------------------------------------------------------

QKVO = linear_entries({"q": "q", "k": "k", "v": "v", "o": "o"})
TEXTBOOK = {"sublayer": "attention", "qkv_layout": "4 Linear", "bias": True, "scale": "scores / sqrt(d_k)",
            "mask_convention": "True = may attend", "fill": -1e9, "fully_masked_row": "mean of V",
            "dropout_sites": ("attention weights",)}


def blocked_attention(q, k, v, keep, scale, rescale=True):
    """Online softmax over key blocks of ``BLOCK`` (flash attention's recurrence, in torch):
    q (B,H,T,d), k/v (B,H,S,d), keep (B,1,T,S) True = may attend; fill -1e9."""
    m = q.new_full(q.shape[:-1] + (1,), float("-inf"))
    row_sum = q.new_zeros(q.shape[:-1] + (1,))
    acc = torch.zeros_like(q)
    for j in range(0, k.size(-2), BLOCK):
        s = (q @ k[..., j:j + BLOCK, :].transpose(-2, -1)) * scale
        s = s.masked_fill(~keep[..., j:j + BLOCK], -1e9)
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        p = torch.exp(s - m_new)
        alpha = torch.exp(m - m_new)
        row_sum = row_sum * alpha + p.sum(-1, keepdim=True)
        acc = (acc * alpha if rescale else acc) + p @ v[..., j:j + BLOCK, :]  # the mistake: no rescale
        m = m_new
    return acc / row_sum


class RegimeAttention(nn.Module):
    """Textbook attention (finite fill -1e9: a fully masked row is the mean of V) with
    switchable one-line mistakes."""

    def __init__(self, d, h, p=0.0, mistake=None):
        super().__init__()
        self.h, self.p, self.mistake = h, p, mistake
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))

    def forward(self, query, key, value, mask):
        B, T, D = query.shape
        h, d_k, m = self.h, D // self.h, self.mistake
        split = lambda x: x.view(B, -1, h, d_k).transpose(1, 2)  # noqa: E731
        scale = 1.0 / math.sqrt(d_k)
        if m == "query_scaled_inplace" and not torch.is_grad_enabled():
            # inference: fold 1/sqrt(d_k) into the query in place (no copy); the Q bias
            # scaled to match. When query is key (and value), key and value are scaled too.
            query.mul_(scale)
            q = split(F.linear(query, self.q.weight, self.q.bias * scale))
            scale = 1.0
        else:
            q = split(self.q(query))
        k = split(self.k(key))
        v = split(self.v(query if (m == "fused_query_is_key" and query is key) else value))
        keep = mask[:, None]                                       # (B, 1, T, S)
        if m in ("flash_no_rescale", "flash_rescaled"):
            y = blocked_attention(q, k, v, keep, scale, rescale=m == "flash_rescaled")
        elif m == "eval_fast_path" and not torch.is_grad_enabled() and not self.training:
            y = F.scaled_dot_product_attention(q, k, v)            # fast path: padding assumed absent
        else:
            scores = (q @ k.transpose(-2, -1)) * scale
            if m == "dropout_on_scores":
                scores = F.dropout(scores, self.p, self.training)  # the mistake: before the softmax
            if m == "softmax_no_max":
                e = scores.masked_fill(~keep, float("-inf")).exp()  # no max subtracted
                w = e / e.sum(-1, keepdim=True)
            elif m == "half_zero_after_softmax" and scores.dtype in (torch.float16, torch.bfloat16):
                w = F.softmax(scores, dim=-1).masked_fill(~keep, 0.0)  # half path: zeroed after, not filled before
            else:
                w = F.softmax(scores.masked_fill(~keep, -1e9), dim=-1)
            if m != "dropout_on_scores":
                w = F.dropout(w, self.p, self.training)
            y = w @ v
        return self.o(y.transpose(1, 2).reshape(B, T, D))


def _attention(vid, mistake, traits=TEXTBOOK, summary=""):
    register(
        id=vid, family="attention", source="tests/regime_variants.py", summary=summary or f"regime mistake: {mistake}",
        build=lambda cfg, m=mistake: RegimeAttention(cfg.d_model, cfg.heads, cfg.dropout, m),
        call=lambda m, i: m(i["query"], i["key"], i["value"], i["mask"]),
        param_map=QKVO, traits=traits,
    )


NO_DROPOUT = {**TEXTBOOK, "dropout_sites": ()}
_attention("rg_softmax_no_max", "softmax_no_max",
           {**TEXTBOOK, "fill": float("-inf"), "fully_masked_row": "NaN"})
_attention("rg_flash_no_rescale", "flash_no_rescale", NO_DROPOUT)
_attention("ctl_flash_rescaled", "flash_rescaled", NO_DROPOUT, "correct blocked online softmax (control)")
_attention("rg_fused_query_is_key", "fused_query_is_key")
_attention("rg_eval_fast_path_drops_padding", "eval_fast_path")
_attention("rg_dropout_on_scores", "dropout_on_scores")
_attention("rg_half_zero_after_softmax", "half_zero_after_softmax")
_attention("rg_query_scaled_inplace", "query_scaled_inplace")


# -- norm --------------------------------------------------------------------------------------

class LayerNorm(nn.Module):
    """nn.LayerNorm(eps=1e-5) written out; ``mistake`` picks how it deviates."""

    def __init__(self, d, mistake=None, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))
        self.eps, self.mistake = eps, mistake

    def forward(self, x):
        shape = x.shape[-1:]
        if self.mistake == "float32_internal":  # correct: upcast, normalise, cast back
            return F.layer_norm(x.float(), shape, self.weight.float(), self.bias.float(), self.eps).to(x.dtype)
        eps = torch.finfo(x.dtype).eps if self.mistake == "finfo_eps" and x.element_size() < 4 else self.eps
        return F.layer_norm(x, shape, self.weight, self.bias, eps)


NORM_MAP = {"weight": Param("weight"), "bias": Param("bias")}
NORM_TRAITS = {"norm_formula": "layernorm", "eps": 1e-5, "std": "biased, eps inside sqrt"}
register(
    id="rg_norm_finfo_eps", family="norm", source="tests/regime_variants.py",
    summary="regime mistake: eps = finfo(x.dtype).eps on the half path",
    build=lambda cfg: LayerNorm(cfg.d_model, "finfo_eps"), call=lambda m, i: m(i["x"]),
    param_map=NORM_MAP, traits=NORM_TRAITS,
)
register(
    id="ctl_float32_internal", family="norm", source="tests/regime_variants.py",
    summary="correct LayerNorm computed in float32 inside (control)",
    build=lambda cfg: LayerNorm(cfg.d_model, "float32_internal"), call=lambda m, i: m(i["x"]),
    param_map=NORM_MAP, traits={**NORM_TRAITS, "internal_dtype": "float32"},
)


# -- ffn ---------------------------------------------------------------------------------------

class FFN(nn.Module):
    def __init__(self, d, f, p, mistake=None):
        super().__init__()
        self.w1, self.w2 = nn.Linear(d, f), nn.Linear(f, d)
        self.p, self.mistake = p, mistake

    def forward(self, x):
        h = F.relu(self.w1(x))
        if self.mistake == "hardcoded_rate":
            h = F.dropout(h, 0.1, self.training)                  # the config's rate ignored
        elif self.mistake == "rand_like":
            if self.training and self.p > 0:                       # correct inverted dropout
                keep = 1.0 - self.p
                h = h * (torch.rand_like(h) < keep) / keep
        else:
            h = F.dropout(h, self.p, self.training)
        return self.w2(h)


FFN_TRAITS = {"sublayer": "ffn", "activation": "relu", "dropout_sites": ("hidden",)}
for vid, mistake, summary in (("rg_dropout_hardcoded_rate", "hardcoded_rate", "regime mistake: F.dropout(h, 0.1)"),
                              ("ctl_rand_like_dropout", "rand_like", "dropout by torch.rand_like (control)")):
    register(
        id=vid, family="ffn", source="tests/regime_variants.py", summary=summary,
        build=lambda cfg, m=mistake: FFN(cfg.d_model, cfg.d_ff, cfg.dropout, m), call=lambda m, i: m(i["x"]),
        param_map=linear_entries({"w1": "w1", "w2": "w2"}), traits=FFN_TRAITS,
    )


# -- encoder layer: a hand-written post-LN layer around nn.MultiheadAttention --------------------

class PostLNEncoderLayer(nn.Module):
    """The paper's post-LN encoder layer (nn.TransformerEncoderLayer's layout and names)."""

    def __init__(self, cfg, mistake=None):
        super().__init__()
        d = cfg.d_model
        self.mistake = mistake
        self.self_attn = nn.MultiheadAttention(d, cfg.heads, dropout=cfg.dropout, batch_first=True)
        self.linear1, self.linear2 = nn.Linear(d, cfg.d_ff), nn.Linear(cfg.d_ff, d)
        self.dropout, self.dropout1, self.dropout2 = (nn.Dropout(cfg.dropout) for _ in range(3))
        if mistake != "no_affine":
            self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self._ignore = None

    def norm(self, i, x):
        if self.mistake == "no_affine":
            return F.layer_norm(x, x.shape[-1:])                   # no gain, no bias
        return (self.norm1, self.norm2)[i](x)

    def forward(self, x, pad):
        m = self.mistake
        if m == "pad_from_lengths":
            pad = torch.arange(x.size(1), device=x.device) < pad.sum(-1, keepdim=True)  # right padding assumed
        if m == "pad_flip_inplace":
            ignore = pad.logical_not_()                             # True = ignore, in the caller's tensor
        elif m == "mask_cached_by_length":
            if self._ignore is None or self._ignore.shape != pad.shape:
                self._ignore = ~pad                                 # stale when the padding changes
            ignore = self._ignore
        else:
            ignore = ~pad
        a = self.self_attn(x, x, x, key_padding_mask=ignore, need_weights=False)[0]
        x = self.norm(0, self.dropout1(x + a) if m == "dropout_whole_residual" else x + self.dropout1(a))
        f = self.linear2(self.dropout(F.relu(self.linear1(x))))
        return self.norm(1, self.dropout2(x + f) if m == "dropout_whole_residual" else x + self.dropout2(f))


MHA_MAP = {**fused_entries("in_proj_weight", "in_proj_bias", ("q", "k", "v")), **linear_entries({"o": "out_proj"})}
ENCODER_MAP = {**nest(MHA_MAP, "self_attn.", "self_attn."),
               **nest(linear_entries({"w1": "linear1", "w2": "linear2"}), "ffn.", ""),
               **norm_entries("norm1", "norm1"), **norm_entries("norm2", "norm2")}
NO_AFFINE_MAP = {**{k: v for k, v in ENCODER_MAP.items() if not k.startswith("norm")},
                 "norm1.weight": Absent(1.0), "norm1.bias": Zero(), "norm2.weight": Absent(1.0), "norm2.bias": Zero()}
ENCODER_TRAITS = {"norm_placement": "post", "norm_formula": "layernorm", "eps": 1e-5, "activation": "relu",
                  "bias": True, "mask_convention": "bool True = not allowed", "fill": "sdpa",
                  "dropout_sites": ("self-attention weights", "dropout1", "FFN hidden", "dropout2")}
for vid, mistake in (("rg_mask_cached_by_length", "mask_cached_by_length"),
                     ("rg_pad_flipped_inplace", "pad_flip_inplace"),
                     ("rg_pad_from_lengths", "pad_from_lengths"),
                     ("rg_dropout_whole_residual", "dropout_whole_residual"),
                     ("rg_layer_norm_no_affine", "no_affine")):
    register(
        id=vid, family="encoder_layer", source="tests/regime_variants.py", summary=f"regime mistake: {mistake}",
        build=lambda cfg, m=mistake: PostLNEncoderLayer(cfg, m), call=lambda m, i: m(i["x"], i["pad"]),
        param_map=NO_AFFINE_MAP if mistake == "no_affine" else ENCODER_MAP, traits=ENCODER_TRAITS,
    )
register(
    id="ctl_layer_norm_declared", family="encoder_layer", source="tests/regime_variants.py",
    summary="post-LN with unit norms, declared: traits['not_learned'] (control)",
    build=lambda cfg: PostLNEncoderLayer(cfg, "no_affine"), call=lambda m, i: m(i["x"], i["pad"]),
    param_map=NO_AFFINE_MAP,
    traits={**ENCODER_TRAITS, "not_learned": ("norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias")},
)


# -- decoder-only block: a causal mask buffer built at the first T --------------------------------

class CachedCausalBlock(nn.TransformerEncoderLayer):
    """nn.TransformerEncoderLayer (post-norm) + a causal mask kept from the first call."""

    def forward(self, x, pad):
        t = x.size(1)
        if not hasattr(self, "future"):
            future = ~torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            self.register_buffer("future", future, persistent=False)
        return super().forward(x, src_mask=self.future[:t, :t], src_key_padding_mask=~pad)


register(
    id="rg_causal_buffer_first_T", family="decoder_only_block", source="tests/regime_variants.py",
    summary="regime mistake: causal mask buffer built at the first T",
    build=lambda cfg: CachedCausalBlock(cfg.d_model, cfg.heads, cfg.d_ff, dropout=cfg.dropout, batch_first=True),
    call=lambda m, i: m(i["x"], i["pad"]), param_map=ENCODER_MAP,
    traits={**ENCODER_TRAITS, "fully_masked_row": "zeros"},
)


# -- positional encoding: a table built at the first call's length --------------------------------

class CachedPE(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.d, self.pe = d, None

    def forward(self, x):
        if self.pe is None:  # built for the first call's length, in float32 (as the write-ups)
            pos = torch.arange(x.size(1), dtype=torch.float32)[:, None]
            div = torch.exp(torch.arange(0, self.d, 2, dtype=torch.float32) * (-math.log(10000.0) / self.d))
            self.pe = torch.zeros(x.size(1), self.d)
            self.pe[:, 0::2], self.pe[:, 1::2] = torch.sin(pos * div), torch.cos(pos * div)
        return x + self.pe[: x.size(1)].to(x.dtype)


register(
    id="rg_pe_cached_first_len", family="positional_encoding", source="tests/regime_variants.py",
    summary="regime mistake: PE table cached at the first call's length",
    build=lambda cfg: CachedPE(cfg.d_model), call=lambda m, i: m(i["x"]),
    traits={"pe_layout": "interleaved sin/cos", "pe_frequencies": "10000^(-2i/D)", "internal_dtype": "float32"},
)


# -- embedding and masks: the pad index hard-coded to 0 ---------------------------------------------

class ZeroPadEmbedding(nn.Module):
    def __init__(self, vocab, d):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(vocab, d))

    def forward(self, tokens, pad_idx):
        return self.weight[tokens].masked_fill((tokens == 0)[..., None], 0.0)  # pad_idx ignored


register(
    id="rg_pad_idx_zero", family="embedding", source="tests/regime_variants.py",
    summary="regime mistake: pad rows zeroed at token 0, not pad_idx",
    build=lambda cfg: ZeroPadEmbedding(cfg.vocab, cfg.d_model), call=lambda m, i: m(i["tokens"], i["pad_idx"]),
    param_map={"weight": Param("weight")}, traits={"embedding_scale": "1", "pad_rows": "zeroed"},
)
def _pad_mask_zero(tokens, pad_idx):
    return tokens != 0  # pad_idx ignored


register(
    id="rg_mask_pad_zero", family="masks", source="tests/regime_variants.py",
    summary="regime mistake: pad mask tokens != 0, not != pad_idx",
    build=lambda cfg: None, call=lambda m, i: _pad_mask_zero(i["tokens"], i["pad_idx"]),
    traits={"cases": ("pad",), "mask_convention": "True = keep", "pad_mask": "tokens != pad"},
)


# -- loss -------------------------------------------------------------------------------------------

def _log_softmax_loss(i):
    logits, target, pad = i["logits"], i["target"], i["pad_idx"]
    q = smoothed_target(target, logits.size(-1), pad, i["smoothing"], SPREADS[1]).to(logits.dtype)
    return -(q * torch.log(torch.softmax(logits, dim=-1))).sum() / (target != pad).sum()  # log(softmax)


CE_TRAITS = {"smoothing_spread": SPREADS[1], "loss_form": "cross-entropy"}
register(
    id="rg_log_softmax_loss", family="loss", source="tests/regime_variants.py",
    summary="regime mistake: cross-entropy as log(softmax(x))", build=lambda cfg: None,
    call=lambda m, i: _log_softmax_loss(i), traits=CE_TRAITS,
)
register(
    id="rg_target_filled_inplace", family="loss", source="tests/regime_variants.py",
    summary="regime mistake: pad targets set to -100 in the caller's tensor", build=lambda cfg: None,
    call=lambda m, i: F.cross_entropy(i["logits"], i["target"].masked_fill_(i["target"] == i["pad_idx"], -100),
                                      label_smoothing=i["smoothing"]),
    traits=CE_TRAITS,
)


# -- lr schedule ----------------------------------------------------------------------------------

def _rates(i, rate):
    return torch.tensor([rate(k, i["d_model"], i["factor"], i["warmup"]) for k in range(1, i["steps"] + 1)],
                        dtype=torch.float64)


register(
    id="rg_lr_ignores_factor", family="lr_schedule", source="tests/regime_variants.py",
    summary="regime mistake: the factor left out", build=lambda cfg: None,
    call=lambda m, i: _rates(i, lambda s, d, f, w: d ** (-0.5) * min(s ** (-0.5), s * w ** (-1.5))),
    traits={"step_count": STEP_COUNTS[1]},
)
register(
    id="ctl_lr_sqrt_last", family="lr_schedule", source="tests/regime_variants.py",
    summary="the Noam rate with 1/sqrt(d) applied last (control)", build=lambda cfg: None,
    call=lambda m, i: _rates(i, lambda s, d, f, w: f * min(s ** (-0.5), s * w ** (-1.5)) * (1.0 / math.sqrt(d))),
    traits={"step_count": STEP_COUNTS[1]},
)


# -- whole models: a k/v cache never reset, a greedy loop that feeds only the newest token ------------

from variants.decoder_only import FOUR_X, MODEL_TRAITS, Decoder, SimpleDecoderLayer, _decoder_map, block_mask  # noqa: E402
from variants.torch_reference import TorchSeq2Seq, _seq2seq_map  # noqa: E402

register(
    id="rg_kv_cache_not_reset", family="decoder_only_model", source="tests/regime_variants.py",
    summary="regime mistake: 002's Decoder whose k/v cache lives on the module and is never reset",
    build=lambda cfg: Decoder(cfg.vocab, cfg.d_model, cfg.heads, layers(cfg), cfg.dropout, block=SimpleDecoderLayer),
    call=lambda m, i: m(i["tokens"], block_mask(i["pad"], m.head_num)).log(),
    param_map=lambda cfg: _decoder_map(cfg, "simple_decoder_layer"),
    traits={**MODEL_TRAITS, "fill": float("-inf")}, supports=FOUR_X,
)


def _sticky_prepare(model, inputs, use_cache):
    if use_cache and not hasattr(model, "kv"):
        model.kv = []                                  # created once, never cleared for a new sequence
    return {"cache": model.kv if use_cache else None, "fed": 0}


def _sticky_step(model, state, ys):
    if state["cache"] is None:
        return model(ys, None)[:, -1].log()
    out = model.decode_step(ys[:, state["fed"]:], state["cache"]).log()
    state["fed"] = ys.size(1)
    return out


register_decoding("decoder_only_model", "rg_kv_cache_not_reset", prepare=_sticky_prepare, step=_sticky_step,
                  cache="self-attention k/v per layer, kept on the module")

SEQ2SEQ_TRAITS = {
    "norm_formula": "layernorm", "activation": "relu", "bias": True, "mask_convention": "bool True = not allowed",
    "fill": "sdpa", "norm_placement": "post", "eps": 1e-5, "final_norm": False, "embedding_scale": "1",
    "pad_rows": "kept", "shared_embeddings": False, "tied_output": False, "pe_layout": "interleaved sin/cos",
    "pe_frequencies": "10000^(-2i/D)", "target_shift": "by the caller", "internal_dtype": "float32",
    "dropout_sites": dropout_sites(("source embedding", "target embedding"),
                                   encoder=ENCODER_TRAITS["dropout_sites"],
                                   decoder=("self-attention weights", "dropout1", "cross-attention weights",
                                            "dropout2", "FFN hidden", "dropout3")),
}


def _seq2seq_prepare(model, inputs, cached):
    src_pad = inputs["src"] == inputs["pad_idx"]
    return {"memory": model.encode(inputs["src"], src_pad), "src_pad": src_pad}


def _greedy_newest(model, inputs, steps):
    state = _seq2seq_prepare(model, inputs, False)
    ys = torch.full((inputs["src"].size(0), 1), inputs["start"], dtype=torch.long)
    for _ in range(steps):
        logp = model.decode(ys[:, -1:], state["memory"], state["src_pad"])[:, -1]  # only the newest token fed
        ys = torch.cat([ys, logp.argmax(-1, keepdim=True)], dim=1)
    return ys[:, 1:]


register(
    id="rg_greedy_newest_token", family="encoder_decoder", source="tests/regime_variants.py",
    summary="regime mistake: nn.Transformer (post-norm) whose greedy loop feeds only the newest token",
    build=lambda cfg: TorchSeq2Seq(cfg, norm_first=False, eps=1e-5, final_norm=False, scale=False),
    call=lambda m, i: m(i["src"], i["tgt"], i["src"] == i["pad_idx"], i["tgt"] == i["pad_idx"]),
    param_map=lambda cfg: _seq2seq_map(cfg, False), traits=SEQ2SEQ_TRAITS,
)
register_decoding("encoder_decoder", "rg_greedy_newest_token", prepare=_seq2seq_prepare,
                  step=lambda m, s, ys: m.decode(ys, s["memory"], s["src_pad"])[:, -1], greedy=_greedy_newest)


# == Exhibits: each wrong variant is wrong in its regime, each control right there ==================
# ``EXHIBITS[id]()`` -> (regime, measured, baseline). For a wrong variant, ``measured`` is how
# far it is from the correct computation in the regime its class names (inf: it raises or
# gives NaN) and ``baseline`` the same measure for its correct sibling (0 where that is
# exact); for a control, ``measured`` is its distance from the correct computation there and
# ``baseline`` the bound it must stay within. Small sizes, float64 unless said, CPU, seconds.


CFG = Config()  # D=48, H=4, F=192


def _dist(a, b):
    """max |a - b|; inf where either is not finite."""
    a, b = a.detach().double(), b.detach().double()
    if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
        return math.inf
    return float((a - b).abs().max())


def _pair(make, mistake, dtype=torch.float64):
    torch.manual_seed(0)
    right = make(None).to(dtype).eval()
    wrong = make(mistake).to(dtype).eval()
    wrong.load_state_dict(right.state_dict(), strict=False)
    return right, wrong


def _raises(fn):
    try:
        fn()
    except Exception:
        return True
    return False


def _x(*shape, scale=1.0, seed=1, dtype=torch.float64):
    return scale * torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _pad(lengths, t, left=False):
    pad = torch.arange(t)[None] < torch.tensor(lengths)[:, None]
    return pad.flip(-1) if left else pad


def _attn_pair(mistake, p=0.0, dtype=torch.float64):
    return _pair(lambda m: RegimeAttention(48, 4, p, m), mistake, dtype)


def ex_pe_cached():
    m = CachedPE(48)
    m(_x(2, 3, 48))
    return "T=3 then T=7", math.inf if _raises(lambda: m(_x(2, 7, 48))) else 0.0, 0.0


def ex_mask_cached():
    right, wrong = _pair(lambda m: PostLNEncoderLayer(CFG, m), "mask_cached_by_length")
    x = _x(3, 7, 48, scale=0.1)
    with torch.no_grad():
        wrong(x, _pad([7, 3, 5], 7))
        b = _pad([7, 6, 2], 7)
        return "two calls, same T, other padding", _dist(wrong(x, b)[b], right(x, b)[b]), 0.0


def ex_causal_buffer():
    m = CachedCausalBlock(48, 4, 192, dropout=0.0, batch_first=True).double().eval()
    with torch.no_grad():
        m(_x(2, 3, 48), _pad([3, 2], 3))
        return "T=3 then T=7", math.inf if _raises(lambda: m(_x(2, 7, 48), _pad([7, 5], 7))) else 0.0, 0.0


def ex_kv_cache():
    torch.manual_seed(0)
    model = Decoder(12, 48, 4, 2, 0.0, block=SimpleDecoderLayer).double().eval()
    gen = torch.Generator().manual_seed(3)
    worst = 0.0
    with torch.no_grad():
        for _ in range(2):  # two sequences, one module
            ys = torch.randint(2, 12, (2, 6), generator=gen)
            state = _sticky_prepare(model, {}, True)
            for k in range(1, 7):
                cached = _sticky_step(model, state, ys[:, :k])
                worst = max(worst, _dist(cached, model(ys[:, :k], None)[:, -1].log()))
    return "second cached session", worst, 0.0


def ex_pad_flip():
    m = PostLNEncoderLayer(CFG, "pad_flip_inplace").double().eval()
    pad = _pad([7, 3, 5], 7)
    before = pad.clone()
    with torch.no_grad():
        m(_x(3, 7, 48, scale=0.1), pad)
    return "the caller's pad mask after the call (entries changed)", float((pad != before).sum()), 0.0


def ex_target_filled():
    logits, target = _x(8, 11), torch.tensor([3, 4, 5, 6, 7, 0, 0, 0])
    before = target.clone()
    F.cross_entropy(logits, target.masked_fill_(target == 0, -100), label_smoothing=0.1)
    return "the caller's target after the call (entries changed)", float((target != before).sum()), 0.0


def ex_query_scaled():
    right, wrong = _attn_pair("query_scaled_inplace")
    x, mask = _x(3, 7, 48), _pad([7, 3, 5], 7)[:, None, :].expand(3, 7, 7)
    with torch.no_grad():
        xr, xw = x.clone(), x.clone()
        d = _dist(wrong(xw, xw, xw, mask), right(xr, xr, xr, mask))
    return "no-grad eval, query is key is value", max(d, _dist(xw, x)), 0.0


def ex_softmax_no_max():
    right, wrong = _attn_pair("softmax_no_max", dtype=torch.float32)
    x, mask = _x(3, 7, 48, scale=12.0, dtype=torch.float32), _pad([7, 3, 5], 7)[:, None, :].expand(3, 7, 7)
    with torch.no_grad():
        return "float32, inputs x12 (logits in the hundreds)", _dist(wrong(x, x, x, mask), right(x, x, x, mask)), 0.0


def ex_log_softmax_loss():
    logits = _x(12, 11, scale=50.0, dtype=torch.float32)
    target = torch.tensor([2, 3, 4, 5, 6, 7, 8, 9, 10, 0, 0, 1])
    i = {"logits": logits, "target": target, "pad_idx": 0, "smoothing": 0.1}
    ref = F.cross_entropy(logits, target, ignore_index=0, label_smoothing=0.1)
    return "float32 logits of std 50", _dist(_log_softmax_loss(i), ref), 0.0


def ex_flash_no_rescale():
    right, wrong = _attn_pair("flash_no_rescale")
    q, kv = _x(2, 5, 48), _x(2, 100, 48, seed=2)
    mask = torch.ones(2, 5, 100, dtype=torch.bool)
    with torch.no_grad():
        return "S = 100 (two key blocks)", _dist(wrong(q, kv, kv, mask), right(q, kv, kv, mask)), 0.0


def ex_pad_from_lengths():
    right, wrong = _pair(lambda m: PostLNEncoderLayer(CFG, m), "pad_from_lengths")
    x, pad = _x(3, 7, 48, scale=0.1), _pad([7, 3, 5], 7, left=True)
    with torch.no_grad():
        return "left padding", _dist(wrong(x, pad)[pad], right(x, pad)[pad]), 0.0


def ex_fused_query_is_key():
    right, wrong = _attn_pair("fused_query_is_key")
    x, v, mask = _x(3, 7, 48), _x(3, 7, 48, seed=2), _pad([7, 3, 5], 7)[:, None, :].expand(3, 7, 7)
    with torch.no_grad():
        return "query = key != value", _dist(wrong(x, x, v, mask), right(x, x, v, mask)), 0.0


def ex_pad_idx_zero():
    m = ZeroPadEmbedding(12, 48).double()
    tokens = torch.tensor([[3, 4, 0, 5, 5], [6, 7, 8, 5, 5]])  # pad_idx 5; 0 is a real token here
    right = m.weight[tokens].masked_fill((tokens == 5)[..., None], 0.0)
    return "pad_idx 5", _dist(m(tokens, 5), right), 0.0


def ex_mask_pad_zero():
    tokens = torch.tensor([[3, 4, 0, 5, 5], [6, 7, 8, 5, 5]])
    return "pad_idx 5 (entries wrong)", float((_pad_mask_zero(tokens, 5) != (tokens != 5)).sum()), 0.0


def ex_lr_factor():
    i = {"d_model": 48, "warmup": 400, "factor": 2.0, "steps": 50}
    wrong = _rates(i, lambda s, d, f, w: d ** (-0.5) * min(s ** (-0.5), s * w ** (-1.5)))
    right = _rates(i, lambda s, d, f, w: f * d ** (-0.5) * min(s ** (-0.5), s * w ** (-1.5)))
    return "factor 2 (max relative error)", float(((wrong - right) / right).abs().max()), 0.0


def ex_eval_fast_path():
    right, wrong = _attn_pair("eval_fast_path")
    x, mask = _x(3, 7, 48), _pad([7, 3, 5], 7)[:, None, :].expand(3, 7, 7)
    with torch.no_grad():
        return "no-grad eval, key padding", _dist(wrong(x, x, x, mask), right(x, x, x, mask)), 0.0


def _mean_gap(right, wrong, call, k=400):
    """max |mean of k train outputs - eval output|, for the wrong variant and the right one."""
    gaps = []
    for m in (wrong, right):
        with torch.no_grad():
            m.eval()
            base = call(m)
            m.train()
            torch.manual_seed(5)
            mean = sum(call(m) for _ in range(k)) / k
            m.eval()
        gaps.append(_dist(mean, base))
    return gaps


def ex_dropout_on_scores():
    right, wrong = _attn_pair("dropout_on_scores", p=0.5)
    x, mask = _x(3, 7, 48, scale=4.0), _pad([7, 3, 5], 7)[:, None, :].expand(3, 7, 7)
    w, r = _mean_gap(right, wrong, lambda m: m(x, x, x, mask))
    return "p=0.5, inputs x4: mean of 400 train calls vs eval", w, r


def ex_dropout_whole_residual():
    cfg = CFG.replace(dropout=0.5)
    right, wrong = _pair(lambda m: PostLNEncoderLayer(cfg, m), "dropout_whole_residual")
    for m in (right, wrong):  # both sublayers output zero: only the residual stream is left
        for p in (m.self_attn.out_proj.weight, m.self_attn.out_proj.bias, m.linear2.weight, m.linear2.bias):
            p.data.zero_()
    x, pad = _x(3, 7, 48, scale=0.1), _pad([7, 3, 5], 7)
    gaps = []
    for m in (wrong, right):
        with torch.no_grad():
            base = m.eval()(x, pad)
            torch.manual_seed(5)
            gaps.append(_dist(m.train()(x, pad), base))
    return "p=0.5, sublayers zeroed: train vs eval", gaps[0], gaps[1]


def _dropped_fraction(m, x, k=50):
    """Fraction of the hidden units live before dropout that the dropout zeroed (train)."""
    seen = []
    m.w2.register_forward_pre_hook(lambda mod, args: seen.append(args[0]))
    live = F.relu(m.w1(x)) != 0
    m.train()
    torch.manual_seed(5)
    with torch.no_grad():
        for _ in range(k):
            m(x)
    m.eval()
    return float(sum(((h == 0) & live).sum() for h in seen) / (live.sum() * k))


def ex_dropout_rate():
    x = _x(3, 7, 48)
    torch.manual_seed(0)
    wrong, right = FFN(48, 192, 0.5, "hardcoded_rate").double(), FFN(48, 192, 0.5).double()
    return ("config p=0.5: |dropped fraction - p|", abs(_dropped_fraction(wrong, x) - 0.5),
            abs(_dropped_fraction(right, x) - 0.5))


def _half_err(make, mistake, call, dtype=torch.bfloat16):
    right64, wrong = _pair(make, mistake)
    right = make(None).eval()
    right.load_state_dict(right64.state_dict())
    with torch.no_grad():
        ref = call(right64, torch.float64)
        return _dist(call(wrong.to(dtype), dtype), ref), _dist(call(right.to(dtype), dtype), ref)


def ex_half_zero():
    x, mask = _x(3, 7, 48), _pad([7, 3, 5], 7)[:, None, :].expand(3, 7, 7)
    w, r = _half_err(lambda m: RegimeAttention(48, 4, 0.0, m), "half_zero_after_softmax",
                     lambda m, dt: m(x.to(dt), x.to(dt), x.to(dt), mask))
    return "bfloat16: error vs float64 (baseline: the right variant in bfloat16)", w, r


def ex_finfo_eps():
    x = _x(3, 7, 1, scale=0.5) + _x(3, 7, 48, scale=0.1, seed=2)
    w, r = _half_err(lambda m: LayerNorm(48, m), "finfo_eps", lambda m, dt: m(x.to(dt)))
    return "bfloat16: error vs float64 (baseline: the right variant in bfloat16)", w, r


def ex_greedy_newest():
    torch.manual_seed(0)
    model = TorchSeq2Seq(CFG.replace(dropout=0.0), norm_first=False, eps=1e-5, final_norm=False, scale=False)
    model = model.double().eval()
    src = torch.randint(2, CFG.vocab, (2, 5), generator=torch.Generator().manual_seed(1))
    ys = torch.randint(2, CFG.vocab, (2, 4), generator=torch.Generator().manual_seed(2))
    state = _seq2seq_prepare(model, {"src": src, "pad_idx": 0}, False)
    with torch.no_grad():
        full = model.decode(ys, state["memory"], state["src_pad"])[:, -1]
        newest = model.decode(ys[:, -1:], state["memory"], state["src_pad"])[:, -1]
    return "log-probabilities after a 4-token prefix", _dist(newest, full), 0.0


def ex_no_affine():
    wrong, right = PostLNEncoderLayer(CFG, "no_affine"), PostLNEncoderLayer(CFG)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    return "learnable parameters missing (the norms' gains and biases)", float(count(right) - count(wrong)), 0.0


def ex_ctl_flash():
    right, ctl = _attn_pair("flash_rescaled")
    q, kv = _x(2, 5, 48), _x(2, 200, 48, seed=2)
    mask = torch.rand(2, 5, 200, generator=torch.Generator().manual_seed(3)) < 0.7
    with torch.no_grad():
        return "S = 200, random mask, float64", _dist(ctl(q, kv, kv, mask), right(q, kv, kv, mask)), 1e-12


def ex_ctl_declared():
    right, ctl = _pair(lambda m: PostLNEncoderLayer(CFG, m), "no_affine")  # right's norms at their init
    x, pad = _x(3, 7, 48, scale=0.1), _pad([7, 3, 5], 7)
    with torch.no_grad():
        gap = _dist(ctl(x, pad), right(x, pad))
    return "against nn.LayerNorm at gain 1, bias 0 (bound: float64 rounding)", gap, 1e-12


def ex_ctl_rand_like():
    torch.manual_seed(0)
    x = _x(3, 7, 48)
    m = FFN(48, 192, 0.5, "rand_like").double()
    n = float((F.relu(m.w1(x)) != 0).sum()) * 50
    return ("p=0.5: |dropped fraction - p| (bound: 4 binomial sd)", abs(_dropped_fraction(m, x) - 0.5),
            4 * math.sqrt(0.25 / n))


def ex_ctl_float32():
    torch.manual_seed(0)
    m = LayerNorm(48, "float32_internal").double()
    x = _x(3, 7, 1, scale=0.5) + _x(3, 7, 48, scale=0.1, seed=2)
    ref = F.layer_norm(x, (48,), m.weight, m.bias, 1e-5)
    return "float64 input: error vs float64 LayerNorm (bound: float32 tolerance)", _dist(m(x), ref), 1e-5


def ex_ctl_lr():
    i = {"d_model": 48, "warmup": 400, "factor": 1.0, "steps": 1200}
    ctl = _rates(i, lambda s, d, f, w: f * min(s ** (-0.5), s * w ** (-1.5)) * (1.0 / math.sqrt(d)))
    right = _rates(i, lambda s, d, f, w: f * d ** (-0.5) * min(s ** (-0.5), s * w ** (-1.5)))
    return ("1200 rates: max relative difference (bound: 4 ulp)", float(((ctl - right) / right).abs().max()),
            4 * 2.0 ** -52)


EXHIBITS = {
    "rg_pe_cached_first_len": ex_pe_cached, "rg_mask_cached_by_length": ex_mask_cached,
    "rg_causal_buffer_first_T": ex_causal_buffer, "rg_kv_cache_not_reset": ex_kv_cache,
    "rg_pad_flipped_inplace": ex_pad_flip, "rg_target_filled_inplace": ex_target_filled,
    "rg_query_scaled_inplace": ex_query_scaled, "rg_softmax_no_max": ex_softmax_no_max,
    "rg_log_softmax_loss": ex_log_softmax_loss, "rg_flash_no_rescale": ex_flash_no_rescale,
    "rg_pad_from_lengths": ex_pad_from_lengths, "rg_fused_query_is_key": ex_fused_query_is_key,
    "rg_pad_idx_zero": ex_pad_idx_zero, "rg_mask_pad_zero": ex_mask_pad_zero, "rg_lr_ignores_factor": ex_lr_factor,
    "rg_eval_fast_path_drops_padding": ex_eval_fast_path, "rg_dropout_on_scores": ex_dropout_on_scores,
    "rg_dropout_whole_residual": ex_dropout_whole_residual, "rg_dropout_hardcoded_rate": ex_dropout_rate,
    "rg_half_zero_after_softmax": ex_half_zero, "rg_norm_finfo_eps": ex_finfo_eps,
    "rg_greedy_newest_token": ex_greedy_newest, "rg_layer_norm_no_affine": ex_no_affine,
    "ctl_flash_rescaled": ex_ctl_flash, "ctl_rand_like_dropout": ex_ctl_rand_like,
    "ctl_float32_internal": ex_ctl_float32, "ctl_lr_sqrt_last": ex_ctl_lr, "ctl_layer_norm_declared": ex_ctl_declared,
}


def run_exhibit(vid):
    """``EXHIBITS[vid]()`` on one intra-op thread (small tensors: threads only contend)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return EXHIBITS[vid]()
    finally:
        torch.set_num_threads(threads)
