"""Which of the regime mistakes (tests/regime_variants.py) the harness catches,
and whether its controls stay equivalent.

    python benchmarks/regime_caught.py            # check + decode + pytest, prints the table
    python benchmarks/regime_caught.py --json out.json --no-pytest

Per family it runs the CLI in a subprocess (robust to the package's restructuring) and
reads the JSON it writes:

- ``python -m harness check --family F --variants FILE --variant ID... --json``: the
  default check (float64 semantics, float32 precision, the default config matrix,
  gradcheck, dropout; pairs and kernel paths are reported but are not contradictions);
- ``python -m harness decode --family F --variants FILE --json`` for the model families:
  greedy decoding compared and the k/v cache against full recomputation, which the
  default check does not run;
- ``python -m harness check ... --dtype float32 --dtype bfloat16`` for the half-precision
  classes, which the default CPU check does not run at all (not float16: a variant that
  declares the finite fill -1e9 is expected to *fail* in float16 by overflow, so a half
  path that never fills contradicts that expectation, which is not the class measured);
- ``pytest --variants FILE FILE -n 0``: the plugin's one test per variant.

"caught" means a contradiction that names the variant. Where ``check`` crashes before
writing its JSON, the Contradictions section of its output is read instead.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILE = ROOT / "tests" / "regime_variants.py"
DEFECTS = ROOT / "tests" / "regime_defects.py"  # variants that break the harness itself
MODEL_FAMILIES = ("encoder_decoder", "decoder_only_model")
HALF = ("rg_half_zero_after_softmax", "rg_norm_finfo_eps")  # only wrong in bfloat16 / float16


def load_ids(path: Path = FILE) -> tuple[dict, dict, dict, dict]:
    """(REGIME_WRONG, REGIME_CONTROLS, id -> family, EXHIBITS) of the variants file."""
    sys.path.insert(0, str(ROOT))
    from harness.registry import load_file, scratch

    with scratch():
        added = load_file(path)
        module = next(m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == str(path))
        families = {v.id: v.family for v in added}
    return module.REGIME_WRONG, module.REGIME_CONTROLS, families, module.run_exhibit


def _run(cmd: list[str]) -> tuple[int, str, float]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    return proc.returncode, proc.stdout + proc.stderr, time.perf_counter() - t0


def _where_spec(s: dict) -> str:
    return f"spec {s['dtype']} {s['config']}/{s['case']}: {s['verdict']} ({s.get('worst') or s.get('note', '')})"


SHOWN: dict[str, str] = {}  # id -> what the check showed without counting it (the kernel paths)


def check_family(family: str, ids: list[str], dtypes: list[str] | None = None) -> tuple[dict, float, str]:
    """id -> list of contradictions (strings) from one ``check`` run; seconds; a note."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "check.json"
        cmd = [sys.executable, "-m", "harness", "check", "--family", family, "--variants", str(FILE),
               "--json", str(out)]
        for vid in ids:
            cmd += ["--variant", vid]
        for d in dtypes or []:
            cmd += ["--dtype", d]
        rc, text, secs = _run(cmd)
        found: dict[str, list[str]] = {vid: [] for vid in ids}
        note = ""
        if out.exists():
            report = json.loads(out.read_text())
            for s in report["specs"]:
                if not s["ok"] and s["variant"] in found:
                    found[s["variant"]].append(_where_spec(s))
            for g in report["gradchecks"]:
                if not g["ok"] and g["variant"] in found:
                    found[g["variant"]].append(f"gradcheck: {g.get('note', '')[:80]}")
            for d in report["dropouts"]:
                if not d["ok"] and d["variant"] in found:
                    found[d["variant"]].append(f"dropout {d['check']}: {d['measured']} (expected {d['expected']})")
            for c in report.get("caches", []):  # two cached sessions against the full forward
                if not c["ok"] and c["variant"] in found:
                    found[c["variant"]].append(f"k/v cache: {c['verdict']} ({c['max_abs']:.3g})")
            for vid in ids:  # paths are listed, not counted: keep the largest no_grad-vs-autograd gap
                paths = [p for p in report.get("paths", [])
                         if p["variant"] == vid and isinstance(p.get("max_abs"), (int, float))]
                worst = max(paths, key=lambda p: p["max_abs"], default=None)
                if worst is not None and worst["max_abs"] > 1e-3 and not dtypes:
                    SHOWN[vid] = (f"paths (not counted): no_grad vs autograd {worst['max_abs']:.3g} on "
                                  f"{worst['case']}, listed {worst['verdict']!r}")
            for c in report.get("compiled", []):
                if not c["ok"] and c["variant"] in found:
                    found[c["variant"]].append(f"compiled: {c['verdict']}")
        else:  # a crash after printing: read the Contradictions section
            note = f"check exited {rc} without JSON: {text.strip().splitlines()[-1][:120] if text.strip() else ''}"
            section = text.split("== Contradictions", 1)[-1] if "== Contradictions" in text else ""
            for line in section.splitlines():
                m = re.match(rf"{family}/(\S+)\s+(.*)", line)
                if m and m.group(1) in found:
                    found[m.group(1)].append("stdout: " + " ".join(m.group(2).split())[:100])
    return found, secs, note


