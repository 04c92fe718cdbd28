"""Declarations no default case reaches, loaded inside ``harness.registry.scratch()`` by
tests/test_reach.py: a window of 8192 deleted from its module (too wide for a case of its
own: reported as not exercised), windows of 4096 and 16 deleted (caught on the case added to
reach them) and 16 kept (the control: clean, nothing reported), a soft cap of 1e6 deleted
(caught on inputs scaled to reach it), a cap of 1e20 and a dynamic NTK scaling from 100000
positions (reported); a kernel whose built-in cap of 1e20 is dropped (reported)."""

from harness import RopeScaling, register, register_kernel
from variants.kernels import eager
from variants.llama import LLAMA, LlamaAttention, attention_map, call

DYNAMIC = RopeScaling("dynamic", factor=2.0, max_positions=100_000)
CASES = ("causal", "window", "decode")


def _own_window(window):
    def called(m, i):
        return m(i["query"], i["key"], i["value"], i["mask"], i["positions"], i["key_positions"], window)
    return called


register(id="window8192_deleted", family="attention", source="test",
         build=lambda cfg: LlamaAttention(cfg), call=call, param_map=attention_map(),
         traits={**LLAMA, "window": (8191, 0), "window_diagonal": "bottom_right", "cases": CASES})
register(id="window4096_deleted", family="attention", source="test",
         build=lambda cfg: LlamaAttention(cfg), call=call, param_map=attention_map(),
         traits={**LLAMA, "window": (4095, 0), "window_diagonal": "bottom_right", "cases": CASES})
register(id="window16_deleted", family="attention", source="test",
         build=lambda cfg: LlamaAttention(cfg), call=call, param_map=attention_map(),
         traits={**LLAMA, "window": (15, 0), "window_diagonal": "bottom_right", "cases": CASES})
register(id="window16", family="attention", source="test",
         build=lambda cfg: LlamaAttention(cfg), call=_own_window((15, 0)), param_map=attention_map(),
         traits={**LLAMA, "window": (15, 0), "cases": ("causal", "window")})
register(id="softcap_1e6_deleted", family="attention", source="test",
         build=lambda cfg: LlamaAttention(cfg), call=call, param_map=attention_map(),
         traits={**LLAMA, "softcap": 1e6, "cases": ("causal",)})
register(id="softcap_1e20", family="attention", source="test",
         build=lambda cfg: LlamaAttention(cfg, softcap=1e20), call=call, param_map=attention_map(),
         traits={**LLAMA, "softcap": 1e20, "cases": ("self", "causal")})
register_kernel(id="kernel_softcap_1e20_deleted", fn=lambda q, k, v, mask, causal=False, window=None, softcap=0.0:
                eager(q, k, v, mask, causal, window, 0.0),
                traits={"causal": "top_left", "mask_method": "bool_fill_-inf", "softcap": 1e20})
register(id="dynamic_ntk_deleted", family="attention", source="test",
         build=lambda cfg: LlamaAttention(cfg), call=call, param_map=attention_map(),
         traits={**LLAMA, "rope_scaling": DYNAMIC, "cases": ("causal", "decode")})
# ALiBi declared as called (flash-attention's alibi_slopes), by a kernel whose call has no such
# option: no case can pass it the slopes, so the declaration is never exercised
register_kernel(id="kernel_alibi_called_untaken", fn=lambda q, k, v, mask, causal=False, window=None:
                eager(q, k, v, mask, causal, window, 0.0),
                traits={"causal": "top_left", "mask_method": "bool_fill_-inf", "alibi": "as called"})
