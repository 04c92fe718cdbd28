"""The reference's weights in the candidate (``harness.check.reference.judge``): by parameter
name where the names match, through a parameter map of the porting entries (``Param``,
``Chunk``, ``Concat``, ``Transposed``, ...) keyed by the reference's names where they do not,
and by creation order where only the names differ and every shape lines up (KernelBench's own
pairing: both built after one seed). Anything else is one line naming the tensor."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch
from torch import nn

from harness.base.errors import PortingError
from harness.porting.entries import MapEntry, Param, Transposed
from harness.porting.portmap import PortMap


def _shape(t: torch.Tensor) -> tuple[int, ...]:
    return tuple(t.shape)


def _params(module: nn.Module | None) -> dict[str, torch.Tensor]:
    return dict(module.named_parameters()) if module is not None else {}


@dataclass(frozen=True)
class WeightLink:
    """How the candidate's parameters hold the reference's: ``entries`` {reference name: entry
    into the candidate}; ``how``: said in the verdict ("by name", "by the map given",
    "by creation order (names differ: ...)", "none: neither side has parameters")."""

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
         param_map: Mapping[str, MapEntry] | None = None) -> WeightLink:
    """How the reference's weights go into the candidate; ``PortingError`` (one line) where they cannot."""
    ref, cand = _params(reference), _params(candidate)
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
    raise PortingError(problem)
