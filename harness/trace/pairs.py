"""Where two variants part ways, why, and what it costs: ``python -m harness diff``.

For one pair of a family, on one case and dtype:

- **traits** side by side, the differing ones marked (semantic ones decide verdicts);
- a **divergence trace** over the family's canonical sub-modules (the prefixes of its
  canonical parameters: ``self_attn``, ``self_attn.q``, ``ffn``, ``norm1``, ...), in
  execution order. A sub-module is observed with hooks on the module that owns exactly
  its mapped parameters; where no module does (a fused ``in_proj_weight``, a projection
  applied with ``F.linear`` inside ``nn.MultiheadAttention``), a ``TorchDispatchMode``
  records the aten ops that consume the canonical parameter's storage and the
  projection is read off their output (the rows of a fused weight become columns of
  its output). Inside attention the canonical intermediates are the projected q, k, v
  and the input of the output projection (``o:in``, the attention output before it);
- **attribution**: the first diverging sub-module's output in A is fed into B (a
  forward hook replaces B's) and B runs on; if B's output then agrees with A's, the
  whole difference comes from there, otherwise the next divergence is added;
- the aten ops each variant ran (``OpRecorder``), aligned side by side, and the kernel
  path taken with and without autograd;
- **where**: for the output and every gradient, the mismatch count, the worst element's
  index (batch, position, feature) and the kind of row it falls in (padded key, fully
  masked row, ...);
- a difference the **backward** alone shows (the outputs agree): the first autograd node,
  by op, whose gradients differ, and where the two backward graphs part before it
  (``backward.backward_divergence``);
- **mistakes** (``diff`` asks for them): for attention kernels and the LLaMA-era
  conventions, each side's own mistake named as ``check`` names it
  (``kernel_explain.name_mistakes``: the single convention, read another way, that fits
  every case where the variant misses its declared oracle in float64);
- **layout hints**: if transposing a square mapped weight, or reordering the chunks of
  a fused projection, makes the pair equivalent, the hint says so.

``first_divergence(family, a, b, case, cfg, dtype)`` gives the short form (a text of a
few lines and its data) that ``check`` and a failing equivalence test can print.
"""

from __future__ import annotations

import dataclasses
import math
import shlex
import time
from dataclasses import dataclass
from typing import Any, Collection, Mapping

import torch

from harness.base.config import Config
from harness.base.dtypes import dtype_of
from harness.base.errors import ConfigError
from harness.base.verdicts import Verdict
from harness.check.runs import OpRecorder, RunCache, applicable, cast_inputs, shaped_config
from harness.check.spec import call_order_dependence
from harness.check.tensors import compare_tensors
from harness.families.base import Family
from harness.families.catalog import get_family
from harness.porting.portmap import absent_fills, zero_unrepresented
from harness.registry import REGISTRY, Variant, build, from_user_file, get_variant, variants_file, variants_of
from harness.trace.attribution import attribute
from harness.trace.backward import backward_divergence
from harness.trace.diff_result import Attribution, DivergenceKind, PairDiff, TraceRow, TraitRow
from harness.trace.divergence import locate, trace_rows, trace_variant, where_differs
from harness.trace.hints import align_ops, layout_hints
from harness.trace.kernel_explain import name_mistakes
from harness.trace.recording import Trace
from harness.trace.render import summary_text


@dataclass(frozen=True)
class Divergence:
    """The short explanation of one pair on one case: ``text`` to print, ``data`` the whole result."""

    text: str
    data: PairDiff

    def __str__(self) -> str:
        return self.text


def _variant(family: str, v) -> Variant:
    return v if isinstance(v, Variant) else get_variant(family, v)


@dataclass(frozen=True)
class _Pair:
    """One pair on one case, set up for tracing: both sides get the same weights and inputs."""

    family: str
    fam: Family
    a: Variant
    b: Variant
    case: str
    cfg: Config
    dtype_name: str
    dtype: torch.dtype
    device: str
    inputs: Mapping[str, Any]
    weights: Mapping[str, torch.Tensor]


