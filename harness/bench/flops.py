"""FLOPs of one call, counted twice in one ``torch.utils.flop_counter.FlopCounterMode`` pass
(matmul-class operators): as executed and dense-equivalent.

Executed: what the kernels compute. A fused causal attention kernel computes whole tiles up
to the diagonal and skips the tiles past it: the CPU flash kernel (its block sizes; its
backward recomputes QK^T per block, five matmuls) and SDPA's CUDA kernels (flash,
memory-efficient, cuDNN: ``FUSED_TILES``). Dense-equivalent: every score of QK^T and PV, as
torch's own formulas count (whose flash backward also counts the recomputation). Explicit
attention, a kernel given an explicit mask and SDPA's math backend compute every score, so
for them both counts agree. An attention operator without a tile model here is counted as
torch counts it and named in ``FlopCount.dense_only``: its call's count is dense-equivalent.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils.flop_counter import flop_registry, sdpa_backward_flop_count, sdpa_flop_count

aten = torch.ops.aten


# A fused causal attention kernel walks its scores in tiles: a query tile visits the key
# tiles that start before its last query's diagonal and computes each visited tile whole
# (the part past the diagonal masked after the matmul); tiles wholly past the diagonal are
# skipped. Executed score pairs therefore lie between T(T+1)/2 and T^2, fixed by the tiles.
def _tile_pairs(t: int, s: int, causal: bool, q_tile: int, k_tile: int) -> int:
    """Query-key score pairs a tiled kernel computes for one (batch, head): every pair
    without ``causal``; with it, whole tiles up to each query tile's diagonal (top-left
    aligned, as SDPA's ``is_causal``)."""
    if not causal:
        return t * s
    q_tile, k_tile = min(q_tile, t), min(k_tile, s)
    pairs = 0
    for m in range(0, t, q_tile):
        q_block = min(q_tile, t - m)
        num_keys = min(m + q_block, s)
        for n in range(0, num_keys, k_tile):
            pairs += q_block * min(k_tile, s - n)
    return pairs


# The CPU flash-attention kernel's block sizes (aten/src/ATen/native/cpu/FlashAttentionKernel.cpp):
# queries in blocks of 256 (T >= 768), 64 (T >= 192) or 32, keys in blocks of 512.
# Forward: QK^T and PV per visited block; backward: QK^T recomputed, then dV, dP, dQ, dK,
# five matmuls per visited block.
def _flash_block_pairs(t: int, s: int, causal: bool) -> int:
    """Query-key score pairs the CPU flash kernel computes for one (batch, head)."""
    return _tile_pairs(t, s, causal, 256 if t >= 768 else 64 if t >= 192 else 32, 512)


@dataclass(frozen=True)
class FusedTiles:
    """How a fused CUDA attention kernel walks the scores: its (query, key) tile and where
    its block sizes come from. Forward and backward recompute-based: forward QK^T and PV per
    visited tile, backward QK^T again plus dV, dP, dQ, dK."""

    backend: str
    q_tile: int
    k_tile: int
    source: str


# SDPA's CUDA backends. Tile sizes at head dim <= 64 on sm80/sm90 (the benchmark shapes:
# D=512 or 1024 over 8 heads, d_k 64 or 128): a different tile moves the executed count at
# T=2048 by under 2% (tiles of 64: 51.6% of dense; of 128: 53.1%), against the factor ~2
# that counting every score makes.
FUSED_TILES = {
    "flash": FusedTiles("flash", 128, 128, "FlashAttention-2 forward kernel traits (kBlockM=128, kBlockN=128 "
                        "at head dim 64) in aten/src/ATen/native/transformers/cuda/flash_attn"),
    "efficient": FusedTiles("efficient", 64, 64, "memory-efficient (CUTLASS) kernel: kQueriesPerBlock=64, "
                            "kKeysPerBlock=64 at head dim <= 64 on sm80+ (mem_eff_attention/kernel_forward.h)"),
    "cudnn": FusedTiles("cudnn", 128, 128, "cuDNN's fused flash attention (the FlashAttention-2 algorithm); "
                        "its tiles are not published: counted at FlashAttention-2's 128 x 128"),
}
_FUSED_OPS = {
    aten._scaled_dot_product_flash_attention: ("flash", False),
    aten._scaled_dot_product_flash_attention_backward: ("flash", True),
    aten._scaled_dot_product_efficient_attention: ("efficient", False),
    aten._scaled_dot_product_efficient_attention_backward: ("efficient", True),
    aten._scaled_dot_product_cudnn_attention: ("cudnn", False),
    aten._scaled_dot_product_cudnn_attention_backward: ("cudnn", True),
}


def _bhtsd(query_shape, key_shape) -> tuple[int, int, int, int]:
    b, h, t, d = query_shape
    return b * h, t, key_shape[2], d


