"""Map entries (``Param``, ``Chunk``, ``PerHeadChunk``, ``Concat``, ``Absent``/``Zero``, ``Transposed``,
``RopePermuted``, ``Offset``, ``Tied``)
and the helpers that build maps of them; no tensors are moved here (``portmap`` does that)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Union

import torch


@dataclass(frozen=True)
class Param:
    """A whole module parameter."""

    path: str

    def regions(self) -> list[tuple[str, slice | None, int]]:
        return [(self.path, None, 0)]


@dataclass(frozen=True)
class Chunk:
    """The ``index``-th of ``chunks`` equal slices of a parameter along ``dim``."""

    path: str
    index: int
    chunks: int
    dim: int = 0

    def __post_init__(self) -> None:
        _check_index(self)

    def regions(self) -> list[tuple[str, slice | None, int]]:
        return [(self.path, ("chunk", self.index, self.chunks), self.dim)]


def _check_index(entry) -> None:
    """An index outside 0..chunks-1 (one counted from 1) is refused where the map is written."""
    if not (isinstance(entry.chunks, int) and entry.chunks >= 1):
        raise ValueError(f"{type(entry).__name__}({entry.path!r}, {entry.index!r}, {entry.chunks!r}): chunks must "
                         "be a positive integer")
    if not (isinstance(entry.index, int) and 0 <= entry.index < entry.chunks):
        raise ValueError(f"{type(entry).__name__}({entry.path!r}, {entry.index!r}, {entry.chunks!r}): index "
                         f"{entry.index!r} is outside 0..{entry.chunks - 1} (chunks are counted from 0)")


@dataclass(frozen=True)
class PerHeadChunk:
    """The ``index``-th of ``chunks`` equal slices inside each of ``heads`` equal blocks of a
    parameter along ``dim``: a fused projection stored per head, GPT-NeoX's
    ``query_key_value`` (H * 3 * d_k, D) viewed as (H, 3, d_k, D), so head h's q rows are
    3 d_k h .. 3 d_k h + d_k, its k rows the next d_k, its v rows the next. The canonical q is
    ``PerHeadChunk("query_key_value.weight", 0, 3, heads=H)`` (rows of head 0, then head 1...);
    with ``Chunk`` instead (q = the first third) every head would read another's rows."""

    path: str
    index: int
    chunks: int
    heads: int
    dim: int = 0

    def __post_init__(self) -> None:
        _check_index(self)

    def regions(self) -> list[tuple[str, tuple | None, int]]:
        return [(self.path, ("per head", self.index, self.chunks, self.heads), self.dim)]


@dataclass(frozen=True)
class Concat:
    """Several whole parameters concatenated along ``dim`` (per-head projections)."""

    paths: tuple[str, ...]
    dim: int = 0

    def __init__(self, paths: Iterable[str], dim: int = 0):
        object.__setattr__(self, "paths", tuple(paths))
        object.__setattr__(self, "dim", dim)

    def regions(self) -> list[tuple[str, slice | None, int]]:
        return [(p, None, self.dim) for p in self.paths]


@dataclass(frozen=True)
class Absent:
    """A canonical parameter the variant does not have, read as the constant ``fill``: 0 for
    a bias of a bias-free Linear (``Zero()``), 1 for the weight of a norm the variant leaves
    out. A partner that has the parameter is compared with it set to ``fill``: for an absent
    final norm its own norm keeps a unit scale (a zero scale would flatten its output to the
    bias and every logit to the same value). ``fill`` = ``IDENTITY`` (``Identity()``): a
    square weight read as the identity matrix (a projection the variant leaves out)."""

    fill: float | str = 0.0

    def regions(self) -> list:
        return []

    def value(self, shape, dtype=torch.float64, device="cpu") -> torch.Tensor:
        """The tensor it reads as."""
        if self.fill == IDENTITY:
            return torch.eye(*shape, dtype=dtype, device=device)
        return torch.full(tuple(shape), self.fill, dtype=dtype, device=device)


IDENTITY = "identity"


def Zero() -> Absent:  # noqa: N802 - reads as the entry it builds, like Param(...)
    """Not represented, reads as zeros: ``Absent(0.0)``."""
    return Absent(0.0)


