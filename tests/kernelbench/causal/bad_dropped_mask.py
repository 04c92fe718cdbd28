"""The causal mask dropped: every query sees every key."""

import torch.nn.functional as F
from torch import nn

CAUGHT = "given"


class ModelNew(nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v)
