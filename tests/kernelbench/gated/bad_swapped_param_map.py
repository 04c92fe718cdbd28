"""The same renamed projections with a PARAM_MAP that swaps them: the map is applied as
given, never second-guessed by shape, and the function it makes is another."""

import torch.nn.functional as F
from torch import nn

from harness import Param

CAUGHT = "given"
PARAM_MAP = {"a.weight": Param("gate_proj.weight"), "b.weight": Param("up_proj.weight")}


class ModelNew(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)

    def forward(self, x):
        return F.linear(x, self.up_proj.weight) * F.linear(x, self.gate_proj.weight).sigmoid()
