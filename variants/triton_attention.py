"""``triton_flash``: a flash-attention kernel of this project's own in Triton, forward and
backward, for float16 and bfloat16 only (``dtypes``; semantics judged in its own dtype).

Forward (one program per block of ``BLOCK_M`` queries of one (batch, query head)): the
query block is loaded once; the key blocks are streamed, each tile's scores Q K^T taken by
``tl.dot`` with float32 accumulation, scaled by 1/sqrt(d), soft-capped (cap * tanh(s / cap)),
masked by the call's key mask, the causal diagonal (top-left: key j <= query i) and the
window (i - left <= j <= i + right), all decided inside the kernel from the indices; an online
softmax (running max and sum in float32, what was accumulated rescaled when the max grows),
P rounded to the input dtype before P V; the output rounded once, the row's log-sum-exp
saved. GQA: query head h reads K/V head h // (H / H_kv). A row without keys is zeros.
Backward (flash-attention 2's): D = rowsum(dO * O); one program per key block accumulates
dK and dV over the query blocks, one per query block accumulates dQ over the key blocks,
the probabilities recomputed from the saved log-sum-exp, dS rounded to the input dtype
before its products; dK and dV of the query heads that share a K/V head are summed.

Runs natively on CUDA tensors. On the CPU it runs under Triton's interpreter
(``TRITON_INTERPRET=1`` set before triton is imported), where ``tl.dot`` on bfloat16
operands is wrong (triton 3.9: an error of 2.5e10 on a 16 x 16 product of unit values): there
the dots take their operands widened to float32 (exact for half values, the same products,
float32 accumulation as on a GPU). Without triton the kernel is registered and skipped,
with the reason.
"""

from __future__ import annotations

import math
import os

import torch

from harness import DeviceSet, register_kernel
from variants.half_kernels import HALF_DTYPES, refuse_wide

try:
    import triton
    import triton.language as tl
except ImportError:  # the optional extra: pip install .[triton]
    triton = None

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


def _why_not(cfg) -> str | None:
    if triton is None:
        return "triton is not installed (pip install -e '.[triton]')"
    if not INTERPRETED and not torch.cuda.is_available():
        return "triton compiles for a GPU: on the CPU set TRITON_INTERPRET=1 (Triton's interpreter) before starting"
    return None


