"""Attention kernels: functions over projected heads (the ``attention_kernel`` family).

Each is a plain function registered with ``register_kernel``, its layout and mask form as
data; the glue that turns the call's causal flag and window into a mask (``attend_mask``)
is this file's, as it would be a user's. Designs:

- ``eager`` / ``eager_bottom_right``: the explicit definition, softmax(q k^T / sqrt(d))
  v with K/V heads repeated (``repeat_interleave``), a bool mask filled with -inf (a row
  without keys is NaN), dropout on the probabilities; the causal diagonal top-left (the
  family reference) or bottom-right (the last query faces the last real key, as
  flash-attention aligns it with key padding).
- ``sdpa_math``: ``F.scaled_dot_product_attention`` under
  ``sdpa_kernel([SDPBackend.MATH])``, ``enable_gqa=True``, ``is_causal=True`` where no key
  is masked (SDPA's own top-left diagonal), else the mask; rows without keys are zeros
  (SDPA's safe softmax).
- ``sdpa_flash_cpu``: the same under ``SDPBackend.FLASH_ATTENTION``: on CPU
  ``_scaled_dot_product_flash_attention_for_cpu`` (the kernel path column shows it); the
  causal diagonal bottom-right through the mask; no dropout (the fused CPU kernels refuse
  it). Declared CPU-only (``devices``): on CUDA tensors the flash backend is another kernel
  and refuses a mask ("No available kernel"); every command skips it there with that reason.
- ``sdpa_flash``, ``sdpa_efficient``, ``sdpa_cudnn``: the CUDA-only backends (declared
  ``devices``: skipped with that reason elsewhere), each in the dtypes it takes (flash and
  cuDNN float16/bfloat16, efficient also float32: semantics judged in each of them,
  ``harness.check.own_dtype``). Flash: no mask argument (the backend takes none), the causal
  flag as ``is_causal`` (top-left), GQA through ``enable_gqa``; cuDNN the same without
  ``enable_gqa`` (GQA works only for flash and math): the K/V heads repeated by the glue;
  efficient: the bool mask, the K/V heads repeated by the glue.
- ``flex``: ``flex_attention`` with a block mask (``create_block_mask`` over the call's
  mask, causal diagonal and window) and the softcap as a ``score_mod``; eager, without
  torch.compile. Its backward raises NotImplementedError on CPU in torch 2.13, so it is
  skipped with that reason (with a GPU too: its higher-order op breaks under the kernel-path
  recorder); tests/test_kernels.py holds its forward to the oracle on CPU.
- ``flex_compiled``: the same under ``torch.compile`` (the Triton kernels it generates),
  CUDA only, float32, float16 and bfloat16 (judged in each); its path is not recorded (under
  the recorder Dynamo would run it eager).
- ``blocked``: a flash-style kernel in this project's own code: query and key blocks of the
  config's ``block`` size, an online softmax (running max and sum, earlier blocks rescaled
  when the max grows), rows without keys zeros; its own backward (flash-attention's:
  probabilities recomputed per tile from the saved log-sum-exp), checked by gradcheck.
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from harness import DeviceSet, register_kernel

SOURCE = "torch"


def attend_mask(mask: torch.Tensor, causal: bool, window, align: str) -> torch.Tensor:
    """(B, 1, T, S) bool True = may attend: ``mask`` with the causal mask and the window on
    the diagonal ``align`` names (``top_left``: key i for query i; ``bottom_right``: the last
    query faces the last key any query may attend)."""
    B, _, T, S = mask.shape
    offset = torch.zeros(B, dtype=torch.long, device=mask.device)
    if align == "bottom_right":
        keys = torch.arange(S, device=mask.device)
        offset = torch.where(mask.any(-2)[:, 0], keys, -1).max(-1).values - (T - 1)   # (B,)
    rel = (torch.arange(S, device=mask.device)[None, :] - torch.arange(T, device=mask.device)[:, None])
    rel = rel[None, None] - offset[:, None, None, None]                 # (B, 1, T, S) key - diagonal
    keep = mask
    if causal:
        keep = keep & (rel <= 0)
    if window is not None:
        left, right = window
        keep = keep & (rel >= -left) & (rel <= right)
    return keep


def repeat_kv(x: torch.Tensor, heads: int) -> torch.Tensor:
    """(B, H_kv, S, d) -> (B, H, S, d), consecutive query heads per K/V head."""
    return x.repeat_interleave(heads // x.shape[1], dim=1)


def eager(q, k, v, mask, causal=False, window=None, softcap=0.0, dropout_p=0.0, *, align="top_left"):
    """The definition: (B, H, T, d) heads, K/V repeated, -inf fill, softmax, dropout."""
    k, v = repeat_kv(k, q.shape[1]), repeat_kv(v, q.shape[1])         # (B, H, S, d)
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])               # (B, H, T, S)
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    p = s.masked_fill(~attend_mask(mask, causal, window, align), float("-inf")).softmax(-1)
    if dropout_p:
        p = F.dropout(p, dropout_p)
    return p @ v                                                       # (B, H, T, d)


def sdpa(q, k, v, mask, causal=False, window=None, dropout_p=0.0, *, backend=SDPBackend.MATH,
         align="top_left", cuda_only=False):
    """SDPA on one backend; ``is_causal`` where no key is masked (top-left only)."""
    if cuda_only and q.device.type != "cuda":
        raise RuntimeError(f"{backend.name} runs on CUDA only; got {q.device.type} tensors")
    with sdpa_kernel([backend]):
        if causal and window is None and align == "top_left" and bool(mask.all()):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p, enable_gqa=True)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attend_mask(mask, causal, window, align),
                                              dropout_p=dropout_p, enable_gqa=True)


def flex(q, k, v, mask, causal=False, window=None, softcap=0.0, *, compiled=False):
    """flex_attention (eager, or under torch.compile): the mask as a block mask, the softcap
    as a score_mod."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    B, _, T, S = mask.shape
    keep = attend_mask(mask, causal, window, "top_left")[:, 0]          # (B, T, S)
    block_mask = create_block_mask(lambda b, h, i, j: keep[b, i, j], B, None, T, S, device=q.device)
    score_mod = (lambda s, b, h, i, j: softcap * torch.tanh(s / softcap)) if softcap else None
    run = _compiled_flex() if compiled else flex_attention
    return run(q, k, v, score_mod=score_mod, block_mask=block_mask, enable_gqa=True)


