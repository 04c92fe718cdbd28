"""A mask one step off: each query also sees the next key."""

import math

import torch
from torch import nn

CAUGHT = "given"


class ModelNew(nn.Module):
    def forward(self, q, k, v):
        t = q.shape[-2]
        allowed = torch.ones(t, t, dtype=torch.bool, device=q.device).tril(diagonal=1)
        scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~allowed, float("-inf"))
        return scores.softmax(-1) @ v
