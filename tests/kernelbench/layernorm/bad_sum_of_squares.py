"""The variance from running sums in one pass, sum(x^2)/n - (sum(x)/n)^2: exact algebra, but
in float32 the two terms cancel when the mean is large against the spread (activations with
an offset), and the variance loses its digits."""

import torch
from torch import nn

CAUGHT = "offset +1000"


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape)

    def forward(self, x):
        n = x.shape[-1]
        total, squares = x.sum(-1, keepdim=True), (x * x).sum(-1, keepdim=True)
        mean = total / n
        var = squares / n - mean * mean
        return (x - mean) / torch.sqrt(var + self.ln.eps) * self.ln.weight + self.ln.bias
