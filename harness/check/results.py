"""What checks return: spec, gradcheck, dropout, pair and kernel-path results, and what
the whole-model runs above them return (the copy task's runs), as data only: the report
renders them, the JSON output reads them."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from harness.base.config import Config
from harness.base.failures import traceback_if_any
from harness.base.verdicts import Verdict

if TYPE_CHECKING:
    from harness.families.base import PathFinding


class Cell(NamedTuple):
    """Where one spec result sits: a variant (its id) of a family on one config, case and
    dtype. Results are joined and looked up on it, each field by name."""

    family: str
    variant: str
    config: str
    case: str
    dtype: str


@dataclass
class PairResult:
    family: str
    a: str
    b: str
    case: str
    dtype: str
    device: str
    verdict: Verdict
    expected: Verdict
    reason: str
    ok: bool
    max_abs: float
    max_rel: float
    noise_ratio: float
    grad_verdict: Verdict
    grad_max_abs: float
    grad_noise_ratio: float
    worst_grad: str
    path_a: str
    path_b: str
    note: str = ""
    config: str = ""
    declared: str = ""  # the declarations that expect this verdict (each side's SpecResult.declared), or ""

    def __post_init__(self) -> None:
        self.verdict = Verdict(self.verdict)
        self.expected = Verdict(self.expected)
        self.grad_verdict = Verdict(self.grad_verdict)

    @property
    def sides(self) -> tuple[Cell, Cell]:
        """The cells of the two specs this pair compares."""
        return (Cell(self.family, self.a, self.config, self.case, self.dtype),
                Cell(self.family, self.b, self.config, self.case, self.dtype))

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class PathResult:
    """Per variant and case: the autograd path against the no_grad (inference) path."""

    family: str
    variant: str
    case: str
    dtype: str
    device: str
    path_autograd: str
    path_inference: str
    verdict: Verdict
    max_abs: float

    def __post_init__(self) -> None:
        self.verdict = Verdict(self.verdict)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class TensorCheck:
    name: str
    verdict: Verdict
    err: float
    ref_err: float | None
    allowed: float
    ratio: float
    note: str = ""
    max_ratio: float = math.nan  # the largest error's ratio to the baseline's (shown; the verdict reads the RMS)
    n: int = 0                   # elements the RMS averages
    shown: bool = False          # its note is said even when it is equivalent

    def __post_init__(self) -> None:
        self.verdict = Verdict(self.verdict)

    @classmethod
    def missing(cls, name: str) -> TensorCheck:
        """A tensor the variant's run did not produce: different."""
        return cls(name, Verdict.DIFFERENT, math.inf, None, 0.0, math.inf, f"{name} is missing")

    @classmethod
    def shape_differs(cls, name: str, shape: tuple[int, ...], oracle: tuple[int, ...]) -> TensorCheck:
        """A tensor of another shape than its oracle's (the same values unflattened are still
        another output): different, the line saying both shapes."""
        return cls(name, Verdict.DIFFERENT, math.inf, None, 0.0, math.inf,
                   f"{name}: shape {tuple(shape)}, the oracle's is {tuple(oracle)}")

    @classmethod
    def pattern_differs(cls, name: str, err: float, ref_err: float | None, mismatched: int) -> TensorCheck:
        """NaN or inf where the oracle has a finite value, or the reverse: different."""
        return cls(name, Verdict.DIFFERENT, err, ref_err, 0.0, math.inf,
                   f"{name}: NaN/inf pattern differs from the oracle in {mismatched} element(s)")


@dataclass
class SpecResult:
    family: str
    variant: str
    config: str
    case: str
    dtype: str
    device: str
    verdict: Verdict          # equivalent | less precise | different | error
    expected: Verdict     # equivalent | less precise | error
    ok: bool
    err: float            # the worst tensor's max |variant - oracle|
    ref_err: float        # the reference's on that tensor (NaN in float64)
    ratio: float          # err over the baseline error (the ulp floor when the baseline is exact)
    worst: str            # which tensor ("output", "grad:q.weight", ...)
    reference: str
    path: str
    note: str = ""
    tensors: list[TensorCheck] = field(default_factory=list)
    # the declaration that expects a verdict other than agreement here (a mask fill the dtype
    # cannot hold: "annotated: fill -1e+09 overflows float16"; a path finding's reason), or ""
    declared: str = ""
    # the case's own run holds or not, but a build called on other inputs first gives another
    # output (state kept between calls: ``spec.call_order_dependence``)
    depends_on_earlier_calls: bool = False
    # the declared path finding that makes this failure a finding (written first in ``note``;
    # not in ``as_dict``, whose ``declared`` and ``note`` say it), or None
    finding: PathFinding | None = None
    # where the check itself failed (the harness's own failure, a bug): its whole traceback
    # (``harness.base.failures.harness_traceback``); None otherwise, and then not in ``as_dict``
    traceback: str | None = None
    # float64: what the oracle's run noted of each trait's reach (``harness.families.reach.Reach``;
    # not in ``as_dict``: the report's ``not_exercised`` says what no case reached)
    reaches: tuple = ()

    def __post_init__(self) -> None:
        self.verdict = Verdict(self.verdict)
        self.expected = Verdict(self.expected)

    @property
    def cell(self) -> Cell:
        return Cell(self.family, self.variant, self.config, self.case, self.dtype)

    def as_dict(self) -> dict:
        out = asdict(self)
        del out["finding"], out["reaches"]
        return traceback_if_any(out)


