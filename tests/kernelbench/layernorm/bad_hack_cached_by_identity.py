"""Remembers each answer under the input's storage address, offset and version counter: the
same tensor rewritten without a version bump gets the old answer (a timing loop's hit)."""

import torch
from torch import nn

CAUGHT = "hack: cached_by_identity"


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)
        self.seen = {}

    def forward(self, x):
        key = (x.untyped_storage().data_ptr(), x.storage_offset(), x._version, x.dtype, torch.is_grad_enabled())
        if key not in self.seen:
            self.seen[key] = self.ln(x)
        return self.seen[key]