def decode_family(family: str, ids: list[str]) -> tuple[dict, float]:
    """id -> contradictions from ``decode`` (greedy pairs, cache checks) naming it."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "decode.json"
        _, _, secs = _run([sys.executable, "-m", "harness", "decode", "--family", family, "--variants", str(FILE),
                           "--json", str(out)])
        found: dict[str, list[str]] = {vid: [] for vid in ids}
        if out.exists():
            report = json.loads(out.read_text())
            for r in report["greedy"]:
                for vid in {r["a"], r["b"]} & set(found):
                    if not r["ok"]:
                        found[vid].append(f"decode greedy {r['a']} ~ {r['b']}: {r['first_diff']}")
            for r in report["cache"]:
                if r["variant"] in found and not r["ok"]:
                    found[r["variant"]].append(f"decode cache: {r['verdict']} ({r['max_abs']:.3g})")
    return found, secs


def pytest_side(ids: list[str]) -> tuple[dict, float]:
    """id -> 'failed' / 'passed' for the plugin's test of each variant (CPU)."""
    rc, text, secs = _run([sys.executable, "-m", "pytest", "--variants", str(FILE), str(FILE), "-n", "0", "-q",
                           "-rA", "-p", "no:cacheprovider"])
    result = {}
    for m in re.finditer(r"^(PASSED|FAILED|ERROR) \S+::(\w+)/([\w-]+)\[cpu\]", text, re.M):
        result[m.group(3)] = m.group(1).lower()
    return {vid: result.get(vid, "?") for vid in ids}, secs