@dataclass
class GradcheckResult:
    family: str
    variant: str
    config: str
    case: str
    ok: bool
    note: str
    traceback: str | None = None  # where gradcheck failed in the harness's own code (then in ``as_dict``)

    def as_dict(self) -> dict:
        return traceback_if_any(asdict(self))


@dataclass
class DropoutResult:
    family: str
    variant: str
    check: str            # "eval: output unchanged (p=...)" | "train: draws per call (p=...)"
    expected: str
    measured: str
    ok: bool

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class CompiledResult:
    family: str
    variant: str
    config: str
    case: str
    dtype: str
    backend: str
    verdict: Verdict          # identical | equivalent | less precise | different | error
    ok: bool
    graphs: int           # graphs Dynamo compiled for this call (0: it ran eager)
    graph_breaks: int
    err: float            # compiled vs oracle, worst tensor
    eager_err: float      # eager vs oracle, same tensor
    note: str = ""
    traceback: str | None = None  # where a run failed in the harness's own code (then in ``as_dict``)

    def __post_init__(self) -> None:
        self.verdict = Verdict(self.verdict)

    def as_dict(self) -> dict:
        return traceback_if_any(asdict(self))


@dataclass
class CheckReport:
    configs: dict[str, Config]
    dtypes: list[str]
    specs: list[SpecResult] = field(default_factory=list)
    pairs: list[PairResult] = field(default_factory=list)
    paths: list[PathResult] = field(default_factory=list)
    gradchecks: list[GradcheckResult] = field(default_factory=list)
    dropouts: list[DropoutResult] = field(default_factory=list)
    compiled: list[CompiledResult] = field(default_factory=list)
    skipped: list[tuple[str, str, str, str]] = field(default_factory=list)  # family, variant, config, why
    # declarations no checked case reached (``harness.check.reach.NotExercised``): not a
    # contradiction, never a silent pass either
    not_exercised: list = field(default_factory=list)
    # the configs of the cases added to reach a declaration, by name (``reach:TRAIT:VARIANT``)
    added_configs: dict[str, Config] = field(default_factory=dict)
    # k/v caches, one row per model: its cached sessions against re-running the prefix and
    # against the full forward (harness.systems.cache_parity's CacheCheck, added by the check
    # command: the systems layer sits above this one)
    caches: list = field(default_factory=list)
    # the run caches the check made, one per config (harness.check.runs.RunCache; not
    # serialized): a trace on the same config reads its runs instead of making them again
    sessions: list = field(default_factory=list, repr=False, compare=False)

    @property
    def failures(self) -> list:
        """Everything that contradicts a declaration: a failing spec, gradcheck, dropout or
        compiled check, and a measured pair (``--pairs all``) that contradicts while both its
        specs hold (a pair whose spec fails is counted once, as that spec)."""
        failing = {s.cell for s in self.specs if not s.ok}
        pairs = [p for p in self.pairs if not p.ok and not failing.intersection(p.sides)]
        return ([s for s in self.specs if not s.ok] + [g for g in self.gradchecks if not g.ok]
                + [d for d in self.dropouts if not d.ok] + [c for c in self.compiled if not c.ok]
                + [c for c in self.caches if not c.ok] + pairs)

    def merge(self, part: CheckReport) -> None:
        """Add ``part``'s results (one family's, ``harness.check.api``) to this report's."""
        for name in ("specs", "pairs", "paths", "gradchecks", "dropouts", "compiled", "skipped", "caches",
                     "not_exercised"):
            getattr(self, name).extend(getattr(part, name))
        self.added_configs.update(part.added_configs)

    def as_dict(self) -> dict:
        return {
            "configs": {n: {**asdict(c), "d_k": c.d_k} for n, c in self.configs.items()},
            "dtypes": self.dtypes,
            "specs": [s.as_dict() for s in self.specs],
            "pairs": [p.as_dict() for p in self.pairs],
            "paths": [p.as_dict() for p in self.paths],
            "gradchecks": [g.as_dict() for g in self.gradchecks],
            "dropouts": [d.as_dict() for d in self.dropouts],
            "compiled": [c.as_dict() for c in self.compiled],
            "caches": [c.as_dict() for c in self.caches],
            "skipped": [dict(zip(("family", "variant", "config", "why"), s)) for s in self.skipped],
            "not_exercised": [n.as_dict() for n in self.not_exercised],
            "contradictions": len(self.failures),
        }


@dataclass
class CopyRun:
    """One model trained on the copy task (``harness.systems.copy_task``): its loss per
    update, and greedy decoding's exact-match and token accuracy on held-out sequences."""

    variant: str
    steps: int
    losses: list[float]
    exact_match: float
    token_accuracy: float
    seconds: float

    def as_dict(self) -> dict:
        return asdict(self)
