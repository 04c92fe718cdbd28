"""The typed benchmark row (``harness.bench.row``): JSON in and out without loss, the keys
of logs written by earlier versions read, unknown keys kept, wrong types refused in one line.
No measurement: rows are written by hand, in the shapes the sweep and earlier versions wrote."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from harness.base.errors import ResultsFileError
from harness.bench import timing
from harness.bench.measured import Rounds, Status
from harness.bench.row import KEY_ORDER, BenchRow, Measurement, PeakRow, RowSpec, typed_rows

# A case row as the sweep writes it (keys in its order; nulls where it writes nulls).
OK_ROW = {
    "family": "norm", "variant": "torch_layernorm", "batch": 1, "seq": 8, "d_model": 64, "heads": 4, "d_ff": 256,
    "dtype": "float32", "device": "cpu", "mode": "fwd+bwd", "compiled": False, "case": "plain",
    "key": "norm/torch_layernorm|B=1|T=8|D=64|H=4|F=256|float32|cpu|fwd+bwd|compile=0", "threads": 1,
    "baseline": None, "path": "explicit ops", "path_ops": [{"op": "native_layer_norm", "shapes": [[1, 8, 64]]}],
    "flops": 0, "flops_dense": 0, "peak_bytes": 4096, "largest_tensor": None, "peak_method": "tensor peak",
    "saved_bytes": 2048, "status": "ok", "median_s": 1e-05, "q1_s": 9e-06, "q3_s": 1.1e-05, "iqr_s": 2e-06,
    "round_s": [1e-05, 1e-05, 1e-05], "rounds": 3, "reps": 300, "gflops": math.nan, "gflops_dense": math.nan,
    "peak_flops": 1e10, "peak_fraction": math.nan, "peak_fraction_q1": math.nan, "peak_fraction_q3": math.nan,
    "peak_fraction_lo": math.nan, "peak_fraction_hi": math.nan, "peak_fraction_dense": math.nan,
    "load": [0.5, None], "disturbed": "", "group": "norm|B=1|T=8|D=64|H=4|F=256|float32|cpu|fwd+bwd|compile=0",
    "interleaved": True, "rss_peak_bytes": None, "rss_note": "compiled: the probe would compile it again",
    "kind": "case", "profile": "full", "torch": "2.13.0+cpu", "python": "3.11.9", "cpu": "a cpu", "cpu_count": 2,
    "commit": "abc1234", "device_name": "a cpu",
}


def _line(row: dict) -> str:
    return json.dumps(row, default=str)


def test_a_sweep_row_goes_out_as_it_came_in_byte_for_byte():
    row = BenchRow.from_json(OK_ROW)
    assert row.spec.variant == "torch_layernorm" and row.measurement.saved_bytes == 2048 and row.ok
    assert row.environment.cpu_count == 2 and row.spec.profile == "full" and row.extra == {}
    assert _line(row.to_json()) == _line(OK_ROW)
    assert list(row.to_json()) == [k for k in KEY_ORDER if k in OK_ROW]


def test_nulls_are_written_only_where_the_sweep_writes_them():
    """``baseline`` always; ``largest_tensor`` beside a path; ``rss_peak_bytes`` beside a note."""
    unsupported = {k: OK_ROW[k] for k in list(OK_ROW)[:15]} | {"status": "unsupported", "error": "8 heads",
                                                               "kind": "case"}
    out = BenchRow.from_json(unsupported).to_json()
    assert out["baseline"] is None and "largest_tensor" not in out and "rss_peak_bytes" not in out
    assert _line(out) == _line(unsupported)
    no_probe = {k: v for k, v in OK_ROW.items() if k not in ("rss_peak_bytes", "rss_note")}
    assert "rss_peak_bytes" not in BenchRow.from_json(no_probe).to_json()


def test_rows_of_earlier_versions_and_of_other_writers_are_read():
    """A minimal row (an early log), a pytest-benchmark row, and a results.json row (every
    column, None where a row had nothing, numbers through a DataFrame, the report's
    ``change`` and ``regression``)."""
    minimal = BenchRow.from_json({"kind": "case", "key": "k"})
    assert minimal.key == "k" and minimal.spec.family is None and minimal.measurement.stats.median_s is None
    assert BenchRow.from_json({"key": "k2", "median_s": 1}).measurement.stats.median_s == 1.0  # no kind: a case
    from_frame = {**{k: None for k in KEY_ORDER}, **OK_ROW, "peak_bytes": 4096.0, "error": math.nan,
                  "change": 0.05, "regression": False}
    row = BenchRow.from_json(from_frame)
    assert row.measurement.peak_bytes == 4096 and isinstance(row.measurement.peak_bytes, int)
    assert row.measurement.error is None and row.extra == {"change": 0.05, "regression": False}
    assert list(row.to_json()) == list(from_frame) and row.to_json()["compile_s"] is None  # nulls read: kept


def test_unknown_keys_are_kept_and_written_back():
    """The decision: a key this version does not know is kept in ``extra`` (a log of a later
    version, a pytest-benchmark extra_info entry) and written back after the known keys, so
    reading and writing a row loses nothing; it is never silently dropped."""
    row = BenchRow.from_json({**OK_ROW, "tokens_per_s": 1234.5, "note": {"by": "a user"}})
    assert row.extra == {"tokens_per_s": 1234.5, "note": {"by": "a user"}}
    out = row.to_json()
    assert list(out)[-2:] == ["tokens_per_s", "note"] and out["note"] == {"by": "a user"}
    shuffled = {"note": 1, **dict(reversed(list(OK_ROW.items())))}  # another writer's order: kept
    assert _line(BenchRow.from_json(shuffled).to_json()) == _line(shuffled)
    built = BenchRow(row.spec, row.measurement, row.environment, {"x": 1})  # built, not read: KEY_ORDER
    assert list(built.to_json())[:2] == ["family", "variant"] and list(built.to_json())[-1] == "x"
    assert BenchRow.from_json(out).to_json() == out
    assert row.value("tokens_per_s") == 1234.5 and row.value("device") == "cpu" and row.value("cpu") == "a cpu"


@pytest.mark.parametrize("key, value, said", [
    ("median_s", "fast", "median_s is 'fast', not float"),
    ("batch", 1.5, "batch is 1.5, not int"),
    ("compiled", "no", "compiled is 'no', not bool"),
    ("round_s", 0.1, "round_s is 0.1, not list"),
])
def test_a_value_of_the_wrong_type_is_refused_in_one_line(key, value, said):
    with pytest.raises(ResultsFileError, match=said) as info:
        BenchRow.from_json({**OK_ROW, key: value})
    assert "\n" not in str(info.value) and OK_ROW["key"] in str(info.value)


def test_rows_without_a_key_or_of_another_kind_are_not_case_rows():
    with pytest.raises(ResultsFileError, match="needs a 'key'"):
        BenchRow.from_json({"median_s": 1.0})
    with pytest.raises(ResultsFileError, match="'peak' row, not a case"):
        BenchRow.from_json({"kind": "peak", "key": "peak|g"})
    with pytest.raises(ResultsFileError, match="matmul-peak row needs a 'key'"):
        typed_rows([{"kind": "peak", "group": "g"}])


def test_peak_rows_and_the_log_header_and_end():
    peak = {"kind": "peak", "key": "peak|g", "group": "g", "family": "norm", "device": "cpu", "dtype": "float32",
            "size": 64, "peak_flops": 1e10, "peak_q1": 9e9, "peak_q3": 1.1e10, "peak_rounds": [1e10] * 3,
            "rounds": 3, "load": [0.5, 0.6], "disturbed": "", "threads": 1, "elapsed_s": 0.2, "profile": "full",
            "torch": "2.13.0+cpu", "python": "3.11.9", "cpu": "a cpu", "cpu_count": 2, "commit": "abc1234",
            "device_name": "a cpu"}
    header = {"harness_log": "attention-harness bench log", "kind": "log", "stamp": {}}
    rows = typed_rows([header, peak, OK_ROW, {"kind": "end", "key": "end"}])
    assert [type(r) for r in rows] == [PeakRow, BenchRow]
    assert _line(rows[0].to_json()) == _line(peak) and rows[0].disturbed == "" and rows[0].environment.cpu == "a cpu"
    assert typed_rows(rows) == rows  # typed rows pass through


def test_min_time_and_status_are_typed_fields_read_from_the_keys_logs_have_always_had():
    """``min_time`` (what --compare holds like with like) is a field, not an extra key: a
    log line that carried it after the environment is read into the field and written back
    in the same place; ``status`` is a ``Status`` and writes its text."""
    logged = {**OK_ROW, "min_time": 0.02}
    row = BenchRow.from_json(logged)
    assert row.measurement.min_time == 0.02 and row.extra == {} and row.measurement.status is Status.OK
    assert _line(row.to_json()) == _line(logged) and list(row.to_json())[-1] == "min_time"
    assert "min_time" not in BenchRow.from_json(OK_ROW).to_json()  # a row without one gains none
    from harness.report.bench_frame import frame

    assert "min_time" not in frame([OK_ROW])[0] and frame([logged])[0]["min_time"].tolist() == [0.02]  # nor a column
    with pytest.raises(ResultsFileError, match="status is 'fine', not one of"):
        BenchRow.from_json({**OK_ROW, "status": "fine"})
    with pytest.raises(ResultsFileError, match="min_time is 'long', not float"):
        BenchRow.from_json({**OK_ROW, "min_time": "long"})


def test_statistics_are_derived_from_the_raw_rounds_and_read_back_as_recorded():
    """The sweep keeps the raw rounds; the statistics are computed from them when asked
    (median over blocks, the ratios of medians with their intervals) and are what the row
    writes; read back (the log has no blocks), they are the recorded figures."""
    rounds = Rounds(round_s=(2e-3, 3e-3, 2.5e-3), reps=12, blocks=(2e-3, 2.2e-3, 3e-3, 2.6e-3),
                    peak_rounds=(1e10, 1.2e10, 1.1e10), baseline_round_s=(4e-3, 5e-3, 6e-3))
    m = Measurement(status=Status.OK, flops=10**7, flops_dense=2 * 10**7, rounds=3, times=rounds)
    st = m.stats
    assert st.median_s == pytest.approx(2.4e-3) and st.iqr_s == st.q3_s - st.q1_s > 0
    assert st.gflops == pytest.approx(10**7 / 2.4e-3 / 1e9) and st.peak_flops == 1.1e10
    assert st.peak_fraction == timing.ratio_of_medians([10**7 / t for t in rounds.round_s], [1e10, 1.2e10, 1.1e10])[0]
    assert st.peak_fraction_dense == pytest.approx(2 * st.peak_fraction)
    assert (st.vs_baseline, st.vs_baseline_lo, st.vs_baseline_hi) == timing.ratio_of_medians(
        [4e-3, 5e-3, 6e-3], [2e-3, 3e-3, 2.5e-3])
    assert m.stats is st  # computed once for the same rounds
    out = BenchRow(RowSpec(key="k"), m).to_json()
    assert out["round_s"] == [2e-3, 3e-3, 2.5e-3] and out["reps"] == 12 and out["vs_baseline"] == st.vs_baseline
    back = BenchRow.from_json(out)
    assert back.measurement.stats == st and back.measurement.times == Rounds(round_s=rounds.round_s, reps=12)
    assert _line(back.to_json()) == _line(out)
    without = Measurement(status=Status.OK, flops=10**7, times=dataclasses.replace(rounds, baseline_round_s=None))
    assert without.stats.vs_baseline is None and "vs_baseline" not in BenchRow(RowSpec(key="k"), without).to_json()
