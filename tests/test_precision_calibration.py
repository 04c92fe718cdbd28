"""benchmarks/precision_calibration.py: random (seed, shape) draws of the float32 check,
the ratio distribution per family and the false-alarm rate of the max and rms rules (the
figures of docs/verdict-calibration.md come from its default 1,000 draws; here the space it
draws from, and two draws of one family, seconds)."""

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
    cfgs = [script.draw_config(rng) for _ in range(400)]
    assert all(c.d_model % c.heads == 0 and 4 <= c.d_model <= 128 and 1 <= c.batch <= 5 for c in cfgs)
    assert all(max(c.tgt_len, c.src_len) <= 12 or min(c.tgt_len, c.src_len) >= script.LONG[0] for c in cfgs)
    # the shapes users give: every B, T, S and H of the space, d_k = 2, and the long draws
    assert {c.batch for c in cfgs} == set(range(1, 6)) and {c.heads for c in cfgs} == set(range(1, 9))
    assert {c.tgt_len for c in cfgs} >= set(range(1, 13)) and {c.src_len for c in cfgs} >= set(range(1, 13))
    assert any(c.d_k == 2 for c in cfgs) and any(c.tgt_len >= script.LONG[0] for c in cfgs)
    assert len({(c.d_model, c.heads, c.batch, c.tgt_len, c.src_len) for c in cfgs}) > 300
    assert script.DRAWS >= 1000


def test_two_draws_report_the_distribution_and_no_false_alarm(capsys):
    code = _script().main(["--draws", "2", "--family", "norm", "--seed", "1"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "2 draws (seed 1)" in out and "norm" in out
    assert "rms rule (now)" in out and "false alarms in 0 of 2 draws" in out


def test_the_pre_norm_encoder_layer_at_d4_is_no_false_alarm():
    """nn.TransformerEncoderLayer(norm_first=True) at D = 4, H = 1, B = 1, T = 9, S = 7: its
    36-element input gradient reaches 3.5x the baseline's RMS error on this seed (3.7x with
    eps 1e-6 on seed 19; the factor is 3): the size allowance covers it, the ratio still shown."""
    from harness.base.config import Config
    from harness.check.spec import SpecChecker
    from harness.registry import get_variant, load_packs

    load_packs()
    for seed, vid in ((36, "torch_pre"),):
        cfg = Config(d_model=4, heads=1, batch=1, tgt_len=9, src_len=7, d_ff=16, seed=seed)
        result = SpecChecker({"d4": cfg}).check(get_variant("encoder_layer", vid), "d4", "padded", "float32")
        grad = next(t for t in result.tensors if t.name == "grad:x")
        assert grad.n == 36 and grad.ratio > 3.0
        assert result.ok and result.verdict == "equivalent", result.note
