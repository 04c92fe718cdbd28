"""One call seeds Python, NumPy and torch."""

from __future__ import annotations

import random

import numpy as np
import torch


def seed_torch(seed: int) -> None:
    """Seed torch's CPU generator, and every accelerator's where torch has one.

    Without a GPU, ``torch.manual_seed`` would still queue a lazy CUDA (and XPU, MTIA)
    seeding with a formatted stack trace on every call (``torch.cuda._lazy_call``): a queue
    that never runs and grows by one stack per seed, about 9 s of a whole-registry ``check``
    (5,500 seeds) on this project's CPU. There, the CPU generator (and MPS's, where present)
    is all torch draws from."""
    if torch.cuda.is_available() or getattr(torch, "xpu", None) is not None and torch.xpu.is_available():
        torch.manual_seed(seed)
        return
    torch.default_generator.manual_seed(int(seed))
    if torch.backends.mps.is_available():
        torch.mps.manual_seed(int(seed))


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy, torch (CPU) and every CUDA device (``seed_torch``)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    seed_torch(seed)
