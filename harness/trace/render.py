"""A divergence as text: the one-paragraph summary and the full table."""

from __future__ import annotations

import math

from tabulate import tabulate

from harness.base.verdicts import Verdict
from harness.trace.divergence import _row_label


def summary_text(d: dict) -> str:
    if d.get("errors"):
        return "error: " + "; ".join(f"{k}: {v}" for k, v in d["errors"].items())
    lines = []
    worst = next((w for w in d["where"] if w["tensor"] == d.get("worst")), None)
    if Verdict(d["verdict"]).agrees:
        lines.append(f"{d['a']} and {d['b']} agree on {d['case']} ({d['verdict']})")
    elif d["first"]:
        lines.append(f"first divergence: {d['first']['text']}")
    elif d.get("backward"):
        lines.append(f"first divergence (backward only): {d['backward']['text']}")
    elif not d["trace"]:
        lines.append("no canonical sub-module to trace: the difference is the module's own computation")
    else:
        lines.append("every traced sub-module agrees: the difference is in ops outside them "
                     "(a residual, a norm or step the family does not map)")
    if d.get("attribution"):
        lines.append(d["attribution"]["text"])
    lines += [f"mistake of {v}: {line}" for v, line in d.get("mistakes", {}).items()]
    if worst is not None and not Verdict(worst["verdict"]).agrees:
        idx = ", ".join(map(str, worst["worst_index"]))
        lines.append(f"worst tensor {worst['tensor']}: {worst['mismatches']}/{worst['numel']} elements "
                     f"differ, worst at [{idx}] ({worst['row_kind']}): {_value(worst['worst_a'])} vs "
                     f"{_value(worst['worst_b'])}")
    lines += [f"hint: {h}" for h in d.get("hints", [])]
    return "\n".join(lines)


# -- printing -----------------------------------------------------------------------------------------------------

def render(d: dict) -> str:
    out = [f"== diff {d['family']}: {d['a']} (A) vs {d['b']} (B), case {d['case']}, {d['dtype']} on {d['device']}",
           f"verdict: {d['verdict']}; declared: {d['expected']}"
           + (f" ({d['declared_reason']})" if d['declared_reason'] else "")]
    out.append("\n-- traits (* differs, S semantic)")
    out.append(tabulate([[("*" if t["differs"] else "") + ("S" if t["semantic"] else ""), t["trait"], t["a"], t["b"]]
                         for t in d["traits"]], headers=["", "trait", d["a"], d["b"]], tablefmt="simple"))
    for v, line in d.get("mistakes", {}).items():
        out.append(f"mistake of {v}: {line}")
    if d.get("errors"):
        out.append("\nerror: " + "; ".join(f"{k}: {v}" for k, v in d["errors"].items()))
        return "\n".join(out)
    out.append("\n-- divergence trace (A's execution order; > first divergence)")
    out.append(tabulate(
        [[">" if r["first"] else "", _row_label(r["unit"], r["what"]), r["verdict"], _fmt(r["max_abs"]),
          r["input_verdict"], r["source_a"] or "-", r["source_b"] or "-",
          r["how_a"] if r["how_a"] == r["how_b"] else f"{r['how_a']} | {r['how_b']}"]
         for r in d["trace"]],
        headers=["", "sub-module", "verdict", "max_abs", "input", "A fed from", "B fed from", "observed by"],
        tablefmt="simple"))
    if d["first"]:
        out.append(f"first divergence: {d['first']['text']}")
    elif d.get("backward"):
        out.append(f"first divergence (backward only): {d['backward']['text']}")
    if d.get("attribution"):
        out.append(f"attribution: {d['attribution']['text']}")
    out.append("\n-- where (mismatching elements, worst index (batch, position, feature), row kind)")
    out.append(tabulate(
        [[w["tensor"], w["verdict"], _fmt(w["max_abs"]), f"{w['mismatches']}/{w['numel']}",
          ", ".join(map(str, w["worst_index"])) + (f" (A {_value(w['worst_a'])}, B {_value(w['worst_b'])})"
                                                    if w["worst_index"] else ""), w["row_kind"],
          "; ".join(f"{k}: {n}" for k, n in w["rows"].items())]
         for w in d["where"] if not Verdict(w["verdict"]).agrees]
        or [["(every tensor agrees)", "", "", "", "", "", ""]],
        headers=["tensor", "verdict", "max_abs", "mismatches", "worst at", "row kind", "mismatches by row kind"],
        tablefmt="simple"))
    if d.get("hints") or d.get("hint_candidates"):
        out.append(f"\n-- layout hints ({d['hint_candidates']} candidate layouts tried in float64)")
        out += [f"hint: {h}" for h in d["hints"]] or ["(no transposed or reordered weight makes them agree)"]
    counts = d["op_counts"]
    out.append(f"\n-- aten ops, aligned ({d['a']}: {counts[d['a']]} ops, {d['b']}: {counts[d['b']]} ops)")
    out.append(tabulate([[tag, x, y] for tag, x, y in d["ops"]], headers=["", d["a"], d["b"]],
                        tablefmt="simple", maxcolwidths=[None, 60, 60]))
    out.append("\nkernel path: " + "; ".join(
        f"{v}: autograd {d['paths'][v]}, no_grad {d['paths_no_grad'][v]}" for v in (d["a"], d["b"])))
    out.append(f"({d['seconds']:.1f} s)")
    return "\n".join(out)


def _fmt(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return f"{x:.3g}" if x else "0"


def _value(x) -> str:
    """An element's value: NaN shown as NaN (in a max_abs column NaN means 'not applicable')."""
    return "NaN" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.6g}"
