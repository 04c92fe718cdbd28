"""Without autograd, writes each result into one buffer it keeps and returns the buffer: the
output a caller kept from an earlier call holds the latest call's answer."""

import torch
from torch import nn

CAUGHT = "hack: output_reused"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.out = None

    def forward(self, x):
        if torch.is_grad_enabled():
            return torch.softmax(x, dim=1)
        if self.out is None or self.out.shape != x.shape or self.out.dtype != x.dtype:
            self.out = torch.empty_like(x)
        torch.exp(x - x.amax(dim=1, keepdim=True), out=self.out)
        return self.out.div_(self.out.sum(dim=1, keepdim=True))
