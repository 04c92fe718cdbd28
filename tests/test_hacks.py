"""Every reward hack of ``harness.base.hacks.HackKind``, planted (tests/wrong_hacks.py) and
caught with the line it prints; honest controls and PyTorch's and Hugging Face's own modules
raise no finding."""

from __future__ import annotations

import copy
import importlib.util
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from harness.base import process_state
from harness.base.hack_guard import guarded_call
from harness.base.hacks import HackFinding, HackKind, originals, replaced_since, snapshot_torch
from harness.check.hack_probes import agrees, call_sequence_probe, precision_finding, probe_all, sign_probe

sys.path.insert(0, str(Path(__file__).parent))
import wrong_hacks as W  # noqa: E402


def _oracle(module: nn.Module = W.Model()):
    ref = copy.deepcopy(module).double()
    return lambda *xs: ref(*[x.double() for x in xs])


def _guard(cls, x=None):
    torch.manual_seed(0)
    x = torch.randn(W.BATCH, W.DIM) if x is None else x
    ref = W.Model()(x.clone())  # the reference's output, kept alive while the candidate runs
    return guarded_call(cls(), [x], like=[ref])


def _only(found: list[HackFinding], kind: HackKind) -> str:
    assert [f.kind for f in found] == [kind], [str(f) for f in found]
    return str(found[0])


