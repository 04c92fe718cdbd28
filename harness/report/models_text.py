"""The terminal text of `decode` and `train-step`: functions of their results.

The commands compute (harness/systems) and print what these return; the bounds the
results were judged by (KL bound, top-k, the Adam settings) are given, not imported, so
this module renders without reaching into the systems that produced the rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tabulate import tabulate

from harness.base.verdicts import Verdict


def _fmt(x: float) -> str:
    return "-" if isinstance(x, float) and math.isnan(x) else f"{x:.3g}"


def _yes(ok: bool) -> str:
    return "yes" if ok else "NO"


def _errors(rows) -> list[str]:
    """A line per model that failed (its code raised or answered wrongly), with its row count."""
    counts: dict[str, int] = {}
    for r in rows:
        error = getattr(r, "error", "")
        if error:
            variant = getattr(r, "variant", None)
            line = f"{r.family}/{variant}: {error}" if variant and not error.startswith(f"{r.family}/") else error
            counts[line] = counts.get(line, 0) + 1
    return (["\n== Errors (their rows are marked NO above; every other row is judged as usual)"]
            + [f"  {line} ({n} row{'s' if n > 1 else ''})" for line, n in counts.items()]) if counts else []


def decode_text(greedy: Sequence, distributions: Sequence, cache: Sequence, parity: Sequence, *,
                kl_bound: float, top_k: int) -> str:
    """`decode`'s four tables and its count line."""
    parts = ["== Greedy decoding: each model's own loop on the same ported weights (sharpened: FFN input x3)",
             tabulate([(r.family, f"{r.a} ~ {r.b}", r.expected, "same" if r.same_tokens else "differ", _yes(r.ok),
                        r.first_diff or "-", _fmt(r.margin_a), _fmt(r.margin_b), r.logprobs or "-",
                        _fmt(r.logprob_max_abs)) for r in greedy],
                      headers=("family", "pair", "expected", "tokens", "ok", "first difference",
                               "margin a", "margin b", "log-probs", "max |Δ log-p|")),
             f"\n== Next-token distributions, float32: per-token KL(a || b) over real positions (agree: worst "
             f"<= {kl_bound:g}), top-1 and top-{top_k} agreement",
             tabulate([(r.family, f"{r.a} ~ {r.b}", r.case, r.expected, _fmt(r.kl_worst), r.worst_at,
                        _fmt(r.kl_mean), f"{r.top1:.2f}", f"{r.topk:.2f}",
                        "hidden" if r.hidden else ("yes" if r.agrees else "no"), _yes(r.ok)) for r in distributions],
                      headers=("family", "pair", "case", "expected", "KL worst", "at", "KL mean", "top-1",
                               f"top-{top_k}", "agree", "ok")),
             "\n== Incremental decoding (cache) vs re-running the whole prefix, float32",
             tabulate([(r.family, r.variant, r.cache, r.steps, r.verdict, _yes(r.ok), _fmt(r.max_abs),
                        _fmt(r.noise_ratio)) for r in cache],
                      headers=("family", "model", "cache", "steps", "verdict", "ok", "max_abs", "noise_ratio")),
             "\n== KV-cache parity: each call of a cached session vs the full forward at its position, float32",
             tabulate([(r.family, r.variant, r.padding, r.schedule,
                        " ".join(f"{s.fed}{Verdict(s.verdict).symbol}" for s in r.steps), _yes(r.ok),
                        f"fed {r.first_bad.fed}: {r.first_bad.verdict}, max_abs {_fmt(r.first_bad.max_abs)}"
                        if r.first_bad else "-") for r in parity],
                      headers=("family", "model", "padding", "schedule", "tokens fed: verdict", "ok",
                               "first contradiction"))]
    bad = sum(not r.ok for rows in (greedy, distributions, cache, parity) for r in rows)
    parts += _errors(r for rows in (greedy, distributions, cache, parity) for r in rows)
    parts.append(f"\n{len(greedy)} pairs decoded, {len(distributions)} distribution pairs compared, {len(cache)} "
                 f"caches checked, {len(parity)} cached sessions against the full forward, {bad} contradict")
    return "\n".join(parts)


def train_step_text(rows: Sequence, *, adam: object) -> str:
    """`train-step`'s table and its count line."""
    table = tabulate([(r.family, f"{r.a} ~ {r.b}", r.expected, r.verdict, _yes(r.ok), r.worst_param,
                       _fmt(r.max_abs), _fmt(r.noise_ratio)) for r in rows],
                     headers=("family", "pair", "expected", "verdict", "ok", "worst parameter", "max_abs",
                              "noise_ratio"))
    bad = sum(not r.ok for r in rows)
    errors = "\n".join(_errors(rows))
    return (f"== One Adam step {adam}, dropout 0: updated parameters through the canonical map\n{table}\n"
            + (f"{errors}\n" if errors else "") + f"\n{len(rows)} pairs stepped, {bad} contradict")
