"""Kernels that run only in half precision, judged in their own dtype: the rule
(``harness.check.own_dtype``), the CPU half-only kernel ``half_tiled`` judged equivalent,
each deliberately wrong half-only kernel (tests/wrong_half_kernels.py) caught and named by
``check`` and ``diff``, the CUDA-only kernels skipped here with their reason, and the Triton
kernel under Triton's interpreter when triton is installed."""

from __future__ import annotations

import importlib.util
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness import DeviceSet, register_kernel
from harness.base.config import CONFIG_MATRIX, Config
from harness.base.errors import RegistryError
from harness.check import own_dtype
from harness.check.api import check_all
from harness.registry import REGISTRY, get_variant, load_file, load_packs, scratch
from harness.trace.kernel_explain import explain_mistake, name_mistakes

WRONG_FILE = Path(__file__).with_name("wrong_half_kernels.py")
ONE_CONFIG = {"default": CONFIG_MATRIX["default"]}
ROOT = Path(__file__).resolve().parent.parent
MISTAKES = {
    "half_causal_swapped": "reads as causal='bottom_right' (declared causal='top_left')",
    "half_window_off_by_one": "reads as window left +1 (declared window='as called')",
    "half_heads_tiled": "reads as gqa_grouping='tiled' (declared gqa_grouping='consecutive')",
    "half_softcap_missing": "reads as the softcap ignored (declared softcap='as called')",
    "half_sum_in_half": "no single convention read another way explains it",
}


# -- the rule ---------------------------------------------------------------------------------------

def test_the_rule_allows_a_factor_of_the_same_dtype_references_error_plus_atol():
    truth = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)
    ref = truth + torch.tensor([1e-3, 0.0, 0.0], dtype=torch.float64)
    atol = own_dtype.rounding_atol(truth, torch.float16)
    assert atol == pytest.approx(own_dtype.ATOL_SCALE * torch.finfo(torch.float16).eps * 2.3)
    allowed = own_dtype.FACTOR * 1e-3 + atol
    inside = truth + torch.tensor([0.0, allowed * 0.99, 0.0], dtype=torch.float64)
    outside = truth + torch.tensor([0.0, allowed * 1.01, 0.0], dtype=torch.float64)
    assert own_dtype.own_dtype_check("output", inside, truth, ref, torch.float16).verdict == "equivalent"
    c = own_dtype.own_dtype_check("output", outside, truth, ref, torch.float16)
    assert c.verdict == "different" and "the float16 reference's" in c.note
    nan = truth.clone()
    nan[0] = math.nan
    assert own_dtype.own_dtype_check("output", nan, truth, ref, torch.float16).verdict == "different"


def test_a_gradient_that_is_analytically_zero_is_held_at_the_gradients_scale():
    zero = torch.zeros(4, dtype=torch.float64)
    noise = torch.full((4,), 1e-4, dtype=torch.float64)
    assert own_dtype.own_dtype_check("grad:q", noise, zero, zero, torch.float16).verdict == "different"
    assert own_dtype.own_dtype_check("grad:q", noise, zero, zero, torch.float16, scale=1.0).verdict == "equivalent"


@pytest.mark.parametrize("field,value,message", [
    ("dtypes", ("float8",), "dtypes ('float8',) must be a tuple of"),
    ("dtypes", "float16", "dtypes 'float16' must be a tuple of"),
])
def test_a_bad_dtype_or_device_declaration_is_refused_in_one_line(field, value, message):
    with scratch(), pytest.raises(RegistryError, match=message.replace("(", r"\(").replace(")", r"\)")):
        register_kernel(id="bad", fn=lambda q, k, v, mask: q, source="test", **{field: value})


# -- the half-only CPU kernel ---------------------------------------------------------------------

def test_half_tiled_refuses_float32_and_float64():
    from variants.half_kernels import half_tiled

    q = torch.randn(1, 2, 3, 4)
    mask = torch.ones(1, 1, 3, 3, dtype=torch.bool)
    for dtype in (torch.float32, torch.float64):
        with pytest.raises(TypeError, match="runs in float16 or bfloat16 only"):
            half_tiled(q.to(dtype), q.to(dtype), q.to(dtype), mask)


@pytest.fixture(scope="module")
def half_report():
    load_packs()
    return check_all(["attention_kernel"], ONE_CONFIG, "cpu", ["float32"],
                     variants=["attention_kernel/half_tiled"])


