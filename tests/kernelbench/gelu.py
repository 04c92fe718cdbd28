"""GELU, the exact (erf) form (KernelBench level 1, 26_GELU_, smaller)."""

import torch
import torch.nn.functional as F
from torch import nn

batch_size = 6
dim = 50


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.gelu(x)


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
