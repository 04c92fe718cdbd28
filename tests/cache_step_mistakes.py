"""Cache mistakes that the cached and uncached paths of ``step`` share, or that show only on
a call feeding several tokens: two sessions against re-running the prefix agree on each, so
only the parity with the full forward (each padding side, each schedule) catches them.

- ``step_positions_from_cache_length``: a call's tokens are placed from the cache's length
  on, not counted over the real tokens (right on right padding, wrong on left);
- ``step_forgets_pad_mask``: every call attends to the left padding, cached or not;
- ``step_returns_first_of_call``: a call feeding several tokens returns its first position;
- ``step_control``: the same step, right.
"""

import torch

from harness import register, register_decoding
from variants.llama import BLOCK, LlamaModel, _pad_upto, call_model, llama_prepare, model_map, positions_of


def make_step(mistake: str | None):
    def step(model, state, ys):
        k = ys.shape[1]
        pad = _pad_upto(state["pad"], k)
        if mistake == "pad":
            pad = torch.ones_like(pad)
        positions = positions_of(pad)
        if state["cache"] is None:
            return model(ys, pad, positions)[:, -1]
        fed, state["fed"] = state["fed"], k
        new = positions[:, fed:]
        if mistake == "positions" and fed > 0:
            new = torch.arange(fed, k)[None].expand(ys.shape[0], -1)
        out = model(ys[:, fed:], pad[:, fed:], new, cache=state["cache"])
        return out[:, 0] if mistake == "first" else out[:, -1]
    return step


for vid, mistake in (("step_positions_from_cache_length", "positions"), ("step_forgets_pad_mask", "pad"),
                     ("step_returns_first_of_call", "first"), ("step_control", None)):
    register(id=vid, family="llama_model", source=__file__, summary=vid.replace("_", " "),
             build=lambda cfg: LlamaModel(cfg), call=call_model, param_map=model_map(),
             traits={**BLOCK, "tied_output": False})
    register_decoding("llama_model", vid, prepare=llama_prepare, step=make_step(mistake),
                      cache="rotated k and v per layer, and the pad mask", padding=("right", "left"))