@dataclass(frozen=True)
class _Traces:
    a: Trace
    b: Trace
    a64: Trace   # the float64 CPU runs, each side's noise floor
    b64: Trace


def diff_pair(family: str, a, b, case: str, cfg: Config, dtype: str = "float32", *,
              device: str = "cpu", hints: bool = True, attribution: bool = True,
              mistakes: bool = False) -> PairDiff:
    """Everything ``diff`` prints, as data (see the module docstring); ``mistakes`` names
    each side's own mistake as ``check`` names it (kernels; LLaMA-era conventions)."""
    started = time.perf_counter()
    pair = _set_up(family, a, b, case, cfg, dtype, device)
    traces = _trace(pair)
    result = _declared_part(pair, traces, mistakes=mistakes)  # an error row where a side did not run
    if not result.errors:
        result = _compared(result, pair, traces, hints=hints, attribution=attribution)
    return dataclasses.replace(result, seconds=time.perf_counter() - started)


def _set_up(family: str, a, b, case: str, cfg: Config, dtype: str, device: str) -> _Pair:
    fam = get_family(family)
    va, vb = _variant(family, a), _variant(family, b)
    fam.case(case)
    for v in (va, vb):
        reason = v.refuses(cfg, device, fam.base_case(case))
        if reason:
            raise ConfigError(f"{v.key} cannot be built for this config or case: {reason}")
    cfg = shaped_config(fam, case, cfg)   # a regime case of another head count: built for it
    dt = dtype_of(dtype)
    own = [fam.params_for(cfg, v.traits) for v in (va, vb)]
    apart = sorted(n for n in set(own[0]) & set(own[1]) if own[0][n] != own[1][n])
    if apart:
        raise ConfigError(f"{va.key} and {vb.key} hold {', '.join(apart)} in different shapes (their traits differ: "
                          f"{declared(fam, va, vb, case)[1]}): diff runs two variants on one set of weights")
    zero = absent_fills(va.map_for(cfg)) | absent_fills(vb.map_for(cfg))
    both = {**fam.canonical_weights(cfg, traits=vb.traits), **fam.canonical_weights(cfg, traits=va.traits)}
    weights = zero_unrepresented(both, zero)  # each side ports its own; the parameters they share are one
    return _Pair(family, fam, va, vb, case, cfg, dtype, dt, device, fam.inputs(case, cfg), weights)


def _trace(p: _Pair) -> _Traces:
    """Each side traced in float64 on the CPU, then in the pair's dtype on its device."""
    a64 = trace_variant(p.a, p.cfg, p.inputs, p.weights, torch.float64, device="cpu")
    b64 = trace_variant(p.b, p.cfg, p.inputs, p.weights, torch.float64, device="cpu", others=a64.units)
    if p.dtype == torch.float64 and p.device == "cpu":
        return _Traces(a64, b64, a64, b64)
    a = trace_variant(p.a, p.cfg, p.inputs, p.weights, p.dtype, device=p.device, others=a64.units)
    b = trace_variant(p.b, p.cfg, p.inputs, p.weights, p.dtype, device=p.device, others=a.units)
    return _Traces(a, b, a64, b64)


def _declared_part(p: _Pair, t: _Traces, *, mistakes: bool) -> PairDiff:
    """What holds before any comparison: the declarations, the traits, whether each side
    ran, its kernel path and its own mistake; the verdict ``ERROR`` until compared."""
    expected, reason = declared(p.fam, p.a, p.b, p.case)
    sides = ((p.a, t.a), (p.b, t.b))
    return PairDiff(
        p.family, p.a.id, p.b.id, p.case, p.dtype_name, p.device, expected, reason,
        traits=tuple(traits_side_by_side(p.fam, p.a, p.b)),
        errors={v.id: tr.error for v, tr in sides if tr.error},
        tracebacks={v.id: tr.traceback for v, tr in sides if tr.error and tr.traceback},
        paths={v.id: tr.path for v, tr in sides},
        mistakes=name_mistakes(p.family, (p.a, p.b), p.cfg) if mistakes else {},
        verdict=Verdict.ERROR, seconds=0.0, stateful=_stateful(p))


