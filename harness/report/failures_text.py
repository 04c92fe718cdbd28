"""The first screen of ``check``: the verdict, then every contradiction folded, one line
per failure however many configs, cases and dtypes it repeats on (the full rows are in
``check --json``; ``tables.failures_table`` renders them one per row)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.base.verdicts import Verdict
from harness.check.results import PairResult

NAMED = 6  # failing variants named on the verdict line before '... and N more'


@dataclass(frozen=True)
class Failure:
    """One contradiction: ``cell`` (config, case, dtype) for a spec or a measured pair,
    ``where`` in words for the other checks; ``error`` the line of the exception that made
    the check fail to run the variant ('' for a verdict that contradicts)."""

    what: str
    found: str
    expected: str
    cell: tuple[str, str, str] | None = None
    where: str = ""
    worst: str = ""
    max_abs: float = math.nan
    ratio: float = math.nan
    note: str = ""
    error: str = ""


def failures(report) -> list[Failure]:
    """Every contradiction of ``report``, in its order: specs, gradchecks, dropout checks,
    compiled and cached runs, measured pairs. A gradcheck or dropout row that failed on the
    exception its variant's spec rows name carries it as its ``error`` too."""
    out = [Failure(f"{s.family}/{s.variant}", str(s.verdict), str(s.expected), (s.config, s.case, s.dtype),
                   worst=s.worst, max_abs=s.err, ratio=s.ratio, note=s.note,
                   error=s.note if s.verdict == Verdict.ERROR else "")
           for s in report.specs if not s.ok]
    errors = {(f.what, f.error) for f in out if f.error}
    theirs = lambda what, text: text if (what, text) in errors else ""  # noqa: E731
    for g in report.gradchecks:
        if not g.ok:
            what = f"{g.family}/{g.variant}"
            out.append(Failure(what, "failed", "passes", where=f"gradcheck {g.config} {g.case}", note=g.note,
                               error=theirs(what, g.note)))
    for d in report.dropouts:
        if not d.ok:
            what = f"{d.family}/{d.variant}"
            out.append(Failure(what, d.measured, d.expected, where=f"dropout ({d.check})",
                               error=theirs(what, d.measured)))
    for c in report.compiled:
        if not c.ok:
            out.append(Failure(f"{c.family}/{c.variant}", str(c.verdict), "equivalent to eager, compiled",
                               where=f"torch.compile({c.backend}) {c.config} {c.case} {c.dtype}", max_abs=c.err,
                               note=c.note))
    for c in report.caches:
        if not c.ok:
            where, verdict, max_abs = c.worst()
            out.append(Failure(f"{c.family}/{c.variant}", str(verdict), "the full forward's log-probabilities",
                               where=f"k/v cache ({c.cache}), {where}", max_abs=max_abs, note=c.error))
    for p in report.failures:
        if isinstance(p, PairResult):
            out.append(Failure(f"{p.family}/{p.a} ~ {p.b}", str(p.verdict), str(p.expected),
                               (p.config, p.case, p.dtype), worst=p.worst_grad,
                               max_abs=max(p.max_abs, p.grad_max_abs), note=p.note or p.reason))
    return out


def _names(values) -> str:
    return ", ".join(dict.fromkeys(values))


def where_text(cells: list[tuple[str, str, str]]) -> str:
    """(config, case, dtype) cells in few words: 'CASES on CONFIGS in DTYPES' where they are
    every combination of their cases, configs and dtypes; else one such phrase per group of
    cases that share their (config, dtype) cells, joined by '; '."""
    by_case: dict[str, set[tuple[str, str]]] = {}
    for config, case, dtype in cells:
        by_case.setdefault(case, set()).add((config, dtype))
    groups: dict[str, list[str]] = {}  # the cells' phrase -> the cases it holds for
    for case, pairs in by_case.items():
        ordered = [(c, d) for c, _, d in cells if (c, d) in pairs]
        configs, dtypes = dict.fromkeys(c for c, _ in ordered), dict.fromkeys(d for _, d in ordered)
        if len(pairs) == len(configs) * len(dtypes):
            phrase = f"on {_names(configs)} in {_names(dtypes)}"
        else:
            phrase = "on " + _names(f"{c} in {d}" for c, d in ordered)
        groups.setdefault(phrase, []).append(case)
    return "; ".join(f"{', '.join(cases)} {phrase}" for phrase, cases in groups.items())


def _folded_line(what: str, rows: list[Failure]) -> str:
    """One line for ``rows``, the same failure of ``what`` wherever it shows."""
    cells = [r.cell for r in rows if r.cell is not None]
    where = "; ".join(filter(None, [where_text(cells) if cells else "", _names(r.where for r in rows if r.where)]))
    checks = f"{len(rows)} check{'s' if len(rows) != 1 else ''}"
    first = rows[0]
    if first.error:
        return f"  {what}: {first.error}; {checks} could not run: {where}"
    line = f"  {what}: {first.found}, declared {first.expected}, on {checks}: {where}"
    measured = [r for r in rows if not math.isnan(r.max_abs)]
    if measured:
        worst = max(measured, key=lambda r: (r.ratio if first.found == Verdict.LESS_PRECISE else r.max_abs))
        at = " ".join(worst.cell) if worst.cell else worst.where
        size = (f"{worst.ratio:.3g}x the baseline's error" if first.found == Verdict.LESS_PRECISE
                else f"max_abs {worst.max_abs:.3g}")
        line += f"; worst {worst.worst + ' ' if worst.worst else ''}{size} ({at})"
        if worst.note:
            line += f": {worst.note[:160]}"
    return line


def folded_failures(report) -> list[str]:
    """Each contradiction once: the rows of one variant that fail on one exception, or with
    one (found, declared) verdict on one kind of check, folded into a line with their count
    and where they are."""
    groups: dict[tuple, list[Failure]] = {}
    for f in failures(report):
        kind = "cell" if f.cell is not None else f.where.split(" ", 1)[0]
        key = (f.what, "error", f.error) if f.error else (f.what, kind, f.found, f.expected)
        groups.setdefault(key, []).append(f)
    return [_folded_line(key[0], rows) for key, rows in groups.items()]


def verdict_lines(report, n_variants: int, mistakes: list[str]) -> list[str]:
    """The first lines ``check`` prints: whether every declaration holds, or how many
    checks contradict and in which variants, then each failing variant's named mistake
    (``mistakes``: the lines ``harness.trace.explain.mistake_lines`` gives) and every
    contradiction folded."""
    rows = failures(report)
    if not rows:
        unreached = len(report.not_exercised)
        return [f"verdict: holds: {n_variants} variant(s) checked, 0 contradict"
                + (f"; {unreached} declaration(s) not exercised (the last line names them)" if unreached else "")]
    what = list(dict.fromkeys(r.what for r in rows))
    named = ", ".join(what[:NAMED]) + (f" and {len(what) - NAMED} more" if len(what) > NAMED else "")
    errors = sum(bool(r.error) for r in rows)
    lines = [f"verdict: {len(rows)} contradict" + (f" ({errors} could not run)" if errors else "")
             + f", in {len(what)} of {n_variants} variant(s) checked: {named}"]
    lines += mistakes
    folded = folded_failures(report)
    lines += [f"\n== Contradictions: {len(rows)} checks, {len(folded)} line(s) (each failure once, "
              "with the configs, cases and dtypes it shows on)", *folded]
    return lines
