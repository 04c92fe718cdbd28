"""eps 1e-6 where nn.LayerNorm's is 1e-5."""

from torch import nn

CAUGHT = "given"


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape, eps=1e-6)

    def forward(self, x):
        return self.ln(x)
