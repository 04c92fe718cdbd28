"""What checks return: spec, gradcheck, dropout, pair and kernel-path results (data only;
the report renders them, the JSON output reads them)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class PairResult:
    family: str
    a: str
    b: str
    case: str
    dtype: str
    device: str
    verdict: str
    expected: str
    reason: str
    ok: bool
    max_abs: float
    max_rel: float
    noise_ratio: float
    grad_verdict: str
    grad_max_abs: float
    grad_noise_ratio: float
    worst_grad: str
    path_a: str
    path_b: str
    note: str = ""
    config: str = ""

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
    verdict: str
    max_abs: float

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class TensorCheck:
    name: str
    verdict: str
    err: float
    ref_err: float | None
    allowed: float
    ratio: float
    note: str = ""


@dataclass
class SpecResult:
    family: str
    variant: str
    config: str
    case: str
    dtype: str
    device: str
    verdict: str          # equivalent | less precise | different | error
    expected: str         # equivalent | less precise | error
    ok: bool
    err: float            # the worst tensor's max |variant - oracle|
    ref_err: float        # the reference's on that tensor (NaN in float64)
    ratio: float          # err over the baseline error (the ulp floor when the baseline is exact)
    worst: str            # which tensor ("output", "grad:q.weight", ...)
    reference: str
    path: str
    note: str = ""
    tensors: list[TensorCheck] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class GradcheckResult:
    family: str
    variant: str
    config: str
    case: str
    ok: bool
    note: str

    def as_dict(self) -> dict:
        return asdict(self)


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
