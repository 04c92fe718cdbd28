"""The report: ``reports/<device>/<profile>/`` with REPORT.md, results.csv, results.json and PNG plots.

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

from .bench import PEAK_SPREAD_LIMIT
from .compare import PairResult, PathResult
from .errors import HarnessError, ResultsFileError
from .families import get_family
from .measure import CPU_PEAK_METHOD, CUDA_PEAK_METHOD
from .registry import reference_of, variants_of
from .tables import LEGEND, SYMBOL, differences_table, paths_table, traits_table, verdict_matrix
from .targets import MET_TEXT, TARGETS, evaluate, growth_exponent

ENV_KEYS = ["torch", "python", "device_name", "cpu", "cpu_count", "threads", "commit"]


NUMERIC = ("median_s", "iqr_s", "gflops", "gflops_dense", "peak_fraction", "peak_fraction_q1",
           "peak_fraction_q3", "peak_fraction_lo", "peak_fraction_hi", "peak_fraction_dense", "vs_baseline",
           "vs_baseline_q1", "vs_baseline_q3", "vs_baseline_lo", "vs_baseline_hi",
           "saved_bytes", "peak_bytes", "rss_peak_bytes", "flops", "flops_dense", "compile_s")
TEXT = ("error", "path", "disturbed", "rss_note", "largest_tensor")


def frame(rows: Iterable[dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(case rows, matmul-peak rows) as DataFrames. Ratios are the sweep's, measured
    interleaved; rows that were not (pytest-benchmark's) carry none."""
    rows = list(rows)
    cases = pd.DataFrame([r for r in rows if r.get("kind", "case") == "case"])
    peaks = pd.DataFrame([r for r in rows if r.get("kind") == "peak"])
    if cases.empty:
        return cases, peaks
    for col in NUMERIC:
        if col not in cases:
            cases[col] = np.nan
        cases[col] = pd.to_numeric(cases[col], errors="coerce")
    for col in TEXT + ("interleaved", "path_ops"):
        if col not in cases:
            cases[col] = None
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


def _pct(x) -> str:
    return "-" if x is None or pd.isna(x) else f"{x:.0%}"


def _spread_text(r, column: str, fmt) -> str:
    if pd.isna(r[column]):
        return "-"
    q1, q3 = r.get(f"{column}_q1"), r.get(f"{column}_q3")
    if q1 is None or pd.isna(q1):
        return fmt(r[column])
    return f"{fmt(r[column])} [{fmt(q1)}-{fmt(q3)}]"


def family_table(cases: pd.DataFrame, family: str) -> str:
    g = cases[cases["family"] == family].copy()
    g = g.sort_values(["mode", "compiled", "dtype", "batch", "d_model", "seq", "median_s"])
    has_change = "change" in g
    compiled = bool(g["compiled"].any())
    rows = []
    for _, r in g.iterrows():
        row = {
            "variant": r["variant"], "mode": r["mode"] + (" compiled" if r["compiled"] else ""),
            "B": r["batch"], "T": r["seq"], "D": r["d_model"], "dtype": r["dtype"],
            "median ms": _ms(r["median_s"]), "IQR ms": _ms(r["iqr_s"]),
            "vs baseline [q1-q3]": _spread_text(r, "vs_baseline", lambda x: f"{x:.2f}x"),
            "GFLOP/s": "-" if pd.isna(r["gflops"]) else f"{r['gflops']:.1f}",
            "% peak [q1-q3]": _spread_text(r, "peak_fraction", _pct),
            "% peak dense-eq.": _pct(r["peak_fraction_dense"]),
            "saved MiB": _mib(r["saved_bytes"]), "tensor peak MiB": _mib(r["peak_bytes"]),
            "RSS peak MiB": _mib(r["rss_peak_bytes"]) if not pd.isna(r["rss_peak_bytes"]) else (
                "not measured" if r["status"] == "ok" and r["device"] == "cpu" else "-"),
            "path": r["path"] if isinstance(r["path"], str) else "-",
        }
        if compiled:
            row["compile s"] = "-" if pd.isna(r["compile_s"]) else f"{r['compile_s']:.1f}"
        if r["status"] != "ok":
            row["median ms"] = r["status"]
            row["IQR ms"] = str(r.get("error", ""))[:60]
        if isinstance(r["disturbed"], str) and r["disturbed"]:
            row["median ms"] += " (d)"
        if has_change:
            row["change"] = "-" if pd.isna(r["change"]) else (
                f"{r['change']:+.0%}" + (" REGRESSION" if r["regression"] else ""))
        rows.append(row)
    return tabulate(pd.DataFrame(rows), headers="keys", tablefmt="github", showindex=False)


