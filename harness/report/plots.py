"""The report's figures: time and memory against sequence length, the verdict heat map."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from harness.base.files import save_figure
from harness.base.verdicts import Verdict
from harness.bench.row import Status
from harness.check.results import PairResult
from harness.families.catalog import get_family
from harness.registry import variants_of
from harness.report.targets import growth_exponent


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _sweeps(cases: pd.DataFrame) -> list[tuple[tuple, pd.DataFrame]]:
    """Groups (family, batch, d_model, dtype, mode, compiled) with several sequence lengths."""
    ok = cases[cases["status"] == Status.OK]
    keys = ["family", "batch", "d_model", "dtype", "mode", "compiled"]
    return [(k, g) for k, g in ok.groupby(keys) if g["seq"].nunique() > 1]


def _seq_plot(out: Path, name: str, title: str, ylabel: str, draw) -> str:
    """One log-log figure against sequence length; ``draw(ax)`` adds the lines."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    draw(ax)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("sequence length T")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    save_figure(fig, out / name, dpi=110)
    plt.close(fig)
    return name


MARKERS = "osD^v<>phx*+"
LINES = ("-", "--", ":", "-.")


def line_style(n: int) -> dict:
    """The n-th line's marker and dash: lines that lie on each other stay told apart."""
    return {"marker": MARKERS[n % len(MARKERS)], "ms": 4, "linestyle": LINES[n % len(LINES)],
            "markerfacecolor": "none" if n % 2 else None}


def coinciding(by_variant: list[tuple[str, pd.DataFrame]], column: str) -> dict[str, str]:
    """variant -> the earlier variant whose line it lies on (the same values at the same T),
    for the legend ("= torch_sdpa"): a line drawn exactly under another is named."""
    same: dict[str, str] = {}
    for i, (variant, v) in enumerate(by_variant):
        mine = dict(zip(v["seq"], v[column]))
        for other, w in by_variant[:i]:
            theirs = dict(zip(w["seq"], w[column]))
            if other not in same and mine.keys() == theirs.keys() and all(
                    np.isclose(mine[t], theirs[t], rtol=1e-6) for t in mine):
                same[variant] = other
                break
    return same


def plot_sweeps(cases: pd.DataFrame, out: Path) -> list[str]:
    """Per sweep: time against T (bars = IQR) and, for fwd+bwd, saved bytes against T
    with each variant's fitted growth exponent in the legend."""
    files = []
    for (family, batch, d, dtype, mode, comp), g in _sweeps(cases):
        suffix = "_compiled" if comp else ""
        tag = f"B{batch}_D{d}_{dtype}{suffix}"
        by_variant = [(variant, v.sort_values("seq")) for variant, v in g.groupby("variant")]

        def draw_time(ax):
            for n, (variant, v) in enumerate(by_variant):
                ax.errorbar(v["seq"], v["median_s"] * 1e3, yerr=v["iqr_s"] * 1e3 / 2, capsize=2, label=variant,
                            **line_style(n))

        def draw_saved(ax):
            same = coinciding(by_variant, "saved_bytes")
            for n, (variant, v) in enumerate(by_variant):
                exp = growth_exponent(v, "saved_bytes")
                label = f"{variant} (T^{exp:.2f})" + (f" = {same[variant]}" if variant in same else "")
                ax.plot(v["seq"], v["saved_bytes"] / 2**20, label=label, **line_style(n))

        files.append(_seq_plot(out, f"time_{family}_{mode.replace('+', '_')}_{tag}.png",
                               f"{family}: {mode}, B={batch} D={d} {dtype}{suffix.replace('_', ' ')}",
                               "median time (ms), bars = IQR", draw_time))
        if mode == "fwd+bwd" and g["saved_bytes"].notna().any():
            files.append(_seq_plot(out, f"memory_{family}_{tag}.png",
                                   f"{family}: saved for backward, B={batch} D={d} {dtype}; legend: fitted exponent",
                                   "bytes saved for backward (MiB)", draw_saved))
    return files


def plot_verdicts(results: list[PairResult], dtype: str, out: Path) -> str | None:
    """One panel per family: a cell per pair of variants, coloured by its verdicts over the
    family's cases, with the count of each verdict ("≈7 ≠1") instead of a symbol per case."""
    plt = _plt()
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    families = [f for f in dict.fromkeys(r.family for r in results) if any(
        r.family == f and r.dtype in (dtype, "bool") for r in results)]
    if not families:
        return None
    cols = 3
    rows = math.ceil(len(families) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 5.8 * rows), layout="constrained")
    axes = np.atleast_1d(axes).ravel()
    colours = ["#1a9850", "#91cf60", "#fee08b", "#fc8d59", "#7f7f7f"]
    cmap = ListedColormap(colours)
    for ax, family in zip(axes, families):
        res = [r for r in results if r.family == family and r.dtype in (dtype, "bool")]
        ids = [v.id for v in variants_of(family) if any(v.id in (r.a, r.b) for r in res)]
        cases = [c.name for c in get_family(family).cases]
        cells: dict[tuple[int, int], dict[str, PairResult]] = {}
        for r in res:
            i, j = ids.index(r.a), ids.index(r.b)
            cells.setdefault((i, j), {})[r.case] = r
            cells.setdefault((j, i), {})[r.case] = r
        grid = np.full((len(ids), len(ids)), np.nan)
        for (x, y), by_case in cells.items():
            verdicts = {r.verdict for r in by_case.values()}
            grid[x, y] = (4 if Verdict.ERROR in verdicts else 0 if verdicts == {Verdict.IDENTICAL}
                          else 3 if verdicts == {Verdict.DIFFERENT} else 2 if Verdict.DIFFERENT in verdicts else 1)
            counts: dict[str, int] = {}
            for c in cases:
                if c in by_case:
                    sym = by_case[c].verdict.symbol + ("!" if not by_case[c].ok else "")
                    counts[sym] = counts.get(sym, 0) + 1
            ax.text(y, x, "\n".join(f"{k}{n}" for k, n in counts.items()), ha="center", va="center",
                    fontsize=7 if len(ids) < 8 else 6, linespacing=0.9)
        ax.imshow(grid, cmap=cmap, vmin=-0.5, vmax=4.5)
        ax.set_xticks(range(len(ids)), ids, rotation=60, ha="right", fontsize=7)
        ax.set_yticks(range(len(ids)), ids, fontsize=7)
        ax.set_title(f"{family} ({res[0].dtype}, {len(cases)} cases)", fontsize=9)
    for ax in axes[len(families):]:
        ax.axis("off")
    names = ["all identical", "all equivalent", "mixed across cases", "all different", "an error"]
    fig.legend(handles=[Patch(color=c, label=n) for c, n in zip(colours, names)], loc="outside lower center",
               ncol=5, fontsize=9, title="Cell: count of each verdict over the cases (≡ identical ≈ equivalent "
               "≲ less precise ≠ different E error; ! contradicts the declaration). Colour:", title_fontsize=9)
    fig.suptitle("Verdicts per pair of variants", fontsize=11)
    save_figure(fig, out / "verdicts.png", dpi=100)
    plt.close(fig)
    return "verdicts.png"
