"""Causal scaled dot-product attention (a query attends to itself and earlier keys)."""

import torch
import torch.nn.functional as F
from torch import nn

batch_size = 2
num_heads = 3
sequence_length = 9
head_dim = 8


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def get_inputs():
    shape = (batch_size, num_heads, sequence_length, head_dim)
    return [torch.randn(shape), torch.randn(shape), torch.randn(shape)]


def get_init_inputs():
    return []
