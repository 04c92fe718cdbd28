"""Ports with the classic porting mistakes, each declaring the traits of the correct port
it imitates; loaded inside ``harness.registry.scratch()`` (with examples/checkpoint_ports.py)
by tests/test_checkpoint_parity.py. ``WRONG`` maps each id to the checkpoint class it is a
port of, and the mistake ``parity`` must name; ``step_without_offset`` is a decoding
mistake (a port whose full forward is right)."""

from checkpoint_models import GEMMA2, Gemma2Model, gemma2_map, needs

from harness import register, register_decoding
from variants.llama import (
    BLOCK,
    CACHE,
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

WRONG = {
    "llama_kv_tiled": ("llama", "K/V heads tiled"),
    "gemma2_gain_w": ("gemma2", "norm gain 1 + w read as w"),
    "gemma2_no_embed_scale": ("gemma2", "embedding scale missing"),
    "gemma2_untied": ("gemma2", "untied head left at its init"),
}


class TiledBlock(LlamaBlock):
    """K/V heads repeated with ``repeat`` (query head h reads K/V head h mod H_kv)."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.self_attn = LlamaAttention(cfg, gqa="tile")


register(id="llama_kv_tiled", family="llama_model", source="test", build=lambda cfg: LlamaModel(cfg, block=TiledBlock),
         call=call_model, param_map=model_map(), traits={**BLOCK, "tied_output": False})
register(id="gemma2_gain_w", family="llama_model", source="test",
         build=lambda cfg: Gemma2Model(cfg, gemma_gain=False), call=call_model, param_map=gemma2_map(),
         traits=GEMMA2, supports=needs("sandwich_norms", "Gemma 2"))
register(id="gemma2_no_embed_scale", family="llama_model", source="test",
         build=lambda cfg: Gemma2Model(cfg, embed_scale=False), call=call_model, param_map=gemma2_map(),
         traits=GEMMA2, supports=needs("sandwich_norms", "Gemma 2"))
register(id="gemma2_untied", family="llama_model", source="test",
         build=lambda cfg: Gemma2Model(cfg, tied=False), call=call_model, param_map=gemma2_map(tied=False),
         traits=GEMMA2, supports=needs("sandwich_norms", "Gemma 2"))
for vid in WRONG:
    register_decoding("llama_model", vid, prepare=llama_prepare, step=llama_step, cache=CACHE)


def step_without_offset(model, state, ys):
    """A cached step whose new tokens turn at 0..n-1 of the call, not after what the cache
    holds (a port's decoding mistake: its full forward is right)."""
    k = ys.shape[1]
    pad = _pad_upto(state["pad"], k)
    if state["cache"] is None:
        return model(ys, pad, positions_of(pad))[:, -1]
    fed, state["fed"] = state["fed"], k
    return model(ys[:, fed:], pad[:, fed:], positions_of(pad[:, fed:]), cache=state["cache"])[:, -1]