def _shape(ops_shape) -> str:
    return "(" + ", ".join(str(x) for x in ops_shape) + ")"


def mechanism(r) -> str:
    """What the recorded operators (nested ones included) say the variant ran."""
    ops = r.get("path_ops")
    if not isinstance(ops, list) or not ops:
        return "-"
    parts = []
    names = {o["op"] for o in ops}
    for o in ops:
        shape = _shape(o["shapes"][0]) if o.get("shapes") else ""
        if o["op"] == "_native_multi_head_attention":
            inner = [x for x in ops if x.get("parent") == "_native_multi_head_attention"]
            how = ", ".join(f"`{x['op']}` on {_shape(x['shapes'][0])}" for x in inner if x.get("shapes"))
            parts.append("nn.MultiheadAttention's no-grad fast path `_native_multi_head_attention`: the kernel "
                         "takes no `is_causal`; the mask is applied to every score" + (f" ({how})" if how else ""))
        elif o["op"] == "_transformer_encoder_layer_fwd":
            parts.append("nn.TransformerEncoderLayer's no-grad fast path (one fused kernel: attention + FFN)")
        elif o["op"] == "_scaled_dot_product_flash_attention_for_cpu":
            if o.get("parent") == "_native_multi_head_attention":
                continue
            if o.get("is_causal"):
                frac = r["flops"] / r["flops_dense"] if r.get("flops_dense") else float("nan")
                parts.append(f"CPU flash kernel on {shape}, `is_causal`: it computes the 512-wide key blocks "
                             "that start before the diagonal; " + (
                                 f"at T={r['seq']} that is every block (executed = dense)" if frac > 0.999 else
                                 f"executed FLOPs {frac:.0%} of dense at T={r['seq']}"))
            elif o.get("mask"):
                parts.append(f"CPU flash kernel on {shape} with an explicit mask: every key block computed")
            else:
                parts.append(f"CPU flash kernel on {shape}, no mask")
        elif o["op"] == "_scaled_dot_product_flash_attention_for_cpu_backward":
            parts.append("flash backward (QK^T recomputed per block, counted as executed)")
        elif o["op"] == "_masked_softmax" and o.get("parent") != "_native_multi_head_attention":
            parts.append(f"`_masked_softmax` on {shape}")
        elif o["op"] == "_softmax" and len(o.get("shapes", [[]])[0]) >= 3 and not names & {
                "_native_multi_head_attention", "_scaled_dot_product_flash_attention_for_cpu"}:
            times = f"{o['count']} x " if o.get("count", 1) > 1 else ""
            parts.append(f"explicit softmax over {times}a {shape} weights tensor (materialized)")
    largest = r.get("largest_tensor")
    if isinstance(largest, str) and largest:
        parts.append(f"largest tensor created: {largest}")
    return "; ".join(dict.fromkeys(parts)) or "explicit ops"


def mechanisms_table(cases: pd.DataFrame, family: str) -> str:
    """Per variant and mode, at the family's largest measured shape: the path and what it means."""
    g = cases[(cases["family"] == family) & (cases["status"] == "ok")]
    rows = []
    for (mode, comp), m in g.groupby(["mode", "compiled"]):
        top = m.assign(size=m["batch"] * m["seq"] * m["d_model"]).sort_values("size").iloc[-1]
        at = m[(m["batch"] == top["batch"]) & (m["seq"] == top["seq"]) & (m["d_model"] == top["d_model"])]
        for _, r in at.sort_values("variant").iterrows():
            rows.append({"variant": r["variant"], "mode": mode + (" compiled" if comp else ""),
                         "shape": f"B={r['batch']} T={r['seq']} D={r['d_model']}",
                         "executed / dense FLOPs": "-" if pd.isna(r["flops_dense"]) or not r["flops_dense"]
                         else f"{r['flops'] / r['flops_dense']:.2f}",
                         "mechanism (recorded operators, nested ones included)": mechanism(r)})
    return tabulate(pd.DataFrame(rows), headers="keys", tablefmt="github", showindex=False) if rows else ""


