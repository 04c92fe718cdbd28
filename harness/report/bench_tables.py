"""The benchmark tables of REPORT.md: per family, kernel mechanisms, peaks, machine state."""

from __future__ import annotations

import math
import sys

import numpy as np
import pandas as pd
from tabulate import tabulate

from harness.bench.flops import FUSED_TILES
from harness.bench.measured import CUDA_FUSED_OPS, FlopBasis, Status
from harness.bench.shapes import HEAD_SHAPED, shape_text
from harness.report.bench_frame import frame
from harness.report.targets import MET_TEXT, asked_targets, evaluate


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


def dense_only(r) -> bool:
    return r.get("flops_basis") == FlopBasis.DENSE_EQUIVALENT.value


def peak_cell(r) -> str:
    """The executed fraction of the peak with its per-round quartiles; 'counting error' where
    it exceeds the peak (the row is named in the report's counting errors), and none from a
    dense-equivalent count."""
    if isinstance(r.get("counting_error"), str) and r["counting_error"]:
        return "counting error"
    if dense_only(r):
        return "- (count dense-eq.)"
    return _spread_text(r, "peak_fraction", _pct)


def dense_cell(r) -> str:
    """The dense-equivalent fraction: above 1 it is no fraction of anything the machine did."""
    x = r["peak_fraction_dense"]
    if x is None or pd.isna(x):
        return "-"
    return "> peak (skipped work counted)" if x > 1 else _pct(x)


def counting_errors(cases: pd.DataFrame) -> list[str]:
    if "counting_error" not in cases:
        return []
    return [e for e in cases["counting_error"] if isinstance(e, str) and e]


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
            "GFLOP/s": "-" if pd.isna(r["gflops"]) else f"{r['gflops']:.1f}" + (" dense-eq." if dense_only(r) else ""),
            "% peak [q1-q3]": peak_cell(r),
            "% peak dense-eq.": dense_cell(r),
            "saved MiB": _mib(r["saved_bytes"]), "tensor peak MiB": _mib(r["peak_bytes"]),
            "RSS peak MiB": _mib(r["rss_peak_bytes"]) if not pd.isna(r["rss_peak_bytes"]) else (
                "not measured" if r["status"] == Status.OK and r["device"] == "cpu" else "-"),
            "path": short_path(r["path"]) if isinstance(r["path"], str) else "-",
        }
        if family in HEAD_SHAPED:  # (B, H, T, d): d = D / H
            row["H"], row["d"] = int(r["heads"]), int(r["d_model"]) // int(r["heads"])
        if compiled:
            row["compile s"] = "-" if pd.isna(r["compile_s"]) else f"{r['compile_s']:.1f}"
        if r["status"] != Status.OK:
            row["median ms"] = r["status"]
            row["IQR ms"] = str(r.get("error", ""))[:40]
        if isinstance(r["disturbed"], str) and r["disturbed"]:
            row["median ms"] += " (d)"
        if has_change:
            note = r.get("change_note")
            row["change"] = ("not comparable" if isinstance(note, str) and note else "-" if pd.isna(r["change"]) else
                             f"{r['change']:+.0%}" + (" REGRESSION" if r["regression"] else ""))
        rows.append(row)
    df = pd.DataFrame(rows)
    ids = ["variant", "mode", "B", "H", "T", "d", "dtype"] if family in HEAD_SHAPED else [
        "variant", "mode", "B", "T", "D", "dtype"]
    parts = []
    for title, columns in (("Time", TIME_COLUMNS), ("Rate", RATE_COLUMNS), ("Memory", MEMORY_COLUMNS),
                           ("Kernel path", ("path",))):
        parts.append(f"{title}:\n\n" + tabulate(df[ids + [c for c in columns if c in df]], headers="keys",
                                                tablefmt="github", showindex=False))
    return "\n\n".join(parts)


# Kernel operators by a short name in the tables (the full names: results.csv, and the
# mechanism table below each family's).
SHORT_OPS = {"_scaled_dot_product_flash_attention_for_cpu": "sdpa_flash_cpu",
             "_transformer_encoder_layer_fwd": "encoder_fast_path", "_native_multi_head_attention": "native_mha"}


def short_path(path: str) -> str:
    for op, short in SHORT_OPS.items():
        path = path.replace(op, short)
    return path.replace("+", " + ")


# The per-family table in four, so that each fits a wide terminal (160 columns).
TIME_COLUMNS = ("median ms", "IQR ms", "vs baseline [q1-q3]", "compile s", "change")
RATE_COLUMNS = ("GFLOP/s", "% peak [q1-q3]", "% peak dense-eq.")
MEMORY_COLUMNS = ("saved MiB", "tensor peak MiB", "RSS peak MiB")


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
        elif o["op"] in CUDA_FUSED_OPS:
            if o.get("parent") == "_native_multi_head_attention":
                continue
            backend = o["op"].removeprefix("_scaled_dot_product_").removesuffix("_attention")
            tiles = FUSED_TILES[backend]
            frac = r["flops"] / r["flops_dense"] if r.get("flops_dense") else float("nan")
            if dense_only(r):
                parts.append(f"SDPA {backend} kernel on {shape}: FLOPs counted dense (every score), "
                             "dense-equivalent: the row was logged before the kernel's tiles were counted")
            elif o.get("is_causal"):
                parts.append(f"SDPA {backend} kernel on {shape}, `is_causal`: it computes the "
                             f"{tiles.q_tile} x {tiles.k_tile} tiles up to the diagonal and skips the rest; "
                             f"executed FLOPs {frac:.0%} of dense")
            elif o.get("mask"):
                parts.append(f"SDPA {backend} kernel on {shape} with an explicit mask: every tile computed")
            else:
                parts.append(f"SDPA {backend} kernel on {shape}, no mask")
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
    g = cases[(cases["family"] == family) & (cases["status"] == Status.OK)]
    rows = []
    for (mode, comp), m in g.groupby(["mode", "compiled"]):
        top = m.assign(size=m["batch"] * m["seq"] * m["d_model"]).sort_values("size").iloc[-1]
        at = m[(m["batch"] == top["batch"]) & (m["seq"] == top["seq"]) & (m["d_model"] == top["d_model"])]
        for _, r in at.sort_values("variant").iterrows():
            rows.append({"variant": r["variant"], "mode": mode + (" compiled" if comp else ""),
                         "shape": shape_text(family, r["batch"], r["seq"], r["d_model"], r["heads"]),
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
    for line in counting_errors(cases):
        print(line, file=sys.stderr)
    for t in asked_targets(cases):
        e = evaluate(t, cases)
        print(f"target: {e['target']}: {MET_TEXT[e['met']]} ({e['measured']}; threshold {e['threshold']})")
