"""A self-attention without a mask through nn.MultiheadAttention (as KernelBench level 3,
31_VisionAttention, attends over image patches), smaller."""

import torch
from torch import nn

batch_size = 2
seq_len = 7
embed_dim = 16
num_heads = 4


class Model(nn.Module):
    def __init__(self, embed_dim, num_heads):
        super().__init__()
        self.attn = nn.MultiheadAttention(embed_dim, num_heads, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]


def get_inputs():
    return [torch.rand(batch_size, seq_len, embed_dim)]


def get_init_inputs():
    return [embed_dim, num_heads]
