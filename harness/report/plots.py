"""The report's figures: time and memory against sequence length, the verdict heat map."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from harness.base.files import save_figure
from harness.base.verdicts import Verdict
from harness.bench.measured import Status
from harness.check.results import PairResult
from harness.families.catalog import get_family
from harness.registry import reference_of, variants_of
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


def _plain_ticks(axis) -> None:
    """Plain numbers on a log axis (64, 128, 256; 1, 10, 100): read at a glance, no 2^k."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def _last_value(handle) -> float:
    """The y value at the largest T of a legend handle's line (an errorbar's data line)."""
    line = handle.lines[0] if hasattr(handle, "lines") else handle
    ys = np.asarray(line.get_ydata(), dtype=float)
    return float(ys[-1]) if ys.size else float("nan")


def _seq_plot(out: Path, name: str, title: str, ylabel: str, draw, seqs) -> str:
    """One log-log figure against sequence length; ``draw(ax)`` adds the lines. The axes
    read in plain numbers (T at its measured values); the legend, outside on the right,
    lists the lines in the order they end at the largest T, the highest first."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8.5, 4.8), layout="constrained")
    draw(ax)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    from matplotlib.ticker import NullFormatter, NullLocator

    ax.set_xticks(sorted(set(seqs)), [f"{t:g}" for t in sorted(set(seqs))])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
    _plain_ticks(ax.yaxis)
    ax.set_xlabel("sequence length T")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="major", alpha=0.35)
    ax.grid(True, which="minor", alpha=0.12)
    handles, labels = ax.get_legend_handles_labels()
    order = sorted(range(len(handles)), key=lambda i: -np.nan_to_num(_last_value(handles[i]), nan=-np.inf))
    ax.legend([handles[i] for i in order], [labels[i] for i in order], fontsize=7, loc="upper left",
              bbox_to_anchor=(1.01, 1.0), title="at the largest T,\nhighest first", title_fontsize=7)
    save_figure(fig, out / name, dpi=110)
    plt.close(fig)
    return name


MARKERS = "osD^v<>phx*+"
LINES = ("-", "--", ":", "-.")


def line_style(n: int, reference: bool = False) -> dict:
    """The n-th line's marker and dash: lines that lie on each other stay told apart; the
    family's reference drawn thick and black, the line the others are read against."""
    style = {"marker": MARKERS[n % len(MARKERS)], "ms": 4, "linestyle": LINES[n % len(LINES)],
             "markerfacecolor": "none" if n % 2 else None}
    return {**style, "color": "black", "linewidth": 2.4, "zorder": 5} if reference else style


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
        ref = reference_of(family)
        ref_id = ref.id if ref is not None else None

        def named(variant: str) -> str:
            return f"{variant} [reference]" if variant == ref_id else variant

        def draw_time(ax):
            for n, (variant, v) in enumerate(by_variant):
                ax.errorbar(v["seq"], v["median_s"] * 1e3, yerr=v["iqr_s"] * 1e3 / 2, capsize=2,
                            label=named(variant), **line_style(n, variant == ref_id))

        def draw_saved(ax):
            same = coinciding(by_variant, "saved_bytes")
            for n, (variant, v) in enumerate(by_variant):
                exp = growth_exponent(v, "saved_bytes")
                label = f"{named(variant)} (T^{exp:.2f})" + (f" = {same[variant]}" if variant in same else "")
                ax.plot(v["seq"], v["saved_bytes"] / 2**20, label=label, **line_style(n, variant == ref_id))

        files.append(_seq_plot(out, f"time_{family}_{mode.replace('+', '_')}_{tag}.png",
                               f"{family}: {mode}, B={batch} D={d} {dtype}{suffix.replace('_', ' ')}",
                               "median time (ms), bars = IQR", draw_time, g["seq"]))
        if mode == "fwd+bwd" and g["saved_bytes"].notna().any():
            files.append(_seq_plot(out, f"memory_{family}_{tag}.png",
                                   f"{family}: saved for backward, B={batch} D={d} {dtype}; legend: fitted exponent",
                                   "bytes saved for backward (MiB)", draw_saved, g["seq"]))
    return files


