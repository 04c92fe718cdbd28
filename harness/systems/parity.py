"""Model parity beyond greedy tokens: the distributions two models give, position by position.

For every pair of a model family's models on the same ported weights (the pair's Zero()
entries zeroed for both, as the check does), on each of the family's cases, in float32:

- per-token KL divergence KL(p_a || p_b) of the next-token distributions at every real
  position (pad positions of a decoder-only case are left out: what follows a sentence's
  end is each model's own business), reported per position (the worst row) with the worst
  (row, position) and the mean;
- top-k agreement: the fraction of positions whose argmax agrees (top-1) and the mean
  overlap of the top-``TOP_K`` sets;
- greedy tokens with the first differing step are ``harness.systems.decoding.compare_greedy``.

What each can hide is in docs/models.md ("Model parity metrics"). The bound: a pair agrees when
its worst per-token KL is at most ``KL_BOUND`` (float32, each side renormalised in float64).
Measured on this registry (default and GQA configs, load average 2): equivalent pairs reach
at most 5.4e-13 (nanogpt ~ torch_pre_gelu); the smallest declared difference, LayerNorm eps
1e-5 vs 1e-6 between two encoder-decoders, 7.7e-5 with every top-1 and top-5 agreeing;
Meta's interleaved RoPE without the q/k permutation 0.28 to 0.35 against half-split. A
bound of 1e-9 sits three orders above the first and far below torchtitan's 5.4e-6 for a
missing permutation on a trained model, so neither float32 rounding nor a mean over
positions can hide that.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass, field

import torch

from harness.base.boundary import failure_text, variant_failure
from harness.base.config import Config
from harness.base.failures import harness_traceback, traceback_if_any
from harness.base.verdicts import Verdict
from harness.registry import variants_of
from harness.systems.models import Models, _memo, expectation

KL_BOUND = 1e-9
TOP_K = 5


@dataclass
class ParityResult:
    family: str
    a: str
    b: str
    case: str
    expected: str
    reason: str
    kl_mean: float
    kl_worst: float
    worst_at: str            # "row r, position t"
    top1: float              # fraction of real positions with the same argmax
    topk: float              # mean |top-k(a) & top-k(b)| / k
    agrees: bool             # kl_worst <= KL_BOUND
    ok: bool                 # an equivalent pair must agree; a different one may look alike (hidden)
    kl_per_position: list = field(default_factory=list)  # the worst row's KL at each position
    error: str = ""   # one of the two failed (its code raised or answered wrongly): the pair's row
    traceback: str | None = None  # where the harness itself failed: its whole traceback (then in as_dict)

    @property
    def hidden(self) -> bool:
        """A declared difference these metrics do not see (tied weights drawn equal, a pad
        convention on positions left out, a gradient-only difference)."""
        return self.expected != Verdict.EQUIVALENT and self.agrees

    def as_dict(self) -> dict:
        return traceback_if_any({**asdict(self), "hidden": self.hidden})


def token_kl(logp_a: torch.Tensor, logp_b: torch.Tensor) -> torch.Tensor:
    """(B, T) KL(p_a || p_b) of two (B, T, V) log-probability tensors, in float64. Each is
    renormalised in float64 first: float32 log-probabilities sum to 1 only within rounding,
    which would put a first-order floor of ~1e-7 under the KL of two equal distributions
    (the second-order floor of float32 rounding is ~1e-13)."""
    a, b = logp_a.double().log_softmax(-1), logp_b.double().log_softmax(-1)
    return (a.exp() * (a - b)).sum(-1).clamp(min=0.0)


def topk_overlap(logp_a: torch.Tensor, logp_b: torch.Tensor, k: int) -> torch.Tensor:
    """(B, T) |top-k(a) & top-k(b)| / k."""
    k = min(k, logp_a.shape[-1])
    ta, tb = logp_a.topk(k, -1).indices, logp_b.topk(k, -1).indices          # (B, T, k)
    return (ta[..., :, None] == tb[..., None, :]).any(-1).double().mean(-1)


def real_positions(family: str, inputs: dict) -> torch.Tensor:
    """(B, T) True where a position's distribution is compared: every target position of an
    encoder-decoder; the real tokens of a decoder-only case."""
    if "pad" in inputs:
        return inputs["pad"]
    return torch.ones_like(inputs["tgt"], dtype=torch.bool)


def compare_distributions(family: str, cfg: Config) -> list[ParityResult]:
    return _memo("compare_distributions", family, cfg, lambda: _compare(family, cfg))


def _compare(family: str, cfg: Config) -> list[ParityResult]:
    models = Models(family, cfg)
    fam = models.family
    variants = [v for v in variants_of(family) if not v.supports(cfg)]
    results = []
    for case in fam.cases:
        inputs = fam.inputs(case.name, cfg)
        real = real_positions(family, inputs)
        outs: dict[tuple, torch.Tensor] = {}

        def run(v, zero):
            if (v.key, zero) not in outs:
                with torch.no_grad():
                    outs[v.key, zero] = v.call(models.get(v, zero), inputs).detach()
            return outs[v.key, zero]

        for va, vb in itertools.combinations([v for v in variants if not v.refuses(cfg, case=case.name)], 2):
            zero = models.zero(va, vb)
            try:
                la, lb = run(va, zero), run(vb, zero)
            except Exception as exc:  # one of the two failed: the pair's error row, the others go on
                if not variant_failure(exc):
                    raise
                expected, reason = expectation(fam, va, vb)
                results.append(ParityResult(family, va.id, vb.id, case.name, expected.value, reason, math.nan,
                                            math.nan, "-", math.nan, math.nan, False, False,
                                            error=failure_text(exc),
                                            traceback=harness_traceback(exc)))
                continue
            kl = token_kl(la, lb).masked_fill(~real, 0.0)                   # (B, T)
            flat = int(kl.argmax())
            r, t = divmod(flat, kl.shape[1])
            same_top1 = (la.argmax(-1) == lb.argmax(-1))[real].double().mean()
            expected, reason = expectation(fam, va, vb)
            agrees = float(kl.max()) <= KL_BOUND
            results.append(ParityResult(
                family, va.id, vb.id, case.name, expected.value, reason, float(kl[real].mean()), float(kl.max()),
                f"row {r}, position {t}", float(same_top1), float(topk_overlap(la, lb, TOP_K)[real].mean()),
                agrees, agrees or expected != Verdict.EQUIVALENT, kl.max(0).values.tolist()))
    return results
