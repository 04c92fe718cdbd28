"""The unbiased variance (torch.var's default) where LayerNorm divides by n."""

import torch
from torch import nn

CAUGHT = "given"


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape)

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        return (x - mean) / torch.sqrt(x.var(dim=-1, keepdim=True) + 1e-5) * self.ln.weight + self.ln.bias
