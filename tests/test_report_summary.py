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
