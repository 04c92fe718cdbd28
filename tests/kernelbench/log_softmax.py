"""Log-softmax over the features (KernelBench level 1, 24_LogSoftmax, smaller)."""

import torch
from torch import nn

batch_size = 6
dim = 40


class Model(nn.Module):
    def __init__(self, dim: int = 1):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.log_softmax(x, dim=self.dim)


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
