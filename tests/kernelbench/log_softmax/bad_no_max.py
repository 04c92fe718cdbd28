"""x - log(sum(exp(x))): the sum overflows float32 at large logits."""

import torch
from torch import nn

CAUGHT = "scale x100"


class ModelNew(nn.Module):
    def __init__(self, dim: int = 1):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return x - torch.log(torch.exp(x).sum(dim=self.dim, keepdim=True))
