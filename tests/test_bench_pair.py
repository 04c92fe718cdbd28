"""``harness.bench.pair.time_pair``: a candidate timed against its reference, interleaved, with
intervals, a time beyond the machine's measured peak flagged instead of reported, and one
within the per-call floor noted "too short to bound"; at one intra-op thread on CPU (the caller's
count put back), the load before and after recorded, a load above the cores marked disturbed.
Structure and gross ratios only: no threshold a loaded machine could break (the flag logic runs
on a fake clock and given peaks, the load check on injected readings)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from harness.base.errors import ConfigError
from harness.bench import pair
from harness.bench.machine import LOAD_MARGIN, LoadDisturbance, load_disturbance
from harness.bench.pair import BeyondPeak, Bound, MachinePeak, TooShortToBound, measure_peak, time_pair
from harness.check.kernelbench import load_problem, timing_pair

CORPUS = Path(__file__).resolve().parent / "kernelbench"

PEAK = MachinePeak(device="cpu", dtype="float32", flops_per_s=1e11, bytes_per_s=1e10,
                   matmul_size=1024, copy_bytes=1 << 20)


def _inputs():
    gen = torch.Generator().manual_seed(0)
    return (torch.randn(128, 128, generator=gen), torch.randn(128, 128, generator=gen))


class _FakeClock:
    """Seconds that pass only when a timed callable says so, and ``tick`` per reading (a timed
    call's own cost: the per-call floor is one tick): timings exact on a loaded machine."""

    def __init__(self, tick=1e-7):
        self.now = 0.0
        self.tick = tick

    def __call__(self):
        self.now += self.tick
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
    assert t.note is None and t.floor_s.value == pytest.approx(clock.tick)  # the floor: one identity call
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
    assert t.speedup is not None and t.speedup.high == pytest.approx(0.25, rel=1e-3)  # the floor's tick on each


def test_a_cached_output_beyond_the_peak_is_flagged_not_reported():
    a, b = _inputs()
    cached = torch.matmul(a, b)
    slow_peak = MachinePeak(device="cpu", dtype="float32", flops_per_s=1e6, bytes_per_s=1e6,
                            matmul_size=1024, copy_bytes=1 << 20)  # a machine far slower than the claim
    t = time_pair(torch.matmul, lambda x, y: cached, _inputs, device="cpu", rounds=3, min_time=0.002,
                  peak=slow_peak)
    assert isinstance(t.flag, BeyondPeak) and t.speedup is None
    assert "of this machine's measured peak" in str(t.flag) and "not a speedup" in str(t.flag)


def _softmax_pair():
    """The corpus's tiny problem (a softmax over 6x40) and a correct candidate, as ``--time`` times them."""
    return timing_pair(load_problem(CORPUS / "softmax.py"), CORPUS / "softmax" / "ok_max_subtracted.py")


def _stalling_copy(clock, stall_s):
    """The peak's copy as a shared machine runs it: at more than one intra-op thread each call
    waits ``stall_s`` for a descheduled pool thread (measured on this 2-core machine at load 6:
    a 1 MiB copy took 5.5 ms at 2 threads, 24 us at one); at one thread, 10 GB/s."""
    def make(device, half):
        src, dst = torch.ones(half, dtype=torch.uint8), torch.empty(half, dtype=torch.uint8)

        def copy():
            clock.now += stall_s if torch.get_num_threads() > 1 else 2 * half / 1e10
            return dst.copy_(src)
        return copy
    return make


def test_a_tiny_candidate_was_flagged_by_a_peak_the_thread_pool_stalled_and_is_not_now(monkeypatch):
    """The false alarm: a correct 6x40 softmax flagged at about 245% of the peak bandwidth, the
    copy the peak was measured with having waited on the pool; the one-thread copy is the peak."""
    clock = _FakeClock()
    monkeypatch.setattr(pair, "_copy_callable", _stalling_copy(clock, 8e-3))
    monkeypatch.setattr(pair, "PEAK_MATMUL", {"cpu": 64, "cuda": 64})  # the FLOP peak is not at issue
    p = _softmax_pair()
    ref, cand = clock.costing(5e-6, p.reference), clock.costing(3e-6, p.candidate)
    saved = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        stalled = measure_peak("cpu", torch.float32, 1920, clock=clock, threads=(2,))  # the pool's only
        before = time_pair(ref, cand, p.make_inputs, device="cpu", rounds=3, min_time=1e-4, peak=stalled, clock=clock)
        after = time_pair(ref, cand, p.make_inputs, device="cpu", rounds=3, min_time=1e-4, clock=clock)
    finally:
        torch.set_num_threads(saved)
    assert before.bytes_floor == after.bytes_floor == 2 * 6 * 40 * 4  # the input read, the output written
    assert isinstance(before.flag, BeyondPeak) and before.flag.fraction == pytest.approx(2.45, rel=0.05)
    assert after.peak is not None and after.peak.copy_threads == 1 and stalled.copy_threads == 2
    assert after.flag is None and after.note is None and after.speedup is not None
    assert after.bandwidth_fraction is not None and after.bandwidth_fraction < 0.1


def _tiny(bytes_s_at_peak):
    """The softmax pair on a clock whose per-call floor is 2.5 us, the candidate 1 us above it,
    against a peak at which the pair's 1920 bytes take ``bytes_s_at_peak``."""
    clock = _FakeClock(tick=2.5e-6)
    p = _softmax_pair()
    peak = MachinePeak(device="cpu", dtype="float32", flops_per_s=1e11, bytes_per_s=1920 / bytes_s_at_peak,
                       matmul_size=1024, copy_bytes=1 << 20)
    return time_pair(clock.costing(1e-4, p.reference), clock.costing(1e-6, p.candidate), p.make_inputs,
                     device="cpu", rounds=3, min_time=1e-3, peak=peak, clock=clock)


def test_a_candidate_within_the_per_call_floor_is_too_short_to_bound_not_flagged():
    t = _tiny(4e-6)  # beyond the peak (3.5 us for work needing 4 us), all within 2x the 2.5 us floor
    assert t.bandwidth_fraction is not None and t.bandwidth_fraction > 1
    assert t.flag is None and isinstance(t.note, TooShortToBound) and t.speedup is not None
    assert t.note.floor_s == pytest.approx(2.5e-6) and t.note.work_s == pytest.approx(4e-6)
    assert str(t.note).startswith("too short to bound: ") and "per-call floor" in str(t.note)


def test_work_clearly_above_the_floor_is_still_flagged_at_the_same_time():
    t = _tiny(2e-5)  # the same 3.5 us, for work needing 20 us at peak: 8x the floor
    assert isinstance(t.flag, BeyondPeak) and t.note is None and t.speedup is None


def test_a_cached_output_on_a_problem_large_enough_is_flagged_at_the_floor():
    a, b = _inputs()
    cached = torch.matmul(a, b)
    clock = _FakeClock(tick=2.5e-6)  # the cached call takes the floor; its 192 KiB need 20 us at the peak
    t = time_pair(clock.costing(1e-4, torch.matmul), lambda x, y: cached, _inputs, device="cpu", rounds=3,
                  min_time=1e-3, peak=PEAK, clock=clock)
    assert t.candidate_s.value == pytest.approx(t.floor_s.value)
    assert isinstance(t.flag, BeyondPeak) and t.flag.bound is Bound.BANDWIDTH
    assert t.flag.fraction > 5  # 192 KiB in 2.5 us
    assert t.note is None and t.speedup is None


@pytest.mark.parametrize("kwargs", [{"rounds": 2}, {"min_time": 0}, {"level": 1.5}, {"threads": 0},
                                    {"threads": -2}, {"threads": 1.5}, {"threads": True}])
def test_a_bad_argument_is_one_config_error(kwargs):
    with pytest.raises(ConfigError):
        time_pair(torch.matmul, torch.matmul, _inputs, device="cpu", peak=PEAK, **kwargs)


class _ThreadsSeen:
    """A callable costing ``seconds`` on ``clock`` that records torch's intra-op thread count at
    each call (``raise_after``: it raises from that call on, as a broken candidate would)."""

    def __init__(self, clock, seconds, raise_after=None):
        self.clock, self.seconds, self.raise_after, self.seen = clock, seconds, raise_after, []

    def __call__(self, *args):
        self.seen.append(torch.get_num_threads())
        if self.raise_after is not None and len(self.seen) > self.raise_after:
            raise RuntimeError("the candidate broke")
        self.clock.now += self.seconds
        return torch.matmul(*args)


@pytest.fixture
def two_threads():
    """Torch at 2 intra-op threads (the caller's count the pair must put back), restored after."""
    saved = torch.get_num_threads()
    torch.set_num_threads(2)
    yield 2
    torch.set_num_threads(saved)


@pytest.mark.parametrize("threads, runs_at", [(None, 1), (3, 3)])
def test_on_cpu_the_pair_runs_at_one_thread_or_the_given_count_and_puts_the_callers_back(two_threads, threads,
                                                                                         runs_at):
    clock = _FakeClock()
    ref, cand = _ThreadsSeen(clock, 2e-4), _ThreadsSeen(clock, 1e-4)
    t = time_pair(ref, cand, _inputs, device="cpu", rounds=3, min_time=1e-3, peak=PEAK, clock=clock, threads=threads)
    assert t.threads == runs_at and set(cand.seen) == set(ref.seen) == {runs_at}  # warm-up and every round
    assert torch.get_num_threads() == two_threads


def test_the_callers_thread_count_is_put_back_when_the_candidate_raises(two_threads):
    clock = _FakeClock()
    broken = _ThreadsSeen(clock, 1e-4, raise_after=5)
    with pytest.raises(RuntimeError, match="the candidate broke"):
        time_pair(_ThreadsSeen(clock, 1e-4), broken, _inputs, device="cpu", rounds=3, min_time=1e-3, peak=PEAK,
                  clock=clock)
    assert broken.seen[-1] == 1 and torch.get_num_threads() == two_threads


def test_the_peak_is_measured_at_the_callers_thread_count_too(two_threads, monkeypatch):
    """A pair timed at one thread is set against the best of the caller's count, its own and 1:
    never a peak lower than the machine gives (a false flag)."""
    asked = []
    monkeypatch.setattr(pair, "measure_peak", lambda *a, threads, **k: asked.append(threads) or PEAK)
    clock = _FakeClock()
    time_pair(clock.costing(1e-4, torch.matmul), clock.costing(1e-4, torch.matmul), _inputs, device="cpu",
              rounds=3, min_time=1e-3, clock=clock, threads=3)
    assert asked == [(2, 3, 1)]


class _Loads:
    """The injected load average: ``readings`` in turn, the last one repeated."""

    def __init__(self, *readings):
        self.readings = list(readings)

    def __call__(self):
        return self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]


