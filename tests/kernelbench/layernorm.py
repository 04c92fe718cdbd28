"""LayerNorm over the last axis, with its gain and bias (KernelBench level 1, 40_LayerNorm, smaller)."""

import torch
from torch import nn

batch_size = 4
seq = 6
features = 20


class Model(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x):
        return self.ln(x)


def get_inputs():
    return [torch.rand(batch_size, seq, features)]


def get_init_inputs():
    return [(features,)]
