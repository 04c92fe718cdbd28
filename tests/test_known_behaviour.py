"""PyTorch behaviour found on the GPU, declared where it holds (``PathFinding`` bound to
devices and dtypes): a finding there, and the CPU verdicts unchanged. The cause of each is
measured on the CPU where it reproduces (docs/gpu-known-behaviour.md)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from harness import PathFinding, register_kernel
from harness.base.config import CONFIG_MATRIX
from harness.check.api import check_all
from harness.check.runs import RunCache, cast_inputs
from harness.check.spec import PATH_FINDING
from harness.families.base import declared_path_finding
from harness.registry import REGISTRY, build, get_variant, load_packs, reference_of, scratch
from harness.trace.explain import path_findings

WHY = "float32 takes another kernel here"
DEFAULT = {"default": CONFIG_MATRIX["default"]}


def off_in_float32(q, k, v, mask, causal=False):
    """The eager kernel, off by 1e-2 in float32 only (a kernel picked for one dtype)."""
    from variants.kernels import eager

    out = eager(q, k, v, mask, causal)
    return out + 1e-2 if q.dtype == torch.float32 else out


def _check(traits):
    load_packs()
    with scratch():
        register_kernel(id="off32", fn=off_in_float32, source="test",
                        traits={"causal": "top_left", "cases": ("self",), **traits})
        return check_all(["attention_kernel"], DEFAULT, "cpu", ["float32"], extras=False,
                         variants=["attention_kernel/off32"])


def test_a_finding_bound_to_a_dtype_holds_there_only():
    report = _check({"path_findings": {"self": PathFinding(WHY, dtypes=("float32",))}})
    assert report.failures == []
    found = [s for s in report.specs if s.finding is not None]
    assert all(s.note.startswith(f"{PATH_FINDING}: {WHY} (in float32)") for s in found)
    assert [s.dtype for s in found] == ["float32"] and not found[0].verdict.agrees   # the measurement stays
    assert f"{WHY} (in float32)" in path_findings(report, DEFAULT)


@pytest.mark.parametrize("finding", [PathFinding(WHY, dtypes=("bfloat16",)), PathFinding(WHY, devices=("cuda",))])
def test_a_finding_bound_elsewhere_leaves_the_contradiction(finding):
    """Declared for another dtype, or for CUDA: on the CPU in float32 it still contradicts."""
    report = _check({"path_findings": {"self": finding}})
    assert {(s.case, s.dtype) for s in report.failures} == {("self", "float32")}


def off_on_edge_in_float32(q, k, v, mask, causal=False):
    """Off in float32 on one shape only (B = 1, T = 1: the edge config)."""
    from variants.kernels import eager

    out = eager(q, k, v, mask, causal)
    return out + 1e-2 if q.dtype == torch.float32 and q.shape[0] == q.shape[2] == 1 else out


def test_an_undeclared_finding_suggests_the_declaration_bound_to_its_dtype():
    load_packs()
    configs = {n: CONFIG_MATRIX[n] for n in ("default", "edge")}
    with scratch():
        register_kernel(id="edge32", fn=off_on_edge_in_float32, source="test",
                        traits={"causal": "top_left", "cases": ("self",)})
        report = check_all(["attention_kernel"], configs, "cpu", ["float32"], extras=False,
                           variants=["attention_kernel/edge32"])
    assert {(s.config, s.dtype) for s in report.failures} == {("edge", "float32")}
    assert ("traits={'path_findings': {'self@edge': PathFinding('why', dtypes=('float32',))}}"
            in path_findings(report, configs))


def test_the_projects_gpu_findings_do_not_apply_on_the_cpu():
    """Every PathFinding the project declares is bound to CUDA: on the CPU, in every dtype,
    the case is held to the spec as before."""
    load_packs()
    bound = [(v, key, f) for v in REGISTRY.values() if v.origin.startswith("variants")
             for key, f in (v.traits.get("path_findings") or {}).items() if isinstance(f, PathFinding)]
    assert {v.key for v, _, _ in bound} >= {"decoder_only_block/torch_pre_gelu", "decoder_only_model/torch_pre_gelu",
                                            "attention/fused_sdpa", "attention/torch_sdpa", "attention/sdpa_gqa",
                                            "decoder_only_block/nanogpt_block"}
    for v, key, finding in bound:
        case, _, config = key.partition("@")
        config = config or "default"
        assert finding.devices == ("cuda",)
        for dtype in ("float64", "float32", "bfloat16", "float16"):
            assert declared_path_finding(v.traits, case, config, "cpu", dtype) is None
            on_cuda = declared_path_finding(v.traits, case, config, "cuda:0", dtype)
            assert (on_cuda is not None) == (not finding.dtypes or dtype in finding.dtypes)


# The H200 run's float64 figures (../shared/cuda/h200-2026-11-26/check-cuda.txt, "Contradictions"):
# the no-grad output of torch_pre_gelu against the oracle, on the CUDA fast path.
H200_NO_GRAD = {("decoder_only_block", "default", "right_pad"): 5.37e-4,
                ("decoder_only_block", "heads8", "right_pad"): 4.61e-4,
                ("decoder_only_model", "default", "full"): 5.69e-4}


@pytest.mark.parametrize("family,config,case", list(H200_NO_GRAD))
def test_the_cuda_gelu_finding_is_the_tanh_approximation(family, config, case):
    """On the CPU the fast path computes exact GELU (no finding); the same layers with GELU's
    tanh approximation miss the oracle by the H200's no-grad figure to three digits: the
    CUDA kernel of ``_addmm_activation(use_gelu=True)`` is that approximation."""
    load_packs()
    v = get_variant(family, "torch_pre_gelu")
    fam = v.family_spec
    cfg = fam.configs_of(CONFIG_MATRIX)[config]
    runs = RunCache(cfg, record=False)
    zero = runs.fills(v) | runs.fills(reference_of(family))
    oracle = runs.oracle(fam, v.traits, case, zero, torch.float64).tensors["output"]
    module, _ = build(v, cfg, dtype=torch.float64, weights=runs.variant_weights(v, zero))
    inputs = cast_inputs(runs.inputs(fam, case), torch.float64, "cpu")
    with torch.no_grad():
        fast = v.call(module, inputs)                       # the CPU fast path: exact GELU
    for layer in (m for m in module.modules() if isinstance(m, torch.nn.TransformerEncoderLayer)):
        layer.activation = lambda x: F.gelu(x, approximate="tanh")
        layer.activation_relu_or_gelu = 0                   # the Python path, with the tanh GELU
    tanh = v.call(module, inputs).detach()
    fast, tanh = fam.specified(inputs, fast), fam.specified(inputs, tanh)  # padded positions left out, as checked
    assert float((fast - oracle).abs().max()) < 1e-12
    assert float((tanh - oracle).abs().max()) == pytest.approx(H200_NO_GRAD[family, config, case], rel=2e-3)
