"""What ``reports/DIFFERENCES.md`` reports, computed: ``harness.report.differences_md`` renders it.

Per family: the variants' traits side by side; the equivalence classes (variants that
agree on every case, float32 and float64) and, per case, which variants agree; for every
boundary between two classes its declared reason, its measured effect and where the two
first diverge (``harness.trace``); what each single semantic trait costs (pairs that
differ in exactly that trait); and the kernel-path findings (a fused no_grad path whose
result is not the autograd path's).
"""

from __future__ import annotations

import itertools
import math
from typing import Iterable

import torch

from harness.base.config import Config
from harness.base.errors import ConfigError
from harness.base.numbers import fmt as _fmt
from harness.base.verdicts import Verdict
from harness.check.api import run_check
from harness.check.mismatch import mismatch
from harness.check.results import PairResult, PathResult
from harness.check.run_keys import Mode
from harness.check.runs import RunCache, applicable
from harness.families.catalog import FAMILIES, get_family
from harness.registry import get_variant, variants_of
from harness.trace.findings import Boundary, Contradiction, FamilyFindings
from harness.trace.pairs import declared, diff_pair
from harness.trace.render import summary_text

# Agreeing, or a declared difference this case cannot show:
SAME_FUNCTION = (Verdict.IDENTICAL, Verdict.EQUIVALENT, Verdict.NOT_EXERCISED)


def measure_gap(checker: RunCache, family: str, a: str, b: str, case: str,
                *, dtype: torch.dtype) -> tuple[float, float, str]:
    """The pair's own runs on the same weights and inputs: max |a - b| of the output and
    of the worst gradient both have (inf where NaN sits in one and not the other)."""
    va, vb = get_variant(family, a), get_variant(family, b)
    zero = checker.fills(va) | checker.fills(vb)
    ra, rb = checker.run(va, case, zero, dtype), checker.run(vb, case, zero, dtype)
    if ra.error or rb.error:
        return math.nan, math.nan, Verdict.ERROR
    out, grad, worst = 0.0, 0.0, ""
    for name, ta in ra.tensors.items():
        tb = rb.tensors.get(name)
        if tb is None or tb.shape != ta.shape or name.removeprefix("grad:") in zero:
            continue
        m = mismatch(ta, tb)
        gap = math.inf if m.nan_mismatch else m.max_abs
        if name == "output":
            out = gap
        elif gap > grad:
            grad, worst = gap, name.removeprefix("grad:")
    return out, grad, worst


def equivalence_classes(ids: list[str], results: Iterable[PairResult],
                        cases: set[str] | None = None) -> list[list[str]]:
    """Variants joined when they compute the same function (float64 verdicts: identical,
    equivalent, or a declared difference the case cannot show) on every case (restricted
    to ``cases`` when given); connected components, in registry order."""
    parent = {i: i for i in ids}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    agree: dict[tuple[str, str], bool] = {}
    for r in results:
        if r.dtype != "float64" or (cases is not None and r.case not in cases):
            continue
        key = tuple(sorted((r.a, r.b)))
        agree[key] = agree.get(key, True) and r.verdict in SAME_FUNCTION
    for (a, b), ok in agree.items():
        if ok and a in parent and b in parent:
            parent[find(a)] = find(b)
    classes: dict[str, list[str]] = {}
    for i in ids:
        classes.setdefault(find(i), []).append(i)
    return list(classes.values())


def _representative(members: list[str], family: str) -> str:
    refs = [m for m in members if get_variant(family, m).reference]
    return refs[0] if refs else members[0]


