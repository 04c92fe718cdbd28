"""benchmarks/own_dtype_calibration.py: random draws of correct kernels judged in their own
dtype and of the wrong half-only kernels (docs/half-precision-kernels.md gives the figures of
its 40 draws; here one draw of one case, about a second)."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "own_dtype_calibration.py"


def _script():
    spec = importlib.util.spec_from_file_location("own_dtype_calibration", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_draws_are_deterministic_and_varied():
    script = _script()
    assert script.draw_config(random.Random(7)) == script.draw_config(random.Random(7))
    rng = random.Random(0)
    cfgs = [script.draw_config(rng) for _ in range(40)]
    assert all(c.heads % c.n_kv_heads == 0 and c.tgt_len <= 12 and c.src_len <= 12 for c in cfgs)
    assert len({(c.heads, c.d_k, c.n_kv_heads, c.batch, c.tgt_len, c.src_len) for c in cfgs}) == 40


def test_the_needed_factor_is_what_makes_the_rule_pass():
    script = _script()
    # err 5e-3, ref 1e-3, atol 1e-3: with the whole atol it needs 4x, without it 5x
    figures = (5e-3, 1e-3, 0.0, 0.0, 1e-3, 0.0, 0.0)
    assert abs(script.needed(figures, 1.0, "max") - 4.0) < 1e-9
    assert abs(script.needed(figures, 0.0, "max") - 5.0) < 1e-9
    assert script.needed((1e-4, 1e-3, 0.0, 0.0, 1e-3, 0.0, 0.0), 1.0, "max") == 0.0


def test_one_draw_reports_the_distribution_false_alarms_and_the_wrong_kernels(capsys):
    code = _script().main(["--draws", "1", "--seed", "3", "--cases", "causal_cross"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "1 draws (seed 3), float16 and bfloat16, cases causal_cross" in out
    assert "max error, atol x 0.25 (now)" in out and "false alarms" in out
    assert "half_causal_swapped      1.5x 1/1" in out      # the swapped diagonal shows on causal_cross
    assert "half_heads_tiled" in out
