"""torch.compile really compiles in the benchmark: Dynamo's counters say so (a tiny case).

The first call of a compiled case runs outside any TorchDispatchMode; under one (the op
recorder, the FLOP counter), Dynamo skips the frame and the module runs eager, which is
what the benchmark once timed as "compiled". Here Dynamo compiles with the "eager" backend
(graph capture without code generation: about a second); the same check with Inductor is
``benchmarks/test_compile_inductor.py`` (out of the default suite, ~10-30 s).
"""

from __future__ import annotations

import pytest
import torch

from harness.bench import cases
from harness.bench.cases import BenchCase, prepare
from harness.check.runs import OpRecorder

CASE = BenchCase("norm", "torch_layernorm", 1, 4, 16, 2, 64, "float32", "cpu", "fwd", compiled=True)


def assert_compiled(case: BenchCase) -> None:
    from torch._dynamo.utils import counters

    prepared = prepare(case)  # resets Dynamo, compiles by the first call
    assert prepared.graphs >= 1, "Dynamo compiled no graph: the 'compiled' row would run eager"
    assert counters["stats"]["unique_graphs"] >= 1 and counters["frames"]["ok"] >= 1
    assert prepared.compile_s > 0
    graphs = counters["stats"]["unique_graphs"]
    out = prepared.step()  # steady state: no recompilation
    assert counters["stats"]["unique_graphs"] == graphs
    torch.testing.assert_close(out, prepared.eager_step())


def test_compiled_case_is_compiled_by_dynamo(monkeypatch):
    monkeypatch.setattr(cases, "COMPILE_BACKEND", "eager")
    assert_compiled(CASE)


def test_dispatch_mode_makes_dynamo_skip_the_frame():
    """The mechanism the benchmark avoids: a first call under a dispatch mode compiles nothing."""
    from torch import _dynamo as dynamo
    from torch._dynamo.utils import counters

    dynamo.reset()
    counters.clear()
    compiled = torch.compile(torch.nn.LayerNorm(16), backend="eager")
    with OpRecorder(), torch.no_grad():
        compiled(torch.randn(1, 4, 16))
    assert counters["stats"]["unique_graphs"] == 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the CUDA compile path runs on a GPU machine")
def test_compiled_case_on_cuda(monkeypatch):
    import dataclasses

    monkeypatch.setattr(cases, "COMPILE_BACKEND", "eager")
    assert_compiled(dataclasses.replace(CASE, device="cuda"))
