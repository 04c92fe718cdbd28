"""Sizes that cannot fit: a case's rough memory, set against what the device has, checked
before a sweep runs (``check_sizes``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from harness.base.dtypes import dtype_of
from harness.base.errors import ConfigError
from harness.bench.shapes import HEAD_SHAPED

if TYPE_CHECKING:
    from harness.bench.cases import BenchCase

ATTENTION_FAMILIES = {"attention", "encoder_layer", "decoder_layer", "decoder_only_block", "llama_block",
                      "encoder_decoder", "decoder_only_model", "llama_model", "attention_kernel"}


def case_bytes(case: BenchCase) -> int:
    """A rough lower estimate of one case's memory: inputs, output and activations of
    (B, T, D) and (B, T, F) (a kernel: q, k, v and its output, (B, H, T, d) = (B, T, D) each),
    and, for families with attention, one (B, H, T, S) weights tensor (the explicit variants
    hold it); twice that with backward."""
    itemsize = dtype_of(case.dtype).itemsize
    b, t, d = case.batch, case.seq, case.d_model
    n = 4 * b * t * d if case.family in HEAD_SHAPED else 6 * b * t * d + b * t * case.d_ff
    if case.family in ATTENTION_FAMILIES:
        n += b * case.heads * t * t
    return itemsize * n * (2 if case.mode == "fwd+bwd" else 1)


def available_bytes(device: str) -> int | None:
    if device.startswith("cuda"):
        return torch.cuda.mem_get_info()[0]
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def check_sizes(cases: list[BenchCase]) -> None:
    """Refuse, before the run, a sweep whose largest case cannot fit in memory."""
    if not cases:
        return
    big = max(cases, key=case_bytes)
    need, have = case_bytes(big), available_bytes(big.device)
    if have is not None and need > have:
        raise ConfigError(
            f"case {big.family}/{big.variant} B={big.batch} T={big.seq} D={big.d_model} {big.mode} needs at "
            f"least ~{need / 2**30:,.1f} GiB (activations and the (B,H,T,S) attention weights), more than the "
            f"{have / 2**30:,.1f} GiB available; lower --batch or --seq")
