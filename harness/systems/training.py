"""One training step (loss, backward, Adam) compared across model variants."""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from harness.base.boundary import failure_text, user_code, variant_failure
from harness.base.config import Config
from harness.base.failures import harness_traceback, traceback_if_any
from harness.base.verdicts import Verdict
from harness.check.tensors import compare_tensors, worst
from harness.families.models import PAD, START
from harness.registry import Variant, build, variants_of
from harness.systems.decoding import _session_tokens
from harness.systems.models import Models, _memo, expectation, matches

ADAM = {"lr": 1e-3, "betas": (0.9, 0.98), "eps": 1e-9}  # 004's betas and eps; a small rate


@dataclass
class StepResult:
    family: str
    a: str
    b: str
    expected: str
    reason: str
    verdict: str
    ok: bool
    worst_param: str
    max_abs: float
    noise_ratio: float
    error: str = ""   # one of the two failed (its code raised or answered wrongly): the pair's row
    traceback: str | None = None  # where the harness itself failed: its whole traceback (then in as_dict)

    def as_dict(self) -> dict:
        return traceback_if_any(asdict(self))


def _labels(family: str, inputs: dict, cfg: Config) -> torch.Tensor:
    gen = torch.Generator().manual_seed(cfg.seed + 3)
    tokens = _session_tokens(family, inputs)
    labels = torch.randint(START + 1, cfg.vocab, tokens.shape, generator=gen)
    return labels.masked_fill(tokens == PAD, PAD)


def train_step(variant: Variant, cfg: Config, weights: dict, inputs: dict, labels: torch.Tensor,
               dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Canonical parameters after one Adam step on the NLL of the family call (pad ignored),
    dropout 0, train mode."""
    module, portmap = build(variant, cfg.replace(dropout=0.0), dtype=dtype, weights=weights)
    module.train()
    optimizer = torch.optim.Adam(module.parameters(), **ADAM)
    logp = variant.call(module, inputs)
    with user_code("train step", who=variant.key):  # the loss through the user's module, its backward
        loss = F.nll_loss(logp.reshape(-1, logp.size(-1)), labels.reshape(-1), ignore_index=PAD)
        loss.backward()
        optimizer.step()
    return {k: t.double() for k, t in portmap.export().items()}


def compare_train_step(family: str, cfg: Config) -> list[StepResult]:
    """Every pair: the canonical parameters after one Adam step (``train_step``) compared;
    the expectation is the pair's, on the family's decode case."""
    return _memo("compare_train_step", family, cfg, lambda: _compare_train_step(family, cfg))


def _compare_train_step(family: str, cfg: Config) -> list[StepResult]:
    models = Models(family, cfg)
    fam = models.family
    labels = _labels(family, models.inputs, cfg)
    usable = [v for v in variants_of(family) if not v.supports(cfg)]
    after: dict[tuple, dict] = {}

    def run(v, zero, dtype):
        key = (v.key, zero, dtype)
        if key not in after:
            after[key] = train_step(v, cfg, models.weights(zero, v), models.inputs, labels, dtype)
        return after[key]

    results = []
    for a, b in itertools.combinations(usable, 2):
        zero = models.zero(a, b)
        try:
            pa, pb = run(a, zero, torch.float32), run(b, zero, torch.float32)
            pa64, pb64 = run(a, zero, torch.float64), run(b, zero, torch.float64)
        except Exception as exc:  # one of the two failed: the pair's error row, the others go on
            if not variant_failure(exc):
                raise
            expected, reason = expectation(fam, a, b)
            results.append(StepResult(family, a.id, b.id, expected, reason, Verdict.ERROR.value, False, "-",
                                      math.nan, math.nan, error=failure_text(exc),
                                      traceback=harness_traceback(exc)))
            continue
        verdicts = {n: compare_tensors(pa[n], pb[n], pa64[n], pb64[n], torch.float32) for n in pa}
        name = max(verdicts, key=lambda n: (verdicts[n].verdict.rank, verdicts[n].max_abs))
        verdict = worst(v.verdict for v in verdicts.values())
        expected, reason = expectation(fam, a, b)
        results.append(StepResult(family, a.id, b.id, expected, reason, verdict, matches(verdict, expected),
                                  name, verdicts[name].max_abs, verdicts[name].noise_ratio))
    return results
