"""``check`` runs the k/v cache through the regimes ``decode`` runs: a cache mistake that two
sessions against re-running the prefix cannot see (one the cached and uncached paths share,
or one that shows only on a multi-token call or on left padding) fails ``check`` too."""

from pathlib import Path

from harness.base.config import CONFIG_MATRIX, Config
from harness.check.results import CheckReport
from harness.cli.check import cached_sessions
from harness.registry import load_all, load_packs, scratch
from harness.report.tables import failures_table
from harness.systems.cache_parity import check_caches

MISTAKES = {"step_positions_from_cache_length": "left padding", "step_forgets_pad_mask": "left padding",
            "step_returns_first_of_call": "right padding"}
DOCUMENTED = ("cache_appends_before_rotating", "cache_positions_off_by_one", "cache_not_trimmed_to_window")


def test_check_catches_the_cache_mistakes_decode_catches_and_passes_the_controls():
    load_packs()
    with scratch():
        load_all([str(Path(__file__).with_name("cache_step_mistakes.py")), "examples/cache_bugs.py"])
        rows = {r.variant: r for r in cached_sessions(["llama_model"], CONFIG_MATRIX, None)}
        decode = check_caches("llama_model", Config())
    # the mistakes two sessions cannot see: their sessions agree, the parity does not
    for vid, side in MISTAKES.items():
        r = rows[vid]
        assert not r.ok and all(s.ok for s in r.sessions), r
        assert r.worst()[0].startswith(side) and r.worst()[1] == "different", r.worst()
    assert not any(rows[v].ok for v in DOCUMENTED)
    assert all(rows[v].ok for v in ("step_control", "cache_control", "llama_model")), rows
    # decode's rows: the same models fail, in the same regimes
    assert {c.variant for c in decode if not c.ok} == {v for v, r in rows.items() if not r.ok}
    assert {(c.variant, p.padding, p.schedule) for c in decode for p in c.parity} \
        == {(v, p.padding, p.schedule) for v, r in rows.items() for p in r.parity}
    report = CheckReport(dict(CONFIG_MATRIX), ["float32"], caches=list(rows.values()))
    assert sorted(f.variant for f in report.failures) == sorted([*MISTAKES, *DOCUMENTED])
    table = failures_table(report)
    assert "llama_model/step_returns_first_of_call" in table and "right padding, prefill + steps, from call" in table
    assert len(report.as_dict()["caches"]) == len(rows) and report.as_dict()["caches"][0]["parity"]
