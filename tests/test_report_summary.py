"""REPORT.md's first screen answers the three questions: the machine's state on its first
lines, then one table, a row per variant, with its verdict against the family's reference,
its forward and forward + backward speed against the baseline with an interval, and its peak
memory; rows from a disturbed window are marked and not claimed; the long tables live in
files of their own. Rendered from logs measured before (tests/fixtures/), never by timing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from harness.bench.cases import plan
from harness.bench.log import read_log
from harness.check.results import PairResult
from harness.cli.main import main
from harness.registry import load_all, reference_of, variants_of
from harness.report.markdown import write_report
from harness.report.summary import NOT_CLAIMED, reference_verdict, short_verdict, verdict_against_reference
from harness.report.tables import WIDTH

FIXTURES = Path(__file__).resolve().parent / "fixtures"
QUICK = FIXTURES / "report-quick-cpu.jsonl"  # `python -m harness report` (quick, CPU, 2 cores)
MINE = FIXTURES / "report-mine-cpu.jsonl"    # `report --variants examples/my_attention.py --variant my_einsum`
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "my_attention.py"


def _pair(a, b, verdict, ok=True, reason="", family="norm"):
    return PairResult(family, a, b, "case", "float32", "cpu", verdict, "equivalent", reason, ok,
                      0.0, 0.0, 0.0, verdict, 0.0, 0.0, "", "", "")


def _summary(text: str) -> tuple[list[str], list[dict]]:
    """(the lines above the rule, the summary table's rows as dicts)."""
    head = text.split("\n---\n", 1)[0].splitlines()
    table = [x for x in head if x.startswith("|")]
    names = [c.strip() for c in table[0].strip("|").split("|")]
    rows = [dict(zip(names, (c.strip() for c in x.strip("|").split("|")))) for x in table[2:]]
    return head, rows


def _cases(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r.get("kind") == "case"]


def test_verdict_is_the_worst_against_the_reference():
    ref = reference_of("norm").id
    other = next(v.id for v in variants_of("norm") if v.id != ref)
    assert verdict_against_reference("norm", ref, None) == "reference"
    assert verdict_against_reference("norm", other, None) == "-"
    agree = [_pair(ref, other, "identical"), _pair(other, ref, "equivalent")]
    assert verdict_against_reference("norm", other, agree) == f"equivalent vs {ref}"
    worse = agree + [_pair(ref, other, "different", ok=False, reason="eps: 1e-6 vs 1e-5")]
    text = verdict_against_reference("norm", other, worse)
    assert text.startswith(f"different vs {ref} (eps: 1e-6 vs 1e-5)") and "contradicts" in text
    assert short_verdict(reference_verdict("norm", other, worse)) == f"! different vs {ref}: eps"
    two = [_pair(ref, other, "different", reason="norm_formula: rms vs layernorm; eps: 1e-06 vs 1e-05")]
    assert short_verdict(reference_verdict("norm", other, two)) == f"different vs {ref}: norm_formula, eps"
    assert short_verdict(reference_verdict("norm", other, agree)) == f"equivalent vs {ref}"
    assert short_verdict(reference_verdict("norm", ref, agree)) == "reference"


def test_the_first_screen_of_the_quick_report(tmp_path):
    rows = read_log(QUICK)
    cases = _cases(rows)
    results = [_pair(reference_of(f).id, v.id, "equivalent", family=f)
               for f in {c["family"] for c in cases} for v in variants_of(f) if v.id != reference_of(f).id]
    report = write_report(rows, tmp_path / "quick", results=results, profile="quick")
    text = report.read_text()
    head, table = _summary(text)
    assert head[4].startswith("Machine: ") and "threads" in head[4]  # the machine's state on the first lines
    assert len(head) <= 64 and len([x for x in head if x.startswith("|")]) <= 52  # one screen, baselines in it
    assert max(map(len, head)) <= WIDTH
    timed = {f"{c['family']}/{c['variant']}" + (" (baseline)" if c["variant"] == reference_of(c["family"]).id else "")
             for c in cases}
    assert [r["variant"] for r in table] == list(dict.fromkeys(r["variant"] for r in table))  # each once
    assert {r["variant"] for r in table} == timed  # every variant timed; each family's reference marked
    baselines = [r for r in table if r["variant"].endswith(" (baseline)")]
    assert baselines and all(r["verdict vs reference"] == "reference" and r["peak MiB"] != "-"
                             and {r["fwd vs baseline [90%]"], r["fwd+bwd vs baseline [90%]"]} <= {"1.00x", "-"}
                             and "1.00x" in (r["fwd vs baseline [90%]"], r["fwd+bwd vs baseline [90%]"])
                             for r in baselines)
    assert all(r["verdict vs reference"].startswith("equivalent vs ") for r in table if r not in baselines)
    for r in (r for r in table if r not in baselines):
        for column in ("fwd vs baseline [90%]", "fwd+bwd vs baseline [90%]"):
            cell = r[column]
            m = re.fullmatch(r"([\d.]+)x \[([\d.]+)-([\d.]+)\]", cell)
            assert m or cell in ("-", NOT_CLAIMED), cell
            if m:
                assert float(m.group(2)) <= float(m.group(1)) <= float(m.group(3))
    attention = [r for r in table if r["variant"].startswith("attention/")]
    assert all(r["fwd+bwd vs baseline [90%]"] != "-" for r in attention)  # the fwd+bwd headline shape
    assert len(text.splitlines()) <= 200, len(text.splitlines())  # sized for a person
    long = (tmp_path / "quick" / "TABLES.md").read_text()
    assert all(f"## {f}" in long for f in {c["family"] for c in cases})
    assert "## attention" in (tmp_path / "quick" / "VERDICTS.md").read_text()


def test_disturbed_rows_are_marked_and_not_claimed(tmp_path):
    rows = read_log(QUICK)
    group = next(c for c in _cases(rows) if c["family"] == "norm")["group"]
    why = "load average 9.4 on 2 cores"
    marked = [{**r, "disturbed": why} if r.get("group") == group else
              {k: v for k, v in r.items() if k != "disturbed"} for r in rows]
    text = write_report(marked, tmp_path / "d", profile="quick").read_text()
    head, table = _summary(text)
    machine = head[4]
    assert re.search(r"\*\*\d+ of \d+ groups were timed while the machine was disturbed\*\*", machine), machine
    norm = [r for r in table if r["variant"].startswith("norm/") and not r["variant"].endswith(" (baseline)")]
    assert norm and all(NOT_CLAIMED in (r["fwd vs baseline [90%]"], r["fwd+bwd vs baseline [90%]"]) for r in norm)
    figure = re.compile(r"[\d.]+x \[[\d.]+-[\d.]+\]")
    assert any(figure.fullmatch(r["fwd vs baseline [90%]"]) for r in table if not r["variant"].startswith("norm/"))
    assert why in text.split("\n---\n", 1)[1]  # the reason, below the rule


def test_a_report_of_my_variant_puts_it_in_the_summary_and_no_one_elses_target(tmp_path):
    load_all([str(EXAMPLE)])
    asked = {(c.variant, c.batch, c.seq, c.mode) for c in plan("quick", "cpu", ["attention"], ["my_einsum"])}
    assert ("my_einsum", 8, 512, "fwd") in asked  # timed at the summary's shape, with its baseline
    assert {v for v, *_ in asked} == {"my_einsum", reference_of("attention").id}
    text = write_report(read_log(MINE), tmp_path / "mine", profile="quick").read_text()
    _, table = _summary(text)
    baseline, row = table  # its baseline's row beside it: "lighter?" read from the first screen
    assert baseline["variant"] == f"attention/{reference_of('attention').id} (baseline)"
    assert baseline["fwd vs baseline [90%]"] == "1.00x" and baseline["verdict vs reference"] == "reference"
    assert row["variant"] == "attention/my_einsum"
    assert row["fwd vs baseline [90%]"] != "-" and row["fwd+bwd vs baseline [90%]"] != "-"
    assert float(baseline["peak MiB"]) > 0 and float(row["peak MiB"]) > 0
    assert "## Targets" not in text and "fused_sdpa" not in text.split("\n---\n", 1)[0]


def test_the_committed_reference_is_compared_only_like_with_like(tmp_path, capsys):
    out = tmp_path / "reports"
    assert main(["report", "--from", str(MINE), "--out", str(out), "--no-compare"]) == 0
    folder = out / "cpu"
    (folder / "from").rename(folder / "full")
    reference = folder / "full" / "results.json"
    assert main(["report", "--from", str(MINE), "--out", str(out)]) == 0
    assert f"Compared with `{reference}`" in (folder / "from" / "REPORT.md").read_text()
    data = json.loads(reference.read_text())
    data["rows"] = [{**r, "cpu": "Another CPU"} for r in data["rows"]]
    reference.write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["report", "--from", str(MINE), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"not compared with {reference}" in err and "cpu (Another CPU then" in err
    report = (folder / "from" / "REPORT.md").read_text()
    assert "Compared with" not in report and "not comparable" not in (folder / "from" / "TABLES.md").read_text()
    assert main(["report", "--from", str(MINE), "--out", str(out), "--compare", str(reference)]) == 0
    assert "not comparable" in (folder / "from" / "TABLES.md").read_text()  # asked for: shown, row by row


@pytest.mark.parametrize("fixture", [QUICK, MINE])
def test_fixtures_are_logs_the_harness_wrote(fixture):
    rows = read_log(fixture)
    assert _cases(rows) and all(c["status"] == "ok" for c in _cases(rows))


def test_a_declared_error_is_named_as_such_not_as_the_verdict():
    """The write-ups' -1e9 mask fills cannot be held in float16 (masked_fill raises): the
    check expects that error, and the summary says so beside the verdict where both ran."""
    from harness.base.config import CONFIG_MATRIX
    from harness.check.pairs import derive_pairs
    from harness.check.spec import SpecChecker
    from harness.registry import get_variant
    from harness.report.summary import ReferenceVerdict, reference_verdict

    ref = reference_of("attention").id
    engine = SpecChecker({"default": CONFIG_MATRIX["default"]}, "cpu")
    from harness.check.results import Cell

    specs = {Cell("attention", v, "default", "self", dtype):
             engine.check(get_variant("attention", v), "default", "self", dtype)
             for v in ("annotated", ref) for dtype in ("float32", "float16")}
    pairs = [p for dtype in ("float32", "float16")
             for p in derive_pairs(engine.checkers, "attention", "default", "self", dtype, specs=specs, device="cpu")]
    error = [p for p in pairs if p.verdict == "error"]
    overflow = "annotated: fill -1e+09 overflows float16"
    assert [(p.dtype, p.ok, p.declared) for p in error] == [("float16", True, overflow)]
    outcome = reference_verdict("attention", "annotated", pairs)
    assert isinstance(outcome, ReferenceVerdict) and outcome.verdict == "equivalent" and not outcome.contradicts
    assert str(outcome) == f"equivalent vs {ref}; float16: declared error ({overflow})"


def test_an_undeclared_error_stays_the_verdict():
    ref = reference_of("norm").id
    other = next(v.id for v in variants_of("norm") if v.id != ref)
    crashed = [_pair(ref, other, "equivalent"), _pair(ref, other, "error", ok=False)]
    assert verdict_against_reference("norm", other, crashed).startswith("error")