def defect(vid: str, family: str) -> dict:
    """One ``check`` of a defect variant: exit status, JSON written?, its rows, recorder errors."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "check.json"
        rc, text, secs = _run([sys.executable, "-m", "harness", "check", "--family", family, "--variants",
                               str(DEFECTS), "--variant", vid, "--json", str(out)])
        report = json.loads(out.read_text()) if out.exists() else None
    rows = [] if report is None else [r for k in ("specs", "gradchecks", "dropouts") for r in report[k]
                                      if r["variant"] == vid and not r["ok"]]
    return {"id": vid, "family": family, "rc": rc, "json": report is not None, "failing_rows": len(rows),
            "recorder_errors": sum("HigherOrderOperator" in str(r) for r in rows),
            "last_line": text.strip().splitlines()[-1][:140] if text.strip() else "", "seconds": secs}


def measure_defects() -> list[dict]:
    sys.path.insert(0, str(ROOT))
    from harness.registry import load_file, scratch

    with scratch():
        added = load_file(DEFECTS)
        module = next(m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == str(DEFECTS))
        families = {v.id: v.family for v in added}
    return [{**defect(vid, families[vid]), "defect": text, "expect": module.EXPECT[vid]}
            for vid, text in module.REGIME_DEFECTS.items()]


def measure(run_pytest: bool = True) -> dict:
    wrong, controls, families, exhibits = load_ids()
    ids = [*wrong, *controls]
    by_family: dict[str, list[str]] = {}
    for vid in ids:
        by_family.setdefault(families[vid], []).append(vid)
    order = {vid: n for n, vid in enumerate(ids)}
    rows, timings, notes = {}, {}, []
    for family, members in by_family.items():
        found, secs, note = check_family(family, members)
        timings[f"check {family}"] = secs
        if note:
            notes.append(f"{family}: {note}")
        extra: dict[str, list[str]] = {vid: [] for vid in members}
        if family in MODEL_FAMILIES:
            extra, secs = decode_family(family, members)
            timings[f"decode {family}"] = secs
        half = [v for v in members if v in HALF]
        half_found: dict[str, list[str]] = {}
        if half:
            half_found, secs, note = check_family(family, half, ["float32", "bfloat16"])
            timings[f"check {family} (half dtypes)"] = secs
            if note:
                notes.append(f"{family} (half): {note}")
        for vid in members:
            rows[vid] = {"id": vid, "family": family, "control": vid in controls,
                         "class": controls.get(vid) or wrong.get(vid),
                         "check": found[vid], "decode": extra.get(vid, []), "half": half_found.get(vid, []),
                         "pytest": None, "exhibit": None, "shown": SHOWN.get(vid, "-")}
    t0 = time.perf_counter()
    for vid in ids:  # the mistake shown outside the harness's regime (or the control right there)
        regime, measured, baseline = exhibits(vid)
        rows[vid]["exhibit"] = {"regime": regime, "measured": measured, "baseline": baseline}
    timings["exhibits (in process)"] = time.perf_counter() - t0
    if run_pytest:
        side, secs = pytest_side(ids)
        timings["pytest"] = secs
        for vid, outcome in side.items():
            rows[vid]["pytest"] = outcome
    t0 = time.perf_counter()
    defects = measure_defects()
    timings["defects"] = time.perf_counter() - t0
    return {"rows": sorted(rows.values(), key=lambda r: order[r["id"]]), "defects": defects,
            "timings": timings, "notes": notes}


def _cell(items: list[str]) -> str:
    return items[0] + (f" (+{len(items) - 1})" if len(items) > 1 else "") if items else "-"


def _ex(r: dict) -> str:
    e = r["exhibit"]
    if e is None:
        return ""
    word = "bound" if r["control"] else "right"
    return f"{e['regime']}: {e['measured']:.3g} ({word} {e['baseline']:.3g})"


def table(result: dict) -> str:
    from tabulate import tabulate

    wrong = [r for r in result["rows"] if not r["control"]]
    controls = [r for r in result["rows"] if r["control"]]
    lines = ["== Wrong variants: caught by the default check (a contradiction naming the variant)?"]
    lines.append(tabulate(
        [(r["id"], r["family"], r["class"], "yes" if r["check"] else "NO",
          _cell(r["check"]) if r["check"] else r["shown"],
          ("yes" if r["decode"] else "NO") if r["family"] in MODEL_FAMILIES else "",
          ("yes" if r["half"] else "NO") if r["id"] in HALF else "",
          {"failed": "yes", "passed": "NO"}.get(r["pytest"], r["pytest"] or "")) for r in wrong],
        headers=("id", "family", "class", "check", "where", "decode", "bfloat16", "pytest")))
    lines.append("\n== The mistakes are real: each wrong variant outside the harness's regime, against its right "
                 "sibling (inf: raises or not finite)")
    lines.append(tabulate([(r["id"], _ex(r)) for r in result["rows"]], headers=("id", "regime: measured")))
    lines.append("\n== Controls: stayed equivalent?")
    lines.append(tabulate(
        [(r["id"], r["family"], r["class"], "yes" if not r["check"] else "NO", _cell(r["check"]),
          {"passed": "yes", "failed": "NO"}.get(r["pytest"], r["pytest"] or "")) for r in controls],
        headers=("id", "family", "why equivalent", "check", "contradiction", "pytest")))
    lines.append("\n== Defects (tests/regime_defects.py): one check of each defect variant")
    lines.append(tabulate(
        [(d["id"], d["family"], d["defect"], d["rc"], "yes" if d["json"] else "NO", d["failing_rows"],
          d["recorder_errors"], "" if d["json"] else d["last_line"]) for d in result.get("defects", [])],
        headers=("id", "family", "defect", "exit", "JSON", "failing rows", "recorder errors", "last line (no JSON)")))
    caught = sum(bool(r["check"]) for r in wrong)
    any_caught = sum(bool(r["check"] or r["decode"] or r["half"]) for r in wrong)
    kept = sum(not r["check"] for r in controls)
    lines.append(f"\ndefault check: {caught}/{len(wrong)} wrong variants caught "
                 f"({any_caught}/{len(wrong)} counting decode and --dtype bfloat16); "
                 f"{kept}/{len(controls)} controls stay equivalent")
    if any(r["pytest"] for r in result["rows"]):
        pc = sum(r["pytest"] == "failed" for r in wrong)
        pk = sum(r["pytest"] == "passed" for r in controls)
        lines.append(f"pytest --variants: {pc}/{len(wrong)} wrong variants fail their test; "
                     f"{pk}/{len(controls)} controls pass")
    lines.append("timings: " + ", ".join(f"{k} {v:.1f}s" for k, v in result["timings"].items())
                 + f"; total {sum(result['timings'].values()):.1f}s")
    lines += [f"note: {n}" for n in result["notes"]]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    parser.add_argument("--no-pytest", action="store_true", help="skip the pytest side")
    args = parser.parse_args(argv)
    result = measure(run_pytest=not args.no_pytest)
    print(table(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
