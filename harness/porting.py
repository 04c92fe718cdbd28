"""Seeded weight porting through a family's canonical parameters.

Each variant declares, next to its class, a *parameter map*: for every canonical
parameter of its family (``q.weight``, ``ffn.w1.bias``, ...) where it lives in the
variant's own module. The entries are data:

    Param("linear_q.weight")                  the whole parameter
    Chunk("qkv.weight", index=0, chunks=3)    rows 0:D of a fused Linear(D, 3D)
    Concat(["heads.0.q.weight", ...])         per-head rows h*d_k:(h+1)*d_k, stacked
    Zero()                                    not represented (a bias-free Linear):
                                              reads as zeros, accepts only zeros
    Absent(1.0)                               not represented, neutral value 1 (the
                                              weight of a final norm the write-up
                                              leaves out): reads as ones, accepts only
                                              ones; Zero() is Absent(0.0)
    Tied("embed.weight")                      the same tensor as another canonical
                                              parameter (weight tying): reads as it,
                                              accepts only a value equal to it
    Transposed(Param("c_proj.weight"))        stored as (in, out), the transpose of the
                                              canonical (out, in): GPT-2's Conv1D
    Transposed(Chunk("c_attn.weight", 0, 3, dim=1))
                                              columns 0:D of a Conv1D (D, 3D), transposed

Porting is strict: a map must cover every canonical parameter and every parameter of
the module exactly once (parameters outside the family are listed in ``fixed`` with a
reason); every shape is checked; a non-zero tensor the target cannot represent is an
error that names the parameter. Nothing is dropped silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Union

import torch
from torch import nn

from .errors import PortingError


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

    def regions(self) -> list[tuple[str, slice | None, int]]:
        return [(self.path, ("chunk", self.index, self.chunks), self.dim)]


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
    bias and every logit to the same value)."""

    fill: float = 0.0

    def regions(self) -> list:
        return []


def Zero() -> Absent:  # noqa: N802 - reads as the entry it builds, like Param(...)
    """Not represented, reads as zeros: ``Absent(0.0)``."""
    return Absent(0.0)


@dataclass(frozen=True)
class Transposed:
    """The transpose of another 2-D entry: a weight stored as (in, out) where the family's
    canonical layout is (out, in), as GPT-2's ``Conv1D`` stores it. For a fused Conv1D
    weight (D, 3D) each projection is a column block: ``Transposed(Chunk(path, i, 3, dim=1))``."""

    inner: Union[Param, Chunk, Concat]

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


MapEntry = Union[Param, Chunk, Concat, Absent, Transposed, Tied]
ParamMap = Mapping[str, MapEntry]


def entry_code(entry: MapEntry) -> str:
    """The entry as the code that builds it: ``Transposed(Chunk("c_attn.weight", 0, 3, dim=1))``."""
    if isinstance(entry, Transposed):
        return f"Transposed({entry_code(entry.inner)})"
    if isinstance(entry, Param):
        return f'Param("{entry.path}")'
    if isinstance(entry, Chunk):
        return f'Chunk("{entry.path}", {entry.index}, {entry.chunks}' + (f", dim={entry.dim})" if entry.dim else ")")
    if isinstance(entry, Concat):
        return "Concat([" + ", ".join(f'"{p}"' for p in entry.paths) + "]" + (f", dim={entry.dim})" if entry.dim else ")")
    if isinstance(entry, Tied):
        return f'Tied("{entry.to}")'
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
    if isinstance(entry, Param):
        entry = Param(module_prefix + entry.path)
    elif isinstance(entry, Chunk):
        entry = Chunk(module_prefix + entry.path, entry.index, entry.chunks, entry.dim)
    elif isinstance(entry, Concat):
        entry = Concat([module_prefix + p for p in entry.paths], entry.dim)
    return entry


def _view(tensor: torch.Tensor, region, dim: int) -> torch.Tensor:
    if region is None:
        return tensor
    _, index, chunks = region
    size = tensor.shape[dim]
    if size % chunks:
        raise PortingError(f"cannot split size {size} into {chunks} equal chunks")
    step = size // chunks
    return tensor.narrow(dim, index * step, step)


