"""Typed benchmark rows, the way ``torch.utils.benchmark`` passes a ``Measurement`` built around a
frozen ``TaskSpec``: a case row is ``BenchRow`` (``spec``: what was measured and where;
``measurement``: what came out, its ``status`` a ``Status``, the raw ``Rounds`` it was timed in and
the ``Statistics`` derived from them; ``environment``: the machine), a matmul-peak row is
``PeakRow``. The sweep builds them and writes ``to_json()`` lines to the JSONL log; the report
reads them back with ``from_json`` and never coerces a dict again.

JSON out: one flat object, keys in the order the sweep has always written them
(``KEY_ORDER``); a field that is None is left out, except where the log has always written
a null (``baseline``; ``largest_tensor`` beside a ``path``; ``rss_peak_bytes`` beside an
``rss_note``), so a log is the same line for line as before the rows were typed.

JSON in: tolerant of what earlier versions wrote. A missing key is None (a log of an
earlier version, a pytest-benchmark row, a minimal row); a value of the wrong type is a
``ResultsFileError`` naming the key and the row. A key this version does not know (one an
earlier or later version wrote, a report's ``change`` column, a pytest-benchmark
``extra_info`` entry) is **kept** in ``extra`` and written back after the known ones,
and a row read writes back the keys it came with, in their order, nulls included: reading
and writing a row loses nothing."""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Iterable, Mapping, TypeVar

from harness.base.errors import ResultsFileError
from harness.bench.measured import CUDA_FUSED_OPS, FlopBasis, Rounds, Statistics, Status, statistics_of


@dataclass(frozen=True)
class RowSpec:
    """What was measured: the case (family, variant, shape, dtype, device, mode, compile),
    its key, how (threads, profile), beside what (baseline, group)."""

    key: str
    family: str | None = None
    variant: str | None = None
    batch: int | None = None
    seq: int | None = None
    d_model: int | None = None
    heads: int | None = None
    d_ff: int | None = None
    dtype: str | None = None
    device: str | None = None
    mode: str | None = None
    compiled: bool | None = None
    sets: list[str] | None = None  # --set items beyond the shape (kv_heads=2, ...)
    case: str | None = None
    threads: int | None = None
    baseline: str | None = None
    group: str | None = None
    profile: str | None = None


@dataclass(frozen=True)
class Environment:
    """The machine and software a row was measured on (``device`` and ``threads`` are in the spec)."""

    torch: str | None = None
    python: str | None = None
    cpu: str | None = None
    cpu_count: int | None = None
    commit: str | None = None
    device_name: str | None = None


_T = TypeVar("_T")

# A field of a row that is not one JSON key (written through its own parts).
_NOT_A_KEY = {"json": False}


@dataclass
class Measurement:
    """What one case gave: its status, error (and the harness's own failure's ``traceback``:
    ``harness.base.failures``, a key only where set); what one instrumented call showed (compile
    time, kernel path, FLOPs executed and dense-equivalent, memory); how it was timed
    (``min_time`` per round, ``rounds``) and the state of the window (load, disturbed,
    interleaved); the raw ``times`` of its rounds and the ``stats`` derived from them
    (lazily, as ``torch.utils.benchmark``'s ``Measurement`` does), or as recorded where a row
    read back from a log has no raw blocks; the probe's resident-set peak."""

    status: Status | None = None
    error: str | None = None
    traceback: str | None = None
    compile_s: float | None = None
    compile_graphs: int | None = None
    path: str | None = None
    path_ops: list | None = None
    flops: int | None = None
    flops_dense: int | None = None
    flops_basis: FlopBasis | None = None
    peak_bytes: int | None = None
    largest_tensor: str | None = None
    peak_method: str | None = None
    saved_bytes: int | None = None
    min_time: float | None = None
    rounds: int | None = None
    load: list | None = None
    disturbed: str | None = None
    interleaved: bool | None = None
    rss_peak_bytes: int | None = None
    rss_note: str | None = None
    source: str | None = None
    times: Rounds | None = field(default=None, metadata=_NOT_A_KEY)
    recorded: Statistics = field(default_factory=Statistics, metadata=_NOT_A_KEY)

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    @property
    def stats(self) -> Statistics:
        """Derived from the raw ``times`` (computed once per rounds), or as recorded."""
        if self.times is not None and self.times.blocks:
            return statistics_of(self.times, self.flops, self.flops_dense)
        return self.recorded

    def values(self) -> dict[str, Any]:
        """The measurement as JSON keys (None where it has no value)."""
        own = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if not f.metadata}
        times = self.times or Rounds()
        return {**own, "round_s": None if times.round_s is None else list(times.round_s), "reps": times.reps,
                **dataclasses.asdict(self.stats)}

    @classmethod
    def from_values(cls, data: Mapping[str, Any], key: Any) -> Measurement:
        times = None
        if "round_s" in data or "reps" in data:
            round_s = _typed("round_s", data.get("round_s"), list | None, key)
            reps = _typed("reps", data.get("reps"), int | None, key)
            times = Rounds(None if round_s is None else tuple(round_s), reps)
        return dataclasses.replace(_part(cls, data, key), times=times, recorded=_part(Statistics, data, key))


