"""A fused RMSNorm + linear layer judged against the two modules it replaces, with no family:
the reference (``nn.RMSNorm`` then ``nn.Linear``) is the oracle (docs/reference-oracle.md).

- ``FusedRMSNormLinear``: one expression, ``x * rsqrt(mean(x^2) + eps) * g @ W^T + b``;
- ``EpsOutsideTheSqrt``: the same, with ``x / (sqrt(mean(x^2)) + eps)``: a planted mistake,
  to show what a failing verdict says.

    python examples/fused_rmsnorm_linear.py
"""

import torch
from torch import nn

from harness import judge


class FusedRMSNormLinear(nn.Module):
    """RMSNorm over the last axis, its gain and the linear layer in one expression."""

    def __init__(self, features: int, out: int, eps: float = 1e-6):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(features))
        self.weight = nn.Parameter(torch.randn(out, features) / features**0.5)
        self.bias = nn.Parameter(torch.zeros(out))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.gain) @ self.weight.T + self.bias


class EpsOutsideTheSqrt(FusedRMSNormLinear):
    """A planted mistake: eps added after the square root."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = x.pow(2).mean(-1, keepdim=True).sqrt() + self.eps
        return (x / rms * self.gain) @ self.weight.T + self.bias


def main() -> None:
    for candidate in (FusedRMSNormLinear, EpsOutsideTheSqrt):
        reference = nn.Sequential(nn.RMSNorm(64, eps=1e-6), nn.Linear(64, 32))
        def inputs(batch=4, tokens=10):
            return [torch.randn(batch, tokens, 64)]
        verdict = judge(reference, candidate(64, 32), inputs)
        print(f"{candidate.__name__}: {verdict.summary}")
        print(f"  regimes seen: {', '.join(verdict.regimes)}")
        print(f"  left out: {'; '.join(f'{name}: {why}' for name, why in verdict.skipped) or 'none'}")


if __name__ == "__main__":
    main()
