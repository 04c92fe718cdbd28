"""benchmarks/house_stats.py, the figures of an issue's closing note: its circle finder sees
a circle, and harness/ has none (import-linter's contracts say the same from the other side)."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("house_stats", ROOT / "benchmarks" / "house_stats.py")
house_stats = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(house_stats)


def test_circles_and_levels_of_a_small_graph():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    found = house_stats.circles(graph)
    assert found == [["a", "b", "c"]]
    assert house_stats.levels(graph, found) == 2  # d -> (a b c)
    assert house_stats.circles({"a": {"b"}, "b": set()}) == []


def test_harness_has_no_import_circle_and_the_table_renders():
    s = house_stats.measure()
    assert s["circles"] == [] and s["files"] > 50 and s["levels"] >= 8
    assert "| import circles | 0 |" in house_stats.table(s)


def test_a_parameter_list_counts_every_parameter_but_self():
    tree = ast.parse("class C:\n    def f(self, a, /, b, *rest, c, d=1, **kw): ...\ndef g(): ...")
    f, g = sorted((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)), key=lambda n: n.name)
    assert (house_stats.parameters(f), house_stats.parameters(g)) == (6, 0)