@functools.cache
def _compiled_flex():
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


def sdpa_cuda(q, k, v, mask=None, causal=False, dropout_p=0.0, *, backend, gqa="enable_gqa"):
    """One CUDA-only SDPA backend: ``mask`` None (flash, cuDNN: ``is_causal`` only) or the
    call's bool mask with the causal diagonal; GQA by ``enable_gqa`` or K/V heads repeated."""
    if q.device.type != "cuda":
        raise RuntimeError(f"SDPBackend.{backend.name} runs on CUDA only; got {q.device.type} tensors")
    if gqa == "repeat":
        k, v = repeat_kv(k, q.shape[1]), repeat_kv(v, q.shape[1])
    with sdpa_kernel([backend]):
        if mask is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, dropout_p=dropout_p,
                                                  enable_gqa=gqa == "enable_gqa")
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attend_mask(mask, causal, None, "top_left"),
                                              dropout_p=dropout_p)


def _tiles(T: int, S: int, block: int):
    return [(slice(t0, t0 + block), slice(s0, s0 + block)) for t0 in range(0, T, block) for s0 in range(0, S, block)]


def _scores(q, k, keep, softcap, scale):
    """One tile's scores: scaled, soft-capped, masked with -inf; and tanh for the backward."""
    s = q @ k.transpose(-2, -1) * scale                                # (B, H, tb, sb)
    t = torch.tanh(s / softcap) if softcap else None
    if softcap:
        s = softcap * t
    return s.masked_fill(~keep, float("-inf")), t