class PortMap:
    """A variant's parameter map bound to one built module; validated on creation."""

    def __init__(
        self,
        variant_id: str,
        module: nn.Module,
        param_map: ParamMap,
        canonical_shapes: Mapping[str, tuple[int, ...]],
        fixed: Mapping[str, str] | None = None,
    ):
        self.variant_id = variant_id
        self.module = module
        self.entries = dict(param_map)
        self.canonical_shapes = dict(canonical_shapes)
        self.fixed = dict(fixed or {})
        self.params = dict(module.named_parameters())
        self._validate()

    # -- validation ---------------------------------------------------------------
    def _fail(self, message: str) -> PortingError:
        return PortingError(f"{self.variant_id}: {message}")

    def _validate(self) -> None:
        missing = sorted(set(self.canonical_shapes) - set(self.entries))
        if missing:
            raise self._fail(f"parameter map has no entry for canonical {missing}")
        extra = sorted(set(self.entries) - set(self.canonical_shapes))
        if extra:
            raise self._fail(f"parameter map names unknown canonical {extra}")
        coverage = {name: torch.zeros(p.shape, dtype=torch.int32) for name, p in self.params.items()}
        for canonical, entry in self.entries.items():
            for path, region, dim in entry.regions():
                if path not in self.params:
                    raise self._fail(
                        f"canonical '{canonical}' maps to '{path}', which the module does not have"
                    )
                try:
                    _view(coverage[path], region, dim).add_(1)
                except PortingError as exc:
                    want = tuple(self.canonical_shapes[canonical])
                    raise self._fail(f"canonical '{canonical}': {exc} (dim {dim} of '{path}', shape "
                                     f"{tuple(self.params[path].shape)})"
                                     f"{self._orientation_hint(entry, want)}") from None
            if isinstance(entry, Tied) and not isinstance(self.entries.get(entry.to), (Param, Chunk, Concat, Transposed)):
                raise self._fail(f"canonical '{canonical}' is tied to '{entry.to}', which is not held by a parameter")
            if not isinstance(entry, Absent):
                shape = tuple(self.read(canonical).shape)
                want = tuple(self.canonical_shapes[canonical])
                if shape != want:
                    raise self._fail(
                        f"canonical '{canonical}' maps to a tensor of shape {shape}, "
                        f"the family's canonical shape is {want}{self._orientation_hint(entry, want)}"
                    )
        for name, count in coverage.items():
            if name in self.fixed:
                if count.any():
                    raise self._fail(f"'{name}' is listed as fixed but also mapped")
                continue
            if (count == 0).any():
                raise self._fail(
                    f"module parameter '{name}' has no canonical counterpart "
                    "(map it, or list it in `fixed` with the reason)"
                )
            if (count > 1).any():
                raise self._fail(f"module parameter '{name}' is mapped more than once")
        unknown_fixed = sorted(set(self.fixed) - set(self.params))
        if unknown_fixed:
            raise self._fail(f"`fixed` names parameters the module does not have: {unknown_fixed}")

    def _orientation_hint(self, entry: MapEntry, want: tuple[int, ...]) -> str:
        """When the other orientation fits, say so and name the entry that would."""
        if len(want) != 2:
            return ""
        if isinstance(entry, Transposed):
            plain = entry.inner
            if tuple(self._read_plain(plain).shape) == want:
                return f"; without Transposed it fits: {entry_code(plain)}"
            return ""
        if isinstance(entry, Chunk):
            other = Chunk(entry.path, entry.index, entry.chunks, 1 - entry.dim)
            try:
                fits = tuple(self._read_plain(other).shape)[::-1] == want
            except PortingError:
                fits = False
            if fits:
                return (f"; its transpose fits: an (in, out) layout such as GPT-2's Conv1D? "
                        f"map it as Transposed({entry_code(other)})")
        if tuple(self._read_plain(entry).shape)[::-1] == want:
            return (f"; its transpose fits: an (in, out) layout such as GPT-2's Conv1D? "
                    f"map it as {entry_code(Transposed(entry))}")
        return ""

    # -- reading and writing --------------------------------------------------------
    def represented(self, canonical: str) -> bool:
        return not isinstance(self.entries[canonical], Absent)

    def zero_names(self) -> Fills:
        """The canonical parameters the module does not have, each with the value it reads as."""
        return absent_fills(self.entries)

    def read(self, canonical: str, grad: bool = False) -> torch.Tensor | None:
        """The canonical tensor (a view into the module), or its gradient."""
        entry = self.entries[canonical]
        if isinstance(entry, Tied):
            # its gradient accumulates on ``to``: none of its own (zeros, as an unused
            # canonical tensor has), so a tied model and an oracle that uses ``to`` agree
            source = self.read(entry.to)
            return torch.zeros_like(source) if grad and source is not None else source
        if isinstance(entry, Absent):
            if grad:
                return None
            shape = self.canonical_shapes[canonical]
            some = next(iter(self.params.values()), None)
            dtype = some.dtype if some is not None else torch.float32
            device = some.device if some is not None else "cpu"
            return torch.full(tuple(shape), entry.fill, dtype=dtype, device=device)
        return self._read_plain(entry, grad)

    def _read_plain(self, entry: MapEntry, grad: bool = False) -> torch.Tensor | None:
        if isinstance(entry, Transposed):
            inner = self._read_plain(entry.inner, grad)
            return None if inner is None else inner.t()
        pieces = []
        for path, region, dim in entry.regions():
            tensor = self.params[path].grad if grad else self.params[path]
            if tensor is None:
                return None
            pieces.append(_view(tensor, region, dim))
        return pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=entry.dim)

    def export(self, grad: bool = False) -> dict[str, torch.Tensor | None]:
        with torch.no_grad():
            return {
                name: (None if (t := self.read(name, grad)) is None else t.detach().clone())
                for name in self.entries
            }

    def load(self, canonical: Mapping[str, torch.Tensor]) -> None:
        """Write canonical tensors into the module, strictly."""
        missing = sorted(set(self.entries) - set(canonical))
        if missing:
            raise self._fail(f"canonical weights lack {missing}")
        extra = sorted(set(canonical) - set(self.entries))
        if extra:
            raise self._fail(f"canonical weights have unknown {extra}")
        with torch.no_grad():
            for name, value in canonical.items():
                want = tuple(self.canonical_shapes[name])
                if tuple(value.shape) != want:
                    raise self._fail(
                        f"canonical '{name}' has shape {tuple(value.shape)}, expected {want}"
                    )
                entry = self.entries[name]
                if isinstance(entry, Tied):
                    if not torch.equal(value, canonical[entry.to]):
                        raise self._fail(
                            f"holds '{name}' in the same tensor as '{entry.to}' (tied) and cannot "
                            f"take a different value"
                        )
                    continue
                if isinstance(entry, Absent):
                    if (value != entry.fill).any():
                        raise self._fail(
                            f"has no '{name}' (not represented, reads as {entry.fill:g}) and cannot "
                            f"take another value (max |x - {entry.fill:g}| = "
                            f"{(value - entry.fill).abs().max().item():.3g})"
                        )
                    continue
                if isinstance(entry, Transposed):  # stored (in, out): write the transpose
                    entry, value = entry.inner, value.t()
                offset = 0
                for path, region, dim in entry.regions():
                    target = _view(self.params[path], region, dim)
                    size = target.shape[dim] if isinstance(entry, Concat) else None
                    source = value.narrow(dim, offset, size) if size is not None else value
                    if tuple(source.shape) != tuple(target.shape):
                        raise self._fail(
                            f"'{name}' slice for '{path}' has shape {tuple(source.shape)}, "
                            f"the parameter region has {tuple(target.shape)}"
                        )
                    target.copy_(source.to(dtype=target.dtype, device=target.device))
                    offset += size or 0


