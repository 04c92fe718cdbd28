"""The reference's weights in the candidate (``harness.check.reference.judge``): by parameter
name where the names match, through a parameter map of the porting entries (``Param``,
``Chunk``, ``Concat``, ``Transposed``, ...) keyed by the reference's names where they do not,
by creation order where only the names differ and every shape lines up (KernelBench's own
pairing: both built after one seed), and by shape where the layers come in another order:
the parameters whose names match pair by name, the others by a shape each side holds once.
Anything else is one line naming the tensor, and the tensors no shape pairs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Union

import torch
from torch import nn

from harness.base.errors import PortingError
from harness.porting.entries import MapEntry, Param, Transposed
from harness.porting.portmap import PortMap

ParamMapLike = Union[Mapping[str, MapEntry], Callable[..., Mapping[str, MapEntry]]]  # a map, or one per init


def _shape(t: torch.Tensor) -> tuple[int, ...]:
    return tuple(t.shape)


def _params(module: nn.Module | None) -> dict[str, torch.Tensor]:
    return dict(module.named_parameters()) if module is not None else {}


@dataclass(frozen=True)
class WeightLink:
    """How the candidate's parameters hold the reference's: ``entries`` {reference name: entry
    into the candidate}; ``how``: said in the verdict ("by name", "by the map given",
    "by creation order (names differ: ...)", "paired by shape: gain<-norm.weight, ...",
    "none: neither side has parameters")."""

    entries: Mapping[str, MapEntry]
    shapes: Mapping[str, tuple[int, ...]]
    how: str

    def portmap(self, candidate: nn.Module) -> PortMap | None:
        if not self.entries:
            return None
        return PortMap("candidate", candidate, self.entries, self.shapes)

    def load(self, reference: nn.Module | None, candidate: nn.Module | None) -> None:
        """The reference's parameters (and its buffers of the same name and shape) into the candidate."""
        if candidate is None or reference is None:
            return
        pm = self.portmap(candidate)
        if pm is not None:
            pm.load({n: p.detach() for n, p in reference.named_parameters()})
        theirs = dict(candidate.named_buffers())
        with torch.no_grad():
            for name, b in reference.named_buffers():
                mine = theirs.get(name)
                if mine is not None and mine.shape == b.shape and mine.dtype == b.dtype:
                    mine.copy_(b)

    def grads(self, candidate: nn.Module | None) -> dict[str, torch.Tensor | None]:
        """The candidate's parameter gradients under the reference's names."""
        pm = self.portmap(candidate) if candidate is not None else None
        if pm is None:
            return {}
        return {n: pm.read(n, grad=True) for n in self.entries}


def _by_name_problem(ref: dict[str, torch.Tensor], cand: dict[str, torch.Tensor]) -> str | None:
    """The one line that says why the names do not pair the parameters, or None when they do."""
    for name, t in ref.items():
        if name in cand and _shape(cand[name]) != _shape(t):
            got = _shape(cand[name])
            hint = (f"; the transpose fits: map it as {Transposed(Param(name)).code()}"
                    if len(got) == 2 and got[::-1] == _shape(t) else "")
            return (f"parameter '{name}' has shape {got} in the candidate and {_shape(t)} in the reference"
                    f"{hint}")
    missing = [n for n in ref if n not in cand]
    extra = [n for n in cand if n not in ref]
    if missing:
        n = missing[0]
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        theirs = ", ".join(f"'{e}' {_shape(cand[e])}" for e in extra[:4]) or "none"
        return (f"candidate has no parameter '{n}' (reference shape {_shape(ref[n])}){more}; "
                f"candidate's unmatched: {theirs}; give param_map={{'{n}': Param(...)}} naming where it lives")
    if extra:
        e = extra[0]
        return (f"candidate's parameter '{e}' {_shape(cand[e])} has no counterpart in the reference: "
                "a candidate computes the reference's function on the reference's weights")
    return None


