"""One call seeds everything; one call builds any variant with ported weights."""

from __future__ import annotations

import random
from typing import Any, Mapping

import numpy as np
import torch

from .config import Config
from .errors import ConfigError
from .families import get_family
from .porting import PortMap
from .registry import Variant


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy, torch (CPU) and every CUDA device."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def build(
    variant: Variant,
    cfg: Config,
    *,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    weights: Mapping[str, torch.Tensor] | None = None,
) -> tuple[Any, PortMap | None]:
    """Seed, build ``variant`` for ``cfg`` in eval mode on ``device``/``dtype`` and, when
    ``weights`` (canonical) are given, port them in. Returns (module, port map)."""
    reason = variant.supports(cfg)
    if reason:
        raise ConfigError(f"{variant.key} cannot be built for this config: {reason}")
    seed_everything(cfg.seed)
    module = variant.build(cfg)
    if not isinstance(module, torch.nn.Module):
        return module, None  # builders without parameters (the masks family)
    module = module.to(device=device, dtype=dtype).eval()
    family = get_family(variant.family)
    portmap = PortMap(
        variant.key, module, variant.map_for(cfg), family.canonical_shapes(cfg), variant.fixed
    )
    if weights is not None:
        portmap.load(weights)
    return module, portmap
