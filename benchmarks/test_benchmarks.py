"""The quick profile's cases as a pytest-benchmark suite (not part of the default run).

    pytest benchmarks -n 0 --benchmark-only --benchmark-json bench.json
    python -m harness report --from bench.json

Each case is marked with its family (``-m norm`` times the norm family's cases; ``-k``
matches ids as in any pytest run, so ``-k norm`` also takes every ``postnorm_blog`` and
``olmo2_qk_norm`` case of the other families).

(``-n 0``: the project's pytest defaults run two xdist workers, under which
pytest-benchmark refuses to time.)

The same callables as ``python -m harness bench`` (``harness.bench.cases.prepare``), timed by
pytest-benchmark one case at a time, with torch's threads set explicitly. CUDA work is
synchronized inside the benchmarked call. Each benchmark carries the case, its FLOPs
(executed and dense-equivalent), kernel path, saved bytes and tensor peak in
``extra_info``, so the JSON turns into a report. Its rows are not interleaved: the report
states no ratio (vs baseline, % of peak) and claims no timed target from them; for those,
``python -m harness report``.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from harness.bench import counters
from harness.bench.cases import plan, prepare
from harness.bench.sweep import environment
from harness.registry import get_variant

THREADS = torch.get_num_threads()
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
CASES = [c for device in DEVICES for c in plan("quick", device) if not c.compiled]


def case_id(c) -> str:
    """An id that ``pytest -k`` can match, e.g. ``norm-torch_layernorm-B4-T128-D256-float32-cpu-fwd_bwd``."""
    return f"{c.family}-{c.variant}-B{c.batch}-T{c.seq}-D{c.d_model}-{c.dtype}-{c.device}-{c.mode.replace('+', '_')}"


@pytest.mark.parametrize("case", [pytest.param(c, id=case_id(c), marks=getattr(pytest.mark, c.family))
                                  for c in CASES])
def test_case(benchmark, case):
    variant = get_variant(case.family, case.variant)  # skipped where the sweep writes an unsupported row
    reason = variant.refuses(case.config(), case.device, case.case) or variant.dtype_reason(case.dtype)
    if reason:
        pytest.skip(reason)
    torch.set_num_threads(THREADS)  # set explicitly, recorded in extra_info
    prepared = prepare(case)
    step = prepared.step
    if case.device == "cuda":
        def call():
            step()
            torch.cuda.synchronize()
    else:
        call = step
    st = counters.instrumented(step, case.device, prepared.resident if case.mode == "fwd+bwd" else None)
    benchmark.group = f"{case.family} {case.shape} {case.dtype} {case.mode}"
    benchmark.extra_info.update(
        dataclasses.asdict(case), key=case.key, case=case.case, kind="case", profile="quick",
        flops=st.flops, flops_dense=st.flops_dense, flops_basis=st.flops_basis.value,
        saved_bytes=st.saved_bytes, peak_bytes=st.peak_bytes,
        path=counters.path_name(st.ops), path_ops=st.ops, **{**environment(case.device), "threads": THREADS},
    )
    benchmark(call)
