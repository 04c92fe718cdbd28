"""Uses its input as scratch space: exponentiates it in place."""

from torch import nn

CAUGHT = "hack: input_modified"


class ModelNew(nn.Module):
    def forward(self, x):
        e = x.sub_(x.amax(dim=1, keepdim=True)).exp_()
        return e / e.sum(dim=1, keepdim=True)
