"""The output projection created before the fused one, both under other names (`out`, `qkv`):
neither names nor creation order pair the weights; each shape is held once, so they pair by
shape. SDPA with is_causal=True in place of the mask buffer."""

import torch.nn.functional as F
from torch import nn


class ModelNew(nn.Module):
    def __init__(self, n_embd, n_head, max_seqlen):
        super().__init__()
        self.out = nn.Linear(n_embd, n_embd)
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.n_head = n_head

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(B, T, C))
