"""Returns a torch.Tensor subclass (whose values could be made up when read)."""

import torch
from torch import nn

CAUGHT = "hack: not_plain_tensor"


class Lazy(torch.Tensor):
    pass


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1).as_subclass(Lazy)
