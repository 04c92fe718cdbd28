"""Softmax over the features of a (batch, dim) input (KernelBench level 1, 23_Softmax, smaller)."""

import torch
from torch import nn

batch_size = 6
dim = 40


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
