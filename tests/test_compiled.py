"""check --compiled: a variant under torch.compile against itself eager, and proof that it
compiled (Dynamo's counters). The default suite uses the aot_eager backend (Dynamo and
AOTAutograd, no C++ code generation: seconds, not the ~40 s inductor takes here);
`python -m harness check --compiled` uses inductor."""

from __future__ import annotations

from harness.base.config import Config
from harness.check.api import check_all


def test_compiled_variant_really_compiles_and_matches_eager():
    report = check_all(["attention"], {"default": Config(batch=2)}, "cpu", ["float32"], extras=False,
                       variants=["attention/annotated"], compile_backend="aot_eager")
    [c] = report.compiled
    assert c.graphs >= 1, "Dynamo compiled no graph"
    assert c.verdict in ("identical", "equivalent") and c.ok
    assert c.backend == "aot_eager" and c.case == "self"
    assert not report.failures
