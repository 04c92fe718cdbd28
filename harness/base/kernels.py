"""The operators that tell which kernel path ran: one list, read by the run recorder
(``check``, which names a path after the fused kernels) and by the profiler (``bench``,
which also records the softmax and mask ops around them)."""

from __future__ import annotations

# Fused kernels: a torch module's fast path shows itself by one of these.
PATH_MARKERS = (
    "_native_multi_head_attention",
    "_transformer_encoder_layer_fwd",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_attention_math",
    "_masked_softmax",
)

# What the profiler records (matched anywhere in the call tree): the fused kernels, the flash
# backward, and the explicit softmax and mask fills of a path without a fused kernel.
PATH_OPS = tuple(f"aten::{op}" for op in (
    *PATH_MARKERS,
    "_scaled_dot_product_flash_attention_for_cpu_backward",
    "_softmax",
    "masked_fill",
    "masked_fill_",
))
