"""One fused (2 d_ff, d_model) projection, value rows then gate rows; its PARAM_MAP is a
function of the constructor's arguments, so the chunks follow the sizes each regime sets."""

import torch
from torch import nn

from harness import Chunk


def PARAM_MAP(d_model, d_ff):
    return {"a.weight": Chunk("fused", 0, sizes=(d_ff, d_ff)), "b.weight": Chunk("fused", 1, sizes=(d_ff, d_ff))}


class ModelNew(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.fused = nn.Parameter(torch.empty(2 * d_ff, d_model))

    def forward(self, x):
        value, gate = (x @ self.fused.t()).chunk(2, dim=-1)
        return value * gate.sigmoid()
