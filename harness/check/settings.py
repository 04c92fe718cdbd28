"""What a whole check is asked to do, as one frozen value (``CheckSettings``): built once
from the command line or a caller's keywords and passed through whole, never rebuilt."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any, Iterable

from harness.check.precision import PRECISION_FACTOR

# Dtypes where "less precise" is reported but is not a contradiction unless --strict-precision:
# CPU half-precision kernels upcast differently by design (measured: nn.TransformerEncoderLayer
# with norm_first=True has 72x the float16 gradient error of the definition evaluated in
# float16, on one config), so a 2x rule there would flag PyTorch's own modules.
LENIENT_DTYPES = ("bfloat16", "float16")


class PairMode(str, enum.Enum):
    """How the pair matrix is made (``--pairs``)."""

    DERIVED = "derived"  # from the equivalence classes and the two specs
    ALL = "all"          # every pair measured from its own runs


@dataclass(frozen=True)
class CheckSettings:
    """``device``: where variants run; ``dtypes``: the precision dtypes (float64 always runs,
    for semantics); ``factor``: the precision factor; ``strict``: 'less precise' in bfloat16
    and float16 is a contradiction too; ``pairs``: derived or measured; ``extras``: paths,
    gradcheck and dropout too; ``variants``: the keys (``family/id``) checked, None for every
    one (the family references run anyway, as the baseline); ``compile_backend``: also each
    attention/layer variant under ``torch.compile`` with this backend."""

    device: str = "cpu"
    dtypes: tuple[str, ...] = ("float32",)
    factor: float = PRECISION_FACTOR
    strict: bool = False
    pairs: PairMode = PairMode.DERIVED
    extras: bool = True
    variants: frozenset[str] | None = None
    compile_backend: str | None = None

    def __post_init__(self) -> None:  # the keyword forms callers give: a list of dtypes, "all"
        object.__setattr__(self, "dtypes", tuple(self.dtypes) or ("float32",))
        object.__setattr__(self, "pairs", PairMode(self.pairs))
        if self.variants is not None:
            object.__setattr__(self, "variants", frozenset(self.variants))

    @classmethod
    def of(cls, settings: CheckSettings | None = None, *, device: str | None = None,
           dtypes: Iterable[str] | None = None, **fields: Any) -> CheckSettings:
        """``settings`` (or the defaults) with the fields given as keywords replaced; ``device``
        and ``dtypes`` only where given."""
        given = {**({"device": device} if device is not None else {}),
                 **({"dtypes": tuple(dtypes)} if dtypes is not None else {}), **fields}
        return dataclasses.replace(settings or cls(), **given)

    @property
    def lenient(self) -> tuple[str, ...]:
        """The dtypes where 'less precise' is not a contradiction."""
        return () if self.strict else LENIENT_DTYPES

    @property
    def report_dtypes(self) -> list[str]:
        """float64 first (semantics), then the precision dtypes."""
        return ["float64", *[d for d in self.dtypes if d != "float64"]]

    def wants(self, key: str) -> bool:
        """Whether the variant ``key`` (``family/id``) is checked."""
        return self.variants is None or key in self.variants