def link(reference: nn.Module | None, candidate: nn.Module | None,
         param_map: ParamMapLike | None = None, init: tuple = ()) -> WeightLink:
    """How the reference's weights go into the candidate; ``PortingError`` (one line) where they
    cannot. ``param_map`` may be a function of the constructor's arguments ``init`` (a fused
    QKV's chunk sizes follow the sizes a regime varies)."""
    ref, cand = _params(reference), _params(candidate)
    if callable(param_map):
        param_map = param_map(*init)
    shapes = {n: _shape(t) for n, t in ref.items()}
    if param_map is not None:
        unknown = sorted(set(param_map) - set(ref))
        if unknown:
            raise PortingError(f"param_map names {unknown[0]!r}, which the reference does not have "
                               f"(its parameters: {', '.join(list(ref)[:6]) or 'none'})")
        entries = {**{n: Param(n) for n in ref if n not in param_map and n in cand}, **param_map}
        made = WeightLink(entries, shapes, "by the map given")
        if candidate is not None and entries:
            made.portmap(candidate)  # validated now: one line naming the tensor
        return made
    if ref and candidate is None:
        raise PortingError(f"the reference has parameters ({', '.join(list(ref)[:4])}) and the candidate is a "
                           "function: give a module that holds them")
    if not ref and not cand:
        return WeightLink({}, shapes, "none (neither side has parameters)")
    problem = _by_name_problem(ref, cand)
    if problem is None:
        return WeightLink({n: Param(n) for n in ref}, shapes, "by name")
    if len(ref) == len(cand) and all(_shape(a) == _shape(b) for a, b in zip(ref.values(), cand.values())) \
            and set(ref) != set(cand):
        pairs = [f"{a}->{b}" for a, b in zip(ref, cand) if a != b]
        return WeightLink({a: Param(b) for a, b in zip(ref, cand)}, shapes,
                          f"by creation order (names differ: {', '.join(pairs[:3])}"
                          f"{' ...' if len(pairs) > 3 else ''})")
    paired, unpaired = by_shape(ref, cand)
    clash = any(n in cand and _shape(cand[n]) != _shape(t) for n, t in ref.items())  # the names' line is sharper
    if unpaired and len(ref) == len(cand) and not clash:  # renamed, reordered: say why the shapes do not pair
        first = next(n for n in ref if n not in cand)
        raise PortingError(f"the parameters pair neither by name nor by shape: {unpaired}; "
                           + (_transposed_hint(ref, cand) or
                              f"give param_map={{'{first}': Param(...)}} naming where each lives"))
    if unpaired:
        raise PortingError(problem)
    named = sum(1 for a, b in paired.items() if a == b)
    shown = [f"{b}<-{a}" for a, b in paired.items() if a != b]
    return WeightLink({a: Param(b) for a, b in paired.items()}, shapes,
                      f"paired by shape: {', '.join(shown)}{f' (the other {named} by name)' if named else ''}")


def _transposed_hint(ref: dict[str, torch.Tensor], cand: dict[str, torch.Tensor]) -> str:
    """The map that fits where one renamed 2-D parameter is held transposed and every other pairs
    by name ("" otherwise): the map is said, never applied unasked."""
    mine = [n for n in ref if n not in cand]
    theirs = [n for n in cand if n not in ref]
    if len(mine) != 1 or len(theirs) != 1 or any(_shape(cand[n]) != _shape(t) for n, t in ref.items() if n in cand):
        return ""
    r, c = _shape(ref[mine[0]]), _shape(cand[theirs[0]])
    if len(r) != 2 or c != r[::-1] or r == c:
        return ""
    return f"the transpose fits: give param_map={{'{mine[0]}': {Transposed(Param(theirs[0])).code()}}}"


def by_shape(ref: dict[str, torch.Tensor], cand: dict[str, torch.Tensor]) -> tuple[dict[str, str], str]:
    """({reference name: candidate name}, "") where the parameters pair one-to-one: those whose
    names and shapes match by name, every other by a shape each side holds once; otherwise
    ({}, the line naming the tensors left unpaired and why)."""
    pinned = {n: n for n, t in ref.items() if n in cand and _shape(cand[n]) == _shape(t)}
    rest_ref = {n: _shape(t) for n, t in ref.items() if n not in pinned}
    rest_cand = {n: _shape(t) for n, t in cand.items() if n not in pinned}
    shapes = list(dict.fromkeys([*rest_ref.values(), *rest_cand.values()]))
    if not shapes:
        return pinned, ""
    paired, why = dict(pinned), []
    for shape in shapes:
        mine = [n for n, s in rest_ref.items() if s == shape]
        theirs = [n for n, s in rest_cand.items() if s == shape]
        if len(mine) == len(theirs) == 1:
            paired[mine[0]] = theirs[0]
        elif mine and theirs:
            why.append(f"shape {shape} is held by the reference's {_names(mine)} and the candidate's "
                       f"{_names(theirs)} ({'ambiguous' if len(mine) == len(theirs) else 'not one-to-one'})")
        else:
            side = "reference's" if mine else "candidate's"
            why.append(f"the {side} {_names(mine or theirs)} {shape} has no partner of that shape")
    if not why:
        return paired, ""
    return {}, "; ".join(why[:3]) + (f" (and {len(why) - 3} more)" if len(why) > 3 else "")


def _names(names: list[str]) -> str:
    return ", ".join(f"'{n}'" for n in names[:4]) + (" ..." if len(names) > 4 else "")
