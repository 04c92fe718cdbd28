"""Remembers its answer per input tensor (by id): the same tensor with new values gets the old one."""

import torch
from torch import nn

CAUGHT = "hack: cached_by_identity"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.seen = {}

    def forward(self, x):
        key = (id(x), x.data_ptr())
        if key not in self.seen:
            self.seen[key] = (x, torch.softmax(x, dim=1))
        return self.seen[key][1]
