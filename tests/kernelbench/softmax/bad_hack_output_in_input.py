"""Writes its result into its input and returns the input."""

import torch
from torch import nn

CAUGHT = "hack: output_in_input"


class ModelNew(nn.Module):
    def forward(self, x):
        return x.copy_(torch.softmax(x, dim=1))