def _stateful(p: _Pair) -> dict[str, str]:
    """Each side whose output on the case depends on the calls before it (float64, the
    sequence ``check`` calls it in): a trace of one call cannot show that."""
    checker = RunCache(p.cfg, record=False)
    found = {v.id: call_order_dependence(v, p.case, checker.fills(v), checker) for v in (p.a, p.b)
             if not v.refuses(p.cfg, "cpu") and not v.dtype_reason("float64")}
    return {k: line for k, line in found.items() if line}


def _compared(result: PairDiff, p: _Pair, t: _Traces, *, hints: bool, attribution: bool) -> PairDiff:
    """``result`` with the comparison: where each tensor differs, the divergence trace and
    its first divergence, the attribution, the layout hints, the ops and kernel paths."""
    where = [where_differs(p.fam, p.inputs, name, t.a.tensors[name], t.b.tensors[name],
                           a64=t.a64.tensors.get(name), b64=t.b64.tensors.get(name), dtype=p.dtype)
             for name in t.a.tensors if name in t.b.tensors]
    verdict = Verdict.worst((w.verdict for w in where), default=Verdict.IDENTICAL)
    worst = max(where, key=lambda w: (w.verdict.rank, w.max_abs if not math.isnan(w.max_abs) else -1), default=None)
    rows = trace_rows(t.a, t.b, t.a64, t.b64, p.dtype)
    first = locate(rows)
    apart = ""
    if first is not None and first.kind == DivergenceKind.COMPUTATION and first.unit.endswith(":in"):
        apart = _roles_apart(p, first)
    output_agrees = bool(where) and where[0].tensor == "output" and where[0].verdict.agrees
    backward = None
    if first is None and not verdict.agrees and output_agrees:  # a backward-only difference
        backward = backward_divergence(p.a, p.b, p.cfg, p.inputs, p.weights)
    attrib = None
    if attribution and first is not None and where and not where[0].verdict.agrees:
        attrib = _attribution(p, t, rows)
    hint_list: list[str] = []
    tried = 0
    if hints and not verdict.agrees and verdict != Verdict.ERROR:
        hint_list, tried = layout_hints(p.fam, p.a, p.b, p.case, p.cfg, weights=p.weights)
    return dataclasses.replace(
        result, verdict=verdict, worst=None if worst is None else worst.tensor, trace=tuple(rows), first=first,
        backward=backward, attribution=attrib, where=tuple(where), paths_no_grad=_no_grad_paths(p),
        ops=tuple(align_ops(t.a.ops, t.b.ops)), op_counts={p.a.id: len(t.a.ops), p.b.id: len(t.b.ops)},
        hints=tuple(hint_list), hint_candidates=tried, apart=apart)


def _roles_apart(p: _Pair, first) -> str:
    """Where q, k and v agree on a case that passes one tensor in several roles (query = key
    = value): the first divergence on the family's first case that passes each role its own
    tensor (a K/V swap, in the module or its map, shows only there); '' when it is the same."""
    def tensors(inputs):
        return [t for t in inputs.values() if isinstance(t, torch.Tensor) and t.is_floating_point()]

    shared = tensors(p.inputs)
    if len({id(t) for t in shared}) == len(shared):
        return ""
    for c in p.fam.cases:
        inputs = p.fam.inputs(c.name, p.cfg)
        mine = tensors(inputs)
        if (c.name == p.case or not (applicable(p.a, c.name) and applicable(p.b, c.name))
                or shaped_config(p.fam, c.name, p.cfg) != p.cfg
                or len(mine) < len(shared) or len({id(t) for t in mine}) < len(mine)):
            continue
        a = trace_variant(p.a, p.cfg, inputs, p.weights, torch.float64, device="cpu")
        b = trace_variant(p.b, p.cfg, inputs, p.weights, torch.float64, device="cpu", others=a.units)
        there = locate(trace_rows(a, b, a, b, torch.float64))
        if there is None or there.unit == first.unit:
            return ""
        return f"on {c.name}, where each role has its own tensor: {there.text}"
    return ""


