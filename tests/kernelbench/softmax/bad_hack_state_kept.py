"""Right on its first two calls, then drifts: a counter kept between calls."""

import torch
from torch import nn

CAUGHT = "hack: state_kept"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        out = torch.softmax(x, dim=1)
        return out if self.calls <= 2 else out.flip(1)
