"""Layout hints: the op sequences aligned, fused groups and square weights that a transposed
or mis-split map would explain."""

from __future__ import annotations

import difflib
import itertools
from typing import Mapping

import torch
from torch import nn

from harness.base.config import Config
from harness.base.errors import HarnessError
from harness.check.tensors import compare_tensors
from harness.families.base import Family
from harness.porting.entries import Absent, Chunk, Transposed, entry_code
from harness.registry import Variant, build
from harness.trace.divergence import trace_variant
from harness.trace.recording import _entry_paths


def align_ops(ops_a: list[str], ops_b: list[str]) -> list[tuple[str, str, str]]:
    """(tag, A's ops, B's ops) blocks: runs of equal ops collapsed to a count."""
    out = []
    matcher = difflib.SequenceMatcher(None, ops_a, ops_b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            out.append(("=", f"{i2 - i1} ops the same ({', '.join(dict.fromkeys(ops_a[i1:i2]))})", ""))
        else:
            out.append(("≠", " ".join(ops_a[i1:i2]) or "-", " ".join(ops_b[j1:j2]) or "-"))
    return out


# -- layout hints ----------------------------------------------------------------------------------------

def _square_weights(family: Family, cfg: Config) -> list[str]:
    return [n for n, s in family.canonical_shapes(cfg).items() if len(s) == 2 and s[0] == s[1]]


def _fused_groups(variant: Variant, cfg: Config) -> list[tuple[str, list[str]]]:
    """Canonical units whose weights are chunks of one parameter, by that parameter."""
    groups: dict[str, list[tuple[int, str]]] = {}
    for name, entry in variant.map_for(cfg).items():
        inner = entry.inner if isinstance(entry, Transposed) else entry
        if isinstance(inner, Chunk) and name.endswith(".weight"):
            groups.setdefault(inner.path, []).append((inner.index, name.removesuffix(".weight")))
    return [(p, [u for _, u in sorted(v)]) for p, v in groups.items() if len(v) > 1]


def _linear_owned(variant: Variant, cfg: Config, family: Family) -> bool:
    """Whether every square weight of ``variant`` lives in an ``nn.Linear`` (as its
    ``weight``, untransposed)."""
    try:
        module, portmap = build(variant, cfg, dtype=torch.float64)
    except HarnessError:
        return False
    if portmap is None:
        return False
    mods = dict(module.named_modules())
    for n in _square_weights(family, cfg):
        entry = portmap.entries.get(n)
        if isinstance(entry, Absent) or entry is None:
            continue
        if isinstance(entry, Transposed):
            return False
        for path, _ in _entry_paths(entry):
            owner, _, leaf = path.rpartition(".")
            if leaf != "weight" or not isinstance(mods.get(owner), nn.Linear):
                return False
    return True


class _Trial:
    """Weights tried on one side of the pair (``subject``): whether its float64 output on them
    agrees with the other side's (``ref``); ``tried`` counts the layouts tried."""

    def __init__(self, subject: Variant, ref: torch.Tensor, output):
        self.subject, self.ref, self.output = subject, ref, output
        self.tried = 0

    def fixes(self, w: Mapping[str, torch.Tensor]) -> bool:
        self.tried += 1
        try:
            got = self.output(self.subject, w)
        except HarnessError:
            return False
        return got is not None and compare_tensors(got, self.ref, None, None, torch.float64).verdict.agrees


def layout_hints(family: Family, a: Variant, b: Variant, case: str, cfg: Config,
                 *, weights: Mapping[str, torch.Tensor]) -> tuple[list[str], int]:
    """Hints whose fix makes the pair's outputs, which differ, equivalent in float64 on
    ``case``; and the number of candidate layouts tried (none where the outputs already agree:
    there no layout is distinguishable by them)."""
    inputs = family.inputs(case, cfg)
    dtype = torch.float64

    def output(v, w):
        t = trace_variant(v, cfg, inputs, w, dtype, backward=False, observe=False)
        return t.output

    base = {v.id: output(v, weights) for v in (a, b)}
    tried = 0
    # A weight an nn.Linear owns is (out, in) by construction: suspect the other side first.
    subjects = sorted(((b, a), (a, b)), key=lambda so: _linear_owned(so[0], cfg, family))
    for subject, other in subjects:
        ref = base[other.id]
        if ref is None or base[subject.id] is None:
            continue
        # Only a difference the outputs show can be fixed by a layout: where they already
        # agree (the pair differs in its gradients only, or the output does not read the
        # weights on this case: one row that sees no key), no layout is distinguishable.
        if compare_tensors(base[subject.id], ref, None, None, dtype).verdict.agrees:
            continue
        trial = _Trial(subject, ref, output)
        hints = _transposed_hints(trial, family, cfg, weights)
        hints += _chunk_order_hints(trial, cfg, weights)
        if not hints:
            hints = _swapped_hints(trial, cfg, weights)
        tried += trial.tried
        if hints:
            return hints, tried
    return [], tried


def _transposed_hints(trial: _Trial, family: Family, cfg: Config, weights: Mapping[str, torch.Tensor]) -> list[str]:
    """Square weights that agree transposed: each alone, else all of them together."""
    subject, hints = trial.subject, []
    square = [n for n in _square_weights(family, cfg) if not isinstance(subject.map_for(cfg).get(n), Absent)]
    for n in square:
        if trial.fixes({**weights, n: weights[n].t().contiguous()}):
            entry = subject.map_for(cfg)[n]
            fix = entry.inner if isinstance(entry, Transposed) else Transposed(entry)
            hints.append(f"{subject.id}: {n} looks transposed: a Conv1D (in, out) layout? "
                         f"map it as {entry_code(fix)}")
    if not hints and len(square) > 1:
        if trial.fixes({**weights, **{n: weights[n].t().contiguous() for n in square}}):
            hints.append(f"{subject.id}: every square weight ({', '.join(square)}) looks transposed: "
                         "a Conv1D (in, out) layout? map them with Transposed(...)")
    return hints


def _chunk_order_hints(trial: _Trial, cfg: Config, weights: Mapping[str, torch.Tensor]) -> list[str]:
    """Fused parameters whose chunks agree in another order."""
    subject, hints = trial.subject, []
    for path, group in _fused_groups(subject, cfg):
        for perm in itertools.permutations(group):
            if list(perm) == group:
                continue
            w = dict(weights)
            for slot, actual in zip(group, perm):
                for leaf in ("weight", "bias"):
                    if f"{slot}.{leaf}" in w:
                        w[f"{slot}.{leaf}"] = weights[f"{actual}.{leaf}"]
            if trial.fixes(w):
                hints.append(f"{subject.id}: the chunks of {path} look like "
                             f"({', '.join(p.rsplit('.', 1)[-1] for p in perm)}) in that order; its map "
                             f"says ({', '.join(g.rsplit('.', 1)[-1] for g in group)})")
    return hints


def _swapped_hints(trial: _Trial, cfg: Config, weights: Mapping[str, torch.Tensor]) -> list[str]:
    """Sibling projections that agree swapped."""
    subject, hints = trial.subject, []
    for x, y in _sibling_pairs(subject, cfg, weights):
        w = dict(weights)
        for leaf in ("weight", "bias"):
            if f"{x}.{leaf}" in w and f"{y}.{leaf}" in w:
                w[f"{x}.{leaf}"], w[f"{y}.{leaf}"] = weights[f"{y}.{leaf}"], weights[f"{x}.{leaf}"]
        if trial.fixes(w):
            entries = subject.map_for(cfg)
            hints.append(f"{subject.id}: {x} and {y} look swapped (in its map, or in the module's use of "
                         f"them): with {x}.weight mapped to {entry_code(entries[f'{y}.weight'])} and "
                         f"{y}.weight to {entry_code(entries[f'{x}.weight'])} they agree")
    return hints


def _sibling_pairs(variant: Variant, cfg: Config, weights: Mapping[str, torch.Tensor]) -> list[tuple[str, str]]:
    """Pairs of sibling projections (``k`` and ``v``, ``gate`` and ``up``: the same parent and
    weight shape) that ``variant`` maps, each one a parameter of its own (no fused chunks)."""
    entries = variant.map_for(cfg)
    inner = {n: e.inner if isinstance(e, Transposed) else e for n, e in entries.items()}
    mapped = [n.removesuffix(".weight") for n in weights if n.endswith(".weight") and n in inner
              and not isinstance(inner[n], (Absent, Chunk))]
    parent = lambda n: n.rsplit(".", 1)[0] if "." in n else ""  # noqa: E731
    return [(x, y) for x, y in itertools.combinations(mapped, 2)
            if parent(x) == parent(y) and weights[f"{x}.weight"].shape == weights[f"{y}.weight"].shape]
