"""Dropout judged by statistics, not only counted.

Counting draws (``harness.check.extras.dropout_checks``) cannot tell dropout on the scores
from dropout on the weights, nor a rate hard-coded to 0.1 from the config's: each draws the
declared number of masks. In train mode, on the first config, float64:

- **the kept fraction per site**: every mask a draw makes is recorded at the dispatcher
  (``native_dropout``'s mask, a ``bernoulli`` draw, or a uniform draw ``rand``/``rand_like``/
  ``uniform_`` compared with a rate, as a hand-written ``torch.rand_like(h) < keep`` does), and
  pooled over ``FRACTION_CALLS`` calls per site (the i-th draw of each call). Its fraction of
  kept elements must be 1 - p within ``Z`` binomial standard deviations (a hand-written mask
  may mark the dropped elements instead: for ``bernoulli`` and a comparison, p is accepted
  too). Checked at the config's rate and at ``SECOND_RATE``: a rate hard-coded to any value r
  passes at most one of them (r is 0.5 for the first, 0.2 or 0.8 for the second).
- **unbiased sites: the mean approaches the eval output**: where the output is linear in every
  dropped tensor (the family says for which traits: attention without a residual norm, a
  feed-forward without one, the positional encoding's sum, a kernel's probabilities), the
  mean of ``MEAN_CALLS`` seeded train calls must be within ``Z_MEAN`` standard errors (the
  sample standard deviation / sqrt(K): the bound shrinks with K) of the eval output at every
  element. Dropout on the scores (before the softmax) is biased and fails.
- **residual branches zeroed**: where a norm follows the dropout (layers, post-norm
  sublayers) the mean is biased for a correct design too. There each residual branch's output
  projection (the family names them) is zeroed: every correct site then drops zeros and the
  train output equals the eval output (float64's bound); a dropout on the whole residual
  sum (``dropout(x + a)``) or on the stream itself changes it.

Cost, measured on the registry: see docs/verdicts.md (dropout by statistics).
"""

from __future__ import annotations

import math

import torch

from harness.base.boundary import describe
from harness.base.config import Config
from harness.base.errors import HarnessError, PortingError
from harness.base.seeding import seed_torch
from harness.check import precision as P
from harness.check.results import DropoutResult
from harness.check.runs import OpRecorder, cast_inputs
from harness.porting.portmap import zero_unrepresented
from harness.registry import Variant, build

# every random op counts as a draw: dropout's own and a hand-written one (rand_like(x) < keep)
DRAW_OPS = ("bernoulli_", "bernoulli", "native_dropout", "_fused_dropout", "rand", "rand_like", "randn",
            "randn_like", "uniform_", "normal_", "randint", "randint_like", "multinomial")
UNIFORM_OPS = ("rand", "rand_like", "uniform_")
COMPARISONS = ("lt", "le", "gt", "ge", "lt_", "le_", "gt_", "ge_")
ALIASES = ("detach", "alias", "view", "_unsafe_view", "expand", "clone")  # a uniform draw by another name

Z = 5.0              # binomial standard deviations allowed for a site's kept fraction (2.9e-7 two-sided)
FRACTION_CALLS = 5   # train calls pooled per site (a site of the default config has >= 147 elements)
SECOND_RATE = 0.2
MEAN_CALLS = 200     # train calls averaged for the unbiasedness check
Z_MEAN = 6.0         # standard errors allowed per element (a t statistic with 199 df: ~1e-8 per element)
SEED = 1234


class MaskRecorder(OpRecorder):
    """Records, per random draw in call order, the mask it makes: (kind, kept, total), kind
    "kept" (``native_dropout``'s mask: True = kept) or "either" (a ``bernoulli`` draw or a
    uniform draw compared with a rate: it may mark the kept or the dropped elements); None
    for a draw no mask was seen from."""

    def __init__(self) -> None:
        super().__init__()
        self.masks: list[tuple[str, int, int] | None] = []
        self._uniform: dict[int, tuple[int, torch.Tensor]] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = super().__torch_dispatch__(func, types, args, kwargs)
        name = self.ops[-1]
        if name in DRAW_OPS:
            if name == "native_dropout":
                self.masks.append(("kept", int(out[1].count_nonzero()), out[1].numel()))
            elif name in ("bernoulli", "bernoulli_"):
                self.masks.append(("either", int(out.count_nonzero()), out.numel()))
            else:
                self.masks.append(None)
                if name in UNIFORM_OPS:  # kept alive so its id stays its own during the call
                    self._uniform[id(out)] = (len(self.masks) - 1, out)
        elif name in ALIASES and args and isinstance(args[0], torch.Tensor) and id(args[0]) in self._uniform:
            self._uniform[id(out)] = (self._uniform[id(args[0])][0], out)
        elif name in COMPARISONS and args and isinstance(args[0], torch.Tensor) and id(args[0]) in self._uniform:
            i, _ = self._uniform[id(args[0])]
            self.masks[i] = ("either", int(out.count_nonzero()), out.numel())
        return out


def _build(variant: Variant, cfg: Config, weights: dict):
    module, portmap = build(variant, cfg, dtype=torch.float64)
    if portmap is not None:
        portmap.load(zero_unrepresented(weights, portmap.zero_names()))
    return module


