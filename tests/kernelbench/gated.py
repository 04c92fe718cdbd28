"""A gated linear unit: a(x) * sigmoid(b(x)), two projections of one shape (their roles differ,
so no pairing by shape can tell them apart: a candidate with other names gives a PARAM_MAP)."""

import torch
from torch import nn

batch_size = 3
tokens = 5
d_model = 8
d_ff = 12


class Model(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.a = nn.Linear(d_model, d_ff, bias=False)
        self.b = nn.Linear(d_model, d_ff, bias=False)

    def forward(self, x):
        return self.a(x) * torch.sigmoid(self.b(x))


def get_inputs():
    return [torch.randn(batch_size, tokens, d_model)]


def get_init_inputs():
    return [d_model, d_ff]
