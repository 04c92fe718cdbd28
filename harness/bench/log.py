"""The JSONL log of a sweep: its first line (what measured it), reading it, refusing a file
the harness did not write, rows from pytest-benchmark."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any, Iterable

from harness.base.errors import ResultsFileError
from harness.base.files import atomic_write, check_schema, read_text
from harness.bench.row import BenchRow, Row, require_fields, typed_rows
from harness.bench.timing import PEAK_FRACTION
from harness.registry import REGISTRY

LOG_MAGIC = "attention-harness bench log"


def code_fingerprint(variant_files: Iterable[str] = ()) -> str:
    """A hash of the code a measurement depends on: the harness package's sources, the files
    every registered variant came from (its pack module or a user's file), and ``variant_files``.
    Rows measured under another fingerprint are not reused."""
    files = {f.resolve() for f in Path(__file__).resolve().parents[1].rglob("*.py")}
    for origin in {v.origin for v in REGISTRY.values() if v.origin} | set(variant_files):
        module = sys.modules.get(origin)
        path = getattr(module, "__file__", None) if module is not None else origin
        if path and Path(path).is_file():
            files.add(Path(path).resolve())
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def stamp_difference(old: dict[str, Any] | None, new: dict[str, Any]) -> str:
    """'' when equal, else what differs, for the message that explains a fresh start."""
    if old is None:
        return "it has no header line (written by an earlier version of the harness)"
    names = {"code": "the harness's or the variants' code", "min_time": "--min-time", "rounds": "--rounds",
             "threads": "--threads", "memory": "--no-rss", "profile": "the profile"}
    diff = [names.get(k, k) for k in new if old.get(k) != new[k]]
    return ", ".join(diff) + (" differ" if len(diff) > 1 else " differs") if diff else ""


def is_harness_row(row: Any) -> bool:
    return isinstance(row, dict) and (row.get("harness_log") == LOG_MAGIC
                                      or row.get("kind") in ("case", "peak", "end") and "key" in row)


def is_own_log(log: Path) -> bool:
    """True for a missing or empty file and for a log this harness wrote (its first line is
    the harness's, possibly cut off by an interrupt)."""
    if not log.is_file():
        return True
    with log.open("rb") as f:
        first = f.readline().removeprefix(b"\xef\xbb\xbf").decode(errors="replace").strip()
        more = f.read(1)
    if not first and not more:
        return True
    header = json.dumps({"harness_log": LOG_MAGIC})[:-1]
    try:
        return is_harness_row(json.loads(first))
    except json.JSONDecodeError:  # the header itself cut off by an interrupt
        return not more and (header.startswith(first) or first.startswith(header))


def refuse_foreign_log(log: Path) -> None:
    """Refuse a non-empty file whose first line is not this harness's: a log is only ever
    appended to, resumed or replaced when the harness wrote it."""
    if not is_own_log(log):
        raise ResultsFileError(f"'{log}' is not a log written by this harness; it is left as it is: "
                               "give another --log path")


def read_log(path: Path, *, quiet: bool = False) -> list[dict]:
    """The measured rows of a JSONL log (its first line, what measured it, left out)."""
    return [r for r in read_jsonl(path, quiet=quiet) if r.get("harness_log") != LOG_MAGIC]


def read_jsonl(path: Path, *, quiet: bool = False) -> list[dict]:
    """Rows of a JSONL log. A cut-off last line (the row in progress when the run stopped)
    is dropped with a message; every earlier row is kept. A bad line before it is an error."""
    rows: list[dict] = []
    if not path.exists():
        return rows
    if path.is_dir():
        raise ResultsFileError(f"bench log '{path}' is a directory, not a JSONL file")
    try:
        text = read_text(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsFileError(f"cannot read bench log '{path}': {getattr(exc, 'strerror', None) or exc}") from None
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    for i, (n, line) in enumerate(lines):
        try:
            rows.append(json.loads(line))
            if isinstance(rows[-1], dict) and rows[-1].get("harness_log") == LOG_MAGIC:
                check_schema(rows[-1], path)
                if i > 0:  # only a log's first line is its header
                    raise ResultsFileError(
                        f"{path}:{n} starts another log (a second header line): two logs concatenated into one "
                        "file are not one sweep; give each log as its own --from (shards of one sweep are read "
                        "together)")
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                if not quiet:
                    print(f"note: {path}:{n} is cut off (the row in progress when the run stopped); "
                          f"dropped, {len(rows)} earlier row(s) kept", file=sys.stderr)
                break
            raise ResultsFileError(f"{path}:{n} is not a JSON line: not a log of this harness, or damaged; "
                                   "it is left as it is (give another --log path)") from None
    return rows


def _rewrite_without_cut_line(path: Path, rows: list[dict]) -> None:
    """Before appending to a log whose last line was cut off, write it back whole."""
    if len([x for x in read_text(path).splitlines() if x.strip()]) > len(rows):
        atomic_write(path, "".join(json.dumps(r, default=str) + "\n" for r in rows))


# -- rows from a log, a results file or pytest-benchmark ---------------------------------------------


def load_rows(path: Path) -> list[Row]:
    """Typed rows (case and matmul-peak rows) from a bench log (JSONL), a results.json, or a
    pytest-benchmark JSON; a case row without a field the tables need is refused."""
    rows = _load_rows(path)
    require_fields(rows, f"'{path}'")
    return rows


def _load_rows(path: Path) -> list[Row]:
    if not path.exists():
        raise ResultsFileError(f"results file '{path}' does not exist")
    if path.is_dir():
        raise ResultsFileError(f"results file '{path}' is a directory; give a results.json or a bench .jsonl in it")
    if not path.is_file():  # a pipe would block the read; a device is no results file
        raise ResultsFileError(f"results file '{path}' is not a regular file (a device, a pipe or a socket)")
    try:
        text = read_text(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsFileError(f"cannot read results file '{path}': {getattr(exc, 'strerror', None) or exc}") from None
    if path.suffix == ".jsonl":
        return typed_rows(read_log(path))
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultsFileError(f"'{path}' is not JSON: {exc.msg} (line {exc.lineno})") from None
    check_schema(data, path)
    if isinstance(data, dict) and "benchmarks" in data:
        return typed_rows(rows_from_pytest_benchmark(data))
    if isinstance(data, dict) and "rows" in data:  # a results.json: its matmul peaks, then its cases
        peaks = data.get("peaks") if isinstance(data.get("peaks"), list) else []
        data = [p for p in peaks if isinstance(p, dict) and p.get("kind") == "peak"] + data["rows"]
    if not isinstance(data, list) or not all(isinstance(r, dict) and "key" in r for r in data):
        raise ResultsFileError(f"'{path}' is not a results file of this harness (rows with a 'key')")
    return typed_rows(data)


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


# -- several files: shards of one sweep ----------------------------------------------------------------

# What must agree for rows to share a table: the rows' environment, and for logs what measured them.
ENVIRONMENT_FIELDS = ("torch", "device", "device_name", "cpu", "cpu_count", "threads", "profile", "commit")
STAMP_FIELDS = ("code", "min_time", "rounds", "memory")


def _environment_of(path: Path, rows: list[Row]) -> dict[str, Any]:
    cases = [r for r in rows if isinstance(r, BenchRow)]
    env = {k: cases[0].value(k) for k in ENVIRONMENT_FIELDS} if cases else {}
    if path.suffix == ".jsonl":
        header = next((r for r in read_jsonl(path, quiet=True) if r.get("harness_log") == LOG_MAGIC), None)
        if header is not None:
            env.update({k: header.get("stamp", {}).get(k) for k in STAMP_FIELDS})
    return env


def load_many(paths: list[Path]) -> list[Row]:
    """Rows of several results files (shards of one sweep: ``bench --shard i/n`` logs) as one
    list. Refused, naming the field and the files: rows measured in different environments
    (torch, device, CPU, threads, profile, commit; for logs also the code fingerprint and the
    timing settings), and a case present in two files."""
    loaded = [(p, load_rows(p)) for p in paths]
    if len(loaded) == 1:
        return loaded[0][1]
    first, envs = loaded[0][0], [_environment_of(p, rows) for p, rows in loaded]
    for (path, _), env in zip(loaded[1:], envs[1:]):
        differ = sorted(k for k in envs[0].keys() & env.keys() if envs[0][k] != env[k])
        if differ:
            what = ", ".join(f"{k} ({envs[0][k]!r} vs {env[k]!r})" for k in differ)
            raise ResultsFileError(f"rows from different environments cannot share one table: '{first}' and "
                                   f"'{path}' differ in {what}")
    seen: dict[str, Path] = {}
    merged = []
    for path, rows in loaded:
        for r in rows:
            key = r.key
            if key in seen:
                raise ResultsFileError(f"case {key} is in both '{seen[key]}' and '{path}': give each shard once")
            seen[key] = path
            merged.append(r)
    return merged


def slow_peaks(rows: list[dict]) -> list[dict]:
    """Rows with a group marked disturbed when its matmul peak fell below PEAK_FRACTION of the
    best peak of the run (same device and dtype), whatever the load average said: the machine
    gave that group less than it gave the others. Its case rows carry the same mark."""
    peaks = [r for r in rows if r.get("kind") == "peak" and isinstance(r.get("peak_flops"), (int, float))]
    best: dict[tuple, float] = {}
    for p in peaks:
        k = (p.get("device"), p.get("dtype"))
        best[k] = max(best.get(k, 0.0), p["peak_flops"])
    why: dict[str, str] = {}
    for p in peaks:
        top = best[(p.get("device"), p.get("dtype"))]
        if top > 0 and p["peak_flops"] < PEAK_FRACTION * top:
            why[p["group"]] = (f"matmul peak {p['peak_flops'] / 1e9:.0f} GFLOP/s, {p['peak_flops'] / top:.0%} of "
                               f"the run's best {top / 1e9:.0f}")
    if not why:
        return rows
    out = []
    for r in rows:
        extra = why.get(r.get("group")) if r.get("kind", "case") in ("case", "peak") else None
        if extra and extra not in (r.get("disturbed") or ""):
            r = {**r, "disturbed": "; ".join(x for x in (r.get("disturbed"), extra) if x)}
        out.append(r)
    return out
