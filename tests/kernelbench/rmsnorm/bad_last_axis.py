"""Normalises over the last axis (a channels-last reading of the layout) instead of axis 1."""

import torch
from torch import nn

CAUGHT = "given"


class ModelNew(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
