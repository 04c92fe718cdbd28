"""Softmax as exp(x - logsumexp(x)): another computation of the same function."""

import torch
from torch import nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.exp(x - torch.logsumexp(x, dim=1, keepdim=True))
