"""Deliberately wrong LLaMA-style blocks, models and caches, each declaring the traits of a
correct one. The variants are loaded inside ``harness.registry.scratch()`` by
tests/test_llama_model.py; the wrong decodings are swapped in for ``llama_model`` there.
``WRONG`` maps each variant id to its mistake; ``WRONG_STEPS`` names each decoding step."""

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


class WindowInTheCall(LlamaModel):
    def dense_mask(self, keys, n, past):
        rows = torch.arange(n)[:, None]
        cols = torch.arange(past + n)[None, :]
        window = (cols - past >= rows - self.window[0]) & (cols - past <= rows + self.window[1])
        return (cols <= rows + past)[None] & keys[:, None, :] & (window | (cols < past))[None]


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