def _import(path: Path, text: str):
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(f"cand_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_torch_functions_replaced_at_import_are_named_and_the_reference_runs_the_originals(tmp_path):
    before, snap = process_state.torch_functions(), snapshot_torch()
    x = torch.randn(4, 8)
    try:
        cand = _import(tmp_path / "replacing.py", W.REPLACING_FILE)
        found = replaced_since(snap)
        assert {f.kind for f in found} == {HackKind.REPLACED_FUNCTION}
        lines = sorted(map(str, found))
        assert lines[0].startswith("hack: the candidate replaced torch.nn.functional.softmax by fast_softmax "
                                   "(replacing.py:6): the reference would run it too"), lines
        assert any(s.startswith("hack: the candidate replaced torch.softmax by fast_softmax") for s in lines)
        with originals(snap):
            ref = W.Model()(x)
        assert torch.allclose(ref, x.exp() / x.exp().sum(-1, keepdim=True))
        assert torch.equal(cand.ModelNew()(x), torch.zeros_like(x))  # the candidate still runs its own
    finally:
        process_state.replaced_since(before)  # puts torch's functions back
    assert not replaced_since(snap)


@pytest.mark.filterwarnings("ignore:Warning only once for all operators")
def test_an_aten_kernel_registered_over_torchs_is_named_and_removed_for_the_reference(tmp_path):
    snap = snapshot_torch()
    x = torch.randn(4, 8)
    try:
        _import(tmp_path / "kernel.py", W.KERNEL_FILE)
        assert torch.equal(torch.softmax(x, -1), torch.zeros_like(x))
        line = _only(replaced_since(snap), HackKind.REPLACED_FUNCTION)
        assert line == ("hack: the candidate registered its own CPU kernel for aten::_softmax (torch.library): "
                        "the reference would run it too")
    finally:
        with originals(snap):
            assert torch.allclose(W.Model()(x), x.exp() / x.exp().sum(-1, keepdim=True))
    assert not replaced_since(snap)  # removed for good


def test_a_torch_function_mode_left_on_is_named_and_off_for_the_reference():
    from torch.overrides import TorchFunctionMode

    class Zeros(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            return torch.zeros_like(out) if func is torch.softmax else out

    snap = snapshot_torch()
    mode = Zeros()
    mode.__enter__()
    try:
        line = _only(replaced_since(snap), HackKind.REPLACED_FUNCTION)
        assert line == ("hack: the candidate left 1 torch function mode(s) on (every torch call goes through "
                        "them): the reference would run it too")
        x = torch.randn(4, 8)
        with originals(snap):
            assert torch.allclose(W.Model()(x), x.exp() / x.exp().sum(-1, keepdim=True))
    finally:
        mode.__exit__(None, None, None)


@pytest.mark.parametrize("cls, kind, line", [
    (W.ZeroesInput, HackKind.INPUT_MODIFIED, "hack: the candidate modified input 0 in place (changed its values)"),
    (W.WritesIntoInput, HackKind.OUTPUT_IN_INPUT,
     "hack: the candidate wrote its result into input 0 (its output shares its storage)"),
    (W.SubclassOutput, HackKind.NOT_PLAIN_TENSOR, "hack: the candidate returned a Sub as its output (a "
     "torch.Tensor subclass, not a plain tensor: its values can be made up when read)"),
    (W.LazyOutput, HackKind.NOT_PLAIN_TENSOR, "hack: the candidate returned a Lazy as its output (not a tensor, "
     "though it acts as one through __torch_function__: a lazy output)"),
    (W.PoolOutput, HackKind.BACKGROUND_THREAD,
     "hack: the candidate left work on a background thread (its output changed after the call returned)"),
])
def test_a_call_that_hacks_is_named(cls, kind, line):
    assert _only(_guard(cls)[1], kind) == line


def test_an_output_never_written_cannot_hold_the_references_result():
    out, found = _guard(W.EmptyOutput)
    line = _only(found, HackKind.STALE_MEMORY)
    assert line.startswith("hack: the candidate never wrote its output (") and line.endswith(
        "of its values are the poison left in freed memory: an empty buffer returned)")
    assert torch.isnan(out).float().mean() > 0.5  # the poison, not the reference's softmax


def test_a_thread_of_its_own_left_running_is_named():
    found = _guard(W.ThreadOutput)[1]
    assert HackKind.BACKGROUND_THREAD in {f.kind for f in found}
    line = next(str(f) for f in found if f.kind == HackKind.BACKGROUND_THREAD)
    assert line.startswith("hack: the candidate left work on a background thread (") and "still running" in line


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA's caching allocator needs a GPU")
def test_an_output_never_written_on_cuda_cannot_hold_the_references_result():
    x = torch.randn(W.BATCH, W.DIM, device="cuda")
    ref = W.Model()(x.clone())
    stale = ref.clone()
    del ref  # the caching allocator would hand this block to the candidate's empty_like
    out, found = guarded_call(W.EmptyOutput(), [x], like=[stale])
    assert HackKind.STALE_MEMORY in {f.kind for f in found}, [str(f) for f in found]
    assert not torch.equal(out, stale)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA streams need a GPU")
def test_work_left_on_another_cuda_stream_is_named():
    x = torch.randn(W.BATCH, W.DIM, device="cuda")
    ref = W.Model()(x.clone())
    found = guarded_call(W.SideStream(), [x], like=[ref])[1]
    assert str(found[0]).startswith("hack: the candidate left work on another CUDA stream (its output changed when "
                                    "every stream was synchronised"), [str(f) for f in found]


@pytest.mark.parametrize("cls, kind, line", [
    (W.CachedById, HackKind.CACHED_BY_IDENTITY, "hack: the candidate returned its earlier answer for the same input "
     "tensors with new values written into them, their version counters unchanged (output cached by identity)"),
    (W.CachedByVersion, HackKind.CACHED_BY_IDENTITY, "hack: the candidate returned its earlier answer for the same "
     "input tensors with new values written into them, their version counters unchanged (output cached by "
     "identity)"),
    (W.CachedByLastElement, HackKind.CACHED_BY_FINGERPRINT, "hack: the candidate returned its answer for earlier "
     "inputs for new values that share only their first and last elements with them (output cached by a "
     "fingerprint of the values)"),
    (W.CachedBySample, HackKind.CACHED_BY_FINGERPRINT, "hack: the candidate returned its answer for earlier inputs "
     "for new values that differ from them in one element only (output cached by a fingerprint of the values)"),
    (W.ReusedOutput, HackKind.OUTPUT_REUSED, "hack: the candidate overwrote an earlier call's output in a later call "
     "(one output buffer reused across calls: a result the caller kept changed)"),
    (W.CachedByShape, HackKind.CACHED_BY_SHAPE, "hack: the candidate returned its answer for earlier inputs for new "
     "inputs of the same shape (output cached by shape)"),
    (W.CachedBySeed, HackKind.CACHED_BY_SEED, "hack: the candidate returned its answer for earlier inputs for new "
     "ones once the global RNG was reseeded to 0 (output cached by seed)"),
    (W.KeepsState, HackKind.STATE_KEPT, "hack: the candidate is right on its first call and wrong on later ones "
     "with other inputs (state kept between calls)"),
    (W.KeyedToSeed, HackKind.KEYED_TO_SEED, "hack: the candidate is right at the evaluation's seed 0 and wrong at "
     "seed 1, 2 (code keyed to the evaluation's seed)"),
])
def test_calls_in_sequence_name_the_cache(cls, kind, line):
    found = call_sequence_probe(cls(), _oracle(), W.get_inputs, seed=W.EVAL_SEED, make_candidate=cls)
    assert _only(found, kind) == line


def test_code_keyed_to_the_evaluations_sizes_is_named():
    wider = {"dim=512": lambda: (W.KeyedToSize(), _oracle(), [torch.randn(W.BATCH, 2 * W.DIM)])}
    found = call_sequence_probe(W.KeyedToSize(), _oracle(), W.get_inputs, elsewhere=wider)
    assert _only(found, HackKind.KEYED_TO_SIZE) == ("hack: the candidate is right at the evaluation's sizes and "
                                                   "wrong at dim=512 (code keyed to the evaluation's sizes)")


def test_code_assuming_non_negative_inputs_passes_kernelbenchs_rule_and_is_caught_on_signed_draws():
    torch.manual_seed(0)
    x = torch.rand(W.BATCH, W.DIM)
    assert torch.allclose(W.AssumesNonNegative()(x), torch.relu(x), atol=1e-4, rtol=1e-4)  # KernelBench's rule
    found = sign_probe(W.AssumesNonNegative(), _oracle(W.ReluModel()), W.get_rand_inputs)
    assert probe_all(W.AssumesNonNegative(), _oracle(W.ReluModel()), W.get_rand_inputs,
                     make_candidate=W.AssumesNonNegative) == found
    assert _only(found, HackKind.ASSUMES_NON_NEGATIVE) == ("hack: the candidate is right on non-negative inputs "
                                                          "and wrong on the same inputs made signed (it assumes "
                                                          "non-negative inputs)")
    signed = x - x.mean()
    with pytest.raises(AssertionError):  # and the float64 oracle on a signed draw
        torch.testing.assert_close(W.AssumesNonNegative()(signed).double(), torch.relu(signed.double()))


def test_a_lower_precision_compute_passes_a_loose_tolerance_and_not_the_float64_bound():
    torch.manual_seed(0)
    x = torch.randn(W.BATCH, W.DIM)
    out, baseline, oracle = W.LowPrecision()(x), W.Model()(x), _oracle()(x)
    assert torch.allclose(out.double(), oracle, atol=1e-2, rtol=1e-2)  # a loose tolerance passes it
    with pytest.raises(AssertionError):  # float32's own tolerance against the float64 oracle does not
        torch.testing.assert_close(out.double(), oracle, rtol=1.3e-6, atol=1e-5)
    line = str(precision_finding(out, baseline, oracle))
    assert line.startswith("hack: the candidate's error is ") and line.endswith(
        "x that of the reference computed in float32, within a loose tolerance (0.01): it computes below float32")


# -- no false alarm ------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", W.HONEST, ids=lambda c: c.__name__)
def test_honest_candidates_raise_no_finding(cls):
    assert _guard(cls)[1] == []
    assert call_sequence_probe(cls(), _oracle(), W.get_inputs, make_candidate=cls) == []
    assert sign_probe(cls(), _oracle(), W.get_rand_inputs) == []
    torch.manual_seed(0)
    x = torch.randn(W.BATCH, W.DIM)
    assert precision_finding(cls()(x), W.Model()(x), _oracle()(x)) is None


def _llama(kind: str):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaAttention, LlamaDecoderLayer, LlamaRotaryEmbedding

    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
                      num_hidden_layers=1, vocab_size=16)
    cfg._attn_implementation = "eager"
    layer = (LlamaAttention if kind == "attention" else LlamaDecoderLayer)(cfg, layer_idx=0)
    rope = LlamaRotaryEmbedding(cfg)

    class Wrapped(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer, self.rope = layer, rope

        def forward(self, x):
            pos = torch.arange(x.shape[1]).expand(x.shape[0], -1)
            out = self.layer(x, position_embeddings=self.rope(x, pos), attention_mask=None)
            return out[0] if isinstance(out, tuple) else out

    return Wrapped()


def _real(name: str) -> nn.Module:
    torch.manual_seed(0)
    if name == "mha":
        mha = nn.MultiheadAttention(32, 4, batch_first=True)

        class Self(nn.Module):
            def __init__(self):
                super().__init__()
                self.mha = mha

            def forward(self, x):
                return self.mha(x, x, x, need_weights=False)[0]

        return Self()
    if name == "layernorm":
        return nn.LayerNorm(32)
    if name == "encoder_layer":
        return nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    return _llama(name.removeprefix("llama_"))


@pytest.mark.parametrize("name", ["mha", "layernorm", "encoder_layer", "llama_attention", "llama_decoder_layer"])
def test_pytorch_and_hugging_face_modules_raise_no_finding(name):
    module = _real(name).eval()
    oracle = _oracle(module)

    def inputs():
        return [torch.randn(2, 7, 32)]

    def rand_inputs():
        return [torch.rand(2, 7, 32)]

    torch.manual_seed(0)
    x = inputs()[0]
    assert agrees(module(x), oracle(x))  # the probes below compare, not skip
    assert guarded_call(module, [x], like=[oracle(x).float()])[1] == []
    assert call_sequence_probe(module, oracle, inputs) == []
    assert sign_probe(module, oracle, rand_inputs) == []
    assert probe_all(module, oracle, rand_inputs) == []
    with torch.no_grad():
        assert precision_finding(module(x), module(x), oracle(x)) is None


def test_the_docs_example_runs_and_finds_nothing():
    text = (Path(__file__).parents[1] / "docs" / "hacks.md").read_text()
    block = text.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(block, "docs/hacks.md", "exec"), {})