def trait_costs(family: str, ids: list[str], checker: RunCache) -> list[list]:
    """Rows for pairs that differ in exactly one semantic trait on a case: the trait, the
    two values, one pair shown (the reference's where it can), how many pairs share those
    values, and the pair's measured forward/gradient max_abs in float32 and float64."""
    fam = get_family(family)
    groups: dict[tuple, list[tuple[str, str]]] = {}
    for a, b in itertools.combinations(ids, 2):
        va, vb = get_variant(family, a), get_variant(family, b)
        sa, sb = fam.semantic_traits(va.traits), fam.semantic_traits(vb.traits)
        for case in fam.cases:
            if not (applicable(va, case.name) and applicable(vb, case.name)):
                continue
            diffs = [t for t in fam.semantic_for(case.name) if sa.get(t) != sb.get(t)]
            if len(diffs) != 1:
                continue
            t = diffs[0]
            values = sorted([str(sa.get(t)), str(sb.get(t))])
            groups.setdefault((t, values[0], values[1], case.name), []).append((a, b))
    rows = []
    for (trait, v1, v2, case), pairs in groups.items():
        a, b = next((p for p in pairs if any(get_variant(family, x).reference for x in p)), pairs[0])
        f32 = measure_gap(checker, family, a, b, case, dtype=torch.float32)
        f64 = measure_gap(checker, family, a, b, case, dtype=torch.float64)
        rows.append([trait, f"{v1} vs {v2}", case, f"{a} ~ {b}", len(pairs),
                     _fmt(f32[0]), _fmt(f32[1]), _fmt(f64[0]), _fmt(f64[1])])
    return rows


def kernel_findings(family: str, paths: list[PathResult], cfg: Config,
                    checker: RunCache | None = None) -> list[str]:
    """A torch fused path (no_grad, eval) whose result is not the autograd path's."""
    out = []
    checker = checker or RunCache(cfg)
    for p in paths:
        if p.family != family or p.verdict.agrees:
            continue
        v = get_variant(family, p.variant)
        zero = checker.fills(v)
        dtype = getattr(torch, p.dtype)
        grad = checker.run(v, p.case, zero, dtype).tensors.get("output")
        inf = checker.run(v, p.case, zero, dtype, mode=Mode.INFERENCE).tensors.get("output")
        if grad is None or inf is None:
            out.append(f"- `{p.variant}` on `{p.case}` ({p.dtype}): one path failed "
                       f"(autograd `{p.path_autograd}`, no_grad `{p.path_inference}`)")
            continue
        n_grad, n_inf = int(grad.isnan().sum()), int(inf.isnan().sum())
        rows = int(inf.isnan().any(-1).sum()) if inf.dim() == 3 else n_inf
        if n_inf != n_grad:
            what = (f"the no_grad path (`{p.path_inference}`) gives NaN in {n_inf} elements ({rows} rows) "
                    f"where the autograd path (`{p.path_autograd}`) gives "
                    + ("finite values" if n_grad == 0 else f"NaN in {n_grad}"))
        else:
            what = (f"no_grad path `{p.path_inference}` vs autograd path `{p.path_autograd}`: "
                    f"{p.verdict}, max_abs {_fmt(p.max_abs)}")
        out.append(f"- `{p.variant}` on `{p.case}` ({p.dtype}): {what}")
    return out


def _traits(family: str) -> tuple[list[str], list[list[str]]]:
    members = variants_of(family)
    keys = list(dict.fromkeys(k for v in members for k in v.traits if k != "cases"))
    return keys, [[v.id, v.source, *[v.traits.get(k, "") for k in keys]] for v in members]