def Identity() -> Absent:  # noqa: N802 - reads as the entry it builds, like Param(...)
    """A square weight not represented, read as the identity: an attention module without
    its output projection (BERT's ``BertSelfAttention``: the projection is in ``BertSelfOutput``)."""
    return Absent(IDENTITY)


@dataclass(frozen=True)
class Transposed:
    """The transpose of another 2-D entry: a weight stored as (in, out) where the family's
    canonical layout is (out, in), as GPT-2's ``Conv1D`` stores it. For a fused Conv1D
    weight (D, 3D) each projection is a column block: ``Transposed(Chunk(path, i, 3, dim=1))``."""

    inner: Union[Param, Chunk, PerHeadChunk, Concat]

    def regions(self) -> list[tuple[str, slice | None, int]]:
        return self.inner.regions()

    @property
    def dim(self) -> int:
        return self.inner.dim


@dataclass(frozen=True)
class RopePermuted:
    """A q or k projection stored for interleaved RoPE (pairs 2i, 2i+1 rotate together, Meta's
    layout) where the canonical rows are for half-split RoPE (dims i and i + d/2, HF's
    ``rotate_half``): within each of ``heads`` heads of width d, canonical row j reads module
    row 2j (j < d/2) or 2(j - d/2) + 1. The canonical tensor is HF's Llama converter's
    ``permute(w)``: ``w.view(heads, d // 2, 2, D).transpose(1, 2).reshape(heads * d, D)``.
    With it an interleaved-RoPE module computes what the half-split canonical weights mean."""

    inner: Union[Param, Chunk, PerHeadChunk, Concat]
    heads: int
    fraction: float = 1.0  # a partial rotary: only the first r = 2 floor(d * fraction / 2) rows of a head

    def regions(self) -> list[tuple[str, slice | None, int]]:
        return self.inner.regions()

    @property
    def dim(self) -> int:
        return 0

    def index(self, rows: int):
        """The module row each canonical row reads (a LongTensor of ``rows``); with a
        ``fraction`` below 1 the rows past each head's rotary part r read themselves."""
        d = rows // self.heads
        r = int(d * self.fraction) // 2 * 2
        j = torch.arange(d)
        within = torch.where(j < r // 2, 2 * j, torch.where(j < r, 2 * (j - r // 2) + 1, j))
        return (torch.arange(self.heads)[:, None] * d + within[None, :]).reshape(-1)


@dataclass(frozen=True)
class Offset:
    """A parameter converted at load by adding ``offset``: the module holds canonical +
    ``offset`` (a checkpoint converter that folds Gemma's ``1 + w`` gain into a plain
    ``x * weight``: ``Offset(Param("weight"), 1.0)`` with the ``gain: "1+w"`` trait)."""

    inner: Union[Param, Chunk, PerHeadChunk, Concat]
    offset: float

    def regions(self) -> list[tuple[str, slice | None, int]]:
        return self.inner.regions()

    @property
    def dim(self) -> int:
        return self.inner.dim


@dataclass(frozen=True)
class Tied:
    """A canonical parameter that the variant holds in the same tensor as the canonical
    parameter ``to`` (a tied output projection, a shared embedding). It covers no module
    parameter of its own; its gradient accumulates on ``to``'s (it reads as zeros)."""

    to: str

    def regions(self) -> list:
        return []


MapEntry = Union[Param, Chunk, PerHeadChunk, Concat, Absent, Transposed, RopePermuted, Offset, Tied]
ParamMap = Mapping[str, MapEntry]


def entry_code(entry: MapEntry) -> str:
    """The entry as the code that builds it: ``Transposed(Chunk("c_attn.weight", 0, 3, dim=1))``."""
    if isinstance(entry, Transposed):
        return f"Transposed({entry_code(entry.inner)})"
    if isinstance(entry, RopePermuted):
        tail = f", fraction={entry.fraction:g}" if entry.fraction != 1.0 else ""
        return f"RopePermuted({entry_code(entry.inner)}, heads={entry.heads}{tail})"
    if isinstance(entry, Offset):
        return f"Offset({entry_code(entry.inner)}, {entry.offset:g})"
    if isinstance(entry, Param):
        return f'Param("{entry.path}")'
    if isinstance(entry, Chunk):
        return f'Chunk("{entry.path}", {entry.index}, {entry.chunks}' + (f", dim={entry.dim})" if entry.dim else ")")
    if isinstance(entry, PerHeadChunk):
        return (f'PerHeadChunk("{entry.path}", {entry.index}, {entry.chunks}, heads={entry.heads}'
                + (f", dim={entry.dim})" if entry.dim else ")"))
    if isinstance(entry, Concat):
        paths = ", ".join(f'"{p}"' for p in entry.paths)
        return "Concat([" + paths + "]" + (f", dim={entry.dim})" if entry.dim else ")")
    if isinstance(entry, Tied):
        return f'Tied("{entry.to}")'
    if entry.fill == IDENTITY:
        return "Identity()"
    return "Zero()" if entry.fill == 0 else f"Absent({entry.fill:g})"


def nest(param_map: ParamMap, canonical_prefix: str, module_prefix: str) -> dict[str, MapEntry]:
    """Re-root a sub-module's map: ``{"q.weight": Param("w_q.weight")}`` nested under
    ``("self_attn.", "attn.")`` gives ``{"self_attn.q.weight": Param("attn.w_q.weight")}``."""
    out: dict[str, MapEntry] = {}
    for name, entry in param_map.items():
        out[canonical_prefix + name] = (Tied(canonical_prefix + entry.to) if isinstance(entry, Tied)
                                        else _rerooted(entry, module_prefix))
    return out


def _rerooted(entry: MapEntry, module_prefix: str) -> MapEntry:
    if isinstance(entry, Transposed):
        return Transposed(_rerooted(entry.inner, module_prefix))
    if isinstance(entry, RopePermuted):
        return RopePermuted(_rerooted(entry.inner, module_prefix), entry.heads, entry.fraction)
    if isinstance(entry, Offset):
        return Offset(_rerooted(entry.inner, module_prefix), entry.offset)
    if isinstance(entry, Param):
        entry = Param(module_prefix + entry.path)
    elif isinstance(entry, Chunk):
        entry = Chunk(module_prefix + entry.path, entry.index, entry.chunks, entry.dim)
    elif isinstance(entry, PerHeadChunk):
        entry = PerHeadChunk(module_prefix + entry.path, entry.index, entry.chunks, entry.heads, entry.dim)
    elif isinstance(entry, Concat):
        entry = Concat([module_prefix + p for p in entry.paths], entry.dim)
    return entry


def linear_entries(names: Mapping[str, str], bias: bool = True) -> dict[str, MapEntry]:
    """``{"q": "linear_q", ...}`` -> ``q.weight``/``q.bias`` entries; ``bias=False`` maps
    the canonical biases to ``Zero()``."""
    out: dict[str, MapEntry] = {}
    for canonical, module in names.items():
        out[f"{canonical}.weight"] = Param(f"{module}.weight")
        out[f"{canonical}.bias"] = Param(f"{module}.bias") if bias else Zero()
    return out


def norm_entries(canonical: str, module: str, weight: str = "weight", bias: str | None = "bias") -> dict[str, MapEntry]:
    """A norm's gain and bias; ``bias=None`` for a norm without one (RMSNorm)."""
    return {
        f"{canonical}.weight": Param(f"{module}.{weight}"),
        f"{canonical}.bias": Param(f"{module}.{bias}") if bias else Zero(),
    }


def fused_entries(weight: str, bias: str | None, names: tuple[str, ...]) -> dict[str, MapEntry]:
    """One fused Linear holding several projections as equal row blocks, in order:
    ``fused_entries("qkv.weight", "qkv.bias", ("q", "k", "v"))`` maps q to rows 0:D,
    k to rows D:2D, v to rows 2D:3D; ``bias=None`` maps the biases to ``Zero()``."""
    out: dict[str, MapEntry] = {}
    for i, name in enumerate(names):
        out[f"{name}.weight"] = Chunk(weight, i, len(names))
        out[f"{name}.bias"] = Chunk(bias, i, len(names)) if bias else Zero()
    return out
