"""REPORT.md's first section answers both questions: one row per variant with its verdict
against the family's reference and its speed against the baseline, with an interval."""

from __future__ import annotations

import re

from harness.check.results import PairResult
from harness.cli.main import main
from harness.registry import reference_of, variants_of
from harness.report.summary import verdict_against_reference

TINY = ["--family", "norm", "--seq", "8", "--batch", "1", "--min-time", "0.002", "--rounds", "3",
        "--no-rss", "--no-progress"]


def _pair(a, b, verdict, ok=True, reason=""):
    return PairResult("norm", a, b, "case", "float32", "cpu", verdict, "equivalent", reason, ok,
                      0.0, 0.0, 0.0, verdict, 0.0, 0.0, "", "", "")


def test_verdict_is_the_worst_against_the_reference():
    ref = reference_of("norm").id
    other = next(v.id for v in variants_of("norm") if v.id != ref)
    assert verdict_against_reference("norm", ref, None) == "reference"
    assert verdict_against_reference("norm", other, None) == "-"
    agree = [_pair(ref, other, "identical"), _pair(other, ref, "equivalent")]
    assert verdict_against_reference("norm", other, agree) == "equivalent"
    worse = agree + [_pair(ref, other, "different", ok=False, reason="eps: 1e-6 vs 1e-5")]
    text = verdict_against_reference("norm", other, worse)
    assert text.startswith("different (eps: 1e-6 vs 1e-5)") and "contradicts" in text


def test_report_opens_with_the_summary(tmp_path):
    log = tmp_path / "bench.jsonl"
    assert main(["bench", *TINY, "--log", str(log)]) == 0
    assert main(["report", "--from", str(log), "--no-compare", "--out", str(tmp_path / "rep")]) == 0
    text = (tmp_path / "rep" / "cpu" / "from" / "REPORT.md").read_text()
    sections = re.findall(r"^## (.*)$", text, re.M)
    assert sections[0].startswith("Summary: equivalent to the reference?")
    summary = text.split("## Summary", 1)[1].split("\n\n|", 1)
    summary = summary[0] + "\n|" + summary[1].split("\n\n", 1)[0]  # its prose and its table
    rows = [r for r in summary.splitlines() if r.startswith("| norm")]
    assert sorted(r.split("|")[2].strip() for r in rows) == sorted(v.id for v in variants_of("norm"))
    for row in rows:
        for ratio, lo, hi in re.findall(r"([\d.]+)x \[([\d.]+)-([\d.]+)\]", row):
            assert float(lo) <= float(ratio) <= float(hi), row
    assert max(len(x) for x in summary.splitlines()) <= 200


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
    specs = {(v, "default", "self", dtype): engine.check(get_variant("attention", v), "default", "self", dtype)
             for v in ("annotated", ref) for dtype in ("float32", "float16")}
    pairs = [p for dtype in ("float32", "float16")
             for p in derive_pairs(engine.checkers, "attention", "default", "self", dtype, specs=specs, device="cpu")]
    error = [p for p in pairs if p.verdict == "error"]
    overflow = "annotated: fill -1e+09 overflows float16"
    assert [(p.dtype, p.ok, p.declared) for p in error] == [("float16", True, overflow)]
    outcome = reference_verdict("attention", "annotated", pairs)
    assert isinstance(outcome, ReferenceVerdict) and outcome.verdict == "equivalent" and not outcome.contradicts
    assert str(outcome) == f"equivalent; float16: declared error ({overflow})"


def test_an_undeclared_error_stays_the_verdict():
    ref = reference_of("norm").id
    other = next(v.id for v in variants_of("norm") if v.id != ref)
    crashed = [_pair(ref, other, "equivalent"), _pair(ref, other, "error", ok=False)]
    assert verdict_against_reference("norm", other, crashed).startswith("error")
