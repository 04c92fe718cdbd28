"""What ``harness.check.reference.judge`` returns, as data: a verdict per regime, dtype and
tensor (``RegimeResult`` holding ``TensorCheck``), the regimes seen and left out, how the
weights were paired, and one line for the whole (``Judgement.summary``).

The line that leads is chosen by kind: a hack first, then a semantic failure (a tensor that
is "different", a candidate that raises, a wrong dtype, ...), and precision advice ("less
precise") only where no regime shows a semantic difference; ``RegimeResult.kind`` says which."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from harness.base.hacks import HackFinding
from harness.base.verdicts import Verdict
from harness.check.reference_inputs import Regime
from harness.check.results import TensorCheck

SEMANTIC, PRECISION = "semantic", "precision"


def lead_check(failing: list[TensorCheck]) -> TensorCheck | None:
    """The failing check a regime's line names: the first that is not merely "less precise"
    (a different function outranks rounding), else the first."""
    return next((c for c in failing if c.verdict != Verdict.LESS_PRECISE), failing[0] if failing else None)


@dataclass
class RegimeResult:
    """One regime in one dtype: every tensor's check, and the one line that fails it ("");
    ``failed``: the check that line names, where a tensor's check fails it."""

    regime: Regime
    dtype: str
    checks: list[TensorCheck] = field(default_factory=list)
    failure: str = ""
    note: str = ""
    failed: TensorCheck | None = None

    @property
    def ok(self) -> bool:
        return not self.failure

    @property
    def kind(self) -> str:
        """"" (it passes), ``PRECISION`` (its failing tensor is the same function, less
        precise: advice on dtypes) or ``SEMANTIC`` (anything else: another function)."""
        if self.ok:
            return ""
        return PRECISION if self.failed is not None and self.failed.verdict == Verdict.LESS_PRECISE else SEMANTIC

    def as_dict(self) -> dict:
        return {"regime": self.regime.name, "kind": self.regime.kind.value, "dtype": self.dtype, "ok": self.ok,
                "failure": self.failure, "failure_kind": self.kind, "note": self.note,
                "tensors": [{"tensor": c.name, "verdict": c.verdict.value, "err": _num(c.err),
                             "baseline_err": _num(c.ref_err), "bound": _num(c.allowed), "note": c.note}
                            for c in self.checks]}


def _num(x: float | None) -> float | None:
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x


@dataclass
class Judgement:
    """A candidate against its reference. ``ok``: every regime seen passes; ``results`` per
    regime and dtype; ``skipped``: (regime, why) for those not tried or that the reference
    itself cannot take; ``weights``: how the reference's weights went into the candidate;
    ``semantics``: where the candidate's semantics were decided (float64, or its own dtype);
    ``hacks``: the reward hacks found (``harness.base.hacks.HackFinding``): any fails the
    judgement, and ``failure`` is then the first one's line ("hack: KIND: ...");
    ``failure``: otherwise the first semantically failing regime's line (the first failing
    one where every failure is "less precise"), with the other failing regimes named."""

    results: list[RegimeResult]
    skipped: list[tuple[str, str]]
    weights: str
    semantics: str
    notes: list[str] = field(default_factory=list)
    family: list = field(default_factory=list)  # the family's own spec results, where family= was given
    family_report: Any = None                     # ... and its whole CheckReport
    hacks: list[HackFinding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.hacks and all(r.ok for r in self.results) and all(getattr(f, "ok", True) for f in self.family)

    @property
    def regimes(self) -> tuple[str, ...]:
        """The regimes seen, in order."""
        return tuple(dict.fromkeys(r.regime.name for r in self.results))

    @property
    def failing(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.regime.name for r in self.results if not r.ok))

    @property
    def semantically_wrong(self) -> tuple[str, ...]:
        """The regimes where the candidate computes another function (not merely less precisely)."""
        return tuple(dict.fromkeys(r.regime.name for r in self.results if r.kind == SEMANTIC))

    @property
    def dtypes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.dtype for r in self.results))

    @property
    def tensors(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c.name.split(" (")[0] for r in self.results for c in r.checks))

    @property
    def failure(self) -> str:
        bad = [r for r in self.results if not r.ok]
        if self.hacks:
            more = f" (and {len(self.hacks) - 1} more hack(s))" if len(self.hacks) > 1 else ""
            also = f"; also wrong at: {', '.join(self.failing[:5])}{' ...' if len(self.failing) > 5 else ''}" \
                if bad else ""
            return self.hacks[0].line + more + also
        if not bad:
            fam = next((f for f in self.family if not getattr(f, "ok", True)), None)
            if fam is None:
                return ""
            where = " ".join(str(getattr(fam, k)) for k in ("family", "config", "case", "dtype") if hasattr(fam, k))
            return f"wrong in the family check ({where}): {getattr(fam, 'note', '') or fam}"
        lead = next((r for r in bad if r.kind == SEMANTIC), bad[0])
        wrong = [n for n in self.semantically_wrong if n != lead.regime.name]
        loose = [n for n in self.failing if n != lead.regime.name and n not in self.semantically_wrong]
        tail = "; ".join(f"{what}: {', '.join(names[:5])}{' ...' if len(names) > 5 else ''}"
                         for what, names in (("also wrong at", wrong), ("less precise at", loose)) if names)
        return lead.failure + (f" ({tail})" if tail else "")

    @property
    def summary(self) -> str:
        """One line: the verdict, the regimes and dtypes seen, the tensors judged, the weights
        (on a wrong verdict too where they were paired by creation order or by shape: a guess)."""
        if not self.ok:
            guessed = self.weights.startswith(("by creation order", "paired by shape"))
            return f"wrong: {self.failure}" + (f" (weights {self.weights})" if guessed else "")
        grads = sum(1 for t in self.tensors if t.startswith("grad:"))
        outs = len(self.tensors) - grads
        return (f"correct: {outs} output(s) and {grads} gradient(s) agree in {len(self.regimes)} regimes x "
                f"{', '.join(self.dtypes)} (semantics in {self.semantics}; weights {self.weights})")

    def verdict(self, regime: str, dtype: str, tensor: str) -> Verdict | None:
        for r in self.results:
            if r.regime.name == regime and r.dtype == dtype:
                for c in r.checks:
                    if c.name == tensor:
                        return c.verdict
        return None

    def as_dict(self) -> dict:
        return {"ok": self.ok, "summary": self.summary, "failure": self.failure, "regimes": list(self.regimes),
                "failing": list(self.failing), "skipped": [{"regime": n, "why": w} for n, w in self.skipped],
                "weights": self.weights, "semantics": self.semantics, "notes": self.notes,
                "hacks": [h.to_json() for h in self.hacks],
                "results": [r.as_dict() for r in self.results]}
