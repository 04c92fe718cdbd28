"""Checking a module from a library: a decoder's causal self-attention that takes no mask.

The module below is written the way LLaMA-style libraries write their attention
(HF ``LlamaAttention`` without rotary embeddings, or a GPT block without padding): it
takes one tensor ``x``, projects it with four bias-free Linear layers named ``q_proj``,
``k_proj``, ``v_proj``, ``o_proj``, and applies the causal mask itself
(``scaled_dot_product_attention(..., is_causal=True)``). It is written out here so the
example needs no third-party package; a real one is registered the same way, with
``build=lambda cfg: TheirAttention(their_config(cfg))``.

What differs from the family's interface, and how the registration says it:

- **self-attention only, no mask argument**: the family's call is
  ``(query, key, value, mask)``. The adapter passes ``query`` alone and refuses inputs
  where key or value differ from it; ``traits["cases"]`` lists the one family case it can
  honour, ``causal_only`` (query = key = value, a causal mask and nothing else). The
  other cases (padding, cross-attention, fully masked rows) are not run for it.
- **no biases**: the canonical q/k/v/o biases map to ``Zero()``; every comparison then
  runs with those biases at zero on both sides, and porting refuses a non-zero one.

    python -m harness check --family attention --variants examples/causal_self_attention.py
    pytest --variants examples/causal_self_attention.py -k causal_sa
"""

import torch
import torch.nn.functional as F
from torch import nn

from harness import Param, Zero, register


class CausalSelfAttention(nn.Module):
    """x (B, T, D) -> (B, T, D); position t attends to positions <= t; no bias."""

    def __init__(self, hidden_size: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.q_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.k_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.v_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.o_proj = nn.Linear(hidden_size, hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(B, T, self.num_heads, D // self.num_heads).transpose(1, 2)  # (B, H, T, d_k)

        out = F.scaled_dot_product_attention(heads(self.q_proj(x)), heads(self.k_proj(x)),
                                             heads(self.v_proj(x)), is_causal=True)  # (B, H, T, d_k)
        return self.o_proj(out.transpose(1, 2).reshape(B, T, D))


def self_attention_only(module: CausalSelfAttention, inputs) -> torch.Tensor:
    """The family's (query, key, value, mask) -> the module's (x): only when they agree."""
    query = inputs["query"]
    if inputs["key"] is not query or inputs["value"] is not query:
        raise ValueError("CausalSelfAttention is self-attention only: key and value must be the query")
    return module(query)


register(
    id="causal_sa",
    family="attention",
    source="examples/causal_self_attention.py",
    summary="LLaMA-style q/k/v/o_proj, bias-free, causal inside, no mask argument",
    build=lambda cfg: CausalSelfAttention(cfg.d_model, cfg.heads),
    call=self_attention_only,
    param_map={
        "q.weight": Param("q_proj.weight"), "q.bias": Zero(),
        "k.weight": Param("k_proj.weight"), "k.bias": Zero(),
        "v.weight": Param("v_proj.weight"), "v.bias": Zero(),
        "o.weight": Param("o_proj.weight"), "o.bias": Zero(),
    },
    traits={"sublayer": "attention", "cases": ["causal_only"],
            "note": "self-attention only, no mask argument: causal inside",
            # SDPA's behaviour on a row with no key (never reached with is_causal=True)
            "fully_masked_row": "zeros", "bias": False,
            "mask_convention": "none: causal inside (is_causal=True)", "fill": "sdpa"},
)
