"""Scores divided by d instead of sqrt(d)."""

import torch
from torch import nn

CAUGHT = "given"


class ModelNew(nn.Module):
    def forward(self, Q, K, V):
        return torch.softmax(Q @ K.transpose(-2, -1) / Q.shape[-1], dim=-1) @ V
