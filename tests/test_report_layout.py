"""REPORT.md, TABLES.md and VERDICTS.md fit a wide terminal (no line over 160 characters: the per-family table in four,
time apart from rate, memory and kernel path; a table still wider becomes a list; prose
wrapped), and its figures are readable: lines that lie on each other are named in the
legend ("= torch_sdpa") and drawn with their own marker and dash; verdicts.png is one
panel per family, laid out without overlapping titles, a count per verdict in each cell."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from harness.bench.log import read_log
from harness.check.results import PairResult
from harness.cli.main import main
from harness.registry import reference_of, variants_of
from harness.report import plots
from harness.report.markdown import write_report
from harness.report.tables import WIDTH, fit_width

TINY = ["--family", "norm", "--seq", "8,16", "--batch", "1", "--min-time", "0.002", "--rounds", "3",
        "--no-rss", "--no-progress"]


def _pair(a, b, verdict, case="rows", ok=True, reason=""):
    return PairResult("norm", a, b, case, "float32", "cpu", verdict, "equivalent", reason, ok,
                      0.0, 0.0, 0.0, verdict, 0.0, 0.0, "", "", "")


def test_no_line_of_the_report_is_wider_than_a_wide_terminal(tmp_path):
    log = tmp_path / "bench.jsonl"
    assert main(["bench", *TINY, "--log", str(log)]) == 0
    ref = reference_of("norm").id
    results = [_pair(ref, v.id, "different", reason="norm_formula: rms vs layernorm; eps: 1e-06 vs 1e-05; " * 4)
               for v in variants_of("norm") if v.id != ref]
    report = write_report(read_log(log), tmp_path / "rep", results=results, profile="quick")
    for name in ("REPORT.md", "TABLES.md", "VERDICTS.md"):
        lines = (report.parent / name).read_text().splitlines()
        assert max(map(len, lines)) <= WIDTH, (name, max(lines, key=len))
    lines = (report.parent / "TABLES.md").read_text().splitlines()
    text = "\n".join(lines)
    for title in ("Time:", "Rate:", "Memory:", "Kernel path:"):
        assert f"\n{title}\n" in text
    time_header = next(x for x in lines if x.startswith("| variant") and "median ms" in x)
    assert "saved MiB" not in time_header and "GFLOP/s" not in time_header  # timing apart from memory


def test_fit_width_keeps_narrow_tables_and_lists_wide_ones():
    narrow = "| a | b |\n|---|---|\n| 1 | 2 |"
    assert fit_width(narrow) == narrow
    wide = "| name | why |\n|---|---|\n| x | " + "word " * 60 + "|"
    out = fit_width(wide)
    assert out.startswith("- **x**: why word") and max(map(len, out.splitlines())) <= WIDTH
    prose = "- " + "a long sentence " * 30
    wrapped = fit_width(prose).splitlines()
    assert len(wrapped) > 1 and all(x.startswith("  ") for x in wrapped[1:]) and max(map(len, wrapped)) <= WIDTH


@pytest.fixture
def figures(monkeypatch):
    saved = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, path, dpi: saved.append(fig))
    monkeypatch.setattr(plots._plt(), "close", lambda fig: None)
    return saved


def test_lines_that_coincide_are_named_and_told_apart(figures, tmp_path):
    rows = []
    for variant, saved in (("torch_sdpa", 1.0), ("fused_sdpa", 1.0), ("annotated", 3.0)):
        for t in (64, 128, 256):
            rows.append({"family": "attention", "batch": 2, "d_model": 64, "dtype": "float32", "mode": "fwd+bwd",
                         "compiled": False, "status": "ok", "variant": variant, "seq": t,
                         "median_s": 0.001 * t, "iqr_s": 0.0001, "saved_bytes": saved * t * 2**20})
    plots.plot_sweeps(pd.DataFrame(rows), tmp_path)
    memory = figures[-1].axes[0]
    labels = [t.get_text() for t in memory.get_legend().get_texts()]
    named = [x for x in labels if x.endswith(("= torch_sdpa", "= fused_sdpa"))]
    assert len(named) == 1 and not named[0].startswith(named[0][-10:]), labels  # the one under the other
    assert not any(x.startswith("annotated") and "=" in x for x in labels)
    styles = {(ln.get_marker(), ln.get_linestyle()) for ln in memory.get_lines()}
    assert len(styles) == 3  # each line its own marker and dash


def test_time_plots_read_in_plain_numbers_with_the_legend_in_line_order(figures, tmp_path):
    rows = [{"family": "attention", "batch": 2, "d_model": 64, "dtype": "float32", "mode": "fwd", "compiled": False,
             "status": "ok", "variant": variant, "seq": t, "median_s": factor * t / 1e4, "iqr_s": 1e-6,
             "saved_bytes": float("nan")}
            for variant, factor in (("annotated", 1.0), ("torch_mha", 3.0), ("torch_sdpa", 2.0))
            for t in (64, 128, 256)]
    plots.plot_sweeps(pd.DataFrame(rows), tmp_path)
    ax = figures[-1].axes[0]
    figures[-1].canvas.draw()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["64", "128", "256"]
    ticks = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert ticks and all(t.replace(".", "").isdigit() for t in ticks), ticks  # 10, 20, 50: no 2^k
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["torch_mha [reference]", "torch_sdpa", "annotated"]  # highest at the largest T first


def test_verdict_panels_do_not_overlap_and_cells_hold_their_text(figures, tmp_path):
    from harness.families.catalog import get_family

    cases = [c.name for c in get_family("attention").cases]
    ids = [v.id for v in variants_of("attention")]
    ref = reference_of("attention").id
    results = [PairResult("attention", a, b, c, "float32", "cpu", "equivalent" if n % 4 else "different", "equivalent",
                          "", True, 0.0, 0.0, 0.0, "equivalent", 0.0, 0.0, "", "", "")
               for a in ids for b in ids if a < b for n, c in enumerate(cases)]
    norm = [v.id for v in variants_of("norm")]
    results += [_pair(a, b, "equivalent") for a in norm for b in norm if a < b]
    assert plots.plot_verdicts(results, "float32", tmp_path) == "verdicts.png"
    fig = figures[-1]
    assert type(fig.get_layout_engine()).__name__ == "ConstrainedLayoutEngine"
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    used = [ax for ax in fig.axes if ax.get_title()]
    boxes = [ax.title.get_window_extent(renderer) for ax in used]
    boxes.append(fig._suptitle.get_window_extent(renderer))
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not a.overlaps(b)
    ax = used[0]
    cell = ax.transData.transform((1, 0))[0] - ax.transData.transform((0, 0))[0]
    assert ax.texts and all(t.get_window_extent(renderer).width < cell for t in ax.texts)
    counts = f"≠{len(cases[::4])}\n≈{len(cases) - len(cases[::4])}"
    assert any(t.get_text() == counts for t in ax.texts), [t.get_text() for t in ax.texts][:3]  # a count each
    assert ref in [t.get_text() for t in ax.get_yticklabels()]
    assert np.isfinite(cell)
    # a family of 18 variants gets cells about the size of a family of 6's (the layout's
    # slack aside), large enough to read at the printed size
    widths = [a.transData.transform((1, 0))[0] - a.transData.transform((0, 0))[0] for a in used]
    assert max(widths) < 1.4 * min(widths) and min(widths) >= 0.35 * fig.dpi, widths
