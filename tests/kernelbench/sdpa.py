"""Scaled dot-product attention over (batch, heads, seq, head_dim) (KernelBench level 1,
97_ScaledDotProductAttention, smaller; every size distinct, so a swapped axis shows)."""

import torch
import torch.nn.functional as F
from torch import nn

batch_size = 2
num_heads = 3
sequence_length = 7
embedding_dimension = 8


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, Q, K, V):
        return F.scaled_dot_product_attention(Q, K, V)


def get_inputs():
    shape = (batch_size, num_heads, sequence_length, embedding_dimension)
    return [torch.rand(shape), torch.rand(shape), torch.rand(shape)]


def get_init_inputs():
    return []
