"""The counts the documentation quotes, computed and compared with the text: the quick
benchmark profile's cases (from the planning code, nothing timed), the committed reference
run's cases, groups and peaks (from its results.json), the registrations of the example
files, the scaling run's size, and the registry's size at which a quoted time was measured
(within a quarter of today's: past that, measure again).
Figures that only a whole check prints (spec checks, pairs) are not quoted: the docs point
at the command's last line instead. Seconds: no check runs."""

from __future__ import annotations

import ast
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from harness.bench.cases import plan
from harness.families.models import DECODINGS
from harness.registry import REGISTRY, load_all, scratch

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
WORDS = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10,
         "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15}
MEASURED_NEAR = 0.25  # a time measured at N variants is quoted while the registry holds N +- 25%


def _number(text: str) -> int:
    return WORDS[text.lower()] if text.lower() in WORDS else int(text.replace(",", ""))


def quoted(text: str, pattern: str) -> list[int]:
    """The figures (group 1 of each match of ``pattern``) in ``text``, its line breaks and
    indents read as one space; a pattern that matches nothing is a test out of date."""
    flat = re.sub(r"\s+", " ", text)
    found = [_number(m.group(1)) for m in re.finditer(pattern, flat)]
    assert found, f"no {pattern!r} in the text: the sentence changed, change this test with it"
    return found


def _page(name: str) -> str:
    return (DOCS / name).read_text()


def near(measured_at: int, now: int) -> bool:
    return abs(now - measured_at) <= MEASURED_NEAR * measured_at


def _registry() -> dict:
    load_all()
    return REGISTRY


def test_the_quoted_figures_are_read_from_the_text_and_the_near_rule_can_fail():
    text = "the whole quick\n   profile, 1,110 cases on CPU; nine HF classes"
    assert quoted(text, r"quick profile, ([\d,]+) cases") == [1110]
    assert quoted(text, r"(\w+) HF classes") == [9]
    with pytest.raises(AssertionError, match="sentence changed"):
        quoted(text, r"(\d+) variants")
    assert near(93, 102) and near(101, 102) and not near(50, 102) and not near(93, 120)


def test_the_quick_profile_counts_in_benchmarking_md():
    _registry()
    cases = plan("quick", "cpu")
    text = _page("benchmarking.md")
    assert quoted(text, r"`-m norm` selects the norm family's (\d+)") == [Counter(c.family for c in cases)["norm"]]
    assert quoted(text, r"the whole quick profile, ([\d,]+) cases on CPU") == [len(cases)]


def test_the_committed_reference_run_counts_in_benchmarking_md():
    run = json.loads((ROOT / "reports" / "cpu" / "full" / "results.json").read_text())
    rows, text = run["rows"], _page("benchmarking.md")
    assert run["profile"] == "full" and not any(r["disturbed"] for r in rows)  # "none disturbed"
    groups = len({r["group"] for r in rows})
    assert quoted(text, r"this project's 2-core CPU machine: ([\d,]+) cases in \d+ groups, none disturbed") == [
        len(rows)]
    assert quoted(text, r"machine: [\d,]+ cases in (\d+) groups") == [groups]
    assert quoted(text, r"the (\d+) group peaks") == [len(run["peaks"])] == [groups]


def _module_registrations(path: Path) -> int:
    """The ``register(...)`` calls at the top level of ``path`` (no import: transformers not needed)."""
    tree = ast.parse(path.read_text())
    return sum(isinstance(n, ast.Expr) and isinstance(n.value, ast.Call) and getattr(n.value.func, "id", "") ==
               "register" for n in tree.body)


def test_the_example_files_hold_what_the_docs_count():
    hf = _module_registrations(ROOT / "examples" / "hf_pack.py")
    assert quoted(_page("layout.md"), r"`hf_pack.py` \((\w+) Hugging Face classes") == [hf]
    assert quoted(_page("your-variant.md"), r"`examples/hf_pack.py` registers (\w+) HF classes") == [hf]
    _registry()
    decodings = dict(DECODINGS)
    try:
        with scratch():
            bugs = [v.id for v in load_all(["examples/cache_bugs.py"])]
    finally:  # the file's register_decoding too: nothing of it stays for the next test
        DECODINGS.clear()
        DECODINGS.update(decodings)
    controls = [b for b in bugs if "control" in b]
    assert len(controls) == 1, bugs
    assert quoted(_page("layout.md"), r"`cache_bugs.py` \((\w+) k/v-cache mistakes and a control") == [
        len(bugs) - 1]
    assert quoted(_page("models.md"), r"`examples/cache_bugs.py` plants (\w+) cache mistakes") == [len(bugs) - 1]


def test_the_scaling_run_is_the_size_the_docs_quote():
    many = re.search(r'HARNESS_MANY", "(\d+)"', (ROOT / "benchmarks" / "many_variants.py").read_text())
    assert quoted(_page("verdicts.md"), r"(\d+) attention variants, the registered ones copied") == [int(many[1])]
    assert quoted(_page("testing.md"), r"the check of (\d+) attention variants") == [int(many[1])]


def test_a_time_quoted_with_the_registry_size_was_measured_near_todays():
    """'Measured ... with N variants registered': the time stands while the registry is
    within a quarter of N; a registry grown past that is measured again, N updated."""
    now = len(_registry())
    for n in quoted(_page("verdicts.md"), r"with (\d+) variants registered"):
        assert near(n, now), f"a time in verdicts.md was measured with {n} variants, the registry holds {now}"
