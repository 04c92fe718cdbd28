"""Three k/v-cache mistakes planted in a LLaMA-style model, each registered with
``register_decoding`` beside a control that decodes right. Every model computes the same full
forward as the project's ``llama_model`` (``check`` finds them equivalent there); only a cached
session shows the mistake.

- ``cache_appends_before_rotating``: the keys go into the cache before RoPE turns them, so a
  later call reads its cached keys unrotated;
- ``cache_positions_off_by_one``: after the prefill, each call's tokens are turned one
  position too far (counted from the cache's length plus one);
- ``cache_not_trimmed_to_window``: a Mistral-style model whose decoding mask leaves the window
  to a rolling cache of the window's length, and whose cache keeps every key;
- ``cache_control``: the same model and cache, decoding right.

    python -m harness check --family llama_model --variants examples/cache_bugs.py
"""

import torch

from harness import register, register_decoding
from variants.llama import (
    BLOCK,
    LlamaAttention,
    LlamaBlock,
    LlamaModel,
    _pad_upto,
    call_model,
    llama_prepare,
    llama_step,
    model_map,
    positions_of,
)

WINDOW = (3, 0)  # Mistral's sliding_window = 4 at the harness's lengths (T = 7)


class AppendBeforeRotating(LlamaAttention):
    """The cache gets this call's keys before RoPE turns them: later calls read them unturned."""

    def forward(self, query, key, value, mask, positions, key_positions, window=None, cache=None):
        if cache is None:
            return super().forward(query, key, value, mask, positions, key_positions, window)
        B, S, _ = key.shape
        raw = self.k_proj(key).view(B, S, self.h_kv, self.d).transpose(1, 2)  # (B, H_kv, S, d), not turned
        seen = {"k": cache["k"], "v": cache["v"]} if "k" in cache else {}
        out = super().forward(query, key, value, mask, positions, key_positions, window, cache=seen)
        cache["k"] = raw if "k" not in cache else torch.cat([cache["k"], raw], dim=2)
        cache["v"] = seen["v"]
        return out


class AppendBlock(LlamaBlock):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.self_attn = AppendBeforeRotating(cfg)


def step_off_by_one(model, state, ys):
    """After the prefill, the new tokens' positions counted one too far."""
    k = ys.shape[1]
    pad = _pad_upto(state["pad"], k)
    if state["cache"] is None:
        return llama_step(model, state, ys)
    fed, state["fed"] = state["fed"], k
    positions = positions_of(pad)[:, fed:] + (1 if fed else 0)
    return model(ys[:, fed:], pad[:, fed:], positions, cache=state["cache"])[:, -1]


class WindowLeftToTheCache(LlamaModel):
    """Decoding (a cache with keys in it) masks no window: a rolling cache of the window's
    length would hold only the keys in it, but this cache keeps every key."""

    def dense_mask(self, keys, n, past, segments=None):
        if past == 0:
            return super().dense_mask(keys, n, past, segments)
        rows = torch.arange(n)[:, None] + past
        cols = torch.arange(past + n)[None, :]
        return (cols <= rows)[None] & keys[:, None, :]


CACHE = "rotated k and v per layer, and the pad mask"
for vid, build, step, window in (
    ("cache_appends_before_rotating", lambda cfg: LlamaModel(cfg, block=AppendBlock), llama_step, None),
    ("cache_positions_off_by_one", lambda cfg: LlamaModel(cfg), step_off_by_one, None),
    ("cache_not_trimmed_to_window", lambda cfg: WindowLeftToTheCache(cfg, window=WINDOW), llama_step, WINDOW),
    ("cache_control", lambda cfg: LlamaModel(cfg, window=WINDOW), llama_step, WINDOW),
):
    register(id=vid, family="llama_model", source=__file__, summary=vid.replace("_", " "), build=build,
             call=call_model, param_map=model_map(),
             traits={**BLOCK, "tied_output": False, "window": window or "none"})
    register_decoding("llama_model", vid, prepare=llama_prepare, step=step, cache=CACHE, padding=("right", "left"))
