"""``harness.bench.pair.time_pair``: a candidate timed against its reference, interleaved, with
intervals, and a time beyond the machine's measured peak flagged instead of reported. Structure
and gross ratios only: no threshold a loaded machine could break."""

from __future__ import annotations

import pytest
import torch

from harness.base.errors import ConfigError
from harness.bench.pair import BeyondPeak, MachinePeak, time_pair

PEAK = MachinePeak(device="cpu", dtype="float32", flops_per_s=1e11, bytes_per_s=1e10,
                   matmul_size=1024, copy_bytes=1 << 20)


def _inputs():
    gen = torch.Generator().manual_seed(0)
    return (torch.randn(128, 128, generator=gen), torch.randn(128, 128, generator=gen))


class _FakeClock:
    """Seconds that pass only when a timed callable says so: timings exact on a loaded machine."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def costing(self, seconds, fn):
        def run(*args):
            self.now += seconds
            return fn(*args)
        return run


def test_identical_callables_give_a_speedup_of_one_with_an_interval():
    clock = _FakeClock()
    same = clock.costing(1e-3, torch.matmul)
    t = time_pair(same, same, _inputs, device="cpu", rounds=5, min_time=0.002, peak=PEAK, clock=clock)
    assert t.flag is None and t.speedup is not None
    assert t.speedup.low == pytest.approx(1.0) and t.speedup.high == pytest.approx(1.0)
    assert len(t.reference_round_s) == len(t.candidate_round_s) == 5
    assert t.reference_flops == t.candidate_flops == 2 * 128 ** 3 and not t.l2_flushed


def test_four_times_the_work_is_slower_and_counted():
    def four(a, b):
        for _ in range(3):
            torch.matmul(a, b)
        return torch.matmul(a, b)
    clock = _FakeClock()
    t = time_pair(clock.costing(1e-3, torch.matmul), clock.costing(4e-3, four), _inputs, device="cpu",
                  rounds=5, min_time=0.002, peak=PEAK, clock=clock)
    assert t.candidate_flops == 4 * t.reference_flops
    assert t.speedup is not None and t.speedup.high == pytest.approx(0.25)


def test_a_cached_output_beyond_the_peak_is_flagged_not_reported():
    a, b = _inputs()
    cached = torch.matmul(a, b)
    slow_peak = MachinePeak(device="cpu", dtype="float32", flops_per_s=1e6, bytes_per_s=1e6,
                            matmul_size=1024, copy_bytes=1 << 20)  # a machine far slower than the claim
    t = time_pair(torch.matmul, lambda x, y: cached, _inputs, device="cpu", rounds=3, min_time=0.002,
                  peak=slow_peak)
    assert isinstance(t.flag, BeyondPeak) and t.speedup is None
    assert "of this machine's measured peak" in str(t.flag) and "not a speedup" in str(t.flag)


@pytest.mark.parametrize("kwargs", [{"rounds": 2}, {"min_time": 0}, {"level": 1.5}])
def test_a_bad_argument_is_one_config_error(kwargs):
    with pytest.raises(ConfigError):
        time_pair(torch.matmul, torch.matmul, _inputs, device="cpu", peak=PEAK, **kwargs)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the L2 flush and stream sync need a GPU")
def test_on_cuda_the_l2_is_flushed():
    t = time_pair(torch.matmul, torch.matmul, _inputs, device="cuda", rounds=3, min_time=0.002)
    assert t.l2_flushed
