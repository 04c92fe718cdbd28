"""``parity`` on saved checkpoints of real Hugging Face classes (transformers, the ``hf``
extra; skipped without it): small models of Llama, Mistral, Gemma 2, Qwen 3 and GPT-2
built from their configs, trained a few steps and their norm gains moved off their init
(examples/tiny_checkpoint.py), saved with ``save_pretrained`` once per session.

- each class's correct port (registered, or examples/checkpoint_ports.py) is equivalent
  on every metric, caches included;
- each classic porting mistake (tests/wrong_checkpoint_ports.py, and the registry's
  ``meta_llama_model`` for unpermuted RoPE rows) differs, is named (undoing it, and only
  it, makes the port agree) and is located by the first-divergence trace;
- a checkpoint that would not fit is refused in one line before a tensor is read; a
  missing, extra or misshaped tensor is one line naming it; a state_dict file with a
  registered variant as its class works without config.json; a sharded folder reads as
  one checkpoint; --text goes through the folder's tokenizer;
- a port given as a hand-built Variant (a module with a map) with a cache that turns new
  tokens at the wrong positions: every forward metric agrees, the cache rows do not.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers", reason="transformers is not installed: pip install -e '.[hf]'")

from harness.base.config import ModelConfig  # noqa: E402
from harness.cli.main import main  # noqa: E402
from harness.porting import checkpoint as checkpoint_module  # noqa: E402
from harness.registry import build, get_variant, load_file, scratch  # noqa: E402
from harness.systems.checkpoint_parity import KL_BOUND, compare, prepare, read_token_file  # noqa: E402
from harness.trace.checkpoint_trace import first_divergence  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
PORTS = EXAMPLES / "checkpoint_ports.py"
WRONG_FILE = Path(__file__).with_name("wrong_checkpoint_ports.py")
DOCS = ROOT / "docs" / "checkpoints.md"

CORRECT = {"llama": "llama_model", "mistral": "mistral_model", "gemma2": "gemma2_port", "qwen3": "qwen3_port",
           "gpt2": "nanogpt"}
# port: (checkpoint class, the mistake named, the first divergence's unit)
MISTAKES = {
    "meta_llama_model": ("llama", "RoPE rows not permuted", "layers.0.self_attn.o:in"),
    "llama_kv_tiled": ("llama", "K/V heads tiled", "layers.0.self_attn.o:in"),
    "gemma2_gain_w": ("gemma2", "norm gain 1 + w read as w", "layers.0.attn_norm"),
    "gemma2_no_embed_scale": ("gemma2", "embedding scale missing", "embed"),
    "gemma2_untied": ("gemma2", "untied head left at its init", "output"),
}


def _example():
    spec = importlib.util.spec_from_file_location("tiny_checkpoint", EXAMPLES / "tiny_checkpoint.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory):
    """{class: folder} of the five saved checkpoints (each with its tokens.txt)."""
    example = _example()
    root = tmp_path_factory.mktemp("checkpoints")
    return {kind: example.save(kind, root / kind) for kind in CORRECT}


@pytest.fixture(scope="module")
def ports():
    """The example ports and the wrong ones registered, for this module only."""
    with scratch():
        load_file(PORTS)
        load_file(WRONG_FILE)
        yield


def _run(folder: Path, port: str, dtype: str = "float32"):
    comparison = prepare(folder, port, dtype=dtype)
    tokens = read_token_file(folder / "tokens.txt", comparison.cfg)
    return comparison, tokens, compare(comparison, tokens, source="tokens.txt")


@pytest.mark.parametrize("kind", CORRECT)
def test_correct_port_is_equivalent(checkpoints, ports, kind):
    """Every metric agrees: KL within its bound, every top-1 and greedy token the same, and
    both caches (the class's past_key_values and the port's) agree with their full forwards."""
    _, tokens, report = _run(checkpoints[kind], CORRECT[kind])
    assert report.agrees, [(m.name, m.value) for m in report.metrics if not m.ok] + \
        [(c.model, c.schedule) for c in report.cache if not c.ok]
    assert report.kl_worst <= KL_BOUND and report.top1 == 1.0
    assert report.greedy_same == report.greedy_steps == tokens.shape[1] - 2
    assert {(c.side, c.schedule) for c in report.cache} == {
        (s, sched) for s in ("reference", "port") for sched in ("prefill + steps", "chunked prefill")}
    assert not report.mistakes and not report.left_at_init


@pytest.mark.parametrize("port", MISTAKES)
def test_each_mistake_is_caught_named_and_located(checkpoints, ports, port):
    kind, mistake, unit = MISTAKES[port]
    comparison, tokens, report = _run(checkpoints[kind], port)
    assert not report.agrees and not report.metrics[0].ok
    assert report.kl_worst > 1e3 * KL_BOUND
    assert [m["name"] for m in report.mistakes] == [mistake]
    assert report.mistakes[0]["kl_undone"] <= KL_BOUND
    found = first_divergence(comparison, tokens)
    assert found is not None and found.unit == unit
    if mistake.startswith("untied"):
        assert report.left_at_init == ["head.weight"] and "tied to embed.weight" in " ".join(report.notes)


def test_half_precision_against_its_baseline(checkpoints, ports):
    """bfloat16: the bound is the reference's own bfloat16 KL against its float32 run times
    the noise multiple; the correct Gemma 2 port is within it, the ungained one is not."""
    _, _, good = _run(checkpoints["gemma2"], "gemma2_port", "bfloat16")
    _, _, bad = _run(checkpoints["gemma2"], "gemma2_gain_w", "bfloat16")
    assert good.agrees and good.dtype == "bfloat16" and KL_BOUND < good.kl_bound
    assert not bad.agrees and bad.kl_worst > 10 * bad.kl_bound


def test_command_exit_status_and_text(checkpoints, ports, capsys, tmp_path):
    folder = checkpoints["llama"]
    assert main(["parity", str(folder), "--port", "llama_model", "--tokens", str(folder / "tokens.txt"),
                 "--json", str(tmp_path / "p.json")]) == 0
    out = capsys.readouterr().out
    assert "agrees: llama_model computes what LlamaForCausalLM computes" in out
    assert (tmp_path / "p.json").read_text().count('"agrees": true') == 1
    assert main(["parity", str(folder), "--port", "meta_llama_model"]) == 1
    out = capsys.readouterr().out
    assert "mistake: RoPE rows not permuted" in out and "first divergence: inside layers.0.self_attn" in out


def _one_line_error(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err
    return err


def test_memory_refusal_before_loading(checkpoints, ports, capsys, monkeypatch):
    monkeypatch.setattr(checkpoint_module, "available_memory", lambda: 10_000)

    def never(*args):
        raise AssertionError("a tensor was read before the refusal")

    monkeypatch.setattr(checkpoint_module.Checkpoint, "tensor", never)
    err = _one_line_error(capsys, ["parity", str(checkpoints["llama"]), "--port", "llama_model"])
    assert "needs about" in err and "GiB available: refused before loading anything" in err


def _copy_with(folder: Path, dest: Path, change) -> Path:
    from safetensors.torch import load_file as read
    from safetensors.torch import save_file

    shutil.copytree(folder, dest)
    tensors = read(str(folder / "model.safetensors"))
    change(tensors)
    save_file(tensors, str(dest / "model.safetensors"), metadata={"format": "pt"})
    return dest


def test_missing_extra_and_misshaped_tensors_are_one_line(checkpoints, ports, capsys, tmp_path):
    llama = checkpoints["llama"]
    missing = _copy_with(llama, tmp_path / "missing", lambda t: t.pop("model.layers.1.mlp.up_proj.weight"))
    err = _one_line_error(capsys, ["parity", str(missing), "--port", "llama_model"])
    assert "missing tensor 'model.layers.1.mlp.up_proj.weight' (canonical 'layers.1.mlp.up.weight')" in err
    extra = _copy_with(llama, tmp_path / "extra", lambda t: t.update({"model.rotary.inv_freq": torch.ones(4)}))
    err = _one_line_error(capsys, ["parity", str(extra), "--port", "llama_model"])
    assert "extra tensor 'model.rotary.inv_freq' (4,): no canonical parameter of the model reads it" in err
    short = _copy_with(llama, tmp_path / "short", lambda t: t.update(
        {"model.layers.0.self_attn.k_proj.weight": t["model.layers.0.self_attn.k_proj.weight"][:8]}))
    err = _one_line_error(capsys, ["parity", str(short), "--port", "llama_model"])
    assert "'model.layers.0.self_attn.k_proj.weight' (8, 32) gives canonical 'layers.0.self_attn.k.weight' " \
           "the shape (8, 32); the model's is (16, 32)" in err
    # a dedup'd (tied) checkpoint into a port that ties where the class does not: the port refuses
    err = _one_line_error(capsys, ["parity", str(llama), "--port", "llama_model_tied"])
    assert "head.weight" in err and "tied" in err


def test_state_dict_with_a_registered_class(ports, capsys, tmp_path):
    """A state_dict file of a registered variant, no config.json: the sizes from --set;
    llama_model_fused (fused k/v and gate/up, RopePermuted q/k rows) is its correct port."""
    cfg = ModelConfig(layers=2, d_model=32, heads=4, kv_heads=2, d_ff=64, vocab=128)
    module, _ = build(get_variant("llama_model", "llama_model"), cfg)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("norm.weight"):
                p.mul_(1.5)
    torch.save(module.state_dict(), tmp_path / "model.pt")
    sizes = [f"--set={k}={v}" for k, v in (("layers", 2), ("d_model", 32), ("heads", 4), ("kv_heads", 2),
                                           ("d_ff", 64), ("vocab", 128))]
    argv = ["parity", str(tmp_path / "model.pt"), "--reference", "llama_model", "--family", "llama_model", *sizes]
    assert main([*argv, "--port", "llama_model_fused"]) == 0
    assert main([*argv, "--port", "meta_llama_model", "--no-trace"]) == 1
    assert "mistake: RoPE rows not permuted" in capsys.readouterr().out
    err = _one_line_error(capsys, ["parity", str(tmp_path / "model.pt"), "--port", "llama_model"])
    assert "no config.json" in err


def _doc_blocks(lang: str) -> list[str]:
    text = DOCS.read_text()
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


@pytest.mark.slow
def test_docs_python_block_runs(tmp_path):
    """docs/checkpoints.md's Python block, from a folder where examples/ is the repository's,
    on the checkpoint folders it reads, written first by the page's own commands (its
    ``parity`` commands, and every other ``bash`` line of the page, are run in order by
    tests/test_readme.py)."""
    (tmp_path / "examples").symlink_to(EXAMPLES)
    os = __import__("os")  # this interpreter's python first on PATH, as an activated environment has it
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    commands = [ln for block in _doc_blocks("bash") for ln in block.splitlines() if ln and not ln.startswith("#")]
    blocks = _doc_blocks("python")
    writers = [c for c in commands if c.startswith("python examples/tiny_checkpoint.py ")
               and any(f'"{c.split()[-1]}' in block for block in blocks)]
    assert writers and blocks
    for command in writers:
        done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    for block in blocks:
        done = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, f"{block}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"


def test_sharded_folder_and_text_through_its_tokenizer(checkpoints, ports, capsys, tmp_path):
    """A folder saved in shards (model.safetensors.index.json) reads as one checkpoint; --text
    goes through the folder's own tokenizer (a word-level one saved beside the weights)."""
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    from harness.systems.checkpoint_parity import tokenize

    folder = tmp_path / "sharded"
    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoints["llama"])
    model.save_pretrained(folder, max_shard_size="20KB")
    assert (folder / "model.safetensors.index.json").is_file() and len(list(folder.glob("*.safetensors"))) > 1
    words = Tokenizer(models.WordLevel({f"w{i}": i for i in range(128)}, unk_token="w0"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    transformers.PreTrainedTokenizerFast(tokenizer_object=words, unk_token="w0").save_pretrained(folder)
    text = "w3 w18 w93 w86 w51 w2 w13 w68"
    assert tokenize(folder, [text], ModelConfig(vocab=128)).tolist() == [[3, 18, 93, 86, 51, 2, 13, 68]]
    other = "w7 w38 w65 w70 w95 w94 w89 w64"
    assert main(["parity", str(folder), "--port", "llama_model", "--text", text, "--text", other]) == 0
    assert "tokens: --text (its tokenizer), 2 sequences x 8" in capsys.readouterr().out


def _wrong_module():
    return next(m for m in sys.modules.values() if getattr(m, "__file__", None) == str(WRONG_FILE))


def test_a_module_with_a_map_and_its_cache(checkpoints, ports):
    """The port as a Variant built by hand (not registered) with its own decoding: its
    forward agrees, its cache (new tokens turned at 0..n-1 after a prefill) is caught from
    the first call after the prefill, and the verdict is 'differs' on the cache alone."""
    from harness.families.models import Decoding
    from harness.registry import Variant
    from variants.llama import LlamaModel, call_model, llama_prepare, model_map

    port = Variant(id="my_llama", family="llama_model", source="test", build=LlamaModel, call=call_model,
                   param_map=model_map())
    decoding = Decoding(prepare=llama_prepare, step=_wrong_module().step_without_offset, cache="mine")
    folder = checkpoints["llama"]
    comparison = prepare(folder, port, port_decoding=decoding)
    report = compare(comparison, read_token_file(folder / "tokens.txt", comparison.cfg))
    assert all(m.ok for m in report.metrics) and not report.agrees
    bad = {(c.side, c.schedule): c for c in report.cache if not c.ok}
    assert set(bad) == {("port", "prefill + steps"), ("port", "chunked prefill")}
    assert bad["port", "prefill + steps"].first_bad.startswith("call 2 (9 tokens fed")


@pytest.mark.parametrize("kind", ["Qwen2", "Gemma"])
def test_other_classes_are_read_strictly(kind, tmp_path):
    """Qwen 2 (q/k/v biases) and Gemma (tied head, no lm_head tensor): their class maps
    account for every tensor save_pretrained writes."""
    import transformers

    cfg = getattr(transformers, f"{kind}Config")(vocab_size=128, hidden_size=32, intermediate_size=64,
                                                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                                  head_dim=8)
    transformers.AutoModelForCausalLM.from_config(cfg).save_pretrained(tmp_path)
    comparison = prepare(tmp_path, "llama_model")
    held = {r.path for e in comparison.reader.entries.values() for r in e.regions()}
    assert held == set(comparison.checkpoint.names)
    assert ("lm_head.weight" in held) == (kind == "Qwen2")
    assert ("model.layers.1.self_attn.q_proj.bias" in held) == (kind == "Qwen2")
