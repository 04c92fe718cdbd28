"""The config matrix: sizes that tell roles apart, overrides, and configs too big to check."""

from __future__ import annotations

import pytest

from harness.base.config import CONFIG_MATRIX, Config, config_matrix
from harness.cli.main import main


def test_the_default_config_gives_every_role_a_different_size():
    cfg = Config()
    sizes = [cfg.batch, cfg.tgt_len, cfg.src_len, cfg.d_model, cfg.heads, cfg.d_k, cfg.d_ff]
    assert len(set(sizes)) == len(sizes)


def test_the_matrix_has_eight_heads_one_head_and_an_edge():
    assert CONFIG_MATRIX["heads8"].heads == 8 and CONFIG_MATRIX["one_head"].heads == 1
    assert CONFIG_MATRIX["edge"].batch == 1 and CONFIG_MATRIX["edge"].tgt_len == 1


def test_set_replaces_the_matrix_by_one_config():
    assert list(config_matrix(["d_model=32", "heads=2"])) == ["custom"]
    assert config_matrix(None).keys() == CONFIG_MATRIX.keys()


def test_a_config_too_big_to_check_is_refused_with_the_estimate(capsys):
    assert main(["check", "--family", "norm", "--set", "batch=100000", "--set", "tgt_len=100000"]) == 2
    err = capsys.readouterr().err
    assert "needs about" in err and "GiB to check" in err and "this machine has" in err
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("name", list(CONFIG_MATRIX))
def test_every_config_of_the_matrix_fits(name):
    assert CONFIG_MATRIX[name].estimate_bytes() < 2**30