class BlockedAttention(torch.autograd.Function):
    """Forward: an online softmax over key blocks per query block (running max m and sum l;
    what was accumulated is rescaled by exp(m_old - m_new) when the max grows); saves the
    row's log-sum-exp. Backward: flash-attention's, tile by tile from the saved log-sum-exp:
    P = exp(S - lse), dP = dO V^T, dV = P^T dO, dS = P * (dP - rowsum(P * dP)), dQ = dS K,
    dK = dS^T Q."""

    @staticmethod
    def forward(ctx, q, k, v, keep, softcap, block):
        B, H, T, d = q.shape
        S, scale = k.shape[2], 1.0 / math.sqrt(d)
        m = torch.full((B, H, T, 1), float("-inf"), dtype=q.dtype, device=q.device)  # running max
        l = torch.zeros_like(m)                                         # running sum  # noqa: E741
        acc = q.new_zeros(B, H, T, v.shape[-1])
        for rows, cols in _tiles(T, S, block):
            s, _ = _scores(q[:, :, rows], k[:, :, cols], keep[:, :, rows, cols], softcap, scale)
            m_new = torch.maximum(m[:, :, rows], s.amax(-1, keepdim=True))
            shift = torch.where(torch.isinf(m_new), 0.0, m_new)            # no key yet: shift by 0
            p = torch.exp(s - shift)
            rescale = torch.exp(m[:, :, rows] - shift)                   # earlier blocks, to the new max
            l[:, :, rows] = rescale * l[:, :, rows] + p.sum(-1, keepdim=True)
            acc[:, :, rows] = rescale * acc[:, :, rows] + p @ v[:, :, cols]
            m[:, :, rows] = m_new
        alive = l > 0
        out = acc / torch.where(alive, l, 1.0)                           # a row without keys: zeros
        lse = torch.where(alive, m + torch.log(torch.where(alive, l, 1.0)), float("inf"))
        ctx.save_for_backward(q, k, v, keep, lse)
        ctx.softcap, ctx.block = softcap, block
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, keep, lse = ctx.saved_tensors
        softcap, scale = ctx.softcap, 1.0 / math.sqrt(q.shape[-1])
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        tiles = _tiles(q.shape[2], k.shape[2], ctx.block)

        def p_and_dp(rows, cols):                                       # (B, H, tb, sb) each
            s, t = _scores(q[:, :, rows], k[:, :, cols], keep[:, :, rows, cols], softcap, scale)
            return torch.exp(s - lse[:, :, rows]), d_out[:, :, rows] @ v[:, :, cols].transpose(-2, -1), t

        # rowsum(P * dP), which equals rowsum(dO * O): summed from the products dS uses, so a
        # row with one key sends exactly zero (rowsum(dO * O) leaves a rounding residue there).
        delta = torch.zeros_like(lse)                                   # (B, H, T, 1)
        for rows, cols in tiles:
            p, dp, _ = p_and_dp(rows, cols)
            delta[:, :, rows] += (p * dp).sum(-1, keepdim=True)
        for rows, cols in tiles:
            p, dp, t = p_and_dp(rows, cols)
            dv[:, :, cols] += p.transpose(-2, -1) @ d_out[:, :, rows]
            ds = p * (dp - delta[:, :, rows])
            if softcap:
                ds = ds * (1 - t * t)                                   # d(cap tanh(x / cap)) / dx
            dq[:, :, rows] += ds @ k[:, :, cols] * scale
            dk[:, :, cols] += ds.transpose(-2, -1) @ q[:, :, rows] * scale
        return dq, dk, dv, None, None, None


def blocked(q, k, v, mask, causal=False, window=None, softcap=0.0, block=64):
    """Flash-style: (block x block) tiles, an online softmax, flash-attention's backward."""
    k, v = repeat_kv(k, q.shape[1]), repeat_kv(v, q.shape[1])         # (B, H, S, d)
    keep = attend_mask(mask, causal, window, "top_left").expand(-1, q.shape[1], -1, -1)  # (B, H, T, S)
    return BlockedAttention.apply(q, k, v, keep, softcap, block)      # (B, H, T, d)


# flex_attention eager: skipped (its backward is not implemented on CPU, and on CUDA its
# higher-order op breaks under the kernel-path recorder); flex_compiled judges it on CUDA.
FLEX_EAGER_SKIP = ("flex_attention has no backward on CPU (NotImplementedError in torch 2.13)",
                   "flex_attention eager: its higher-order op breaks under the kernel-path recorder "
                   "(flex_compiled is the one judged on CUDA)")


def _skip(no_gpu: str, with_gpu: str):
    return lambda cfg: with_gpu if torch.cuda.is_available() else no_gpu


SDPA_ROWS = {"fully_masked_row": "zeros", "fully_masked_grad": "none"}  # SDPA's safe softmax
SDPA_ASKS = "sdpa() calls is_causal=True without a mask when no key is masked (mask.all())"