def peaks_table(peaks: pd.DataFrame, family: str) -> str:
    if peaks.empty or "family" not in peaks:
        return ""
    g = peaks[peaks["family"] == family]
    rows = [{"group": p["group"].split("|", 1)[1], "matmul": f"{p['size']}^3",
             "peak GFLOP/s [q1-q3]": f"{p['peak_flops'] / 1e9:.1f} [{p['peak_q1'] / 1e9:.1f}-{p['peak_q3'] / 1e9:.1f}]",
             "load avg (start, end)": ", ".join("-" if x is None else f"{x:.1f}" for x in p["load"]),
             "disturbed": p["disturbed"] or "no",
             "group wall s": "-" if pd.isna(p.get("elapsed_s", np.nan)) else f"{p['elapsed_s']:.1f}"}
            for _, p in g.iterrows()]
    return tabulate(pd.DataFrame(rows), headers="keys", tablefmt="github", showindex=False) if rows else ""


def machine_state(cases: pd.DataFrame, peaks: pd.DataFrame) -> list[str]:
    """The banner at the top: was the window disturbed, with the figures."""
    if peaks.empty or "disturbed" not in peaks:
        return ["Machine state: not recorded (rows without interleaved groups, e.g. pytest-benchmark's); "
                "no timed target is claimed from them.", ""]
    bad = peaks[peaks["disturbed"].astype(bool)]
    loads = [x for ls in peaks["load"] for x in ls if x is not None]
    spread = ((peaks["peak_q3"] - peaks["peak_q1"]) / peaks["peak_flops"]).max()
    cores = cases.iloc[0].get("cpu_count", "?")
    figures = (f"load average up to {max(loads):.1f} on {cores} cores" if loads else "load average unknown") + \
        f"; matmul peak spread up to {spread:.0%} across rounds"
    if len(bad):
        return [f"**Disturbed window: {len(bad)} of {len(peaks)} groups were measured while the machine was "
                f"disturbed** ({figures}). Their rows are marked (d) and the targets measured in them are "
                "not claimed. Groups: " + "; ".join(f"{g.split('|', 1)[1]}: {d}" for g, d in
                                                   zip(bad["group"], bad["disturbed"])), ""]
    return [f"Machine state: not disturbed ({figures}).", ""]


def print_targets(rows: list[dict]) -> None:
    """The targets, as the report shows them, on the terminal."""
    cases, _ = frame(rows)
    if cases.empty:
        return
    for t in TARGETS:
        e = evaluate(t, cases)
        print(f"target: {e['target']}: {MET_TEXT[e['met']]} ({e['measured']}; threshold {e['threshold']})")