def test_half_tiled_is_judged_in_its_own_dtypes_only_and_is_equivalent(half_report):
    from harness.families.catalog import get_family
    from harness.registry import applicable, get_variant

    mine = [s for s in half_report.specs if s.variant == "half_tiled"]
    assert {s.dtype for s in mine} == {"float16", "bfloat16"}         # no float64, no float32
    tiled = get_variant("attention_kernel", "half_tiled")               # every case but ALiBi's
    assert len(mine) == 2 * len([c for c in get_family("attention_kernel").cases if applicable(tiled, c.name)]) == 40
    assert all(s.ok and s.verdict == "equivalent" for s in mine), \
        [(s.case, s.dtype, s.note) for s in mine if not s.ok]
    names = {t.name for s in mine for t in s.tensors}
    assert {"output", "grad:q", "grad:k", "grad:v", "output (no-grad eval)"} <= names
    assert not [g for g in half_report.gradchecks if g.variant == "half_tiled"]   # float64 gradcheck: not its dtype
    assert {p.dtype for p in half_report.paths if p.variant == "half_tiled"} == {"float16", "bfloat16"}


# -- the wrong half-only kernels ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def wrong():
    load_packs()
    with scratch():
        added = load_file(WRONG_FILE)
        report = check_all(["attention_kernel"], ONE_CONFIG, "cpu", ["float32"], variants=[v.key for v in added],
                           extras=False)
        named = {v.id: explain_mistake("attention_kernel", v.id, report, ONE_CONFIG) for v in added}
        module = next(m for m in sys.modules.values() if getattr(m, "__file__", None) == str(WRONG_FILE))
    return report, named, module.WRONG


CONVENTIONS = sorted(v for v in MISTAKES if v != "half_sum_in_half")
# A config the calibration drew (benchmarks/own_dtype_calibration.py, seed 0, draw 31) where the
# denominator summed in half shows: a rounding bug shows on some shapes only (docs/half-precision-kernels.md).
ROUNDING_CONFIG = {"draw31": Config(d_model=12, heads=3, d_ff=48, batch=1, tgt_len=4, src_len=8, seed=1512797275)}


@pytest.mark.parametrize("vid", CONVENTIONS)
def test_every_wrong_half_kernel_is_caught_on_the_case_that_shows_it(wrong, vid):
    report, _, cases = wrong
    case, mistake = cases[vid]
    failed = {(s.case, s.dtype) for s in report.specs if s.variant == vid and not s.ok}
    assert {(case, "float16"), (case, "bfloat16")} & failed, f"{vid} ({mistake}) escaped on {case}: {sorted(failed)}"
    assert not {c for c, _ in failed} & {"self", "causal"}   # one mistake: the plain cases still agree
    assert all(s.verdict == "different" for s in report.specs if s.variant == vid and not s.ok)


@pytest.mark.parametrize("vid", CONVENTIONS)
def test_check_names_each_wrong_half_kernels_mistake(wrong, vid):
    _, named, _ = wrong
    assert named[vid].startswith(MISTAKES[vid]), named[vid]


def test_the_denominator_summed_in_half_is_caught_and_named_a_computation_mistake():
    load_packs()
    with scratch():
        load_file(WRONG_FILE)
        report = check_all(["attention_kernel"], ROUNDING_CONFIG, "cpu", ["float32"], extras=False,
                           variants=["attention_kernel/half_sum_in_half", "attention_kernel/half_tiled"])
        named = explain_mistake("attention_kernel", "half_sum_in_half", report, ROUNDING_CONFIG)
    bad = [s for s in report.specs if s.variant == "half_sum_in_half" and not s.ok]
    assert bad and all(s.verdict == "different" and "x the" in s.note for s in bad)
    assert named.startswith(MISTAKES["half_sum_in_half"]), named
    assert all(s.ok for s in report.specs if s.variant == "half_tiled")     # the careful kernel, same shapes


def test_diff_names_the_mistakes_from_the_kernels_own_dtype_runs():
    load_packs()
    with scratch():
        added = load_file(WRONG_FILE)
        conventions = [v for v in added if v.id != "half_sum_in_half"]
        named = name_mistakes("attention_kernel", conventions, CONFIG_MATRIX["default"])
    assert {k: v[:len(MISTAKES[k])] for k, v in named.items()} == {v.id: MISTAKES[v.id] for v in conventions}


# -- kernels that run elsewhere ----------------------------------------------------------------------

CUDA_KERNELS = {"sdpa_flash": ("float16", "bfloat16"), "sdpa_efficient": ("float32", "float16", "bfloat16"),
                "sdpa_cudnn": ("float16", "bfloat16"), "flex_compiled": ("float32", "float16", "bfloat16")}


