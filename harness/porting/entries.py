"""Map entries (``Param``, ``Chunk``, ``PerHeadChunk``, ``Concat``, ``Absent``/``Zero``, ``Transposed``,
``RopePermuted``, ``Offset``, ``Tied``), the ``Region`` of a module parameter an entry lies in, and the
helpers that build maps of them. Each entry says where it lies (``regions``), the code that
builds it (``code``) and itself under another module prefix (``rerooted``); no tensor is
read or written here (``portmap`` does that)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Iterable, Mapping, Union

import torch

from harness.base.errors import PortingError


@dataclass(frozen=True)
class Region:
    """Where an entry lies in the module parameter ``path``: the whole of it (``chunks``
    None), or the ``index``-th of ``chunks`` equal slices along ``dim``; with ``heads``, that
    slice inside each of ``heads`` equal blocks along ``dim`` (``PerHeadChunk``)."""

    path: str
    dim: int = 0
    index: int = 0
    chunks: int | None = None
    heads: int | None = None
    sizes: tuple[int, ...] = ()   # the chunks' sizes along ``dim`` when they differ (``Chunk``)

    def view(self, tensor: torch.Tensor) -> torch.Tensor:
        """The region of ``tensor`` (a view); per head it is shaped (..., heads, n, ...) along ``dim``."""
        if self.chunks is None:
            return tensor
        size, dim, chunks = tensor.shape[self.dim], self.dim, self.chunks
        if self.sizes:
            if sum(self.sizes) != size:
                raise PortingError(f"cannot split size {size} into chunks of sizes {list(self.sizes)} "
                                   f"(they add up to {sum(self.sizes)})")
            return tensor.narrow(dim, sum(self.sizes[:self.index]), self.sizes[self.index])
        if self.heads is not None:
            if size % (self.heads * chunks):
                raise PortingError(f"cannot split size {size} into {self.heads} heads of {chunks} equal chunks")
            return tensor.unflatten(dim, (self.heads, chunks, size // (self.heads * chunks))).select(dim + 1,
                                                                                                    self.index)
        if size % chunks:
            raise PortingError(f"cannot split size {size} into {chunks} equal chunks")
        step = size // chunks
        return tensor.narrow(dim, self.index * step, step)

    def flat(self, view: torch.Tensor) -> torch.Tensor:
        """A view as the canonical tensor lays it out: per head, (..., heads, n, ...) -> (..., heads * n, ...)."""
        return view.flatten(self.dim, self.dim + 1) if self.heads is not None else view

    def shaped(self, source: torch.Tensor, view: torch.Tensor) -> torch.Tensor:
        """A canonical slice in the shape of the region's ``view`` (``flat``'s inverse)."""
        return source.unflatten(self.dim, view.shape[self.dim:self.dim + 2]) if self.heads is not None else source


def _dim(dim: int) -> str:
    return f", dim={dim})" if dim else ")"


@dataclass(frozen=True)
class Param:
    """A whole module parameter."""

    path: str
    dim: ClassVar[int] = 0  # a whole parameter: along its first dim, as a Concat of one

    def regions(self) -> list[Region]:
        return [Region(self.path)]

    def code(self) -> str:
        return f'Param("{self.path}")'

    def rerooted(self, canonical_prefix: str, module_prefix: str) -> Param:
        return Param(module_prefix + self.path)


@dataclass(frozen=True)
class Chunk:
    """The ``index``-th of ``chunks`` equal slices of a parameter along ``dim``; with ``sizes``
    (one int per chunk, ``chunks`` then taken from it), the ``index``-th of slices of those
    sizes: a fused QKV whose K and V are narrower than Q (GQA, Phi-3's ``qkv_proj``):
    ``Chunk("qkv_proj.weight", 1, sizes=(H * d_k, H_kv * d_k, H_kv * d_k))`` is K."""

    path: str
    index: int
    chunks: int = 0
    dim: int = 0
    sizes: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.sizes:
            sizes = tuple(self.sizes)
            if not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in sizes) or (
                    self.chunks and self.chunks != len(sizes)):
                raise ValueError(f"Chunk({self.path!r}, {self.index!r}, sizes={self.sizes!r}): sizes must be "
                                 "positive integers, one per chunk")
            object.__setattr__(self, "sizes", sizes)
            object.__setattr__(self, "chunks", len(sizes))
        _check_index(self)

    def regions(self) -> list[Region]:
        return [Region(self.path, self.dim, self.index, self.chunks, sizes=self.sizes)]

    def code(self) -> str:
        if self.sizes:
            return f'Chunk("{self.path}", {self.index}, sizes={self.sizes}' + _dim(self.dim)
        return f'Chunk("{self.path}", {self.index}, {self.chunks}' + _dim(self.dim)

    def rerooted(self, canonical_prefix: str, module_prefix: str) -> Chunk:
        return Chunk(module_prefix + self.path, self.index, self.chunks, self.dim, self.sizes)


def _check_index(entry: Chunk | PerHeadChunk) -> None:
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

    def regions(self) -> list[Region]:
        return [Region(self.path, self.dim, self.index, self.chunks, self.heads)]

    def code(self) -> str:
        return f'PerHeadChunk("{self.path}", {self.index}, {self.chunks}, heads={self.heads}' + _dim(self.dim)

    def rerooted(self, canonical_prefix: str, module_prefix: str) -> PerHeadChunk:
        return PerHeadChunk(module_prefix + self.path, self.index, self.chunks, self.heads, self.dim)


@dataclass(frozen=True)
class Concat:
    """Several whole parameters concatenated along ``dim`` (per-head projections)."""

    paths: tuple[str, ...]
    dim: int = 0

    def __init__(self, paths: Iterable[str], dim: int = 0):
        object.__setattr__(self, "paths", tuple(paths))
        object.__setattr__(self, "dim", dim)

    def regions(self) -> list[Region]:
        return [Region(p, self.dim) for p in self.paths]

    def code(self) -> str:
        return "Concat([" + ", ".join(f'"{p}"' for p in self.paths) + "]" + _dim(self.dim)

    def rerooted(self, canonical_prefix: str, module_prefix: str) -> Concat:
        return Concat([module_prefix + p for p in self.paths], self.dim)


@dataclass(frozen=True)
class Absent:
    """A canonical parameter the variant does not have, read as the constant ``fill``: 0 for
    a bias of a bias-free Linear (``Zero()``), 1 for the weight of a norm the variant leaves
    out. A partner that has the parameter is compared with it set to ``fill``: for an absent
    final norm its own norm keeps a unit scale (a zero scale would flatten its output to the
    bias and every logit to the same value). ``fill`` = ``IDENTITY`` (``Identity()``): a
    square weight read as the identity matrix (a projection the variant leaves out)."""

    fill: float | str = 0.0

    def regions(self) -> list[Region]:
        return []

    def code(self) -> str:
        if self.fill == IDENTITY:
            return "Identity()"
        return "Zero()" if self.fill == 0 else f"Absent({self.fill:g})"

    def rerooted(self, canonical_prefix: str, module_prefix: str) -> Absent:
        return self

    def value(self, shape: Iterable[int], dtype: torch.dtype = torch.float64,
              device: torch.device | str = "cpu") -> torch.Tensor:
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


class _Converted:
    """An entry that converts another entry's tensor (a transpose, a row permutation, an
    offset): it reads the same regions of the module, along the same dimension."""

    inner: Union[Param, Chunk, PerHeadChunk, Concat]

    def regions(self) -> list[Region]:
        return self.inner.regions()

    @property
    def dim(self) -> int:
        return self.inner.dim


@dataclass(frozen=True)
class Transposed(_Converted):
    """The transpose of another 2-D entry: a weight stored as (in, out) where the family's
    canonical layout is (out, in), as GPT-2's ``Conv1D`` stores it. For a fused Conv1D
    weight (D, 3D) each projection is a column block: ``Transposed(Chunk(path, i, 3, dim=1))``."""

    inner: Union[Param, Chunk, PerHeadChunk, Concat]

    def code(self) -> str:
        return f"Transposed({self.inner.code()})"

    def rerooted(self, canonical_prefix: str, module_prefix: str) -> Transposed:
        return Transposed(self.inner.rerooted(canonical_prefix, module_prefix))

    def canonical(self, stored: torch.Tensor, grad: bool = False) -> torch.Tensor:
        """The canonical tensor (or gradient) of what ``inner`` holds."""
        return stored.t()

    def stored(self, canonical: torch.Tensor) -> torch.Tensor:
        """What ``inner`` holds for a canonical tensor (``canonical``'s inverse)."""
        return canonical.t()


@dataclass(frozen=True)
class RopePermuted(_Converted):
    """A q or k projection stored for interleaved RoPE (pairs 2i, 2i+1 rotate together, Meta's
    layout) where the canonical rows are for half-split RoPE (dims i and i + d/2, HF's
    ``rotate_half``): within each of ``heads`` heads of width d, canonical row j reads module
    row 2j (j < d/2) or 2(j - d/2) + 1. The canonical tensor is HF's Llama converter's
    ``permute(w)``: ``w.view(heads, d // 2, 2, D).transpose(1, 2).reshape(heads * d, D)``.
    With it an interleaved-RoPE module computes what the half-split canonical weights mean."""

    inner: Union[Param, Chunk, PerHeadChunk, Concat]
    heads: int
    fraction: float = 1.0  # a partial rotary: only the first r = 2 floor(d * fraction / 2) rows of a head

    @property
    def dim(self) -> int:  # the permutation is of rows, whatever the inner entry's dimension
        return 0

    def code(self) -> str:
        tail = f", fraction={self.fraction:g}" if self.fraction != 1.0 else ""
        return f"RopePermuted({self.inner.code()}, heads={self.heads}{tail})"

    def rerooted(self, canonical_prefix: str, module_prefix: str) -> RopePermuted:
        return RopePermuted(self.inner.rerooted(canonical_prefix, module_prefix), self.heads, self.fraction)

    def canonical(self, stored: torch.Tensor, grad: bool = False) -> torch.Tensor:
        """The canonical tensor (or gradient) of what ``inner`` holds: its rows permuted."""
        return stored[self.index(stored.shape[0]).to(stored.device)]

    def stored(self, canonical: torch.Tensor) -> torch.Tensor:
        """What ``inner`` holds for a canonical tensor: the permutation undone."""
        back = torch.empty_like(canonical)
        back[self.index(canonical.shape[0]).to(canonical.device)] = canonical
        return back

    def index(self, rows: int) -> torch.Tensor:
        """The module row each canonical row reads (a LongTensor of ``rows``); with a
        ``fraction`` below 1 the rows past each head's rotary part r read themselves."""
        d = rows // self.heads
        r = int(d * self.fraction) // 2 * 2
        j = torch.arange(d)
        within = torch.where(j < r // 2, 2 * j, torch.where(j < r, 2 * (j - r // 2) + 1, j))
        return (torch.arange(self.heads)[:, None] * d + within[None, :]).reshape(-1)


@dataclass(frozen=True)
class Offset(_Converted):
    """A parameter converted at load by adding ``offset``: the module holds canonical +
    ``offset`` (a checkpoint converter that folds Gemma's ``1 + w`` gain into a plain
    ``x * weight``: ``Offset(Param("weight"), 1.0)`` with the ``gain: "1+w"`` trait)."""

    inner: Union[Param, Chunk, PerHeadChunk, Concat]
    offset: float

    def code(self) -> str:
        return f"Offset({self.inner.code()}, {self.offset:g})"

    def rerooted(self, canonical_prefix: str, module_prefix: str) -> Offset:
        return Offset(self.inner.rerooted(canonical_prefix, module_prefix), self.offset)

    def canonical(self, stored: torch.Tensor, grad: bool = False) -> torch.Tensor:
        """The canonical tensor of what ``inner`` holds (canonical + offset); a gradient is the same."""
        return stored if grad else stored - self.offset

    def stored(self, canonical: torch.Tensor) -> torch.Tensor:
        """What ``inner`` holds for a canonical tensor: converted at load, canonical + offset."""
        return canonical + self.offset


@dataclass(frozen=True)
class Tied:
    """A canonical parameter that the variant holds in the same tensor as the canonical
    parameter ``to`` (a tied output projection, a shared embedding). It covers no module
    parameter of its own; its gradient accumulates on ``to``'s (it reads as zeros)."""

    to: str

    def regions(self) -> list[Region]:
        return []

    def code(self) -> str:
        return f'Tied("{self.to}")'

    def rerooted(self, canonical_prefix: str, module_prefix: str) -> Tied:
        return Tied(canonical_prefix + self.to)


MapEntry = Union[Param, Chunk, PerHeadChunk, Concat, Absent, Transposed, RopePermuted, Offset, Tied]
ParamMap = Mapping[str, MapEntry]


# Entries that lie in the module's parameters as the canonical tensor lays them out, and
# those that hold it in another layout (``canonical``/``stored`` convert).
Stored = Union[Param, Chunk, PerHeadChunk, Concat]
Relaid = Union[Transposed, RopePermuted, Offset]


def entry_code(entry: MapEntry) -> str:
    """The entry as the code that builds it: ``Transposed(Chunk("c_attn.weight", 0, 3, dim=1))``."""
    return entry.code()


def nest(param_map: ParamMap, canonical_prefix: str, module_prefix: str) -> dict[str, MapEntry]:
    """Re-root a sub-module's map: ``{"q.weight": Param("w_q.weight")}`` nested under
    ``("self_attn.", "attn.")`` gives ``{"self_attn.q.weight": Param("attn.w_q.weight")}``
    (a ``Tied`` entry's ``to`` is canonical: it takes the canonical prefix)."""
    return {canonical_prefix + name: entry.rerooted(canonical_prefix, module_prefix)
            for name, entry in param_map.items()}


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