def _outputs(variant: Variant, cfg: Config, weights: dict, inputs: dict, calls: int, *, record: bool = False):
    """The eval output and ``calls`` seeded train outputs (no grad), with the masks per call."""
    module = _build(variant, cfg, weights)
    def x():  # fresh copies each call: a variant that changes its inputs cannot drift
        return cast_inputs(inputs, torch.float64, "cpu")

    with torch.no_grad():
        if isinstance(module, torch.nn.Module):
            module.eval()
        base = variant.call(module, x())
        if isinstance(module, torch.nn.Module):
            module.train()
        seed_torch(SEED)
        outs, masks = [], []
        for _ in range(calls):
            recorder = MaskRecorder() if record else None
            if recorder is not None:
                with recorder:
                    outs.append(variant.call(module, x()))
                masks.append(recorder.masks)
            else:
                outs.append(variant.call(module, x()))
    return base, outs, masks


def _guard(family: str, vid: str, check: str, expected: str, fn) -> DropoutResult:
    try:
        measured, ok = fn()
    except PortingError as exc:
        measured, ok = f"PortingError: {exc}"[:200], False
    except HarnessError:
        raise
    except Exception as exc:
        measured, ok = describe(exc, limit=200), False
    return DropoutResult(family, vid, check, expected, measured, ok)


def fraction_check(variant: Variant, cfg: Config, p: float, weights: dict, inputs: dict) -> DropoutResult:
    """Each site's kept fraction over ``FRACTION_CALLS`` train calls at rate ``p``."""
    def measure():
        _, _, masks = _outputs(variant, cfg.replace(dropout=p), weights, inputs, FRACTION_CALLS, record=True)
        if not masks or not masks[0]:
            return "no draw", False
        if any(len(m) != len(masks[0]) for m in masks):
            return f"draws per call vary: {sorted({len(m) for m in masks})}", False
        said, ok = [], True
        for i in range(len(masks[0])):
            seen = [m[i] for m in masks]
            if any(s is None for s in seen):
                said.append(f"draw {i + 1}: no mask seen (a random op not compared with a rate)")
                ok = False
                continue
            kept, total = sum(s[1] for s in seen), sum(s[2] for s in seen)
            f, sd = kept / total, math.sqrt(p * (1 - p) / total)
            fine = abs(f - (1 - p)) <= Z * sd or (seen[0][0] == "either" and abs(f - p) <= Z * sd)
            ok = ok and fine
            said.append(f"{f:.3f}" if fine else f"draw {i + 1}: kept {f:.3f} (rate {1 - f:.3f})")
        return ", ".join(said), ok
    return _guard(variant.family, variant.id, f"train: kept fraction per site (p={p:g})",
                  f"1 - p within {Z:g} binomial sd", measure)


def mean_check(variant: Variant, cfg: Config, p: float, weights: dict, inputs: dict) -> DropoutResult:
    """Unbiased sites: the mean of ``MEAN_CALLS`` train outputs against the eval output."""
    def measure():
        base, outs, _ = _outputs(variant, cfg.replace(dropout=p), weights, inputs, MEAN_CALLS)
        stack = torch.stack([o.double() for o in outs])
        mean, se = stack.mean(0), stack.std(0) / math.sqrt(len(outs))
        gap = (mean - base.double()).abs()
        exact = se == 0  # no draw reaches these elements: they must equal the eval output
        tol = P.FLOAT64_ATOL + P.FLOAT64_RTOL * base.double().abs()
        if bool((gap[exact] > tol[exact]).any()):
            return f"elements no draw reaches differ by {float(gap[exact].max()):.3g}", False
        z = float((gap[~exact] / se[~exact]).max()) if bool((~exact).any()) else 0.0
        return f"max {z:.2f} standard errors (K={len(outs)})", z <= Z_MEAN
    return _guard(variant.family, variant.id, f"train: mean of {MEAN_CALLS} calls = eval (p={p:g})",
                  f"within {Z_MEAN:g} standard errors", measure)


def branches_check(variant: Variant, cfg: Config, p: float, weights: dict, inputs: dict,
                   branches: tuple[str, ...]) -> DropoutResult:
    """Residual branches' output projections zeroed: train output = eval output."""
    def measure():
        zeroed = {n: (torch.zeros_like(t) if n in branches else t) for n, t in weights.items()}
        base, outs, _ = _outputs(variant, cfg.replace(dropout=p), zeroed, inputs, 3)
        gaps = [P.gap(o, base.double()) for o in outs]
        ok = all(g.comparable and g.within(P.FLOAT64_ATOL) for g in gaps)
        return ("unchanged" if ok else f"changed by {max(g.max_abs for g in gaps):.3g}"), ok
    return _guard(variant.family, variant.id, f"train with residual branches zeroed = eval (p={p:g})",
                  "unchanged (float64's bound)", measure)


def statistical_checks(variant: Variant, cfg: Config, p: float, weights: dict, inputs: dict) -> list[DropoutResult]:
    """The kept fraction at ``p`` and ``SECOND_RATE``, then the mean or the zeroed branches
    (as the family says for the variant's traits); none for a variant with no dropout site."""
    family = variant.family_spec
    if not variant.traits.get("dropout_sites") or family.dropout_stats is None:
        return []
    second = SECOND_RATE if abs(p - SECOND_RATE) > 1e-9 else 0.4
    out = [fraction_check(variant, cfg, p, weights, inputs), fraction_check(variant, cfg, second, weights, inputs)]
    how = family.dropout_stats(variant.traits)
    if how == "mean":
        out.append(mean_check(variant, cfg, p, weights, inputs))
    elif how:
        out.append(branches_check(variant, cfg, p, weights, inputs, tuple(n for n in how if n in weights)))
    return out
