"""Dtypes by name, and which ones each device checks for precision; the device by name."""

from __future__ import annotations

import torch

from harness.base.errors import UnknownName

DTYPES = {
    "float16": torch.float16, "bfloat16": torch.bfloat16,
    "float32": torch.float32, "float64": torch.float64, "bool": torch.bool,
}
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
HALF_DTYPES = ("float16", "bfloat16")


# The lower dtypes a device checks for precision by default (float64, for semantics, always
# runs): one table for ``check``, the pytest plugin and the CUDA benchmark sweeps.
PRECISION_DTYPES = {"cpu": ("float32",), "cuda": ("float32", "bfloat16", "float16")}


def dtype_of(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise UnknownName(f"unknown dtype '{name}'; dtypes: {sorted(DTYPES)}")
    return DTYPES[name]


def default_dtypes(device: str) -> list[str]:
    """Lower dtypes checked for precision by default (float64, for semantics, always runs)."""
    return list(PRECISION_DTYPES["cuda" if device == "cuda" else "cpu"])


def resolve_device(name: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name not in ("cpu", "cuda"):
        raise UnknownName(f"unknown device '{name}'; devices: cpu, cuda, auto")
    if name == "cuda" and not torch.cuda.is_available():
        raise UnknownName("device 'cuda' asked for, but torch sees no CUDA device")
    return name
