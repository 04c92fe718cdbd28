"""The JSONL log of a sweep: reading it, telling a complete one, rows from pytest-benchmark."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harness.base.errors import ResultsFileError


def read_log(path: Path, *, quiet: bool = False) -> list[dict]:
    """Rows of a JSONL log. A cut-off last line (the row in progress when the run stopped)
    is dropped with a message; every earlier row is kept. A bad line before it is an error."""
    rows: list[dict] = []
    if not path.exists():
        return rows
    if path.is_dir():
        raise ResultsFileError(f"bench log '{path}' is a directory, not a JSONL file")
    lines = [(n, line) for n, line in enumerate(path.read_text().splitlines(), 1) if line.strip()]
    for i, (n, line) in enumerate(lines):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                if not quiet:
                    print(f"note: {path}:{n} is cut off (the row in progress when the run stopped); "
                          f"dropped, {len(rows)} earlier row(s) kept", file=sys.stderr)
                break
            raise ResultsFileError(f"{path}:{n} is not a JSON line; delete it or pass --fresh") from None
    return rows


def _rewrite_without_cut_line(path: Path, rows: list[dict]) -> None:
    """Before appending to a log whose last line was cut off, write it back whole."""
    if len([x for x in path.read_text().splitlines() if x.strip()]) > len(rows):
        path.write_text("".join(json.dumps(r, default=str) + "\n" for r in rows))


def log_complete(path: Path) -> bool:
    """True when the log's last row is the end of a whole sweep."""
    rows = read_log(path, quiet=True) if path.exists() else []
    return bool(rows) and rows[-1].get("kind") == "end"


# -- sizes that cannot fit ---------------------------------------------------------------------------


def load_rows(path: Path) -> list[dict]:
    """Rows from a bench log (JSONL), a results.json, or a pytest-benchmark JSON."""
    if not path.exists():
        raise ResultsFileError(f"results file '{path}' does not exist")
    if path.is_dir():
        raise ResultsFileError(f"results file '{path}' is a directory; give a results.json or a bench .jsonl in it")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsFileError(f"cannot read results file '{path}': {getattr(exc, 'strerror', None) or exc}") from None
    if path.suffix == ".jsonl":
        return read_log(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultsFileError(f"'{path}' is not JSON: {exc.msg} (line {exc.lineno})") from None
    if isinstance(data, dict) and "benchmarks" in data:
        return rows_from_pytest_benchmark(data)
    if isinstance(data, dict) and "rows" in data:
        data = data["rows"]
    if not isinstance(data, list) or not all(isinstance(r, dict) and "key" in r for r in data):
        raise ResultsFileError(f"'{path}' is not a results file of this harness (rows with a 'key')")
    return data


def rows_from_pytest_benchmark(data: dict) -> list[dict]:
    """pytest-benchmark's --benchmark-json output -> rows of the same shape as ours."""
    rows = []
    machine = data.get("machine_info", {})
    for bench in data["benchmarks"]:
        info = bench.get("extra_info", {})
        if "key" not in info:
            raise ResultsFileError(f"benchmark '{bench.get('name')}' has no harness extra_info (not from benchmarks/)")
        stats = bench["stats"]
        row = dict(info)
        row.update(kind="case", status="ok", median_s=stats["median"], q1_s=stats["q1"], q3_s=stats["q3"],
                   iqr_s=stats["iqr"], reps=stats["rounds"], source="pytest-benchmark", interleaved=False,
                   rss_note="the pytest-benchmark suite runs no RSS probe (python -m harness bench does)",
                   cpu=machine.get("cpu", {}).get("brand_raw", info.get("cpu", "")))
        if row.get("flops"):  # a rate of this row alone; no ratio (nothing timed beside it)
            row["gflops"] = row["flops"] / row["median_s"] / 1e9
        rows.append(row)
    return rows
