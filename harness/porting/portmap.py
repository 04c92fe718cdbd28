"""Seeded weight porting through a family's canonical parameters.

Each variant declares, next to its class, a *parameter map*: for every canonical
parameter of its family (``q.weight``, ``ffn.w1.bias``, ...) where it lives in the
variant's own module. The entries are data:

    Param("linear_q.weight")                  the whole parameter
    Chunk("qkv.weight", index=0, chunks=3)    rows 0:D of a fused Linear(D, 3D)
    Chunk("qkv.weight", 1, sizes=(D, d, d))   rows D:D+d of a fused Linear(D, D + 2d) (GQA)
    PerHeadChunk("query_key_value.weight", 0, 3, heads=H)
                                              the q rows of each head of a fused
                                              Linear stored per head (GPT-NeoX)
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

from typing import Callable, Mapping, Union, get_args

import torch
from torch import nn

from harness.base.errors import PortingError
from harness.porting.entries import (
    IDENTITY,
    Absent,
    Chunk,
    Concat,
    MapEntry,
    ParamMap,
    Relaid,
    Stored,
    Tied,
    Transposed,
    Zero,
    entry_code,
)


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
        coverage = coverage_counters(self.params, self.entries.values())
        for canonical, entry in self.entries.items():
            for region in entry.regions():
                path = region.path
                if path not in self.params and path in dict(self.module.named_buffers()):
                    raise self._fail(
                        f"canonical '{canonical}' maps to '{path}', which the module holds as a buffer, not a "
                        "parameter: weights are ported into parameters (make it an nn.Parameter, "
                        "requires_grad=False if it must not train)")
                if path not in self.params:
                    raise self._fail(
                        f"canonical '{canonical}' maps to '{path}', which the module does not have"
                    )
                try:
                    region.view(coverage[path]).add_(1)
                except PortingError as exc:
                    want = tuple(self.canonical_shapes[canonical])
                    raise self._fail(f"canonical '{canonical}': {exc} (dim {region.dim} of '{path}', shape "
                                     f"{tuple(self.params[path].shape)})"
                                     f"{self._orientation_hint(entry, want)}") from None
            tied_to = self.entries.get(entry.to) if isinstance(entry, Tied) else None
            if isinstance(entry, Tied) and not isinstance(tied_to, (*get_args(Stored), *get_args(Relaid))):
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
            other = Chunk(entry.path, entry.index, entry.chunks, 1 - entry.dim, entry.sizes)
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
            return entry.value(shape, dtype, device)
        return self._read_plain(entry, grad)

    def _read_plain(self, entry: MapEntry, grad: bool = False) -> torch.Tensor | None:
        return read_entry(entry, lambda path: self.params[path].grad if grad else self.params[path], grad)

    def export(self, grad: bool = False) -> dict[str, torch.Tensor | None]:
        with torch.no_grad():
            return {
                name: (None if (t := self.read(name, grad)) is None else t.detach().clone())
                for name in self.entries
            }

    def load(self, canonical: Mapping[str, torch.Tensor], *, partial: bool = False) -> None:
        """Write canonical tensors into the module, strictly; ``partial``: only some of them
        (one layer at a time: the caller sees that every name comes once)."""
        missing = sorted(set(self.entries) - set(canonical))
        if missing and not partial:
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
                    if entry.to not in canonical:  # a partial load: the tensor it is tied to holds it
                        continue
                    if not torch.equal(value, canonical[entry.to]):
                        raise self._fail(
                            f"holds '{name}' in the same tensor as '{entry.to}' (tied) and cannot "
                            f"take a different value"
                        )
                    continue
                if isinstance(entry, Absent):
                    want = entry.value(value.shape, value.dtype, value.device)
                    if (value != want).any():
                        said = "the identity" if entry.fill == IDENTITY else f"{entry.fill:g}"
                        raise self._fail(
                            f"has no '{name}' (not represented, reads as {said}) and cannot "
                            f"take another value (max |x - {said}| = {(value - want).abs().max().item():.3g})"
                        )
                    continue
                while isinstance(entry, get_args(Relaid)):  # stored (in, out), for interleaved RoPE, or + offset
                    entry, value = entry.inner, entry.stored(value)
                offset = 0
                for region in entry.regions():
                    dim = region.dim
                    target = region.view(self.params[region.path])
                    size = target.shape[dim] if isinstance(entry, Concat) else None
                    source = region.shaped(value.narrow(dim, offset, size) if size is not None else value, target)
                    if tuple(source.shape) != tuple(target.shape):
                        raise self._fail(
                            f"'{name}' slice for '{region.path}' has shape {tuple(source.shape)}, "
                            f"the parameter region has {tuple(target.shape)}"
                        )
                    target.copy_(source.to(dtype=target.dtype, device=target.device))
                    offset += size or 0


def read_entry(entry: MapEntry, lookup: Callable[[str], torch.Tensor | None],
               grad: bool = False) -> torch.Tensor | None:
    """The canonical tensor a (non-``Absent``, non-``Tied``) entry reads from the tensors
    ``lookup`` gives by path (a module's parameters, or a checkpoint's tensors); ``grad``:
    they are gradients (an ``Offset`` then reads them as they are)."""
    if isinstance(entry, get_args(Relaid)):
        inner = read_entry(entry.inner, lookup, grad)
        return None if inner is None else entry.canonical(inner, grad)
    pieces = []
    for region in entry.regions():
        tensor = lookup(region.path)
        if tensor is None:
            return None
        pieces.append(region.flat(region.view(tensor)))
    return pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=entry.dim)


def coverage_counters(shapes: Mapping[str, torch.Tensor | tuple], entries) -> dict[str, torch.Tensor]:
    """A zero int32 counter per parameter, kept only along the dims some entry slices (size 1
    along the others): counting which regions each entry covers needs no more, and a large
    model's counters stay small."""
    sliced: dict[str, set[int]] = {}
    for entry in entries:
        for region in entry.regions():
            if region.chunks is not None:
                sliced.setdefault(region.path, set()).add(region.dim)
    out = {}
    for name, value in shapes.items():
        shape = tuple(value.shape) if isinstance(value, torch.Tensor) else tuple(value)
        keep = sliced.get(name, set())
        out[name] = torch.zeros([n if d in keep else 1 for d, n in enumerate(shape)], dtype=torch.int32)
    return out


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
    return {n: (Absent(fills[n]).value(t.shape, t.dtype, t.device) if n in fills else t) for n, t in weights.items()}


def port_weights(src: PortMap, dst: PortMap) -> None:
    """Copy every canonical parameter from ``src``'s module into ``dst``'s module."""
    dst.load(src.export())


MapSpec = Union[ParamMap, Callable[..., ParamMap]]
