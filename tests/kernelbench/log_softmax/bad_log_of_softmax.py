"""log(softmax(x)): the softmax underflows to 0 at large logits, its log to -inf."""

import torch
from torch import nn

CAUGHT = "scale x100"


class ModelNew(nn.Module):
    def __init__(self, dim: int = 1):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.log(torch.softmax(x, dim=self.dim))
