"""The CLI: listing, checking, JSON output, user variant files and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.registry import scratch

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "my_attention.py"


def test_list_prints_and_writes_json(tmp_path, capsys):
    out = tmp_path / "variants.json"
    assert main(["list", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "torch_mha" in printed and "000_4f2b0681cf261e4d.txt" in printed
    rows = json.loads(out.read_text())
    assert {"id", "family", "source", "traits"} <= set(rows[0])
    ids = {(r["family"], r["id"]) for r in rows}
    assert ("attention", "annotated") in ids and ("norm", "annotated_preln") in ids
    assert all(r["source"] == "torch" or r["source"] for r in rows)


def test_list_one_family_shows_traits_side_by_side(capsys):
    assert main(["list", "--family", "norm"]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert "norm_formula" in header and "eps" in header  # a column per trait


def test_check_one_family_json(tmp_path, capsys):
    out = tmp_path / "check.json"
    assert main(["check", "--family", "norm", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert set(data["configs"]) == {"default", "heads8", "one_head", "edge"}
    spec_keys = {"family", "variant", "config", "case", "dtype", "verdict", "expected", "ok", "err",
                 "ref_err", "ratio", "worst", "tensors"}
    assert spec_keys <= set(data["specs"][0])
    assert {s["dtype"] for s in data["specs"]} == {"float64", "float32"}
    rows = data["pairs"]
    keys = {"family", "a", "b", "config", "dtype", "device", "verdict", "expected", "max_abs", "grad_max_abs", "ok"}
    assert keys <= set(rows[0])
    custom = [r for r in rows if {r["a"], r["b"]} == {"annotated_preln", "torch_layernorm"}]
    assert custom and all(r["verdict"] == "different" and r["max_abs"] > 1e-3 for r in custom)
    assert "norm_formula" in custom[0]["reason"]
    assert data["gradchecks"] and all(g["ok"] for g in data["gradchecks"]) and data["contradictions"] == 0


def test_user_variant_file_joins_list_and_check(capsys):
    with scratch():
        assert main(["check", "--family", "attention", "--variant", "my_einsum", "--set", "batch=2",
                     "--variants", str(EXAMPLE)]) == 0
        printed = capsys.readouterr().out
        assert "my_einsum" in printed


def test_check_exits_1_on_a_contradiction(capsys):
    wrong = ROOT / "tests" / "wrong_variants.py"
    with scratch():
        assert main(["check", "--family", "norm", "--dtype", "float32", "--variants", str(wrong)]) == 1
    assert "contradict" in capsys.readouterr().out


@pytest.mark.parametrize("argv,message", [
    (["check", "--family", "nope"], "unknown family 'nope'"),
    (["check", "--family", "norm", "--set", "d_model=65", "--set", "heads=8"], "d_model=65 is not divisible by heads=8"),
    (["check", "--family", "norm", "--set", "d_model"], "bad --set 'd_model'"),
    (["check", "--family", "norm", "--set", "depth=3"], "bad --set 'depth=3'"),
    (["check", "--family", "norm", "--dtype", "float8"], "unknown dtype 'float8'"),
    (["check", "--family", "norm", "--dtype", "bool"], "dtype 'bool' is not a floating dtype"),
    (["check", "--family", "norm", "--precision-factor", "0"], "--precision-factor 0.0 must be positive"),
    (["check", "--family", "norm", "--device", "tpu"], "unknown device 'tpu'"),
    (["list", "--variants", "does/not/exist.py"], "variant file 'does/not/exist.py' does not exist"),
])
def test_bad_input_is_one_clear_error(argv, message, capsys):
    with scratch():
        assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert err.count("\n") == 1


def test_variant_file_that_fails_to_import(tmp_path, capsys):
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\nraise RuntimeError('boom')\n")
    with scratch():
        assert main(["list", "--variants", str(broken)]) == 2
    err = capsys.readouterr().err
    assert "failed to import: RuntimeError: boom (line 2)" in err


def test_variant_file_with_a_bad_registration(tmp_path, capsys):
    bad = tmp_path / "bad.py"
    bad.write_text("from harness import register\nregister(id='x', family='nope', source='s', "
                   "build=None, call=None)\n")
    with scratch():
        assert main(["list", "--variants", str(bad)]) == 2
    assert "unknown family 'nope'" in capsys.readouterr().err


def test_unsupported_config_skips_variants_with_a_reason(capsys):
    assert main(["check", "--family", "decoder_only_block", "--dtype", "float32",
                 "--set", "d_ff=128"]) == 0
    out = capsys.readouterr().out
    assert "simple_decoder_layer skips config custom: the FFN is fixed at 4*d_model=192" in out