def test_the_cuda_kernels_declare_device_and_dtypes_and_are_skipped_here_with_the_reason():
    load_packs()
    for vid, dtypes in CUDA_KERNELS.items():
        v = REGISTRY[f"attention_kernel/{vid}"]
        assert v.devices.types == ("cuda",) and v.dtypes == dtypes and v.own_dtype_semantics
        assert v.refuses(CONFIG_MATRIX["default"], "cuda") is None
        assert "runs on cuda only" in v.refuses(CONFIG_MATRIX["default"], "cpu")
    report = check_all(["attention_kernel"], ONE_CONFIG, "cpu", ["float32"], extras=False,
                       variants=[f"attention_kernel/{v}" for v in CUDA_KERNELS])
    assert not [s for s in report.specs if s.variant in CUDA_KERNELS]
    assert {v for _, v, _, why in report.skipped if "runs on cuda only" in why} == set(CUDA_KERNELS)


def test_a_kernel_that_declares_cuda_is_judged_when_the_check_runs_there():
    """The check's device decides, not this machine: on 'cpu' the kernel is skipped, on
    'cuda' it is run and judged in its own dtype (here, without a GPU, its run is an error row)."""
    from harness.check.spec import SpecChecker
    from variants.half_kernels import half_tiled

    load_packs()
    with scratch():
        v = register_kernel(id="cuda_only", fn=half_tiled, source="test", dtypes=("float16",),
                            devices=DeviceSet(("cuda",), "a test's CUDA kernel"),
                            traits={"causal": "top_left", "fully_masked_row": "zeros", "fully_masked_grad": "none"})
        assert SpecChecker(ONE_CONFIG, "cpu").check(v, "default", "self", "float16") is None
        on_cuda = SpecChecker(ONE_CONFIG, "cuda").check(v, "default", "self", "float16")
        assert SpecChecker(ONE_CONFIG, "cuda").check(v, "default", "self", "float64") is None   # not its dtype
    assert on_cuda is not None and on_cuda.dtype == "float16" and on_cuda.device == "cuda"
    if not torch.cuda.is_available():
        assert on_cuda.verdict == "error"


# -- Triton ---------------------------------------------------------------------------------------------

def test_without_triton_the_triton_kernel_is_skipped_with_the_reason(monkeypatch):
    import variants.triton_attention as ta

    load_packs()
    monkeypatch.setattr(ta, "triton", None)
    why = get_variant("attention_kernel", "triton_flash").supports(CONFIG_MATRIX["default"])
    assert "triton is not installed" in why


TRITON_SCRIPT = """
from harness import DeviceSet, register_kernel
from harness.base.config import Config
from harness.check.api import check_all
from harness.registry import load_packs, scratch
from variants.triton_attention import triton_flash
load_packs()
cfg = Config(d_model=8, heads=2, d_ff=32, batch=2, tgt_len=4, src_len=5, block=16)
with scratch():
    register_kernel(id="triton_small", fn=triton_flash, dtypes=("float16", "bfloat16"), source="test",
                    traits={"causal": "top_left", "fully_masked_row": "zeros", "fully_masked_grad": "none",
                            "cases": CASES})
    r = check_all(["attention_kernel"], {"tiny": cfg}, "cpu", ["float32"], variants=["attention_kernel/triton_small"],
                  extras=False)
mine = [s for s in r.specs if s.variant == "triton_small"]
print(len(mine), sum(s.ok for s in mine), [(s.case, s.dtype, s.note) for s in mine if not s.ok])
"""
NO_TRITON = importlib.util.find_spec("triton") is None


@pytest.mark.slow  # the interpreter: about 30 s
@pytest.mark.skipif(NO_TRITON, reason="triton is not installed (pip install -e '.[triton]')")
def test_the_triton_kernel_meets_its_spec_under_the_interpreter():
    """Forward and backward, GQA, causal with a window, softcap, rows without keys, float16
    and bfloat16, in Triton's interpreter on the CPU (a subprocess: TRITON_INTERPRET must be
    set before triton is imported)."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    script = TRITON_SCRIPT.replace("CASES", repr(("gqa", "window_causal", "softcap", "fully_masked")))
    out = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[:2] == ["8", "8"], out.stdout


def test_bench_records_a_half_only_kernel_in_float32_as_unsupported_with_the_reason():
    from harness.bench import sweep
    from harness.bench.cases import BenchCase

    load_packs()
    case = BenchCase("attention_kernel", "half_tiled", 1, 8, 32, 2, 128, "float32", "cpu", "fwd")
    rows, _ = sweep.measure_group([case], min_time=0.002, rounds=3, threads=1)
    m = rows[0].measurement
    assert m.status == "unsupported" and "runs in float16, bfloat16 only" in m.error
