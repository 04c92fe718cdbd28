"""Reads the inputs as (batch, seq, heads, head_dim): attends across heads instead of positions."""

import torch.nn.functional as F
from torch import nn

CAUGHT = "given"


class ModelNew(nn.Module):
    def forward(self, Q, K, V):
        q, k, v = (t.transpose(1, 2) for t in (Q, K, V))
        return F.scaled_dot_product_attention(q, k, v).transpose(1, 2)
