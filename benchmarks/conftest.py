"""The benchmark suite's marks: one per benchmarked family (``pytest benchmarks -m norm``)."""

from harness.bench.cases import BENCH_FAMILIES


def pytest_configure(config):
    for family in BENCH_FAMILIES:
        config.addinivalue_line("markers", f"{family}: the {family} family's benchmark cases")
