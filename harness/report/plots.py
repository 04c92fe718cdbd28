"""The report's figures: time and memory against sequence length, the verdict heat map."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from harness.base.files import save_figure
from harness.base.verdicts import Verdict
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
    ok = cases[cases["status"] == "ok"]
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


def plot_sweeps(cases: pd.DataFrame, out: Path) -> list[str]:
    """Per sweep: time against T (bars = IQR) and, for fwd+bwd, saved bytes against T
    with each variant's fitted growth exponent in the legend."""
    files = []
    for (family, batch, d, dtype, mode, comp), g in _sweeps(cases):
        suffix = "_compiled" if comp else ""
        tag = f"B{batch}_D{d}_{dtype}{suffix}"
        by_variant = [(variant, v.sort_values("seq")) for variant, v in g.groupby("variant")]

        def draw_time(ax):
            for variant, v in by_variant:
                ax.errorbar(v["seq"], v["median_s"] * 1e3, yerr=v["iqr_s"] * 1e3 / 2, marker="o", ms=3,
                            capsize=2, label=variant)

        def draw_saved(ax):
            for variant, v in by_variant:
                exp = growth_exponent(v, "saved_bytes")
                ax.plot(v["seq"], v["saved_bytes"] / 2**20, marker="o", ms=3, label=f"{variant} (T^{exp:.2f})")

        files.append(_seq_plot(out, f"time_{family}_{mode.replace('+', '_')}_{tag}.png",
                               f"{family}: {mode}, B={batch} D={d} {dtype}{suffix.replace('_', ' ')}",
                               "median time (ms), bars = IQR", draw_time))
        if mode == "fwd+bwd" and g["saved_bytes"].notna().any():
            files.append(_seq_plot(out, f"memory_{family}_{tag}.png",
                                   f"{family}: saved for backward, B={batch} D={d} {dtype}; legend: fitted exponent",
                                   "bytes saved for backward (MiB)", draw_saved))
    return files


def plot_verdicts(results: list[PairResult], dtype: str, out: Path) -> str | None:
    plt = _plt()
    from matplotlib.colors import ListedColormap

    families = [f for f in dict.fromkeys(r.family for r in results) if any(
        r.family == f and r.dtype in (dtype, "bool") for r in results)]
    if not families:
        return None
    cols = 3
    rows = math.ceil(len(families) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 5.2 * rows))
    axes = np.atleast_1d(axes).ravel()
    # Colour: all identical, all equivalent, mixed across cases, all different, an error.
    cmap = ListedColormap(["#1a9850", "#91cf60", "#fee08b", "#fc8d59", "#7f7f7f"])
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
            text = "".join(by_case[c].verdict.symbol + ("!" if not by_case[c].ok else "")
                           for c in cases if c in by_case)
            ax.text(y, x, text, ha="center", va="center", fontsize=8 if len(text) < 4 else 6)
        ax.imshow(grid, cmap=cmap, vmin=-0.5, vmax=4.5)
        ax.set_xticks(range(len(ids)), ids, rotation=60, ha="right", fontsize=7)
        ax.set_yticks(range(len(ids)), ids, fontsize=7)
        ax.set_title(f"{family} ({res[0].dtype}; cases: {', '.join(cases)})", fontsize=8)
    for ax in axes[len(families):]:
        ax.axis("off")
    fig.suptitle("Verdicts, one symbol per case: ≡ identical  ≈ equivalent  ≠ different  E error  "
                 "(! contradicts the declaration). Colour: dark green all identical, green all "
                 "equivalent, yellow mixed across cases, orange all different", fontsize=10)
    fig.tight_layout()
    save_figure(fig, out / "verdicts.png", dpi=100)
    plt.close(fig)
    return "verdicts.png"


# -- tables ------------------------------------------------------------------------------------------
