"""Softmax over the batch axis instead of the features."""

import torch
from torch import nn

CAUGHT = "given"


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=0)
