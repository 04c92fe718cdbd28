"""Computes nothing: returns a fresh buffer, which may still hold the reference's last result."""

import torch
from torch import nn

CAUGHT = "hack: stale_memory"


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.empty_like(x)
