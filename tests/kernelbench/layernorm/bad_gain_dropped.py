"""Normalises but never applies the gain and bias (they are 1 and 0 at construction, so a
check that never copies trained weights passes it); the harness copies the reference's
weights as they are and judges every parameter's gradient."""

from torch import nn

CAUGHT = "given"


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape)

    def forward(self, x):
        return nn.functional.layer_norm(x, self.ln.normalized_shape, eps=1e-5)