def method_lines(cases: pd.DataFrame, device: str) -> list[str]:
    threads = sorted({int(x) for x in cases["threads"].dropna()}) if "threads" in cases else []
    interleaved = bool(cases["interleaved"].fillna(False).astype(bool).any())
    rounds = sorted({int(x) for x in cases["rounds"].dropna()}) if "rounds" in cases else []
    lines = ["## Method", ""]
    if interleaved:
        lines.append(
            "- Time: `torch.utils.benchmark.Timer`, the one timing engine (CPU and CUDA; its timer synchronizes "
            "CUDA; garbage collector off), with `num_threads` set explicitly to "
            f"{', '.join(map(str, threads)) or '?'} (also `torch.set_num_threads`, and recorded in every row). "
            "The variants of one family at one shape, dtype and mode form a group; the group's variants, the "
            f"family's reference and a square matmul are timed in {', '.join(map(str, rounds))} alternating rounds "
            "in one window (forward order, then reverse), after one warm-up call each. Each round is Timer blocks "
            "for at least `--min-time`: a call of a quarter of that or more is a block by itself, a shorter one "
            "gets its block size once from `blocked_autorange`. `median ms` and `IQR ms`: over every block of "
            "every round.")
        lines.append(
            "- Ratios: `vs baseline` (reference time / variant time, > 1 is faster) and `% peak` come from the "
            "same interleaved rounds: the figure is the ratio of the two medians over rounds, shown with the "
            "per-round ratio's quartiles [q1-q3]. A target is decided on a 90% bootstrap interval of that ratio "
            "(rounds resampled in pairs, seeded): met only when its low end meets the threshold, not met only "
            "when its high end misses it, undecided when the threshold lies inside it.")
    else:
        lines.append(
            "- Time: rows from pytest-benchmark (`benchmarks/`, same callables, its own timer; threads "
            f"{', '.join(map(str, threads)) or '?'}). Not interleaved: no ratio is stated and no timed target "
            "is claimed from them.")
    lines += [
        "- `fwd` runs under `torch.no_grad()` in eval mode (where torch's fused fast paths run); `fwd+bwd` runs "
        "forward with autograd and `backward` with a seeded gradient, eval mode (dropout off), gradients reset "
        "before each call.",
        "- FLOPs: `torch.utils.flop_counter.FlopCounterMode`, matmul-class operators. `GFLOP/s` and `% peak` "
        "count FLOPs as executed: the CPU flash kernel with `is_causal` computes only the key blocks (512 "
        "wide; query blocks of 32, 64 or 256) that start before the diagonal, and its backward recomputes "
        "QK^T (5 matmuls per visited block); explicit masked attention computes every score. `% peak dense-eq.` "
        "counts every score of QK^T and PV (torch's own formulas, whose flash backward also counts the "
        "recomputation): labelled dense-equivalent. At T=512 the two agree for the flash kernel (one 512-wide "
        "key block per query block: it skips nothing); from T=1024 the causal kernel skips blocks. Formulas added for the "
        "CPU flash kernel and torch's fused MHA / encoder fast paths, which torch 2.13 does not count.",
        "- `% peak`: executed FLOP/s over the FLOP/s of the square matmul timed in the same rounds, same dtype "
        "(per family below, with its spread and the load average).",
        "- A group is **disturbed** when the 1-minute load average at its start or end exceeds the cores + 0.5, "
        f"or its matmul peak's IQR across rounds exceeds {PEAK_SPREAD_LIMIT:.0%} of its median; its rows are marked (d).",
        "- Saved for backward: `torch.autograd.graph.saved_tensors_hooks`, unique storages, parameters and "
        "inputs excluded.",
        f"- Peak memory: {CUDA_PEAK_METHOD if device.startswith('cuda') else CPU_PEAK_METHOD}. `not measured` "
        "says why in `results.csv` (`rss_note`).",
        "- `compiled` rows: `torch.compile` (Inductor), compiled by the first call outside any dispatch mode; "
        "`compile s` is that first call (Dynamo + Inductor + one run), timings are steady state after it; the "
        "row is refused unless Dynamo's counters show a compiled graph. Their FLOPs, path and memory are the "
        "eager module's.",
        "- `path`: the kernel operators recorded by `torch.profiler`, nested ones included.",
        "",
    ]
    return lines


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
    compared_with: str | None = None,
) -> Path:
    """Write the report into a temporary folder beside ``out``, then put it in place: a
    report is written whole or not at all."""
    import os
    import shutil
    import tempfile

    cases, _ = frame(rows)
    if cases.empty:
        raise ResultsFileError("no benchmark rows to report")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.tmp-"))
    try:
        _write(rows, tmp, results=results, paths=paths, old_rows=old_rows, threshold=threshold,
               profile=profile, note=note, compared_with=compared_with)
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        if out.exists():
            out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out / "REPORT.md"


