"""Deliberately wrong LLaMA-style blocks, models and caches, each declaring the traits of a
correct one. The variants are loaded inside ``harness.registry.scratch()`` by
tests/test_llama_model.py; the wrong decodings are swapped in for ``llama_model`` there.
``WRONG`` maps each variant id to its mistake; ``WRONG_STEPS`` names each decoding step.
``model_positions_counted`` is the control beside the packed-row mistakes (not in ``WRONG``)."""

import torch

from harness import Param, register, register_decoding
from variants.llama import (
    BLOCK,
    MISTRAL_WINDOW,
    LlamaBlock,
    LlamaModel,
    _pad_upto,
    block_map,
    call_block,
    call_model,
    llama_prepare,
    llama_step,
    model_map,
    positions_of,
)

WRONG = {
    "wrong_block_post_norm": "RMSNorm after each residual add (post-norm) declared pre-norm",
    "wrong_model_tied_as_untied": "head tied to the embedding, declared untied",
    "wrong_model_untied_as_tied": "a head of its own, declared tied to the embedding",
    "wrong_model_rope_layout": "Meta's interleaved RoPE on half-split q/k rows (no RopePermuted)",
    "wrong_window_in_the_call": "the sliding window counted from the call's first query, not from its "
                                "position after the cache (right in a full forward: only decoding shows it)",
    "wrong_model_positions_of_row_0": "positions restarting where row 0's sequences start, in every row: "
                                      "not per row (right in unpacked rows: only packed rows cut elsewhere "
                                      "show it)",
    "wrong_model_segments_ignored": "one causal mask over the whole row: a packed sequence attends to the ones "
                                    "before it (only a packed row shows it)",
}


class PostNormBlock(LlamaBlock):
    def forward(self, x, mask, positions, cache=None):
        x = self.attn_norm(x + self.self_attn(x, x, x, mask, positions, positions, cache=cache))
        return self.ffn_norm(x + self.mlp(x))


register(id="wrong_block_post_norm", family="llama_block", source="test", build=PostNormBlock,
         call=call_block, param_map=block_map(), traits=BLOCK)
register(id="wrong_model_tied_as_untied", family="llama_model", source="test",
         build=lambda cfg: LlamaModel(cfg, tied=True), call=call_model, param_map=model_map(tied=True),
         traits={**BLOCK, "tied_output": False})


def _untied_read_as_tied(cfg):
    """The untied model's map: its own head is the canonical head. Declared tied, the forward
    agrees (the canonical head is drawn equal to the embedding); the gradients cannot."""
    return {**model_map()(cfg), "head.weight": Param("head.weight")}


register(id="wrong_model_untied_as_tied", family="llama_model", source="test",
         build=lambda cfg: LlamaModel(cfg), call=call_model, param_map=_untied_read_as_tied,
         traits={**BLOCK, "tied_output": True})
register(id="wrong_model_rope_layout", family="llama_model", source="test",
         build=lambda cfg: LlamaModel(cfg, block=lambda c: LlamaBlock(c, rope="interleaved")), call=call_model,
         param_map=model_map(), traits={**BLOCK, "tied_output": False})


def restarting(segments: torch.Tensor) -> torch.Tensor:
    """(B, L) positions restarting at 0 where the segment id changes."""
    idx = torch.arange(segments.shape[-1]).expand_as(segments)
    new = torch.ones_like(segments, dtype=torch.bool)
    new[..., 1:] = segments[..., 1:] != segments[..., :-1]
    return idx - torch.where(new, idx, 0).cummax(-1).values


class PositionsCounted(LlamaModel):
    """Positions counted along the row, not restarting: a control (RoPE reads only the
    distances within a sequence, and the mask keeps each sequence to itself)."""

    def forward(self, tokens, pad, positions, cache=None, segments=None):
        return super().forward(tokens, pad, torch.arange(tokens.shape[1]).expand_as(tokens), cache, segments)


class PositionsOfRowZero(LlamaModel):
    def forward(self, tokens, pad, positions, cache=None, segments=None):
        return super().forward(tokens, pad, restarting(segments[:1]).expand_as(tokens), cache, segments)


class SegmentsIgnored(LlamaModel):
    def forward(self, tokens, pad, positions, cache=None, segments=None):
        return super().forward(tokens, pad, positions, cache)


for vid, model in (("wrong_model_positions_of_row_0", PositionsOfRowZero),
                   ("wrong_model_segments_ignored", SegmentsIgnored), ("model_positions_counted", PositionsCounted)):
    register(id=vid, family="llama_model", source="test", build=model, call=call_model, param_map=model_map(),
             traits={**BLOCK, "tied_output": False, "cases": ("left_pad", "packed")})


class WindowInTheCall(LlamaModel):
    def dense_mask(self, keys, n, past, segments=None):
        rows = torch.arange(n)[:, None]
        cols = torch.arange(past + n)[None, :]
        window = (cols - past >= rows - self.window[0]) & (cols - past <= rows + self.window[1])
        mask = (cols <= rows + past)[None] & keys[:, None, :] & (window | (cols < past))[None]
        return mask if segments is None else mask & (segments[:, :, None] == segments[:, None, :])


register(id="wrong_window_in_the_call", family="llama_model", source="test",
         build=lambda cfg: WindowInTheCall(cfg, window=MISTRAL_WINDOW), call=call_model, param_map=model_map(),
         traits={**BLOCK, "tied_output": False, "window": MISTRAL_WINDOW})
register_decoding("llama_model", "wrong_window_in_the_call", prepare=llama_prepare, step=llama_step,
                  cache="rotated k and v per layer", padding=("right", "left"))


def step_without_offset(model, state, ys):
    """The cache's new tokens turned at 0..n-1 of the call, not after what it holds."""
    k = ys.shape[1]
    pad = _pad_upto(state["pad"], k)
    if state["cache"] is None:
        return model(ys, pad, positions_of(pad))[:, -1]
    fed, state["fed"] = state["fed"], k
    return model(ys[:, fed:], pad[:, fed:], positions_of(pad[:, fed:]), cache=state["cache"])[:, -1]


def step_ignoring_left_pad(model, state, ys):
    """The prefill masks its left padding, then the cache forgets which keys were pads: each
    later call attends to every cached key."""
    cache = state["cache"]
    if cache is not None and cache.pad is not None:
        cache.pad = cache.pad.new_ones(cache.pad.shape)
    return llama_step(model, state, ys)


WRONG_STEPS = {"step_without_offset": step_without_offset, "step_ignoring_left_pad": step_ignoring_left_pad}
