"""The compiled benchmark path with Inductor (torch.compile's default backend), on a tiny
case: Dynamo's counters show a compiled graph and the steady-state call does not recompile.
Out of the default suite (Inductor's code generation and C++ build take 10-30 s here):

    pytest benchmarks/test_compile_inductor.py
"""

from __future__ import annotations

from harness.bench.cases import COMPILE_BACKEND, BenchCase, prepare


def test_inductor_compiles_the_benchmarked_case():
    from torch._dynamo.utils import counters

    assert COMPILE_BACKEND == "inductor"
    prepared = prepare(BenchCase("norm", "torch_layernorm", 1, 4, 16, 2, 64, "float32", "cpu", "fwd", compiled=True))
    assert prepared.graphs >= 1 and counters["frames"]["ok"] >= 1
    graphs = counters["stats"]["unique_graphs"]
    prepared.step()
    assert counters["stats"]["unique_graphs"] == graphs
