"""The report: ``reports/<device>/`` with REPORT.md, results.csv, results.json and PNG plots.

Tables through pandas + tabulate; plots through matplotlib (Agg). Made from benchmark
rows (a bench log, a results.json or a pytest-benchmark JSON) and, when given, the
check's pair results.
"""

from __future__ import annotations

import datetime as _dt
import math
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd
from tabulate import tabulate

from .compare import PairResult, PathResult
from .errors import HarnessError, ResultsFileError
from .families import get_family
from .measure import CPU_PEAK_METHOD, CUDA_PEAK_METHOD
from .registry import reference_of, variants_of
from .tables import LEGEND, SYMBOL, differences_table, paths_table, traits_table, verdict_matrix
from .targets import TARGETS, evaluate, growth_exponent

GROUP = ["family", "batch", "seq", "d_model", "heads", "dtype", "device", "mode", "compiled"]
ENV_KEYS = ["torch", "python", "device_name", "cpu", "cpu_count", "threads", "commit"]


def frame(rows: Iterable[dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(case rows, matmul-peak rows) as DataFrames, with the baseline speed ratio."""
    rows = list(rows)
    cases = pd.DataFrame([r for r in rows if r.get("kind", "case") == "case"])
    peaks = pd.DataFrame([r for r in rows if r.get("kind") == "peak"])
    if cases.empty:
        return cases, peaks
    for col in ("median_s", "iqr_s", "gflops", "peak_fraction", "saved_bytes", "peak_bytes", "flops", "error", "path"):
        if col not in cases:
            cases[col] = np.nan
    cases["vs_baseline"] = np.nan
    ok = cases["status"] == "ok"
    for family in cases["family"].unique():
        ref = reference_of(family)
        if ref is None:
            continue
        base = cases[ok & (cases["family"] == family) & (cases["variant"] == ref.id)]
        base = base.set_index(GROUP)["median_s"]
        sel = ok & (cases["family"] == family)
        keys = list(cases.loc[sel, GROUP].itertuples(index=False, name=None))
        cases.loc[sel, "vs_baseline"] = [base.get(k, np.nan) for k in keys] / cases.loc[sel, "median_s"]
    return cases, peaks


def compare_with(cases: pd.DataFrame, old_rows: list[dict], threshold: float) -> pd.DataFrame:
    """Add ``change`` (median / old median - 1) and ``regression`` (change > threshold)."""
    old = {r["key"]: r for r in old_rows if r.get("kind", "case") == "case" and r.get("status") == "ok"}
    cases = cases.copy()
    cases["change"] = [
        (m / old[k]["median_s"] - 1) if k in old and isinstance(m, float) and not math.isnan(m) else np.nan
        for k, m in zip(cases["key"], cases["median_s"])
    ]
    cases["regression"] = cases["change"] > threshold
    return cases


# -- plots -----------------------------------------------------------------------------------------

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
    fig.savefig(out / name, dpi=110)
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
            grid[x, y] = (4 if "error" in verdicts else 0 if verdicts == {"identical"}
                          else 3 if verdicts == {"different"} else 2 if "different" in verdicts else 1)
            text = "".join(SYMBOL[by_case[c].verdict] + ("!" if not by_case[c].ok else "")
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
    fig.savefig(out / "verdicts.png", dpi=100)
    plt.close(fig)
    return "verdicts.png"


# -- tables ------------------------------------------------------------------------------------------

def _ms(x) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x * 1e3:.3g}"


def _mib(x) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x / 2**20:.3g}"


def family_table(cases: pd.DataFrame, family: str) -> str:
    g = cases[cases["family"] == family].copy()
    g = g.sort_values(["mode", "compiled", "dtype", "batch", "d_model", "seq", "median_s"])
    has_change = "change" in g
    rows = []
    for _, r in g.iterrows():
        row = {
            "variant": r["variant"], "mode": r["mode"] + (" compiled" if r["compiled"] else ""),
            "B": r["batch"], "T": r["seq"], "D": r["d_model"], "dtype": r["dtype"],
            "median ms": _ms(r["median_s"]), "IQR ms": _ms(r["iqr_s"]),
            "vs baseline": "-" if pd.isna(r["vs_baseline"]) else f"{r['vs_baseline']:.2f}x",
            "GFLOP/s": "-" if pd.isna(r["gflops"]) else f"{r['gflops']:.1f}",
            "% peak": "-" if pd.isna(r["peak_fraction"]) else f"{r['peak_fraction']:.0%}",
            "saved MiB": _mib(r["saved_bytes"]), "peak MiB": _mib(r["peak_bytes"]),
        }
        if r["status"] != "ok":
            row["median ms"] = r["status"]
            row["IQR ms"] = str(r.get("error", ""))[:60]
        if has_change:
            row["change"] = "-" if pd.isna(r["change"]) else (
                f"{r['change']:+.0%}" + (" REGRESSION" if r["regression"] else ""))
        rows.append(row)
    return tabulate(pd.DataFrame(rows), headers="keys", tablefmt="github", showindex=False)


def write_report(
    rows: list[dict],
    out: Path,
    *,
    results: list[PairResult] | None = None,
    paths: list[PathResult] | None = None,
    old_rows: list[dict] | None = None,
    threshold: float = 0.10,
    profile: str = "",
    note: str = "",
    agreement: dict | None = None,
) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    cases, peaks = frame(rows)
    if cases.empty:
        raise ResultsFileError("no benchmark rows to report")
    if old_rows is not None:
        cases = compare_with(cases, old_rows, threshold)
    first = cases.iloc[0]
    env = {k: first.get(k, "") for k in ENV_KEYS}
    device = str(first["device"])

    payload_rows = cases.replace({np.nan: None}).to_dict("records")
    from .cli import write_json

    write_json(str(out / "results.json"),
               {"environment": env, "profile": profile, "peaks": peaks.replace({np.nan: None}).to_dict("records"),
                "rows": payload_rows, "agreement": agreement})
    cases.to_csv(out / "results.csv", index=False)

    plots = plot_sweeps(cases, out)
    verdict_png = plot_verdicts(results, "float32" if device == "cpu" else "bfloat16", out) if results else None

    lines = [f"# Benchmark report: {env.get('device_name', device)}", ""]
    lines += [f"Profile `{profile}`, made {_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M} UTC by "
              f"`python -m harness report`. {note}".rstrip(), ""]
    lines += ["## Environment", "", tabulate(
        [(k, env.get(k, "")) for k in ENV_KEYS] + [("device", device)] +
        [(f"matmul peak {p['dtype']}", f"{p['peak_flops'] / 1e9:.1f} GFLOP/s ({p['size']}x{p['size']} @ {p['size']}x{p['size']})")
         for _, p in peaks.iterrows()],
        headers=["", ""], tablefmt="github"), ""]

    lines += ["## Targets", ""]
    evaluated = [evaluate(t, cases) for t in TARGETS]
    if agreement:
        diff = agreement["harness_s"] / agreement["timer_s"] - 1
        evaluated.append({"target": f"harness timing vs torch.utils.benchmark.Timer on the same callable ({agreement['case']})",
                          "threshold": "within 5%", "met": abs(diff) <= 0.05,
                          "measured": f"{diff:+.1%} ({agreement['harness_s'] * 1e3:.2f} ms vs {agreement['timer_s'] * 1e3:.2f} ms)"})
    lines += [tabulate(pd.DataFrame(
        [{**e, "met": {True: "yes", False: "NO", None: "not measured"}[e["met"]]} for e in evaluated]),
        headers="keys", tablefmt="github", showindex=False), ""]

    lines += ["## Method", "",
              "- Time: warm-up calls, then samples until both a minimum count and a minimum time are "
              "reached; a sample is one call, or a block of calls for calls under 1 ms (as "
              "`torch.utils.benchmark` does); median and interquartile range of the per-call times. "
              f"CPU: `time.perf_counter`, threads fixed at {env.get('threads')}; CUDA: events around "
              "each sample, synchronized.",
              "- `fwd` runs under `torch.no_grad()` in eval mode (where torch's fused fast paths run); "
              "`fwd+bwd` runs forward with autograd and `backward` with a seeded gradient, eval mode "
              "(dropout off), gradients reset before each call.",
              "- FLOPs: `torch.utils.flop_counter.FlopCounterMode`, matmul-class operators, dense count "
              "(formulas added for the CPU flash-attention kernel and torch's fused MHA / encoder fast "
              "paths, which torch 2.13 does not count). `% peak` = achieved FLOP/s over the matmul peak "
              "measured in the same run and dtype.",
              "- Saved for backward: `torch.autograd.graph.saved_tensors_hooks`, unique storages, "
              "parameters and inputs excluded.",
              f"- Peak memory: {CUDA_PEAK_METHOD if device.startswith('cuda') else CPU_PEAK_METHOD}.",
              "- `vs baseline`: the family's PyTorch reference time over the variant's time (> 1 is faster).",
              ""]
    if old_rows is not None:
        n_reg = int(cases["regression"].sum())
        lines += [f"Compared with an earlier run: {n_reg} regression(s) beyond {threshold:.0%} "
                  "(`change` column: median time against the old median).", ""]

    for family in cases["family"].unique():
        ref = reference_of(family)
        lines += [f"## {family}", "", f"Call: `{get_family(family).call}`. Baseline: "
                  f"`{ref.id if ref else '-'}`.", "", family_table(cases, family), ""]
        for p in plots:
            if p.startswith((f"time_{family}_", f"memory_{family}_")):
                lines += [f"![{p}]({p})", ""]

    if results:
        lines += ["## Verdicts", "", LEGEND, ""]
        if verdict_png:
            lines += [f"![verdicts]({verdict_png})", ""]
        for family in dict.fromkeys(r.family for r in results):
            fam = get_family(family)
            dtypes = sorted({r.dtype for r in results if r.family == family})
            lines += [f"### {family}", "", "Declared traits, side by side:", "", traits_table(family, "github"), "",
                      f"Cases, one symbol each: {', '.join(c.name for c in fam.cases)}.", ""]
            for dt in dtypes:
                lines += [f"{dt}:", "", verdict_matrix(results, family, dt, "github"), ""]
        one = [r for r in results if r.dtype in ("float32", "bool", "bfloat16")]
        lines += ["### Differences and their declared reasons", "", differences_table(one, "github"), ""]
        if paths:
            lines += ["### Kernel paths: autograd vs no_grad", "", paths_table(paths, "github"), ""]
        bad = [r for r in results if not r.ok]
        lines += [f"{len(results)} comparisons, {len(bad)} contradict their declarations.", ""]

    failed = cases[cases["status"] != "ok"]
    if len(failed):
        lines += ["## Not measured", "", tabulate(failed[["key", "status", "error"]], headers="keys",
                                                  tablefmt="github", showindex=False), ""]
    report = out / "REPORT.md"
    report.write_text("\n".join(lines) + "\n")
    return report


def load_old(path: str) -> list[dict]:
    from .bench import load_rows

    try:
        return load_rows(Path(path))
    except HarnessError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise ResultsFileError(f"--compare file '{path}' is malformed: {exc}") from None