register_kernel(
    id="eager", source=SOURCE, reference=True, summary="explicit softmax, -inf fill, top-left",
    fn=functools.partial(eager, align="top_left"),
    traits={"causal": "top_left", "mask_method": "bool_fill_-inf",
            "dropout_sites": ("attention probabilities",)},
)
register_kernel(
    id="eager_bottom_right", source=SOURCE, summary="explicit softmax, causal diagonal bottom-right",
    fn=functools.partial(eager, align="bottom_right"),
    traits={"causal": "bottom_right", "mask_method": "bool_fill_-inf",
            "dropout_sites": ("attention probabilities",)},
)
register_kernel(
    id="sdpa_math", source=SOURCE, summary="SDPA, math backend, enable_gqa",
    fn=functools.partial(sdpa, backend=SDPBackend.MATH),
    traits={"causal": "top_left", **SDPA_ROWS, "dropout_sites": ("attention probabilities",),
            "note": "backend: SDPBackend.MATH", "data_dependent": SDPA_ASKS},
)
register_kernel(
    id="sdpa_flash_cpu", source=SOURCE, summary="SDPA, flash backend (CPU kernel), bottom-right",
    fn=lambda q, k, v, mask, causal=False, window=None: sdpa(
        q, k, v, mask, causal, window, backend=SDPBackend.FLASH_ATTENTION, align="bottom_right"),
    traits={"causal": "bottom_right", **SDPA_ROWS, "note": "backend: SDPBackend.FLASH_ATTENTION (no dropout on CPU)",
            "data_dependent": SDPA_ASKS},
    devices=DeviceSet(("cpu",), "on CUDA tensors SDPBackend.FLASH_ATTENTION is another kernel "
                                "(half precision only, no arbitrary mask): sdpa_flash"),
)
register_kernel(
    id="sdpa_flash", source=SOURCE, summary="SDPA, FLASH_ATTENTION (CUDA, half precision), is_causal",
    fn=lambda q, k, v, causal=False, dropout_p=0.0: sdpa_cuda(q, k, v, None, causal, dropout_p,
                                                              backend=SDPBackend.FLASH_ATTENTION),
    mask="is_causal", devices=DeviceSet(("cuda",), "SDPBackend.FLASH_ATTENTION is a CUDA kernel"),
    dtypes=("float16", "bfloat16"),
    traits={"causal": "top_left", **SDPA_ROWS, "dropout_sites": ("attention probabilities",),
            "note": "backend: SDPBackend.FLASH_ATTENTION (no mask argument; enable_gqa)"},
)
register_kernel(
    id="sdpa_efficient", source=SOURCE, summary="SDPA, EFFICIENT_ATTENTION (CUDA), bool mask",
    fn=lambda q, k, v, mask, causal=False, dropout_p=0.0: sdpa_cuda(
        q, k, v, mask, causal, dropout_p, backend=SDPBackend.EFFICIENT_ATTENTION, gqa="repeat"),
    devices=DeviceSet(("cuda",), "SDPBackend.EFFICIENT_ATTENTION is a CUDA kernel"),
    dtypes=("float32", "float16", "bfloat16"),
    traits={"causal": "top_left", **SDPA_ROWS, "dropout_sites": ("attention probabilities",),
            "note": "backend: SDPBackend.EFFICIENT_ATTENTION (K/V heads repeated: no enable_gqa)"},
)
register_kernel(
    id="sdpa_cudnn", source=SOURCE, summary="SDPA, CUDNN_ATTENTION (CUDA, half precision), is_causal",
    fn=lambda q, k, v, causal=False, dropout_p=0.0: sdpa_cuda(
        q, k, v, None, causal, dropout_p, backend=SDPBackend.CUDNN_ATTENTION, gqa="repeat"),
    mask="is_causal", devices=DeviceSet(("cuda",), "SDPBackend.CUDNN_ATTENTION is a CUDA kernel"),
    dtypes=("float16", "bfloat16"),
    traits={"causal": "top_left", **SDPA_ROWS, "dropout_sites": ("attention probabilities",),
            "note": "backend: SDPBackend.CUDNN_ATTENTION (no mask argument; K/V heads repeated)"},
)
register_kernel(
    id="flex", source=SOURCE, summary="flex_attention: block mask, softcap as score_mod",
    fn=flex,
    traits={"causal": "top_left", **SDPA_ROWS,
            "note": "flex_attention eager; its backward is not implemented on CPU (torch 2.13)"},
    supports=_skip(*FLEX_EAGER_SKIP),
)
register_kernel(
    id="flex_compiled", source=SOURCE, summary="flex_attention under torch.compile (CUDA)",
    fn=functools.partial(flex, compiled=True), dtypes=("float32", "float16", "bfloat16"),
    devices=DeviceSet(("cuda",), "flex_attention compiles to Triton kernels for a GPU"),
    traits={"causal": "top_left", **SDPA_ROWS, "compiled": True,
            "note": "flex_attention compiled (Triton kernels generated by inductor)"},
)
register_kernel(
    id="blocked", source="attention-harness", summary="flash-style blocks of cfg.block, online softmax",
    fn=blocked,
    traits={"causal": "top_left", **SDPA_ROWS, "note": "block size: the config's block"},
)
