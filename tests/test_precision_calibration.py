"""benchmarks/precision_calibration.py: random (seed, shape) draws of the float32 check,
the ratio distribution per family and the false-alarm rate of the max and rms rules (the
The manual's figure (docs/verdicts.md) comes from its default 200 draws; here two draws of one family, seconds)."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "precision_calibration.py"


def _script():
    spec = importlib.util.spec_from_file_location("precision_calibration", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_draws_are_deterministic_small_and_varied():
    script = _script()
    a = [script.draw_config(random.Random(7)) for _ in range(1)]
    b = [script.draw_config(random.Random(7)) for _ in range(1)]
    assert a == b
    rng = random.Random(0)
    cfgs = [script.draw_config(rng) for _ in range(50)]
    assert all(c.d_model % c.heads == 0 and c.d_model <= 128 and c.tgt_len <= 9 for c in cfgs)
    assert len({(c.d_model, c.heads, c.batch, c.tgt_len, c.src_len) for c in cfgs}) > 40
    assert script.DRAWS >= 200


def test_two_draws_report_the_distribution_and_no_false_alarm(capsys):
    code = _script().main(["--draws", "2", "--family", "norm", "--seed", "1"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "2 draws (seed 1)" in out and "norm" in out
    assert "rms rule (now)" in out and "false alarms in 0 of 2 draws" in out
