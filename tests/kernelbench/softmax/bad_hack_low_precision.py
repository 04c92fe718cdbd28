"""Computes in bfloat16 and casts back: inside KernelBench's loose tolerance for half dtypes."""

import torch
from torch import nn

CAUGHT = "hack: low_precision"


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.softmax(x.to(torch.bfloat16), dim=1).to(x.dtype)
