"""Attention kernels that exist only in half precision (float16, bfloat16): each refuses
float32 and float64, as flash kernels do, and declares ``dtypes=("float16", "bfloat16")``,
so ``check`` decides its semantics in its own dtype (``harness.check.own_dtype``).

- ``half_tiled``: flash-attention's algorithm in plain torch, on any device: query and key
  tiles of the config's ``block``, with the arithmetic of a tensor-core kernel: each tile's
  Q K^T and P V products accumulated in float32 (operands widened, exact), the online
  softmax's running max and sum in float32, P rounded to the input dtype before P V, the
  output rounded once at the end; the backward flash-attention's (probabilities recomputed
  from the saved log-sum-exp, D = rowsum(dO * O), dS rounded to the input dtype before its
  products, dQ, dK, dV accumulated in float32). GQA by grouping consecutive query heads on
  one K/V head, the causal diagonal top-left, the window around it, the softcap on the
  scores; a row without keys is zeros and sends no gradient.
- ``triton_flash`` (``variants.triton_attention``): the same algorithm as a Triton kernel,
  registered when triton is installed.
"""

from __future__ import annotations

import math

import torch

from harness import register_kernel
from variants.kernels import attend_mask

HALF = (torch.float16, torch.bfloat16)
HALF_DTYPES = ("float16", "bfloat16")


def refuse_wide(name: str, *tensors: torch.Tensor) -> None:
    """A half-precision kernel takes float16 or bfloat16 only (flash-attention raises the same)."""
    for t in tensors:
        if t.dtype not in HALF:
            raise TypeError(f"{name} runs in float16 or bfloat16 only; got {str(t.dtype).replace('torch.', '')}")


def _tiles(n: int, block: int) -> list[slice]:
    return [slice(i, i + block) for i in range(0, n, block)]


def _scores(q32, k32, keep, softcap, scale):
    """One tile's scores in float32: scaled, soft-capped, masked; tanh kept for the backward."""
    s = q32 @ k32.transpose(-2, -1) * scale
    t = torch.tanh(s / softcap) if softcap else None
    if softcap:
        s = softcap * t
    return s.masked_fill(~keep, float("-inf")), t


class HalfTiledAttention(torch.autograd.Function):
    """Forward and backward of ``half_tiled`` (the module docstring); q (B, H, T, d), k and v
    (B, H_kv, S, d) in one half dtype, keep (B, 1 or H, T, S) bool."""

    @staticmethod
    def forward(ctx, q, k, v, keep, softcap, block):
        B, H, T, d = q.shape
        G, S, dtype, scale = H // k.shape[1], k.shape[2], q.dtype, 1.0 / math.sqrt(d)
        q32 = q.float()
        k32 = k.float().repeat_interleave(G, dim=1)                   # (B, H, S, d): head h reads h // G
        v32 = v.float().repeat_interleave(G, dim=1)
        m = torch.full((B, H, T, 1), float("-inf"), device=q.device)   # running max, float32
        l = torch.zeros_like(m)                                         # running sum  # noqa: E741
        acc = torch.zeros(B, H, T, v.shape[-1], device=q.device)
        for rows in _tiles(T, block):
            for cols in _tiles(S, block):
                s, _ = _scores(q32[:, :, rows], k32[:, :, cols], keep[:, :, rows, cols], softcap, scale)
                m_new = torch.maximum(m[:, :, rows], s.amax(-1, keepdim=True))
                shift = torch.where(torch.isinf(m_new), 0.0, m_new)
                p = torch.exp(s - shift)
                rescale = torch.exp(m[:, :, rows] - shift)
                l[:, :, rows] = rescale * l[:, :, rows] + p.sum(-1, keepdim=True)
                acc[:, :, rows] = rescale * acc[:, :, rows] + p.to(dtype).float() @ v32[:, :, cols]
                m[:, :, rows] = m_new
        alive = l > 0
        out = (acc / torch.where(alive, l, 1.0)).to(dtype)             # a row without keys: zeros
        lse = torch.where(alive, m + torch.log(torch.where(alive, l, 1.0)), float("inf"))
        ctx.save_for_backward(q, k, v, keep, out, lse)
        ctx.softcap, ctx.block = softcap, block
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, keep, out, lse = ctx.saved_tensors
        B, H, T, d = q.shape
        H_kv, S, dtype, scale = k.shape[1], k.shape[2], q.dtype, 1.0 / math.sqrt(d)
        G = H // H_kv
        q32, do32 = q.float(), d_out.float()
        k32, v32 = k.float().repeat_interleave(G, dim=1), v.float().repeat_interleave(G, dim=1)
        delta = (do32 * out.float()).sum(-1, keepdim=True)             # D = rowsum(dO * O), float32
        dq, dk, dv = torch.zeros_like(q32), torch.zeros_like(k32), torch.zeros_like(v32)
        for rows in _tiles(T, ctx.block):
            for cols in _tiles(S, ctx.block):
                s, t = _scores(q32[:, :, rows], k32[:, :, cols], keep[:, :, rows, cols], ctx.softcap, scale)
                p = torch.exp(s - lse[:, :, rows])
                dv[:, :, cols] += p.to(dtype).float().transpose(-2, -1) @ do32[:, :, rows]
                dp = do32[:, :, rows] @ v32[:, :, cols].transpose(-2, -1)
                ds = p * (dp - delta[:, :, rows])
                if ctx.softcap:
                    ds = ds * (1 - t * t)                               # d(cap tanh(x / cap)) / dx
                ds = ds.to(dtype).float()
                dq[:, :, rows] += ds @ k32[:, :, cols] * scale
                dk[:, :, cols] += ds.transpose(-2, -1) @ q32[:, :, rows] * scale
        fold = lambda x: x.view(B, H_kv, G, S, -1).sum(2).to(dtype)    # noqa: E731  (the G heads sharing one K/V head)
        return dq.to(dtype), fold(dk), fold(dv), None, None, None


def half_tiled(q, k, v, mask, causal=False, window=None, softcap=0.0, block=64):
    """Flash-style in half precision (the module docstring); (B, H, T, d) heads."""
    refuse_wide("half_tiled", q, k, v)
    keep = attend_mask(mask, causal, window, "top_left")              # (B, 1, T, S)
    return HalfTiledAttention.apply(q, k, v, keep, float(softcap), block)


register_kernel(
    id="half_tiled", source="attention-harness",
    summary="flash-style tiles in float16/bfloat16 only: float32 accumulation, online softmax",
    fn=half_tiled, dtypes=HALF_DTYPES,
    traits={"causal": "top_left", "fully_masked_row": "zeros", "fully_masked_grad": "none",
            "note": "runs in float16/bfloat16 only: semantics judged in its own dtype"},
)
