"""Honest GPU figures, on the CPU: the FLOPs SDPA's CUDA kernels execute (their operators run
on the meta device here, with the same signatures), what a row's FLOPs count, a fraction
of the peak above 1 named as a counting error, and the CUDA targets decided from the rows
of the first GPU run (tests/data/h200_attention_T2048_bf16.jsonl: the attention groups at
B=8 T=2048 D=512 bfloat16 of the quick report on one H200, torch 2.11.0+cu130; the
fused_sdpa, torch_sdpa and torch_mha rows and the two groups' matmul peaks, as logged)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from harness.bench import counters
from harness.bench.flops import FUSED_TILES, FlopCount, _tile_pairs
from harness.bench.measured import FlopBasis
from harness.bench.row import BenchRow
from harness.cli.main import main

aten = torch.ops.aten
H200 = Path(__file__).parent / "data" / "h200_attention_T2048_bf16.jsonl"


def _count(call) -> tuple[int, int, FlopCount]:
    fc = FlopCount()
    with FlopCounterMode(display=False, custom_mapping=fc.mapping()) as counter:
        call()
    executed = int(counter.get_total_flops())
    return executed, executed + fc.dense_extra, fc


def _qkv(t=2048, d=64):
    return torch.empty(2, 4, t, d, device="meta", dtype=torch.bfloat16)


FORWARD = {
    "flash": lambda q, causal: aten._scaled_dot_product_flash_attention(q, q, q, 0.0, causal),
    "efficient": lambda q, causal: aten._scaled_dot_product_efficient_attention(q, q, q, None, True, 0.0, causal),
    "cudnn": lambda q, causal: aten._scaled_dot_product_cudnn_attention(q, q, q, None, True, 0.0, causal, False),
}


@pytest.mark.parametrize("backend", sorted(FORWARD))
def test_a_causal_cuda_kernel_counts_the_tiles_it_computes(backend):
    """Causal at T=2048: whole tiles up to the diagonal (128-wide: 136 of 256 tile pairs, 53%;
    64-wide: 528 of 1024, 52%); without is_causal every score."""
    q = _qkv()
    tile = FUSED_TILES[backend]
    executed, dense, fc = _count(lambda: FORWARD[backend](q, True))
    assert dense == 2 * 2 * (2 * 4) * 2048 * 2048 * 64
    n = 2048 // tile.q_tile
    assert executed == dense * (n * (n + 1) // 2) // (n * n) and not fc.dense_only
    assert 0.5 < executed / dense < 0.54
    executed, dense, _ = _count(lambda: FORWARD[backend](q, False))
    assert executed == dense


def test_a_causal_cuda_backward_counts_its_five_matmuls_on_the_same_tiles():
    q = _qkv()
    out, lse, cq, ck, mq, mk, seed, offset, _ = aten._scaled_dot_product_flash_attention(q, q, q, 0.0, True)
    executed, dense, _ = _count(lambda: aten._scaled_dot_product_flash_attention_backward(
        q, q, q, q, out, lse, cq, ck, mq, mk, 0.0, True, seed, offset))
    pairs = _tile_pairs(2048, 2048, True, 128, 128)
    assert executed == 2 * (2 * 4) * pairs * 5 * 64 and dense == 5 * 2 * (2 * 4) * 2048 * 2048 * 64


def test_an_explicit_mask_makes_a_fused_kernel_compute_every_tile():
    q = _qkv(256)
    bias = torch.empty(2, 4, 256, 256, device="meta", dtype=torch.bfloat16)
    executed, dense, _ = _count(lambda: aten._scaled_dot_product_efficient_attention(q, q, q, bias, True))
    assert executed == dense


def test_sdpa_math_backend_computes_every_score_with_is_causal():
    """The math backend builds the causal mask and multiplies every score: executed = dense."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.randn(1, 2, 1024, 8)
    with sdpa_kernel(SDPBackend.MATH):
        executed, dense, fc = _count(lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True))
    assert executed == dense == 2 * 2 * 2 * 1024 * 1024 * 8 and not fc.dense_only


def test_an_attention_kernel_without_a_tile_model_is_counted_dense_equivalent():
    """The low-level flash entry point may skip tiles (is_causal, a window) and this harness
    has no model of it: torch's dense count, and the row says dense-equivalent."""
    q = torch.empty(2, 256, 4, 64, device="meta", dtype=torch.bfloat16)  # (B, T, H, d_k)
    st = counters.instrumented(lambda: aten._flash_attention_forward(q, q, q, None, None, 256, 256, 0.0, True,
                                                                     False), "cpu")
    assert st.flops == st.flops_dense > 0 and st.flops_basis is FlopBasis.DENSE_EQUIVALENT
    plain = counters.instrumented(lambda: torch.randn(8, 8) @ torch.randn(8, 8), "cpu")
    assert plain.flops_basis is FlopBasis.EXECUTED