CELL_IN = 0.42      # inches per cell of a verdict panel: its count of each verdict stays legible
LABEL_CHAR_IN = 0.075  # inches a character of a variant's name takes beside and below a panel (8 pt)
ROW_WIDTH_IN = 20   # a row of panels is at most this wide


def _panel_inches(ids: list[str]) -> float:
    """A panel's side: ``CELL_IN`` per variant, and room for its longest name."""
    return len(ids) * CELL_IN + 0.3 + LABEL_CHAR_IN * max(map(len, ids))


def _panel_rows(sizes: list[float]) -> list[list[int]]:
    """Panels (by their side in inches) packed in order into rows at most ``ROW_WIDTH_IN`` wide."""
    rows: list[list[int]] = [[]]
    width = 0.0
    for index, need in enumerate(sizes):
        if rows[-1] and width + need > ROW_WIDTH_IN:
            rows.append([])
            width = 0.0
        rows[-1].append(index)
        width += need
    return rows


def plot_verdicts(results: list[PairResult], dtype: str, out: Path) -> str | None:
    """One panel per family, its cells all of one size whatever the family's number of
    variants (a family of 18 gets a panel 18 cells wide, not the size of one of 4): a cell
    per pair of variants, coloured by its verdicts over the family's cases, with the count
    of each verdict ("≈7 ≠1") instead of a symbol per case."""
    plt = _plt()
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    families = [f for f in dict.fromkeys(r.family for r in results) if any(
        r.family == f and r.dtype in (dtype, "bool") for r in results)]
    if not families:
        return None
    panels = []
    for family in families:
        res = [r for r in results if r.family == family and r.dtype in (dtype, "bool")]
        ids = [v.id for v in variants_of(family) if any(v.id in (r.a, r.b) for r in res)]
        panels.append((family, res, ids))
    sides = [_panel_inches(ids) for _, _, ids in panels]
    rows = _panel_rows(sides)
    heights = [max(sides[i] for i in row) + 0.4 for row in rows]
    widths = [sum(sides[i] for i in row) for row in rows]
    fig = plt.figure(figsize=(max(widths), sum(heights) + 1.6), layout="constrained")
    colours = ["#1a9850", "#91cf60", "#fee08b", "#fc8d59", "#7f7f7f"]
    cmap = ListedColormap(colours)
    subfigs = np.atleast_1d(fig.subfigures(len(rows), 1, height_ratios=heights))
    for subfig, row in zip(subfigs, rows):
        ratios = [sides[i] for i in row]
        spare = max(widths) - sum(ratios)
        axes = subfig.subplots(1, len(row) + (spare > 0.5), width_ratios=ratios + ([spare] if spare > 0.5 else []),
                               squeeze=False)[0]
        for ax in axes[len(row):]:
            ax.axis("off")
        for ax, index in zip(axes, row):
            family, res, ids = panels[index]
            _verdict_panel(ax, family, res, ids, cmap)
    names = ["all identical", "all equivalent", "mixed across cases", "all different", "an error"]
    fig.legend(handles=[Patch(color=c, label=n) for c, n in zip(colours, names)], loc="outside lower center",
               ncol=5, fontsize=9, title="Cell: count of each verdict over the cases (≡ identical ≈ equivalent "
               "≲ less precise ≠ different E error; ! contradicts the declaration). Colour:", title_fontsize=9)
    fig.suptitle("Verdicts per pair of variants", fontsize=11)
    save_figure(fig, out / "verdicts.png", dpi=100)
    plt.close(fig)
    return "verdicts.png"


def _verdict_panel(ax, family: str, res: list[PairResult], ids: list[str], cmap) -> None:
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
                fontsize=7 if len(counts) < 3 else 6, linespacing=0.9)
    ax.imshow(grid, cmap=cmap, vmin=-0.5, vmax=4.5)
    ax.set_xticks(range(len(ids)), ids, rotation=60, ha="right", fontsize=8)
    ax.set_yticks(range(len(ids)), ids, fontsize=8)
    ax.set_title(f"{family} ({res[0].dtype}, {len(cases)} cases)", fontsize=10)