# The order the sweep has always written a case row's keys in (BenchCase's fields, the
# static figures, the status, the timings, memory, then the environment).
KEY_ORDER = (
    "family", "variant", "batch", "seq", "d_model", "heads", "d_ff", "dtype", "device", "mode", "compiled", "sets",
    "case", "key", "threads", "baseline", "compile_s", "compile_graphs", "path", "path_ops", "flops",
    "flops_dense", "flops_basis", "peak_bytes", "largest_tensor", "peak_method", "saved_bytes", "status", "error",
    "median_s", "q1_s", "q3_s", "iqr_s", "round_s", "rounds", "reps", "gflops", "gflops_dense", "peak_flops",
    "peak_fraction", "peak_fraction_q1", "peak_fraction_q3", "peak_fraction_lo", "peak_fraction_hi",
    "peak_fraction_dense", "load", "disturbed", "group", "interleaved", "vs_baseline", "vs_baseline_q1",
    "vs_baseline_q3", "vs_baseline_lo", "vs_baseline_hi", "rss_peak_bytes", "rss_note", "source", "kind",
    "profile", "torch", "python", "cpu", "cpu_count", "commit", "device_name",
)
# Fields rows carried as extra keys before they were fields: written where they always were, after
# every key of KEY_ORDER (and, unlike those, no column of their own for a report of rows that lack them).
PROMOTED_KEYS = ("min_time",)
_CASE_KEYS = KEY_ORDER + PROMOTED_KEYS + ("traceback",)  # the harness's own failure: only where set, no column

# What every case row must carry: the tables group and label rows by them.
REQUIRED = ("family", "variant", "batch", "seq", "dtype", "device", "mode", "status")
# Keys an earlier version wrote under another name: read as today's (old name -> new name).
# None so far; a rename adds its pair here, and files written before it keep loading.
RENAMED: dict[str, str] = {}
_type_hints = functools.cache(typing.get_type_hints)  # evaluates every annotation: once per class, not per row


def require_fields(rows: Iterable[Any], where: str) -> None:
    """Refuse, naming the field, a case row that lacks one of ``REQUIRED`` (what a report
    groups and labels rows by): read from ``where`` for a table, it could not be placed."""
    for row in rows:
        if isinstance(row, BenchRow):
            missing = [name for name in REQUIRED if row.value(name) is None]
            if missing:
                raise ResultsFileError(f"{where}: benchmark row {row.key!r} has no {missing[0]!r}: every case row a "
                                       f"report reads (schema 1 and 2) carries {', '.join(REQUIRED)} (a key renamed "
                                       "by hand, or not this harness's row)")


def _renamed(data: Mapping[str, Any]) -> Mapping[str, Any]:
    if not any(old in data for old in RENAMED):
        return data
    return {RENAMED.get(k, k) if RENAMED.get(k, k) not in data else k: v for k, v in data.items()}


def _fields(cls: type) -> dict[str, Any]:
    """A dataclass's fields that are JSON keys, with their types."""
    hints = _type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if not f.metadata}


def _base_type(hint: Any) -> Any:
    """``int | None`` -> int, ``list | None`` -> list."""
    args = [a for a in typing.get_args(hint) if a is not type(None)] if isinstance(hint, types.UnionType) else [hint]
    return typing.get_origin(args[0]) or args[0]  # list[str] -> list