if triton is not None:
    @triton.jit
    def _dot(a, b, F32: tl.constexpr):
        if F32:
            return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
        return tl.dot(a, b)

    @triton.jit
    def _to(x, dtype: tl.constexpr, F32: tl.constexpr):
        """``x.to(dtype)`` rounded to nearest even; the interpreter truncates float32 to
        bfloat16, so there the rounding is done on the bits first."""
        if F32 and dtype == tl.bfloat16:
            bits = x.to(tl.int32, bitcast=True)
            bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536
            x = bits.to(tl.float32, bitcast=True)
        return x.to(dtype)

    @triton.jit
    def _tile_scores(q, k, offs_m, offs_n, mask_ptr, b, T, S, scale, softcap, left, right,
                     HAS_SOFTCAP: tl.constexpr, CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr,
                     F32: tl.constexpr):
        """(BLOCK_M, BLOCK_N) float32 scores of one tile, -inf where a key may not be attended;
        and tanh(s / cap) for the backward."""
        s = _dot(q, tl.trans(k), F32) * scale
        t = s
        if HAS_SOFTCAP:
            t = 1.0 - 2.0 / (tl.exp(2.0 * s / softcap) + 1.0)
            s = softcap * t
        inside = (offs_m[:, None] < T) & (offs_n[None, :] < S)
        keep = tl.load(mask_ptr + b * T * S + offs_m[:, None] * S + offs_n[None, :], mask=inside, other=0) != 0
        if CAUSAL:
            keep = keep & (offs_n[None, :] <= offs_m[:, None])
        if HAS_WINDOW:
            keep = keep & (offs_n[None, :] >= offs_m[:, None] - left) & (offs_n[None, :] <= offs_m[:, None] + right)
        return tl.where(keep, s, float("-inf")), t

    @triton.jit
    def _fwd(Q, K, V, Mask, Out, LSE, H, G, T, S, D, scale, softcap, left, right,
             HAS_SOFTCAP: tl.constexpr, CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, F32: tl.constexpr,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
        pid_m, bh = tl.program_id(0), tl.program_id(1)
        b, h = bh // H, bh % H
        kvh = (b * (H // G) + h // G)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, BLOCK_D)
        q = tl.load(Q + bh * T * D + offs_m[:, None] * D + offs_d[None, :],
                    mask=(offs_m[:, None] < T) & (offs_d[None, :] < D), other=0.0)
        m_i = tl.full((BLOCK_M,), -1.0e30, tl.float32)        # finite: no inf - inf
        l_i = tl.zeros((BLOCK_M,), tl.float32)
        acc = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)
        for n0 in range(0, S, BLOCK_N):
            offs_n = n0 + tl.arange(0, BLOCK_N)
            kv_mask = (offs_n[:, None] < S) & (offs_d[None, :] < D)
            k = tl.load(K + kvh * S * D + offs_n[:, None] * D + offs_d[None, :], mask=kv_mask, other=0.0)
            v = tl.load(V + kvh * S * D + offs_n[:, None] * D + offs_d[None, :], mask=kv_mask, other=0.0)
            s, _ = _tile_scores(q, k, offs_m, offs_n, Mask, b, T, S, scale, softcap, left, right,
                                HAS_SOFTCAP, CAUSAL, HAS_WINDOW, F32)
            m_new = tl.maximum(m_i, tl.max(s, 1))
            p = tl.exp(s - m_new[:, None])                    # 0 where masked
            alpha = tl.exp(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + _dot(_to(p, v.dtype, F32), v, F32)
            m_i = m_new
        alive = l_i > 0
        out = acc / tl.where(alive, l_i, 1.0)[:, None]
        tl.store(Out + bh * T * D + offs_m[:, None] * D + offs_d[None, :], _to(out, Out.dtype.element_ty, F32),
                 mask=(offs_m[:, None] < T) & (offs_d[None, :] < D))
        lse = tl.where(alive, m_i + tl.log(tl.where(alive, l_i, 1.0)), float("inf"))
        tl.store(LSE + bh * T + offs_m, lse, mask=offs_m < T)

    @triton.jit
    def _bwd_dkdv(Q, K, V, Mask, DO, LSE, Delta, DK, DV, H, G, T, S, D, scale, softcap, left, right,
                  HAS_SOFTCAP: tl.constexpr, CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, F32: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
        pid_n, bh = tl.program_id(0), tl.program_id(1)
        b, h = bh // H, bh % H
        kvh = (b * (H // G) + h // G)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, BLOCK_D)
        kv_mask = (offs_n[:, None] < S) & (offs_d[None, :] < D)
        k = tl.load(K + kvh * S * D + offs_n[:, None] * D + offs_d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(V + kvh * S * D + offs_n[:, None] * D + offs_d[None, :], mask=kv_mask, other=0.0)
        dk = tl.zeros((BLOCK_N, BLOCK_D), tl.float32)
        dv = tl.zeros((BLOCK_N, BLOCK_D), tl.float32)
        for m0 in range(0, T, BLOCK_M):
            offs_m = m0 + tl.arange(0, BLOCK_M)
            q_mask = (offs_m[:, None] < T) & (offs_d[None, :] < D)
            q = tl.load(Q + bh * T * D + offs_m[:, None] * D + offs_d[None, :], mask=q_mask, other=0.0)
            do = tl.load(DO + bh * T * D + offs_m[:, None] * D + offs_d[None, :], mask=q_mask, other=0.0)
            lse = tl.load(LSE + bh * T + offs_m, mask=offs_m < T, other=float("inf"))
            delta = tl.load(Delta + bh * T + offs_m, mask=offs_m < T, other=0.0)
            s, t = _tile_scores(q, k, offs_m, offs_n, Mask, b, T, S, scale, softcap, left, right,
                                HAS_SOFTCAP, CAUSAL, HAS_WINDOW, F32)
            p = tl.exp(s - lse[:, None])                      # (BLOCK_M, BLOCK_N), 0 where masked
            dv += _dot(tl.trans(_to(p, do.dtype, F32)), do, F32)
            dp = _dot(do, tl.trans(v), F32)
            ds = p * (dp - delta[:, None])
            if HAS_SOFTCAP:
                ds = ds * (1.0 - t * t)
            dk += _dot(tl.trans(_to(ds, q.dtype, F32)), q, F32) * scale
        out_mask = (offs_n[:, None] < S) & (offs_d[None, :] < D)
        tl.store(DK + bh * S * D + offs_n[:, None] * D + offs_d[None, :], dk, mask=out_mask)
        tl.store(DV + bh * S * D + offs_n[:, None] * D + offs_d[None, :], dv, mask=out_mask)

    @triton.jit
    def _bwd_dq(Q, K, V, Mask, DO, LSE, Delta, DQ, H, G, T, S, D, scale, softcap, left, right,
                HAS_SOFTCAP: tl.constexpr, CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, F32: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
        pid_m, bh = tl.program_id(0), tl.program_id(1)
        b, h = bh // H, bh % H
        kvh = (b * (H // G) + h // G)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, BLOCK_D)
        q_mask = (offs_m[:, None] < T) & (offs_d[None, :] < D)
        q = tl.load(Q + bh * T * D + offs_m[:, None] * D + offs_d[None, :], mask=q_mask, other=0.0)
        do = tl.load(DO + bh * T * D + offs_m[:, None] * D + offs_d[None, :], mask=q_mask, other=0.0)
        lse = tl.load(LSE + bh * T + offs_m, mask=offs_m < T, other=float("inf"))
        delta = tl.load(Delta + bh * T + offs_m, mask=offs_m < T, other=0.0)
        dq = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)
        for n0 in range(0, S, BLOCK_N):
            offs_n = n0 + tl.arange(0, BLOCK_N)
            kv_mask = (offs_n[:, None] < S) & (offs_d[None, :] < D)
            k = tl.load(K + kvh * S * D + offs_n[:, None] * D + offs_d[None, :], mask=kv_mask, other=0.0)
            v = tl.load(V + kvh * S * D + offs_n[:, None] * D + offs_d[None, :], mask=kv_mask, other=0.0)
            s, t = _tile_scores(q, k, offs_m, offs_n, Mask, b, T, S, scale, softcap, left, right,
                                HAS_SOFTCAP, CAUSAL, HAS_WINDOW, F32)
            p = tl.exp(s - lse[:, None])
            dp = _dot(do, tl.trans(v), F32)
            ds = p * (dp - delta[:, None])
            if HAS_SOFTCAP:
                ds = ds * (1.0 - t * t)
            dq += _dot(_to(ds, k.dtype, F32), k, F32) * scale
        tl.store(DQ + bh * T * D + offs_m[:, None] * D + offs_d[None, :], dq, mask=q_mask)


def _meta(q, k, causal, window, softcap, block):
    B, H, T, D = q.shape
    block = max(16, min(64, triton.next_power_of_2(block)))
    left, right = window if window is not None else (0, 0)
    consts = dict(HAS_SOFTCAP=bool(softcap), CAUSAL=bool(causal), HAS_WINDOW=window is not None, F32=INTERPRETED,
                  BLOCK_M=block, BLOCK_N=block, BLOCK_D=max(16, triton.next_power_of_2(D)))
    args = (H, H // k.shape[1], T, k.shape[2], D, 1.0 / math.sqrt(D), float(softcap or 1.0), int(left), int(right))
    return consts, args, block


class TritonFlash(torch.autograd.Function):
    """The autograd wrapper of the three kernels (the module docstring)."""

    @staticmethod
    def forward(ctx, q, k, v, mask, causal, window, softcap, block):
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        mask = mask.to(torch.int8).contiguous()                          # (B, T, S)
        B, H, T, D = q.shape
        consts, args, blk = _meta(q, k, causal, window, softcap, block)
        out = torch.empty_like(q)
        lse = torch.empty(B, H, T, device=q.device, dtype=torch.float32)
        _fwd[(triton.cdiv(T, blk), B * H)](q, k, v, mask, out, lse, *args, **consts)
        ctx.save_for_backward(q, k, v, mask, out, lse)
        ctx.opts = (causal, window, softcap, block)
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, mask, out, lse = ctx.saved_tensors
        B, H, T, D = q.shape
        H_kv, S = k.shape[1], k.shape[2]
        consts, args, blk = _meta(q, k, *ctx.opts)
        do = d_out.contiguous()
        delta = (do.float() * out.float()).sum(-1).contiguous()           # D = rowsum(dO * O), float32
        dq = torch.empty(B, H, T, D, device=q.device, dtype=torch.float32)
        dk = torch.empty(B, H, S, D, device=q.device, dtype=torch.float32)  # per query head, folded below
        dv = torch.empty_like(dk)
        _bwd_dkdv[(triton.cdiv(S, blk), B * H)](q, k, v, mask, do, lse, delta, dk, dv, *args, **consts)
        _bwd_dq[(triton.cdiv(T, blk), B * H)](q, k, v, mask, do, lse, delta, dq, *args, **consts)
        fold = lambda x: x.view(B, H_kv, H // H_kv, S, D).sum(2).to(q.dtype)  # noqa: E731
        return dq.to(q.dtype), fold(dk), fold(dv), None, None, None, None, None


def triton_flash(q, k, v, mask, causal=False, window=None, softcap=0.0, block=64):
    """(B, H, T, d) heads, mask (B, 1, T, S) bool True = may attend; the causal diagonal and
    the window decided inside the kernel."""
    refuse_wide("triton_flash", q, k, v)
    if triton is None:
        raise RuntimeError("triton is not installed (pip install -e '.[triton]')")
    return TritonFlash.apply(q, k, v, mask[:, 0], causal, None if window is None else tuple(window), softcap, block)


register_kernel(
    id="triton_flash", source="attention-harness",
    summary="flash attention in Triton (float16/bfloat16 only): forward and backward",
    fn=triton_flash, dtypes=HALF_DTYPES, supports=_why_not,
    devices=DeviceSet(("cuda", "cpu"), "Triton compiles for a GPU, or runs under its interpreter on the CPU"),
    traits={"causal": "top_left", "fully_masked_row": "zeros", "fully_masked_grad": "none",
            "note": "Triton; on the CPU under TRITON_INTERPRET=1 (dots widened to float32 there)"},
)
