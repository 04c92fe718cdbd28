"""What ``diff`` finds, as types: ``PairDiff`` for one pair on one case and dtype, made of a
row per trait (``TraitRow``), per traced intermediate (``TraceRow``) and per tensor
(``Where``), the first divergence (``FirstDivergence``), the backward-only one
(``BackwardDivergence``) and the attribution (``Attribution``). ``PairDiff.to_json()`` is
what ``diff --json`` writes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Mapping

from harness.base.verdicts import Verdict

UNOBSERVED = "-"  # a trace row's verdict where one side did not observe the intermediate


@dataclass(frozen=True)
class TraitRow:
    """One trait of the pair side by side; ``semantic`` traits decide verdicts."""

    trait: str
    a: Any
    b: Any
    differs: bool
    semantic: bool


@dataclass(frozen=True)
class TraceRow:
    """One canonical intermediate of the two traces, A against B."""

    unit: str
    what: str            # "out" or "in" (o:in, the attention output before the output projection)
    how_a: str
    how_b: str
    source_a: str
    source_b: str
    verdict: Verdict | str   # of this intermediate, A against B (UNOBSERVED where one side is unobserved)
    max_abs: float
    input_verdict: Verdict | str   # of the sub-module's input (where both inputs were observed)
    first: bool = False


@dataclass(frozen=True)
class Where:
    """Where one tensor (the output or a gradient) of A and B differs."""

    tensor: str
    verdict: Verdict
    max_abs: float
    mismatches: int
    numel: int
    worst_index: tuple[int, ...]
    worst_a: float
    worst_b: float
    row_kind: str
    rows: Mapping[str, int]   # mismatching elements per kind of row


class DivergenceKind(str, Enum):
    """What kind of place a first divergence is."""

    WIRING = "wiring"              # the two feed a sub-module from different places
    COMPUTATION = "computation"    # the same input, a different result
    INHERITED = "inherited"        # its input already differs: a step between observed sub-modules
    UNKNOWN = "unknown"            # its input is not observed on both sides
    ERROR = "error"                # a side did not run

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class FirstDivergence:
    """Where A and B first part: the unit, its row's label, the kind of place, and a sentence."""

    unit: str
    row: str
    kind: DivergenceKind
    text: str


@dataclass(frozen=True)
class BackwardDivergence:
    """The first backward step (by op) whose gradients differ while the outputs agree: its
    index in each side's backward, the gap, and the ops where the two graphs part before it."""

    op: str
    step_a: int
    step_b: int
    max_abs: float
    parted: tuple[str, str] | None
    text: str


@dataclass(frozen=True)
class Attribution:
    """One side's diverging sub-modules fed into the other: which were fed (in order), and
    whether the fed side's output then agrees. ``reversed``: B was fed into A (A has the
    sub-modules to feed, B has none)."""

    patched: tuple[str, ...]
    agrees: bool
    reversed: bool = False

    @property
    def text(self) -> str:
        source, target = ("B", "A") if self.reversed else ("A", "B")
        if not self.patched:
            return f"no sub-module of {target} to feed (none observed as a module)"
        fed = f"with {source}'s {' + '.join(self.patched)} fed into {target}, "
        if self.agrees:
            return (fed + f"{target}'s output agrees with {source}'s: the whole difference comes from "
                    + ("there" if len(self.patched) == 1 else "those"))
        return fed + ("the outputs still differ: the difference is not inside the traced sub-modules alone "
                      "(their order or wiring differs)")

    def to_json(self) -> dict:
        out: dict[str, Any] = {"patched": list(self.patched), "agrees": self.agrees, "text": self.text}
        return out | ({"reversed": True} if self.reversed else {})


@dataclass(frozen=True)
class PairDiff:
    """Everything ``diff`` says about one pair on one case and dtype. Where a side did not
    run (``errors``), the verdict is ``ERROR`` and nothing was traced: the rows are empty."""

    family: str
    a: str
    b: str
    case: str
    dtype: str
    device: str
    expected: Verdict                  # declared: EQUIVALENT or DIFFERENT
    declared_reason: str               # the differing semantic traits ('' when equivalent)
    traits: tuple[TraitRow, ...]
    errors: Mapping[str, str]          # variant id -> why it did not run
    paths: Mapping[str, str]           # variant id -> the kernel path taken with autograd
    mistakes: Mapping[str, str]        # variant id -> its own mistake, named as ``check`` names it
    verdict: Verdict
    seconds: float
    worst: str | None = None           # the tensor whose difference is the worst
    trace: tuple[TraceRow, ...] = ()
    first: FirstDivergence | None = None
    backward: BackwardDivergence | None = None
    attribution: Attribution | None = None
    where: tuple[Where, ...] = ()
    ops: tuple[tuple[str, str, str], ...] = ()   # (tag, A's ops, B's ops), aligned
    op_counts: Mapping[str, int] = field(default_factory=dict)
    paths_no_grad: Mapping[str, str] = field(default_factory=dict)
    hints: tuple[str, ...] = ()
    hint_candidates: int = 0
    # where the first divergence is inside the attention on a case whose inputs are one tensor
    # in several roles (self-attention): the first divergence on a case with them apart
    apart: str = ""
    stateful: Mapping[str, str] = field(default_factory=dict)  # variant id -> how its output
    # depends on the calls before it (``harness.check.spec.call_order_dependence``)
    tracebacks: Mapping[str, str] = field(default_factory=dict)  # id -> traceback, where the harness itself failed

    @property
    def worst_where(self) -> Where | None:
        return next((w for w in self.where if w.tensor == self.worst), None)

    def to_json(self) -> dict:
        """The result as ``diff --json`` writes it (an error row has no traced part)."""
        head = {"family": self.family, "a": self.a, "b": self.b, "case": self.case, "dtype": self.dtype,
                "device": self.device, "expected": self.expected, "declared_reason": self.declared_reason,
                "traits": [_shallow(t) for t in self.traits], "errors": dict(self.errors),
                **({"tracebacks": dict(self.tracebacks)} if self.tracebacks else {}),  # the harness's failures only
                "paths": dict(self.paths), "mistakes": dict(self.mistakes), "verdict": self.verdict}
        if self.stateful:
            head["stateful"] = dict(self.stateful)
        if self.errors:
            body: dict[str, Any] = {"trace": [], "first": None, "attribution": None, "where": [], "ops": [],
                                    "hints": []}
        else:
            body = {"worst": self.worst, "trace": [dataclasses.asdict(r) for r in self.trace],
                    "first": _asdict(self.first), "backward": _asdict(self.backward), "apart": self.apart,
                    "attribution": None if self.attribution is None else self.attribution.to_json(),
                    "where": [dataclasses.asdict(w) for w in self.where], "ops": [list(o) for o in self.ops],
                    "op_counts": dict(self.op_counts), "paths_no_grad": dict(self.paths_no_grad),
                    "hints": list(self.hints), "hint_candidates": self.hint_candidates}
        return {**head, **body, "seconds": self.seconds}


def _shallow(row) -> dict:
    """A row's fields as they are (a trait's value stays the object it is, written as its text)."""
    return {f.name: getattr(row, f.name) for f in dataclasses.fields(row)}


def _asdict(value) -> dict | None:
    return None if value is None else dataclasses.asdict(value)
