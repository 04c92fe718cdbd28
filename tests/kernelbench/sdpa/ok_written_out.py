"""softmax(Q K^T / sqrt(d)) V, written out."""

import math

import torch
from torch import nn


class ModelNew(nn.Module):
    def forward(self, Q, K, V):
        scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
        return torch.softmax(scores, dim=-1) @ V
