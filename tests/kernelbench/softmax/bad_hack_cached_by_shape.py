"""Remembers its first answer per input shape."""

import torch
from torch import nn

CAUGHT = "hack: cached_by_shape"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.seen = {}

    def forward(self, x):
        if x.shape not in self.seen:
            self.seen[x.shape] = torch.softmax(x, dim=1)
        return self.seen[x.shape]