class FlopCount:
    """FLOPs of one call, as executed and dense-equivalent, in one FlopCounterMode pass.

    The counter runs with the executed formulas; each formula also adds, to ``dense_extra``,
    what the dense formula would count beyond it. An attention operator torch counts with a
    dense formula while its kernel may skip scores (a fused kernel this class has no tile
    model for: flex_attention, the varlen and low-level flash/efficient entry points) is
    counted as torch counts it and named in ``dense_only``: such a call's count is
    dense-equivalent, not executed."""

    def __init__(self) -> None:
        self.dense_extra = 0
        self.ops: list[str] = []
        self.dense_only: list[str] = []

    def _note(self, op: str, executed: int, dense: int) -> int:
        self.dense_extra += dense - executed
        if op not in self.ops:
            self.ops.append(op)
        return executed

    def _flash_fwd(self, query_shape, key_shape, value_shape, dropout_p=0.0, is_causal=False, *args,
                   out_shape=None, **kwargs) -> int:
        bh, t, s, d = _bhtsd(query_shape, key_shape)
        dense = sdpa_flop_count(query_shape, key_shape, value_shape)
        executed = 2 * 2 * bh * _flash_block_pairs(t, s, bool(is_causal)) * d
        return self._note("flash" + (" causal" if is_causal else ""), executed, dense)

    def _flash_bwd(self, grad_out_shape, query_shape, key_shape, value_shape, out_shape_, lse_shape,
                   dropout_p=0.0, is_causal=False, *args, out_shape=None, **kwargs) -> int:
        bh, t, s, d = _bhtsd(query_shape, key_shape)
        dense = sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)
        executed = 5 * 2 * bh * _flash_block_pairs(t, s, bool(is_causal)) * d  # QK^T recomputed
        return self._note("flash backward" + (" causal" if is_causal else ""), executed, dense)

    def _fused(self, op):
        """The executed formula of one of SDPA's CUDA kernels (``FUSED_TILES``): its
        arguments bound by name from the operator's schema (``is_causal``'s place differs)."""
        backend, backward = _FUSED_OPS[op]
        tiles = FUSED_TILES[backend]
        names = [a.name for a in op.default._schema.arguments]

        if not {"query", "key", "value", "is_causal"} <= set(names):  # another torch's signature: as torch counts
            return self._dense_only(op, flop_registry[op])

        def formula(*args, out_shape=None, **kwargs) -> int:
            bound = {**dict(zip(names, args)), **kwargs}
            q, k, v = bound["query"], bound["key"], bound["value"]
            causal = bool(bound.get("is_causal")) and bound.get("attn_bias") is None
            bh, t, s, d_qk = _bhtsd(q, k)
            d_v = v[-1]
            pairs = _tile_pairs(t, s, causal, tiles.q_tile, tiles.k_tile)
            if backward:  # QK^T recomputed (d_qk), dV and dP (d_v), dQ and dK (d_qk)
                dense = sdpa_backward_flop_count(bound[names[0]], q, k, v)
                executed = 2 * bh * pairs * (3 * d_qk + 2 * d_v)
            else:  # QK^T and PV
                dense = sdpa_flop_count(q, k, v)
                executed = 2 * bh * pairs * (d_qk + d_v)
            name = f"{backend}{' backward' if backward else ''}{' causal' if causal else ''}"
            return self._note(name, executed, dense)
        return formula

    def _dense_only(self, op, torch_formula):
        """torch's own (dense) formula for an attention operator without a tile model here;
        the call is marked dense-equivalent."""
        def formula(*args, **kwargs) -> int:
            name = str(op)
            if name not in self.dense_only:
                self.dense_only.append(name)
            return torch_formula(*args, **kwargs)
        formula._get_raw = True  # torch's registered formula takes the raw arguments
        return formula

    def _native_mha(self, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
        """nn.MultiheadAttention's no-grad fast path: its kernel gets no is_causal (a mask, if
        any, is applied to every score), so executed = dense."""
        b, t, d = query_shape
        flops = _attention_block_flops(b, t, key_shape[1], d)
        return self._note("native MHA", flops, flops)

    def _encoder_layer_fast(self, src_shape, embed_dim, num_heads, *args, out_shape=None, **kwargs) -> int:
        """nn.TransformerEncoderLayer's no-grad fast path: attention block plus the FFN."""
        b, t, d = src_shape
        ffn_weight_1 = args[11]  # (F, D), after qkv/proj weights, flags and the norms
        flops = _attention_block_flops(b, t, t, d) + 2 * 2 * b * t * d * ffn_weight_1[0]
        return self._note("native encoder layer", flops, flops)

    def mapping(self) -> dict:
        own = {
            aten._scaled_dot_product_flash_attention_for_cpu: self._flash_fwd,
            aten._scaled_dot_product_flash_attention_for_cpu_backward: self._flash_bwd,
            aten._native_multi_head_attention: self._native_mha,
            aten._transformer_encoder_layer_fwd: self._encoder_layer_fast,
            **{op: self._fused(op) for op in _FUSED_OPS},
        }
        dense_only = {op: self._dense_only(op, f) for op, f in flop_registry.items()
                      if "attention" in str(op) and op not in own}
        return {**dense_only, **own}


def _attention_block_flops(b: int, t: int, s: int, d: int) -> int:
    """Projections (q from T rows, k and v from S rows, output) and QK^T, PV: dense."""
    return 2 * b * t * d * d + 2 * 2 * b * s * d * d + 2 * 2 * b * t * s * d + 2 * b * t * d * d