def _timed_under(loads):
    clock = _FakeClock()
    return time_pair(clock.costing(2e-4, torch.matmul), clock.costing(1e-4, torch.matmul), _inputs, device="cpu",
                     rounds=3, min_time=1e-3, peak=PEAK, clock=clock, load=loads)


def test_a_pair_timed_under_a_load_above_the_cores_is_disturbed_and_a_quiet_one_is_not():
    cores = os.cpu_count() or 1
    quiet = _timed_under(_Loads(0.3, 0.4))
    assert (quiet.load_before, quiet.load_after, quiet.disturbed) == (0.3, 0.4, None)
    busy = _timed_under(_Loads(0.3, cores + 4.0))  # the load rose while it ran: the after reading counts
    assert (busy.load_before, busy.load_after) == (0.3, cores + 4.0)
    assert busy.disturbed == LoadDisturbance(cores + 4.0, cores)
    assert str(busy.disturbed) == f"load average {cores + 4.0:.1f} on {cores} cores"
    assert busy.speedup is not None and busy.speedup.value == pytest.approx(quiet.speedup.value)  # marked, not withheld
    unknown = _timed_under(_Loads(None))  # a system without a load average: not known, not disturbed
    assert (unknown.load_before, unknown.load_after, unknown.disturbed) == (None, None, None)


def test_the_load_check_is_the_sweeps_one():
    """One rule for every timing: above the cores plus LOAD_MARGIN, on CPU only; the sweep's
    ``disturbance`` says the same figures."""
    from harness.bench import sweep
    assert load_disturbance([3.0, 2.0 + LOAD_MARGIN], "cpu", cores=2) == LoadDisturbance(3.0, 2)
    assert load_disturbance([2.0 + LOAD_MARGIN, None], "cpu", cores=2) is None  # at the margin: not above it
    assert load_disturbance([9.0], "cuda:0", cores=2) is None and load_disturbance([None], "cpu", cores=2) is None
    cores = os.cpu_count() or 1
    assert sweep.disturbance([cores + 3.0], [100.0] * 3, "cpu") == str(load_disturbance([cores + 3.0], "cpu"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the L2 flush and stream sync need a GPU")
def test_on_cuda_the_l2_is_flushed():
    t = time_pair(torch.matmul, torch.matmul, _inputs, device="cuda", rounds=3, min_time=0.002)
    assert t.l2_flushed and t.floor_s.value > 0 and t.peak is not None and t.peak.copy_threads is None
