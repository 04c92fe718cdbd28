"""PyTorch's own behaviour on some devices and dtypes, declared once for every variant that
calls the kernels concerned (``traits['path_findings']``: a finding, not a contradiction,
and only where it holds: on the CPU these cases stay held to the spec).
docs/gpu-known-behaviour.md gives the evidence for each.

- ``GELU_FAST_PATH``: ``nn.TransformerEncoderLayer(activation="gelu")`` in eval mode under
  ``torch.no_grad()`` with an even head count takes ``torch._transformer_encoder_layer_fwd``,
  which runs the FFN's first Linear and its activation as one
  ``_addmm_activation(use_gelu=True)``. Its CUDA kernel applies the tanh approximation of
  GELU (cuBLASLt's GELU epilogue, or ``gelu(approximate="tanh")`` where the epilogue is not
  used); its CPU kernel and the autograd path apply the exact erf GELU. Measured on CPU:
  the layer with a tanh GELU reproduces the CUDA no-grad figures to four digits. ReLU is
  exact on both.
- ``SDPA_HALF_FULLY_MASKED``: ``F.scaled_dot_product_attention`` on CUDA tensors in
  bfloat16/float16 with a head width the fused kernels take (a multiple of 8: d_k = 16 in
  the ``one_head`` config; d_k = 12 elsewhere falls back to the math backend) picks a fused
  backend whose row without any visible key is not the math backend's zeros (SDPA's safe
  softmax). float32 (no cuDNN attention) and float64 (math) give the zeros.
"""

from __future__ import annotations

from harness import PathFinding

GELU_FAST_PATH = PathFinding(
    "the CUDA no-grad fast path (_transformer_encoder_layer_fwd) computes GELU with its tanh "
    "approximation (_addmm_activation's CUDA kernel); autograd and CPU compute exact GELU",
    devices=("cuda",))

SDPA_HALF_FULLY_MASKED = PathFinding(
    "SDPA on CUDA in half precision with d_k a multiple of 8 runs a fused backend whose row "
    "without a visible key is not the math backend's zeros",
    devices=("cuda",), dtypes=("bfloat16", "float16"))