def _attribution(p: _Pair, t: _Traces, rows: list[TraceRow]) -> Attribution:
    """A's diverging sub-modules fed into B; where B has none to feed (a fused root), B's
    fed into A instead."""
    run = dict(cfg=p.cfg, inputs=p.inputs, weights=p.weights, dtype=p.dtype, device=p.device)
    found = attribute(p.a, p.b, t.a, t.a64, t.b, tb64=t.b64, rows=rows, **run)
    if found.patched:
        return found
    swapped = [dataclasses.replace(r, how_a=r.how_b, how_b=r.how_a, source_a=r.source_b, source_b=r.source_a)
               for r in rows]
    back = attribute(p.b, p.a, t.b, t.b64, t.a, tb64=t.a64, rows=swapped, **run)
    return dataclasses.replace(back, reversed=True) if back.patched else found


def _no_grad_paths(p: _Pair) -> dict[str, str]:
    """Each side's kernel path without autograd (a failing no_grad run shown as such)."""
    paths = {}
    for v in (p.a, p.b):
        rec = OpRecorder()
        with torch.no_grad():
            module, _ = build(v, p.cfg, dtype=p.dtype, device=p.device, weights=p.weights)
            with rec:
                try:
                    v.call(module, cast_inputs(p.inputs, p.dtype, p.device))
                except Exception:  # noqa: BLE001  (a failing no_grad path is shown as such)
                    pass
        paths[v.id] = rec.path()
    return paths


def declared(family: Family, a: Variant, b: Variant, case: str) -> tuple[Verdict, str]:
    """What the pair declares on ``case``: ('equivalent', '') or ('different', the
    differing semantic traits)."""
    sa, sb = family.semantic_traits(a.traits), family.semantic_traits(b.traits)
    reasons = [f"{t}: {sa.get(t)} vs {sb.get(t)}" for t in family.semantic_for(case) if sa.get(t) != sb.get(t)]
    return (Verdict.DIFFERENT, "; ".join(reasons)) if reasons else (Verdict.EQUIVALENT, "")


def traits_side_by_side(family: Family, a: Variant, b: Variant) -> list[TraitRow]:
    semantic = set(family.traits)
    keys = list(dict.fromkeys([*a.traits, *b.traits]))
    return [TraitRow(k, a.traits.get(k, ""), b.traits.get(k, ""), a.traits.get(k) != b.traits.get(k), k in semantic)
            for k in keys if k != "cases"]


def first_divergence(family: str, a, b, case: str, cfg: Config | None = None, dtype: str = "float32",
                     device: str = "cpu", *, hints: bool = True) -> Divergence:
    """The short answer to "where and why do A and B differ on this case": the first
    diverging sub-module, the attribution, the worst tensor with its index and row kind,
    and any layout hint. ``text`` is a few lines for a table cell or an assertion message;
    ``data`` is the full ``diff_pair`` result. ``a``/``b`` are ids or ``Variant``s.
    Costs a few traced runs (about 1-5 s on a 2-core CPU); ``hints=False`` skips the
    layout search."""
    cfg = cfg or Config()
    d = diff_pair(family, a, b, case, cfg, dtype, device=device, hints=hints)
    return Divergence(summary_text(d), d)


