"""F.layer_norm on parameters held under the problem's names."""

import torch
import torch.nn.functional as F
from torch import nn


class Holder(nn.Module):
    def __init__(self, shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(shape))
        self.bias = nn.Parameter(torch.zeros(shape))


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = Holder(normalized_shape)

    def forward(self, x):
        return F.layer_norm(x, self.ln.weight.shape, self.ln.weight, self.ln.bias, 1e-5)
