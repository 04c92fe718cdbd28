"""Families for what trains the models: the loss and the learning-rate schedule.

- ``loss``: (logits (N,V), target (N,) int, pad 0, smoothing) -> the loss per real
  token (scalar), gradient with respect to the logits. Cases: ``hard`` (smoothing 0)
  and ``smoothed`` (smoothing 0.1), where how the smoothing mass is spread and whether
  the loss is a KL divergence or a cross-entropy become semantic.
- ``lr_schedule``: (d_model, warmup, factor, steps) -> the learning rate each optimizer
  update uses, updates 1..steps (float64; nothing to differentiate). Whether the
  schedule counts the first update as step 1 is semantic.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from harness.base.config import Config
from harness.base.errors import SpecError
from harness.families.base import Case, Family, TraitSpec, activations, regime_case, right_pad

PAD = 0


def _loss_case(smoothing: float):
    def make(cfg: Config, gen: torch.Generator) -> dict:
        n = cfg.batch * cfg.tgt_len
        logits = activations(gen, n, cfg.vocab, std=2.0)
        target = torch.randint(PAD + 1, cfg.vocab, (n,), generator=gen)
        target[~right_pad(gen, cfg.batch, cfg.tgt_len).reshape(-1)] = PAD
        return {"logits": logits, "target": target, "pad_idx": PAD, "smoothing": smoothing}
    return make


SPREADS = ("s/(V-2) off target; pad column and pad rows zeroed", "s/V over every class; pad rows ignored")
LOSS_FORMS = ("KL divergence", "cross-entropy")


def smoothed_target(target: torch.Tensor, vocab: int, pad_idx: int, smoothing: float, spread: str) -> torch.Tensor:
    """(N, V) float64 target distribution; rows of pad targets all zero."""
    if spread == SPREADS[0]:
        dist = torch.full((target.size(0), vocab), smoothing / (vocab - 2), dtype=torch.float64, device=target.device)
        dist.scatter_(1, target[:, None], 1.0 - smoothing)
        dist[:, pad_idx] = 0
    elif spread == SPREADS[1]:
        dist = torch.full((target.size(0), vocab), smoothing / vocab, dtype=torch.float64, device=target.device)
        dist.scatter_add_(1, target[:, None], torch.full((target.size(0), 1), 1.0 - smoothing, dtype=torch.float64,
                                                          device=target.device))
    else:
        raise SpecError(f"no oracle for smoothing_spread={spread!r}; known: {list(SPREADS)}")
    dist[target == pad_idx] = 0
    return dist


def loss_oracle(traits, cfg, w, inputs, dtype) -> torch.Tensor:
    """sum over real rows of -q.log p (cross-entropy) or q.(log q - log p) (KL), / real rows."""
    logp = torch.log_softmax(inputs["logits"], dim=-1)
    target = inputs["target"]
    q = smoothed_target(target, logp.size(-1), inputs["pad_idx"], inputs["smoothing"], traits["smoothing_spread"])
    total = -(q * logp).sum()
    if traits["loss_form"] == "KL divergence":
        total = total + torch.xlogy(q, q).sum()
    return total / (target != inputs["pad_idx"]).sum()


LOSS_CASES = (Case("hard", "smoothing 0: plain negative log-likelihood", _loss_case(0.0)),
              Case("smoothed", "smoothing 0.1", _loss_case(0.1)))

LOSS = Family(
    name="loss",
    call="(logits (N,V), target (N,) int with pad 0, smoothing) -> loss per real token (scalar)",
    doc="Training loss with label smoothing, normalised by the number of real target tokens.",
    params=lambda cfg: {},
    cases=(*LOSS_CASES, regime_case(LOSS_CASES[1], "std50", "logits x25: std 50 (log(softmax) underflows)",
                                    scale=25.0)),
    traits={
        "smoothing_spread": TraitSpec("how the smoothing mass is spread", SPREADS),
        "loss_form": TraitSpec("KL divergence to the target, or cross-entropy (KL + the target's entropy)",
                               LOSS_FORMS),
    },
    oracle=loss_oracle,
    case_semantic={"smoothed": ("smoothing_spread", "loss_form")},
    grad_inputs=("logits",),
)


def _schedule_case(warmup: int, steps: int):
    def make(cfg: Config, gen: torch.Generator) -> dict:
        return {"d_model": cfg.d_model, "warmup": warmup, "factor": cfg.factor, "steps": steps}
    return make


STEP_COUNTS = ("LambdaLR's 0-based count, 0 read as 1", "update k uses step k")


def noam(step: int, d_model: int, factor: float, warmup: int) -> float:
    return factor * (d_model ** (-0.5) * min(step ** (-0.5), step * warmup ** (-1.5)))


def schedule_oracle(traits, cfg, w, inputs, dtype) -> torch.Tensor:
    """The paper's rate at step_num for each update k = 1..steps: step_num = max(k - 1, 1)
    when LambdaLR's 0-based count is read with 0 as 1, step_num = k otherwise."""
    shift = {STEP_COUNTS[0]: lambda k: max(k - 1, 1), STEP_COUNTS[1]: lambda k: k}[traits["step_count"]]
    return torch.tensor([noam(shift(k), inputs["d_model"], inputs["factor"], inputs["warmup"])
                         for k in range(1, inputs["steps"] + 1)], dtype=torch.float64)


NOAM = Case("noam", "warmup 400, 1200 updates (the copy task's scale)", _schedule_case(400, 1200))

LR_SCHEDULE = Family(
    name="lr_schedule",
    call="(d_model, warmup, factor, steps) -> learning rate of optimizer updates 1..steps (float64)",
    doc="The Noam schedule: d^-0.5 * min(step^-0.5, step * warmup^-1.5), as an optimizer sees it.",
    params=lambda cfg: {},
    cases=(NOAM, regime_case(NOAM, "factor2", "factor 2 (a schedule that drops its factor cannot pass)", factor=2.0)),
    traits={"step_count": TraitSpec("which step number update k is given", STEP_COUNTS)},
    oracle=schedule_oracle,
    differentiable=False,
    dtypes=("float64",),
)


TRAINING_FAMILIES = (LOSS, LR_SCHEDULE)  # listed in harness.families.catalog


def optimizer_rates(scheduler_factory: Callable[[torch.optim.Optimizer], Any], steps: int) -> torch.Tensor:
    """The rate each of ``steps`` Adam updates uses, with ``scheduler.step()`` after each
    ``optimizer.step()`` (004's run_epoch order), on a one-parameter optimizer with lr 1."""
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.Adam([param], lr=1.0)
    scheduler = scheduler_factory(optimizer)
    rates = []
    for _ in range(steps):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return torch.tensor(rates, dtype=torch.float64)
