"""The devices a variant runs on, declared at its registration.

Most variants run wherever their tensors are. A kernel bound to one device type (SDPA's
CPU flash kernel, a CUDA-only backend, a Triton kernel) declares the types it runs on and
why; on any other device every command skips it with that reason, as it skips a config the
variant does not support::

    register_kernel(id="sdpa_flash_cpu", ..., devices=DeviceSet(("cpu",), "the CPU flash kernel"))
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.base.errors import RegistryError

DEVICE_TYPES = ("cpu", "cuda", "mps", "xpu", "meta")


def device_type(device: str | torch.device) -> str:
    """'cuda:1' -> 'cuda'; a torch.device -> its type."""
    return torch.device(device).type


@dataclass(frozen=True)
class DeviceSet:
    """The device types a variant runs on (``("cpu",)``, ``("cuda",)``), and why only there."""

    types: tuple[str, ...]
    why: str

    def __post_init__(self) -> None:
        if isinstance(self.types, str) or not self.types or any(t not in DEVICE_TYPES for t in self.types):
            raise RegistryError(f"DeviceSet types {self.types!r} must be a non-empty tuple of {list(DEVICE_TYPES)}")
        if not isinstance(self.why, str) or not self.why:
            raise RegistryError(f"DeviceSet({self.types!r}) needs its reason (why only there), got {self.why!r}")

    def refuses(self, device: str | torch.device) -> str | None:
        """Why a variant with this set does not run on ``device`` (None: it does)."""
        if device_type(device) in self.types:
            return None
        return f"runs on {' and '.join(self.types)} only, not {device_type(device)}: {self.why}"
