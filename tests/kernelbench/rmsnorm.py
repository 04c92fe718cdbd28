"""RMS normalisation over the features axis (KernelBench level 1, 36_RMSNorm_, smaller)."""

import torch
from torch import nn

batch_size = 4
features = 12
dim1 = 10


class Model(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x):
        rms = torch.sqrt(torch.mean(x**2, dim=1, keepdim=True) + self.eps)
        return x / rms


def get_inputs():
    return [torch.rand(batch_size, features, dim1)]


def get_init_inputs():
    return [features]
