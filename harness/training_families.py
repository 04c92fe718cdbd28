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

import torch

from .config import Config
from .families import FAMILIES, Case, Family, activations, right_pad

PAD = 0


def _loss_case(smoothing: float):
    def make(cfg: Config, gen: torch.Generator) -> dict:
        n = cfg.batch * cfg.tgt_len
        logits = activations(gen, n, cfg.vocab, std=2.0)
        target = torch.randint(PAD + 1, cfg.vocab, (n,), generator=gen)
        target[~right_pad(gen, cfg.batch, cfg.tgt_len).reshape(-1)] = PAD
        return {"logits": logits, "target": target, "pad_idx": PAD, "smoothing": smoothing}
    return make


LOSS = Family(
    name="loss",
    call="(logits (N,V), target (N,) int with pad 0, smoothing) -> loss per real token (scalar)",
    doc="Training loss with label smoothing, normalised by the number of real target tokens.",
    params=lambda cfg: {},
    cases=(
        Case("hard", "smoothing 0: plain negative log-likelihood", _loss_case(0.0)),
        Case("smoothed", "smoothing 0.1", _loss_case(0.1)),
    ),
    semantic=(),
    case_semantic={"smoothed": ("smoothing_spread", "loss_form")},
    grad_inputs=("logits",),
)


def _schedule_case(warmup: int, steps: int):
    def make(cfg: Config, gen: torch.Generator) -> dict:
        return {"d_model": cfg.d_model, "warmup": warmup, "factor": 1.0, "steps": steps}
    return make


LR_SCHEDULE = Family(
    name="lr_schedule",
    call="(d_model, warmup, factor, steps) -> learning rate of optimizer updates 1..steps (float64)",
    doc="The Noam schedule: d^-0.5 * min(step^-0.5, step * warmup^-1.5), as an optimizer sees it.",
    params=lambda cfg: {},
    cases=(Case("noam", "warmup 400, 1200 updates (the copy task's scale)", _schedule_case(400, 1200)),),
    semantic=("step_count",),
    differentiable=False,
    dtypes=("float64",),
)

for _family in (LOSS, LR_SCHEDULE):
    FAMILIES[_family.name] = _family


def optimizer_rates(scheduler_factory, steps: int) -> torch.Tensor:
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
