"""Map search, the candidate maps: every assignment of a module's parameters to the family's
canonical ones (by shape, orientation, chunk and per-head chunk order, blocks of unequal
sizes in each order; biases with their weights; norm gains by name; a missing square weight
as the identity)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import torch

from harness.base.config import Config
from harness.families.base import Family
from harness.porting.entries import Absent, Chunk, Identity, Param, PerHeadChunk, Transposed, Zero


@dataclass(frozen=True)
class Slot:
    """One place a canonical weight can live: a whole parameter or one chunk of it (the
    chunk inside each of ``heads`` blocks when ``heads``: GPT-NeoX's per-head fused QKV; the
    ``index``-th of blocks of ``sizes`` when they differ: Phi-3's fused QKV with fewer K/V heads)."""

    path: str
    index: int
    chunks: int
    transposed: bool
    heads: int = 0
    sizes: tuple[int, ...] = ()

    def entry(self):
        if self.chunks == 1:
            inner = Param(self.path)
        elif self.sizes:
            inner = Chunk(self.path, self.index, sizes=self.sizes, dim=1 if self.transposed else 0)
        elif self.heads:
            inner = PerHeadChunk(self.path, self.index, self.chunks, self.heads, dim=1 if self.transposed else 0)
        else:
            inner = Chunk(self.path, self.index, self.chunks, dim=1 if self.transposed else 0)
        return Transposed(inner) if self.transposed else inner


def _weight_slots(params: dict[str, torch.Tensor], out: int, inp: int, heads: int = 0) -> list[list[list[Slot]]]:
    """Per 2-D parameter, its slots for a canonical (out, inp) weight; a square parameter
    yields both orientations as alternatives (one list per orientation), a fused one its
    equal blocks and, with ``heads``, the same blocks inside each head (per-head fused)."""
    groups = []
    for path, p in params.items():
        if p.dim() != 2:
            continue
        r, c = p.shape
        if (r, c) == (out, inp):
            groups.append([[Slot(path, 0, 1, False)]] + ([[Slot(path, 0, 1, True)]] if out == inp else []))
        elif c == inp and r % out == 0 and r // out > 1:
            n = r // out
            per_head = [[Slot(path, i, n, False, heads) for i in range(n)]] if heads > 1 and out % heads == 0 else []
            groups.append([[Slot(path, i, n, False) for i in range(n)]] + per_head)
        elif r == inp and c % out == 0 and c // out > 1:
            n = c // out
            groups.append([[Slot(path, i, n, True) for i in range(n)]])
        elif (r, c) == (inp, out):
            groups.append([[Slot(path, 0, 1, True)]])
    return groups


def _stem(path: str) -> str:
    base = path.rsplit(".", 1)
    leaf = base[-1]
    for a, b in (("weight", ""), ("bias", ""), ("w_", ""), ("b_", ""), ("w", ""), ("b", "")):
        if leaf.startswith(a) or leaf.endswith(a):
            leaf = leaf.replace(a, b, 1)
            break
    return (base[0] + "." if len(base) == 2 else "") + leaf


def _bias_for(slot: Slot, biases: dict[str, torch.Tensor], out: int) -> Any:
    """The bias entry that goes with a weight slot: a 1-D parameter of the slot's module
    (or of the same stem: ``w_qkv``/``b_qkv``, ``in_proj_weight``/``in_proj_bias``)."""
    want = sum(slot.sizes) if slot.sizes else out * slot.chunks
    fits = [p for p, t in biases.items() if t.numel() == want]
    prefix = slot.path.rsplit(".", 1)[0] if "." in slot.path else ""
    same = [p for p in fits if (p.rsplit(".", 1)[0] if "." in p else "") == prefix and "." in p] \
        or [p for p in fits if _stem(p) == _stem(slot.path)]
    pick = same[0] if len(same) == 1 else (fits[0] if len(fits) == 1 else None)
    if pick is None:
        return Zero()
    if slot.chunks == 1:
        return Param(pick)
    if slot.sizes:
        return Chunk(pick, slot.index, sizes=slot.sizes)
    if slot.heads:
        return PerHeadChunk(pick, slot.index, slot.chunks, slot.heads)
    return Chunk(pick, slot.index, slot.chunks)


def _options(path: str, p: torch.Tensor, shapes: list[tuple[int, int]], weights: list[tuple[int, int]],
             heads: int = 0) -> list[list[tuple[tuple[int, int], Slot]]]:
    """The ways one module parameter can hold canonical weights, each a list of (canonical
    shape, slot): per shape and orientation, then the stacks of unequal blocks."""
    same = [[(shape, slot) for slot in alt] for shape in shapes
            for group in _weight_slots({path: p}, *shape, heads) for alt in group]
    return same + _unequal_options(path, p, weights)


def _unequal_options(path: str, p: torch.Tensor, weights: list[tuple[int, int]]
                     ) -> list[list[tuple[tuple[int, int], Slot]]]:
    """A 2-D parameter as canonical weights of unequal sizes stacked along one axis, in every
    order of the blocks (a fused QKV with fewer K/V heads: q's H * d_k rows beside k's and
    v's H_kv * d_k, in whichever order the module stacks them). ``weights``: the canonical
    2-D shapes, one per canonical weight; along dim 1 the parameter is stored (in, out)."""
    if p.dim() != 2:
        return []
    found: list[list[tuple[tuple[int, int], Slot]]] = []
    for axis, (size, other) in enumerate(((p.shape[0], p.shape[1]), (p.shape[1], p.shape[0]))):
        outs = [s[0] for s in weights if s[1] == other]
        stacks = {tuple(sorted(c)) for k in range(2, len(outs) + 1) for c in itertools.combinations(outs, k)
                  if sum(c) == size and len(set(c)) > 1}
        for sizes in sorted({order for stack in stacks for order in itertools.permutations(stack)}):
            found.append([((n, other), Slot(path, i, len(sizes), bool(axis), sizes=sizes))
                          for i, n in enumerate(sizes)])
    return found


def _vector_choices(shapes: dict, weights: list[str], params: dict[str, torch.Tensor], used: set[str],
                    fills: dict[str, Any]):
    """Every assignment of the canonical 1-D parameters that follow no weight (a norm's gain
    and bias) to distinct module 1-D parameters of their shape, or to their absent value;
    the module parameter of the same leaf name first."""
    followers = {n.removesuffix(".weight") + ".bias" for n in weights}
    names = [n for n, s in shapes.items() if len(s) == 1 and n not in followers]
    free = [p for p, t in params.items() if t.dim() == 1 and p not in used]

    def options(name):
        fit = [p for p in free if tuple(params[p].shape) == tuple(shapes[name])]
        leaf = name.rsplit(".", 1)[-1]
        fit.sort(key=lambda p: (not p.endswith(name), p.rsplit(".", 1)[-1] != leaf))
        return [Param(p) for p in fit] + [fills.get(name, Zero())]

    for combo in itertools.product(*(options(n) for n in names)):
        taken = [e.path for e in combo if isinstance(e, Param)]
        if len(taken) == len(set(taken)):
            yield dict(zip(names, combo))


def candidate_maps(family: Family, cfg: Config, module: torch.nn.Module, traits: dict | None = None):
    """Every assignment of the module's weight slots to the family's canonical (2-D)
    weights, grouped by shape (GQA's K/V beside Q/O, a gated FFN's down beside gate and up),
    biases following their weights; the other canonical parameters (norm gains and biases)
    to module parameters of their shape by name, or absent (a norm's gain reads as one,
    anything else as zero). When no assignment uses every slot and the module is one square
    weight short, then the assignments with one square canonical weight read as the identity
    (``Identity()``: an attention without its output projection, BERT's self-attention). The
    canonical parameters are those of a variant declaring ``traits`` (``Family.params_for``)."""
    shapes = family.canonical_shapes(cfg, traits)
    fills = {n: Absent(1.0) for n, (_, kind) in family.params_for(cfg, traits).items() if kind == "norm_weight"}
    params = dict(module.named_parameters())
    weights = [n for n, s in shapes.items() if len(s) == 2]
    kinds = list(dict.fromkeys(tuple(shapes[n]) for n in weights))
    each = [tuple(shapes[n]) for n in weights]
    options = [opts for path, p in params.items()
               if p.dim() == 2 and (opts := _options(path, p, kinds, each, cfg.heads))]
    need = {k: [n for n in weights if tuple(shapes[n]) == k] for k in kinds}
    exact = False
    for choice in itertools.product(*options):
        by_shape = _by_shape(choice, kinds)
        if all(len(by_shape[k]) == len(need[k]) for k in kinds):
            exact = True
            yield from _assignments(by_shape, need, kinds, shapes, weights, params, fills)
    if exact:
        return
    for choice in itertools.product(*options):
        by_shape = _by_shape(choice, kinds)
        short = [k for k in kinds if len(by_shape[k]) != len(need[k])]
        if len(short) != 1 or short[0][0] != short[0][1] or len(by_shape[short[0]]) != len(need[short[0]]) - 1:
            continue
        for eye in reversed(need[short[0]]):  # the last first: the output projection
            rest = {**need, short[0]: [n for n in need[short[0]] if n != eye]}
            for pmap in _assignments(by_shape, rest, kinds, shapes, weights, params, fills):
                bias = eye.removesuffix(".weight") + ".bias"
                full = {**pmap, eye: Identity(), **({bias: Zero()} if bias in shapes else {})}
                yield {name: full[name] for name in shapes}


def _by_shape(choice, kinds) -> dict[tuple[int, int], list[Slot]]:
    by_shape: dict[tuple[int, int], list[Slot]] = {k: [] for k in kinds}
    for option in choice:
        for shape, slot in option:
            by_shape[shape].append(slot)
    return by_shape


def _assignments(by_shape, need, kinds, shapes, weights, params, fills):
    biases = {p: t for p, t in params.items() if t.dim() == 1 and not p.endswith("weight")}  # not a norm's gain
    for perms in itertools.product(*(itertools.permutations(by_shape[k]) for k in kinds)):
        pmap: dict[str, Any] = {}
        taken: set = set()  # a bias (or its chunk) follows one weight only
        for k, perm in zip(kinds, perms):
            for name, slot in zip(need[k], perm):
                pmap[name] = slot.entry()
                bias = name.removesuffix(".weight") + ".bias"
                if bias in shapes:
                    entry = _bias_for(slot, biases, k[0])
                    pmap[bias] = Zero() if entry in taken else entry
                    taken.add(entry)
        used = {e.path for e in pmap.values() if isinstance(e, (Param, Chunk, PerHeadChunk))}
        for rest in _vector_choices(shapes, weights, params, used, fills):
            full = {**pmap, **rest}
            yield {name: full.get(name, Zero()) for name in shapes}  # in the family's order