def _typed(name: str, value: Any, hint: Any, key: Any) -> Any:
    """``value`` as the field's type: None stays None; an int is a float where a float is
    wanted; anything else of the wrong type is refused in one line."""
    if value is None:
        return None
    want = _base_type(hint)
    if isinstance(want, type) and issubclass(want, Enum):
        try:
            return want(value)
        except ValueError:
            raise ResultsFileError(f"benchmark row {key!r}: {name} is {value!r}, not one of "
                                   f"{[m.value for m in want]}: not a row of this harness, or damaged") from None
    if want is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if want is int and isinstance(value, float) and value.is_integer():
        return int(value)  # a whole number that went through a DataFrame (results.json)
    if want is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if want in (str, list, bool) and isinstance(value, want):
        return value
    if want is str and isinstance(value, (int, float)) and not isinstance(value, bool) and math.isnan(value):
        return None  # a text column's NaN, as pandas writes a missing value
    raise ResultsFileError(f"benchmark row {key!r}: {name} is {value!r}, not {want.__name__}: not a row "
                           "of this harness, or damaged")


def _part(cls: type[_T], data: Mapping[str, Any], key: Any) -> _T:
    return cls(**{name: _typed(name, data.get(name), hint, key) for name, hint in _fields(cls).items()
                  if name in data})


# Keys written as null when their companion is written (see the module docstring).
_NULL_BESIDE = {"baseline": None, "largest_tensor": "path", "rss_peak_bytes": "rss_note"}


def _null_written(key: str, values: Mapping[str, Any]) -> bool:
    """Whether a None ``key`` is written as a null (see ``_NULL_BESIDE``)."""
    if key not in _NULL_BESIDE:
        return False
    companion = _NULL_BESIDE[key]
    return companion is None or values.get(companion) is not None


def _flat(values: dict[str, Any], order: tuple[str, ...], extra: Mapping[str, Any],
          read_order: tuple[str, ...] = ()) -> dict[str, Any]:
    """The row as one JSON object: known keys in ``order`` (None left out but where a null is
    written), then ``extra``. A row that was read writes the keys it was read with, in their
    order, nulls included, then any it gained."""
    values = {k: v.value if isinstance(v, Enum) else v for k, v in values.items()}
    out: dict[str, Any] = {k: values[k] if k in values else extra.get(k) for k in read_order}
    for k in order:
        if k not in values or k in out:
            continue
        v = values[k]
        if v is None and not _null_written(k, values):
            continue
        out[k] = v
    out.update({k: v for k, v in extra.items() if k not in out})
    return out


def _row_key(data: Any, what: str) -> str:
    """The ``key`` of a row read from JSON; a row without one is refused, naming ``what``."""
    if not isinstance(data, Mapping) or "key" not in data:
        raise ResultsFileError(f"{what} needs a 'key': {str(data)[:80]}")
    return data["key"]


@dataclass
class BenchRow:
    """One measured case: ``spec`` + ``measurement`` + ``environment``, and ``extra``: keys
    this version does not know, kept as they were read."""

    spec: RowSpec
    measurement: Measurement = field(default_factory=Measurement)
    environment: Environment = field(default_factory=Environment)
    extra: dict[str, Any] = field(default_factory=dict)
    read_order: tuple[str, ...] = field(default=(), repr=False, compare=False)  # keys as read

    kind = "case"

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BenchRow:
        key = _row_key(data, "a benchmark row")
        if data.get("kind", "case") != "case":
            raise ResultsFileError(f"benchmark row {key!r} is a {data.get('kind')!r} row, not a case")
        data = _renamed(data)
        known = set(_CASE_KEYS)
        return cls(_part(RowSpec, data, key), Measurement.from_values(data, key), _part(Environment, data, key),
                   {k: v for k, v in data.items() if k not in known}, tuple(data))

    def to_json(self) -> dict[str, Any]:
        return _flat({**self.values(), "kind": self.kind}, _CASE_KEYS, self.extra, self.read_order)

    def values(self) -> dict[str, Any]:
        """The known fields of every part, by JSON key."""
        return {**dataclasses.asdict(self.spec), **self.measurement.values(), **dataclasses.asdict(self.environment)}

    @property
    def key(self) -> str:
        return self.spec.key

    @property
    def ok(self) -> bool:
        return self.measurement.ok

    @property
    def flop_basis(self) -> FlopBasis | None:
        """What ``flops`` counts: as recorded; for a row logged before the field, what the
        counting of that version made it (CUDA's fused attention kernels were counted dense;
        every other operator as executed). None where the row counts no FLOPs."""
        m = self.measurement
        if m.flops_basis is not None or not m.flops:
            return m.flops_basis
        ops = {o.get("op") for o in m.path_ops or [] if isinstance(o, Mapping)}
        cuda = (self.spec.device or "").startswith("cuda")
        return FlopBasis.DENSE_EQUIVALENT if cuda and ops & set(CUDA_FUSED_OPS) else FlopBasis.EXECUTED

    def counting_error(self) -> str:
        """"" or, when the row's executed FLOP/s exceed the matmul peak timed beside it (no
        kernel executes faster than the machine's matmul), the line naming the row: its
        FLOPs count work that was not executed."""
        f = self.measurement.stats.peak_fraction
        if self.flop_basis is not FlopBasis.EXECUTED or f is None or not f > 1:
            return ""
        return (f"counting error: {self.key}: executed FLOP/s {f:.0%} of the matmul peak timed beside it, "
                f"more than the machine does: its FLOPs ({self.measurement.flops:.4g}) count work its "
                "kernels did not execute")

    def value(self, name: str) -> Any:
        """The field called ``name`` in whichever part holds it (an unknown key: ``extra``)."""
        values = self.values()
        return values[name] if name in values else self.extra.get(name)


