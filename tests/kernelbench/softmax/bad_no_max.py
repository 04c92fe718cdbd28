"""Softmax without the maximum subtracted: exp overflows float32 at large logits."""

import torch
from torch import nn

CAUGHT = "scale x100"


class ModelNew(nn.Module):
    def forward(self, x):
        e = torch.exp(x)
        return e / e.sum(dim=1, keepdim=True)