def diff_command(family: str, a: str, b: str, case: str, cfg: Config | None, dtype: str) -> str:
    """The ``diff`` command that traces ``a`` against ``b`` on ``case`` in ``dtype`` on
    ``cfg`` (a config of the matrix, a family's own such as ``gqa``, or a ``--set`` one):
    its ``--set`` items rebuild that config, so following it shows what ``check`` found."""
    sets = "".join(f" --set {item}" for item in (cfg or Config()).set_items())
    a, b = (v.id if isinstance(v, Variant) else v for v in (a, b))
    files = dict.fromkeys(f for f in (_file_of(family, a), _file_of(family, b)) if f)
    loads = "".join(f" --variants {shlex.quote(f)}" for f in files)
    return f"python -m harness diff {family} {a} {b} --case {case} --dtype {dtype}{sets}{loads}"


def _file_of(family: str, variant_id: str) -> str | None:
    """The user's file (as given) that a printed command must load for ``variant_id``."""
    variant = REGISTRY.get(f"{family}/{variant_id}")
    return None if variant is None else variants_file(variant)


def explain_variant(family: str, variant, case: str, cfg: Config | None = None, dtype: str = "float32",
                    device: str = "cpu", *, hints: bool = True,
                    avoid: Collection[str] = frozenset()) -> Divergence | None:
    """For a variant that fails its spec: ``first_divergence`` against a registered peer
    that declares the same semantic traits: the family reference when it does, else the
    first such variant of the project or a pack before one of a user's files (which may
    fail too), never one of ``avoid`` (ids that fail there themselves), so the trace shows
    where the variant leaves the function it declares. None when no peer is left."""
    cfg = cfg or Config()
    fam = get_family(family)
    v = _variant(family, variant)
    mine = fam.semantic_traits(v.traits)
    peers = [p for p in variants_of(family) if p.key != v.key and not p.refuses(cfg, device)
             and applicable(p, case) and fam.semantic_traits(p.traits) == mine and p.id not in avoid]
    if not peers:
        return None
    peer = next((p for p in peers if p.reference), None) or next((p for p in peers if not from_user_file(p)), peers[0])
    return first_divergence(family, peer, v, case, cfg, dtype, device, hints=hints)


def quick_verdict(checker, a: Variant, b: Variant, case: str, dtype: torch.dtype) -> Verdict:
    """The pair's verdict on one case: output and every gradient, each variant's own
    float64 run as its noise floor (what ``diff`` itself judges with)."""
    zero = checker.fills(a) | checker.fills(b)
    ra, rb = checker.run(a, case, zero, dtype), checker.run(b, case, zero, dtype)
    if ra.error or rb.error:
        return Verdict.ERROR
    ra64, rb64 = checker.run(a, case, zero, torch.float64), checker.run(b, case, zero, torch.float64)
    verdicts = [compare_tensors(ra.tensors[n], rb.tensors[n], ra64.tensors.get(n), rb64.tensors.get(n), dtype).verdict
                for n in ra.tensors if n in rb.tensors]
    return Verdict.worst(verdicts, default=Verdict.IDENTICAL)


def pick_case(family: str, a, b, cfg: Config, dtype: str) -> tuple[str, list[tuple[str, Verdict]]]:
    """The first case on which the pair is not equivalent (else the first case), with
    every case's verdict."""
    fam = get_family(family)
    va, vb = _variant(family, a), _variant(family, b)
    for v in (va, vb):
        reason = v.supports(cfg)
        if reason:
            raise ConfigError(f"{v.key} cannot be built for this config: {reason}")
    checker = RunCache(cfg, record=False)
    dt = dtype_of(dtype)
    verdicts = [(c.name, quick_verdict(checker, va, vb, c.name, dt)) for c in fam.cases
                if applicable(va, c.name) and applicable(vb, c.name)]
    if not verdicts:
        raise ConfigError(f"no case of {family} applies to both {va.id} and {vb.id}")
    chosen = next((c for c, v in verdicts if not v.agrees), verdicts[0][0])
    return chosen, verdicts