class Fills(dict):
    """{canonical name: the value it reads as} for parameters a variant does not have.
    Hashable (runs are cached by it), iterates over the names, and ``|`` joins two (a pair
    compared on the parameters either lacks)."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))

    def __or__(self, other: Mapping[str, float]) -> "Fills":  # type: ignore[override]
        return Fills({**self, **other})


def absent_fills(entries: Mapping[str, object]) -> Fills:
    """The map's ``Absent`` entries: {canonical name: the value it reads as}."""
    return Fills({n: e.fill for n, e in entries.items() if isinstance(e, Absent)})


def absent_norm(canonical: str) -> dict[str, Absent]:
    """Entries for a norm the variant does not have (e.g. no final norm after a post-norm
    stack): its weight reads as ones and its bias as zeros, the norm's neutral values."""
    return {f"{canonical}.weight": Absent(1.0), f"{canonical}.bias": Zero()}


def zero_unrepresented(weights: Mapping[str, torch.Tensor], fills: Mapping[str, float]) -> dict[str, torch.Tensor]:
    """``weights`` with each canonical tensor named in ``fills`` set to the value the variant
    reads it as (zero, one for an absent norm's weight): what a variant (or a pair of
    variants) whose map has ``Absent``/``Zero()`` there can be compared on."""
    return {n: (torch.full_like(t, fills[n]) if n in fills else t) for n, t in weights.items()}


def port_weights(src: PortMap, dst: PortMap) -> None:
    """Copy every canonical parameter from ``src``'s module into ``dst``'s module."""
    dst.load(src.export())


MapSpec = Union[ParamMap, Callable[..., ParamMap]]


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