def test_the_flop_basis_is_a_typed_field_that_round_trips():
    row = BenchRow.from_json({"key": "k", "flops": 10, "flops_basis": "dense-equivalent"})
    assert row.measurement.flops_basis is FlopBasis.DENSE_EQUIVALENT
    assert row.to_json()["flops_basis"] == "dense-equivalent"
    assert json.loads(json.dumps(row.to_json()))["flops_basis"] == "dense-equivalent"
    from harness.base.errors import ResultsFileError
    with pytest.raises(ResultsFileError, match="flops_basis is 'exact'"):
        BenchRow.from_json({"key": "k", "flops_basis": "exact"})


def _h200_rows() -> list[dict]:
    return [json.loads(line) for line in H200.read_text().splitlines()]


def test_rows_logged_before_the_tile_count_say_their_cuda_flops_are_dense_equivalent():
    """The H200 run counted its cuDNN kernel's every score: 88% of the peak in bfloat16 (106%
    in float32) is dense-equivalent, not executed."""
    rows = {(r.get("variant"), r.get("mode")): BenchRow.from_json(r) for r in _h200_rows()
            if r.get("kind", "case") == "case"}
    fused = rows[("fused_sdpa", "fwd")]
    assert fused.measurement.flops_basis is None and fused.flop_basis is FlopBasis.DENSE_EQUIVALENT
    assert fused.measurement.stats.peak_fraction == pytest.approx(0.875, abs=0.001)
    assert fused.counting_error() == ""  # dense-equivalent: labelled as such, no executed figure


def test_a_fraction_above_the_peak_is_a_counting_error_naming_the_row(tmp_path, capsys):
    """A fabricated row: executed FLOP/s 106% of the matmul peak timed beside it."""
    fabricated = []
    for r in _h200_rows():
        if r.get("variant") == "fused_sdpa" and r.get("mode") == "fwd":
            r = {**r, "flops_basis": "executed", "peak_fraction": 1.06}
        fabricated.append(r)
    log = tmp_path / "fabricated.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in fabricated))
    assert main(["report", "--from", str(log), "--no-compare", "--skip-check", "--out", str(tmp_path)]) == 0
    key = "attention/fused_sdpa|B=8|T=2048|D=512|H=8|F=2048|bfloat16|cuda|fwd|compile=0"
    err = capsys.readouterr().err
    assert f"counting error: {key}: executed FLOP/s 106% of the matmul peak" in err
    report = " ".join((tmp_path / "cuda-h200" / "from" / "REPORT.md").read_text().split())
    assert "Counting errors: 1 row(s)" in report and f"counting error: {key}" in report
    # the % peak cell lives in the per-family tables beside REPORT.md
    tables = " ".join((tmp_path / "cuda-h200" / "from" / "TABLES.md").read_text().split())
    assert "| counting error |" in tables and "106%" not in tables
    assert "106%" not in report.replace(f"{key}: executed FLOP/s 106%", "")
    assert "executed FLOP/s as a fraction of the bf16 matmul peak timed beside it**: threshold >= 50%" in report
    assert "measured not measured: counting error" in report


def test_cuda_targets_decide_from_the_h200_rows(tmp_path, capsys):
    """The CUDA report decides the CUDA targets (and lists no CPU one): fused_sdpa against
    torch_sdpa from the same rounds, 1.03x forward and 1.27x forward + backward; the peak
    fraction waits for an executed count."""
    assert main(["report", "--from", str(H200), "--no-compare", "--skip-check", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    speedups = [line for line in out.splitlines() if "vs torch_sdpa" in line]
    assert len(speedups) == 2 and all(": yes (" in line for line in speedups)
    assert "1.03x, 90% interval" in speedups[0] and "1.27x, 90% interval" in speedups[1]
    assert "nn.MultiheadAttention, CPU" not in out  # the CPU targets are the CPU report's
    peak = next(line for line in out.splitlines() if "bf16 matmul peak" in line)
    assert "not measured: the row's FLOPs are dense-equivalent" in peak
    # the same rows counted as this version counts them: executed 69% of dense -> 60% of the peak
    executed = []
    for r in _h200_rows():
        if r.get("variant") == "fused_sdpa" and r.get("mode") == "fwd":
            factor = 70866960384 / r["flops"]  # 34.4 GFLOP of projections + causal SDPA on 128 x 128 tiles
            r = {**r, "flops_basis": "executed", "flops": 70866960384,
                 **{k: r[k] * factor for k in ("gflops", "peak_fraction", "peak_fraction_q1", "peak_fraction_q3",
                                               "peak_fraction_lo", "peak_fraction_hi")}}
        executed.append(r)
    log = tmp_path / "executed.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in executed))
    assert main(["report", "--from", str(log), "--no-compare", "--skip-check", "--out", str(tmp_path / "x")]) == 0
    peak = next(line for line in capsys.readouterr().out.splitlines() if "bf16 matmul peak" in line)
    assert ": yes (60.2%" in peak


def test_the_executed_count_of_the_h200_fused_block():
    """The figure the test above uses: the fused block's four projections (dense matmuls) and
    its causal cuDNN call on 128 x 128 tiles at B=8 T=2048 D=512 H=8."""
    b, t, d, h = 8, 2048, 512, 8
    projections = 2 * b * t * d * 3 * d + 2 * b * t * d * d
    attention = 2 * (b * h) * _tile_pairs(t, t, True, 128, 128) * 2 * (d // h)
    assert projections + attention == 70866960384