def _write(rows, out: Path, *, results, paths, old_rows, threshold, profile, note, compared_with) -> None:
    cases, peaks = frame(rows)
    if old_rows is not None:
        cases = compare_with(cases, old_rows, threshold)
    first = cases.iloc[0]
    env = {k: first.get(k, "") for k in ENV_KEYS}
    device = str(first["device"])

    payload_rows = cases.replace({np.nan: None}).to_dict("records")
    from .cli import write_json

    write_json(str(out / "results.json"),
               {"environment": env, "profile": profile, "peaks": peaks.replace({np.nan: None}).to_dict("records"),
                "rows": payload_rows})
    cases.drop(columns=["path_ops", "round_s"], errors="ignore").to_csv(out / "results.csv", index=False)

    plots = plot_sweeps(cases, out)
    verdict_png = plot_verdicts(results, "float32" if device == "cpu" else "bfloat16", out) if results else None

    lines = [f"# Benchmark report: {env.get('device_name', device)}", ""]
    lines += [f"Profile `{profile}`, made {_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M} UTC by "
              f"`python -m harness report`. {note}".rstrip(), ""]
    lines += machine_state(cases, peaks)
    lines += ["## Environment", "", tabulate(
        [(k, env.get(k, "")) for k in ENV_KEYS] + [("device", device)],
        headers=["", ""], tablefmt="github"), "",
        "The matmul peak is timed beside each group's rows, in the same rounds (per family below).", ""]

    lines += ["## Targets", ""]
    evaluated = [evaluate(t, cases) for t in TARGETS]
    lines += [tabulate(pd.DataFrame([{**e, "met": MET_TEXT[e["met"]]} for e in evaluated]),
                       headers="keys", tablefmt="github", showindex=False), ""]
    lines += method_lines(cases, device)
    if old_rows is not None:
        n_reg = int(cases["regression"].sum())
        lines += [f"Compared with `{compared_with or 'an earlier run'}`: {n_reg} regression(s) beyond "
                  f"{threshold:.0%} (`change` column: median time against the old median, where the same case "
                  "was measured there).", ""]

    for family in cases["family"].unique():
        ref = reference_of(family)
        lines += [f"## {family}", "", f"Call: `{get_family(family).call}`. Baseline: "
                  f"`{ref.id if ref else '-'}`.", "", family_table(cases, family), ""]
        mech = mechanisms_table(cases, family)
        if mech:
            lines += ["Kernel paths at the largest shape measured, and what they mean:", "", mech, ""]
        pk = peaks_table(peaks, family)
        if pk:
            lines += ["Matmul peak timed beside these rows:", "", pk, ""]
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

    lines += models_section(out.parent.parent / "models")

    failed = cases[cases["status"] != "ok"]
    if len(failed):
        lines += ["## Not measured", "", tabulate(failed[["key", "status", "error"]], headers="keys",
                                                  tablefmt="github", showindex=False), ""]
    (out / "REPORT.md").write_text("\n".join(lines) + "\n")


def models_section(models: Path) -> list[str]:
    """The whole-model runs beside the benchmark (``python -m harness copy-task`` and
    ``cache-bench`` write them to ``reports/models/``): the copy-task curves and the k/v
    cache's speed-up, shown here as they were written there, with their own method line."""
    parts = [(name, models / f"{name}.md", f"../../models/{name}.png")
             for name in ("copy_task", "cache_bench") if (models / f"{name}.md").exists()]
    if not parts:
        return []
    titles = {"copy_task": "Copy task (004): loss and exact match per encoder-decoder model",
              "cache_bench": "Greedy decoding with and without the k/v cache"}
    lines = ["## Whole models", "",
             "From `reports/models/` (`python -m harness copy-task` and `cache-bench`, run apart from this "
             "sweep; their own method and machine state are in each table's note).", ""]
    for name, md, png in parts:
        lines += [f"### {titles[name]}", "", md.read_text().strip(), ""]
        if (models / f"{name}.png").exists():
            lines += [f"![{name}]({png})", ""]
    return lines


def load_old(path: str) -> list[dict]:
    from .bench import load_rows

    try:
        return load_rows(Path(path))
    except HarnessError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise ResultsFileError(f"--compare file '{path}' is malformed: {exc}") from None
