"""A divergence as text: the one-paragraph summary and the full table."""

from __future__ import annotations

import math

from tabulate import tabulate

from harness.trace.diff_result import PairDiff
from harness.trace.divergence import _row_label


def _errors(d: PairDiff) -> str:
    return "error: " + "; ".join(f"{k}: {v}" for k, v in d.errors.items())


def _first_line(d: PairDiff) -> str | None:
    """The first divergence, forward or backward only, as one line (None: none found)."""
    if d.first:
        return f"first divergence: {d.first.text}"
    if d.backward:
        return f"first divergence (backward only): {d.backward.text}"
    return None


def summary_text(d: PairDiff) -> str:
    if d.errors:
        return _errors(d)
    lines = []
    worst = d.worst_where
    first = _first_line(d)
    if d.verdict.agrees:
        lines.append(f"{d.a} and {d.b} agree on {d.case} ({d.verdict})")
    elif first:
        lines.append(first)
        lines += [f"  {d.apart}"] if d.apart else []
    elif not d.trace:
        lines.append("no canonical sub-module to trace: the difference is the module's own computation")
    else:
        lines.append("every traced sub-module agrees: the difference is in ops outside them "
                     "(a residual, a norm or step the family does not map)")
    if d.attribution:
        lines.append(d.attribution.text)
    lines += [f"mistake of {v}: {line}" for v, line in d.mistakes.items()]
    lines += [f"{v}: {line}" for v, line in d.stateful.items()]
    if worst is not None and not worst.verdict.agrees:
        idx = ", ".join(map(str, worst.worst_index))
        lines.append(f"worst tensor {worst.tensor}: {worst.mismatches}/{worst.numel} elements "
                     f"differ, worst at [{idx}] ({worst.row_kind}): {_value(worst.worst_a)} vs "
                     f"{_value(worst.worst_b)}")
    lines += [f"hint: {h}" for h in d.hints]
    return "\n".join(lines)


# -- printing -----------------------------------------------------------------------------------------------------

def render(d: PairDiff) -> str:
    out = [f"== diff {d.family}: {d.a} (A) vs {d.b} (B), case {d.case}, {d.dtype} on {d.device}",
           f"verdict: {d.verdict}; declared: {d.expected}" + (f" ({d.declared_reason})" if d.declared_reason else "")
           + "".join(f"; {v}'s output depends on earlier calls (below)" for v in d.stateful)]
    out.append("\n-- traits (* differs, S semantic)")
    out.append(tabulate([[("*" if t.differs else "") + ("S" if t.semantic else ""), t.trait, t.a, t.b]
                         for t in d.traits], headers=["", "trait", d.a, d.b], tablefmt="simple"))
    out += [f"mistake of {v}: {line}" for v, line in d.mistakes.items()]
    out += [f"{v}: {line}" for v, line in d.stateful.items()]
    if d.errors:
        out.append("\n" + _errors(d))
        return "\n".join(out)
    out += _trace_table(d)
    out += _where_table(d)
    if d.hints or d.hint_candidates:
        out.append(f"\n-- layout hints ({d.hint_candidates} candidate layouts tried in float64)")
        out += [f"hint: {h}" for h in d.hints] or ["(no transposed or reordered weight makes them agree)"]
    out.append(f"\n-- aten ops, aligned ({d.a}: {d.op_counts[d.a]} ops, {d.b}: {d.op_counts[d.b]} ops)")
    out.append(tabulate([list(o) for o in d.ops], headers=["", d.a, d.b], tablefmt="simple",
                        maxcolwidths=[None, 60, 60]))
    out.append("\nkernel path: " + "; ".join(
        f"{v}: autograd {d.paths[v]}, no_grad {d.paths_no_grad[v]}" for v in (d.a, d.b)))
    out.append(f"({d.seconds:.1f} s)")
    return "\n".join(out)


def _trace_table(d: PairDiff) -> list[str]:
    """The divergence trace, its first divergence and the attribution."""
    out = ["\n-- divergence trace (A's execution order; > first divergence)", tabulate(
        [[">" if r.first else "", _row_label(r.unit, r.what), r.verdict, _fmt(r.max_abs), r.input_verdict,
          r.source_a or "-", r.source_b or "-", r.how_a if r.how_a == r.how_b else f"{r.how_a} | {r.how_b}"]
         for r in d.trace],
        headers=["", "sub-module", "verdict", "max_abs", "input", "A fed from", "B fed from", "observed by"],
        tablefmt="simple")]
    first = _first_line(d)
    out += [first] if first else []
    out += [f"  {d.apart}"] if d.apart else []
    out += [f"attribution: {d.attribution.text}"] if d.attribution else []
    return out


def _where_table(d: PairDiff) -> list[str]:
    """Per differing tensor: how many elements, the worst one, and by which kind of row."""
    rows = [[w.tensor, w.verdict, _fmt(w.max_abs), f"{w.mismatches}/{w.numel}",
             ", ".join(map(str, w.worst_index)) + (f" (A {_value(w.worst_a)}, B {_value(w.worst_b)})"
                                                   if w.worst_index else ""), w.row_kind,
             "; ".join(f"{k}: {n}" for k, n in w.rows.items())]
            for w in d.where if not w.verdict.agrees]
    return ["\n-- where (mismatching elements, worst index (batch, position, feature), row kind)", tabulate(
        rows or [["(every tensor agrees)", "", "", "", "", "", ""]],
        headers=["tensor", "verdict", "max_abs", "mismatches", "worst at", "row kind", "mismatches by row kind"],
        tablefmt="simple")]


def _fmt(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return f"{x:.3g}" if x else "0"


def _value(x) -> str:
    """An element's value: NaN shown as NaN (in a max_abs column NaN means 'not applicable')."""
    return "NaN" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.6g}"