PEAK_ORDER = ("kind", "key", "group", "family", "device", "dtype", "size", "peak_flops", "peak_q1", "peak_q3",
              "peak_rounds", "rounds", "load", "disturbed", "threads", "elapsed_s", "profile", "torch", "python",
              "cpu", "cpu_count", "commit", "device_name")


@dataclass
class PeakRow:
    """The square matmul timed beside one group, in the same rounds: the machine's peak
    (median and quartiles over rounds), the load average at the group's start and end, and
    why the window was disturbed ("" when it was not)."""

    key: str
    group: str | None = None
    family: str | None = None
    device: str | None = None
    dtype: str | None = None
    size: int | None = None
    peak_flops: float | None = None
    peak_q1: float | None = None
    peak_q3: float | None = None
    peak_rounds: list | None = None
    rounds: int | None = None
    load: list | None = None
    disturbed: str | None = None
    threads: int | None = None
    elapsed_s: float | None = None
    profile: str | None = None
    environment: Environment = field(default_factory=Environment)
    extra: dict[str, Any] = field(default_factory=dict)
    read_order: tuple[str, ...] = field(default=(), repr=False, compare=False)  # keys as read

    kind = "peak"

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PeakRow:
        key = _row_key(data, "a matmul-peak row")
        own = {n: h for n, h in _fields(cls).items() if n not in ("environment", "extra", "read_order")}
        values = {n: _typed(n, data.get(n), h, key) for n, h in own.items() if n in data}
        known = set(PEAK_ORDER)
        return cls(**values, environment=_part(Environment, data, key),
                   extra={k: v for k, v in data.items() if k not in known}, read_order=tuple(data))

    def to_json(self) -> dict[str, Any]:
        values = {**{f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                     if f.name not in ("environment", "extra", "read_order")},
                  **dataclasses.asdict(self.environment), "kind": self.kind}
        return _flat(values, PEAK_ORDER, self.extra, self.read_order)


Row = BenchRow | PeakRow


def typed_rows(rows: Iterable[Mapping[str, Any] | Row]) -> list[Row]:
    """The case and peak rows of a log or results file, typed (its header and ``end`` rows
    left out; rows typed already kept as they are)."""
    out: list[Row] = []
    for r in rows:
        if isinstance(r, (BenchRow, PeakRow)):
            out.append(r)
            continue
        if not isinstance(r, Mapping):
            raise ResultsFileError(f"a benchmark row is a JSON object, not {str(r)[:80]}")
        kind = r.get("kind", "case")
        if kind == "case":
            out.append(BenchRow.from_json(r))
        elif kind == "peak":
            out.append(PeakRow.from_json(r))
    return out


@dataclass
class CacheBenchRow:
    """One greedy generation of ``harness.bench.cache_bench``: a model at one generated
    length, with or without its cache; its median time, tokens/s, peak bytes, and the load
    average and threads it ran with."""

    family: str
    variant: str
    seq: int
    batch: int
    cached: bool
    seconds: float
    tokens_per_s: float
    peak_bytes: int
    load: float
    threads: int

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)
