"""The quick profile's cases as a pytest-benchmark suite (not part of the default run).

    pytest benchmarks --benchmark-only --benchmark-json bench.json
    python -m harness report --from bench.json

CUDA work is synchronized inside the benchmarked call. Each benchmark carries the case,
its FLOPs, saved bytes and the matmul peak in ``extra_info``, so the JSON turns into the
same report as ``python -m harness bench``.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from harness import measure
from harness.bench import environment, plan, prepare
from harness.compare import dtype_of
from harness.registry import get_variant

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
CASES = [c for device in DEVICES for c in plan("quick", device)]


@pytest.fixture(scope="session")
def peaks():
    cache = {}

    def get(device: str, dtype: str) -> float:
        if (device, dtype) not in cache:
            cache[(device, dtype)] = measure.matmul_peak(device, dtype_of(dtype))[0]
        return cache[(device, dtype)]

    return get


@pytest.mark.parametrize("case", CASES, ids=[c.key for c in CASES])
def test_case(benchmark, case, peaks):
    reason = get_variant(case.family, case.variant).supports(case.config())
    if reason:
        pytest.skip(reason)
    prepared = prepare(case)
    step = prepared.step
    if case.device == "cuda":
        def call():
            step()
            torch.cuda.synchronize()
    else:
        call = step
    benchmark.group = f"{case.family} {case.shape} {case.dtype} {case.mode}"
    benchmark.extra_info.update(
        dataclasses.asdict(case), key=case.key, case=case.case, kind="case",
        flops=measure.count_flops(step), peak_flops=peaks(case.device, case.dtype),
        saved_bytes=measure.saved_bytes(prepared.forward, prepared.resident) if case.mode == "fwd+bwd" else None,
        peak_bytes=measure.peak_bytes(step, case.device), **environment(case.device),
    )
    benchmark(call)