def _boundaries(family: str, classes: list[list[str]], mine: list[PairResult], checker: RunCache,
                cfg: Config) -> list[Boundary]:
    fam = get_family(family)
    out = []
    for ca, cb in itertools.combinations(classes, 2):
        a, b = _representative(ca, family), _representative(cb, family)
        va, vb = get_variant(family, a), get_variant(family, b)
        differing = [r for r in mine if {r.a, r.b} == {a, b} and r.dtype == "float64"
                     and r.verdict not in SAME_FUNCTION]
        if not differing:
            continue
        case = next((c.name for c in fam.cases if any(r.case == c.name for r in differing)), differing[0].case)
        reasons = list(dict.fromkeys(part for r in differing for part in declared(fam, va, vb, r.case)[1].split("; ")
                                     if part)) or ["(none declared)"]
        effects = []
        for r in sorted(differing, key=lambda r: [c.name for c in fam.cases].index(r.case)):
            f32 = measure_gap(checker, family, a, b, r.case, dtype=torch.float32)
            f64 = measure_gap(checker, family, a, b, r.case, dtype=torch.float64)
            effects.append(f"{r.case}: fwd {_fmt(f32[0])} / {_fmt(f64[0])}, grad {_fmt(f32[1])} / {_fmt(f64[1])}"
                           + (f" ({f64[2]})" if f64[2] else "") + ("" if r.ok else " (CONTRADICTS a declaration)"))
        out.append(Boundary(a, b, reasons, effects, case, _traced(family, va, vb, case, cfg, "float32", False)))
    return out


def _traced(family: str, a, b, case: str, cfg: Config, dtype: str, hints: bool) -> str:
    """``diff``'s summary of the pair, or why it cannot run (parameters of different shapes)."""
    try:
        return summary_text(diff_pair(family, a, b, case, cfg, dtype, hints=hints))
    except ConfigError as exc:
        return f"not traced: {exc}"


def family_findings(family: str, results: list[PairResult], paths: list[PathResult], cfg: Config,
                    checker: RunCache | None = None) -> FamilyFindings:
    """One family's findings: classes from the float64 verdicts, each boundary traced, each
    single trait's cost measured, the kernel paths and the contradictions."""
    fam = get_family(family)
    ids = [v.id for v in variants_of(family) if not v.supports(cfg)]
    mine = [r for r in results if r.family == family]
    trait_names, traits = _traits(family)
    found = FamilyFindings(
        family, fam.call, [(c.name, c.note) for c in fam.cases], list(fam.semantic),
        {c: list(t) for c, t in fam.case_semantic.items()},
        [(v.id, r) for v in variants_of(family) if (r := v.supports(cfg))],
        trait_names, traits, compared=bool(mine))
    if not mine:
        return found
    checker = checker or RunCache(cfg, record=False)
    found.classes = equivalence_classes(ids, mine)
    if len(fam.cases) > 1:
        found.per_case = [(case.name, equivalence_classes(ids, mine, {case.name})) for case in fam.cases]
    found.boundaries = _boundaries(family, found.classes, mine, checker, cfg)
    found.costs = trait_costs(family, ids, checker)
    found.kernel_findings = kernel_findings(family, paths, cfg, checker)
    for r in [r for r in mine if not r.ok][:20]:
        found.contradictions.append(Contradiction(r.a, r.b, r.case, r.dtype, r.verdict, r.expected,
                                                  _traced(family, r.a, r.b, r.case, cfg, r.dtype, True)))
    return found


def differences(results: list[PairResult] | None, paths: list[PathResult] | None, *,
                families: list[str] | None = None, cfg: Config | None = None,
                sessions: Iterable[RunCache] = ()) -> list[FamilyFindings]:
    """The findings of every family; ``results``/``paths`` from ``run_check`` (float32 and
    float64 on CPU) are reused when they have both dtypes, else checked here. ``sessions``:
    the check's run caches (``CheckReport.sessions``); the one on ``cfg`` and the CPU lends
    its runs (a variant's float64 and float32 runs are made once for its spec check, its
    pairs and its trace)."""
    cfg = cfg or Config()
    checker = next((s for s in sessions if s.cfg == cfg and s.device == "cpu"), None)
    families = families or [f for f in FAMILIES if get_family(f).differentiable]
    results = [r for r in results or [] if r.device == "cpu" and r.config in ("", "default", "custom")]
    paths = [p for p in paths or [] if p.device == "cpu"]
    if not {"float32", "float64"} <= {r.dtype for r in results}:
        results, paths = run_check(families, cfg, "cpu", ["float32"])
        checker = None  # checked here: the sessions' runs are not these results'
    return [family_findings(f, results, paths, cfg, checker) for f in families]
