"""The seed systems whole: model families, greedy decoding, the k/v cache, the
loss and the schedule, one training step, the copy task, and the manual's commands (docs/models.md).

The pairwise verdicts of the model families run in test_equivalence.py (registry-driven);
here: what only whole models have, and checks that must be able to fail."""

from __future__ import annotations

import math
import re
import shlex
from pathlib import Path

import pytest
import torch

from conftest import family_params
from harness.base.config import Config
from harness.base.errors import PortingError
from harness.cli.main import main
from harness.families.catalog import get_family
from harness.families.models import DECODINGS, Decoding
from harness.registry import build, get_variant, variants_of
from harness.systems import copy_task, decoding, training
from harness.systems.models import Models

MODELS_PAGE = Path(__file__).resolve().parents[1] / "docs" / "models.md"
SEEDS = {"000": "000_4f2b0681cf261e4d.txt", "001": "001_fda7eea54f03ebb8.txt", "002": "002_a5adfb2f6616eb1a.txt",
         "003": "003_5751987c9fd6921d.txt", "004": "004_4e525cb8a3aa6a12.txt"}


@pytest.mark.parametrize("family,seeds", [("encoder_decoder", ("000", "001", "003", "004")),
                                          ("decoder_only_model", ("002",))])
def test_every_seed_model_and_a_torch_reference_is_registered(family, seeds):
    sources = {v.source for v in variants_of(family)}
    assert {SEEDS[s] for s in seeds} <= sources
    assert "torch" in sources and any(v.reference for v in variants_of(family))


def test_tied_output_takes_only_equal_values():
    cfg = Config()
    family = get_family("decoder_only_model")
    weights = family.canonical_weights(cfg)
    assert torch.equal(weights["head.weight"], weights["embed.weight"])  # drawn tied
    variant = get_variant("decoder_only_model", "nanogpt")
    zero = {n for n in ("head.bias",)}
    good = {n: (torch.zeros_like(t) if n in zero else t) for n, t in weights.items()}
    module, portmap = build(variant, cfg, weights=good)
    assert module.lm_head.weight is module.transformer.wte.weight
    bad = {**good, "head.weight": good["head.weight"] + 1.0}
    with pytest.raises(PortingError, match="tied"):
        portmap.load(bad)
    tokens = family.inputs("full", cfg)["tokens"]
    variant.call(module, {"tokens": tokens, "pad": torch.ones_like(tokens, dtype=torch.bool)}).sum().backward()
    assert portmap.read("head.weight", grad=True).count_nonzero() == 0   # counted on embed.weight
    assert portmap.read("embed.weight", grad=True).count_nonzero() > 0


@pytest.mark.parametrize("family", ["encoder_decoder", "decoder_only_model"])
def test_equivalent_models_emit_the_same_greedy_tokens(family):
    results = decoding.compare_greedy(family, Config())
    assert all(r.ok for r in results), [r for r in results if not r.ok]
    equivalent = [r for r in results if r.expected == "equivalent"]
    assert equivalent and all(r.same_tokens for r in equivalent)
    differing = [r for r in results if not r.same_tokens]
    assert differing and all(r.first_diff and not math.isnan(r.margin_a) for r in differing)
    # a margin of exactly 0 is a flattened model (every logit equal), not a close call
    assert all(r.margin_a > 0 and r.margin_b > 0 for r in differing), differing


@pytest.mark.parametrize("family", ["encoder_decoder", "decoder_only_model"])
def test_greedy_runs_on_weights_where_the_reference_does_not_repeat_one_token(family):
    """On the canonical weights every model emitted one repeated token, so a loop feeding
    only the newest token agreed; on the sharpened weights the reference's tokens change."""
    from harness.registry import reference_of

    ref = reference_of(family)
    rows = next(r.tokens_a if r.a == ref.id else r.tokens_b for r in decoding.compare_greedy(family, Config())
                if ref.id in (r.a, r.b))
    assert len({t for row in rows for t in row}) > 1, rows
    assert any(a != b for row in rows for a, b in zip(row, row[1:])), rows
    equivalent = [r for r in decoding.compare_greedy(family, Config()) if r.expected == "equivalent" and r.logprobs]
    assert equivalent and all(r.logprob_max_abs < 1e-4 for r in equivalent), equivalent


def test_an_absent_final_norm_leaves_the_partners_norm_a_unit_scale():
    """postnorm_blog has no final norm; compared with torch_pre, whose stacks end with one,
    the pair's weights give that norm the absent one's neutral values (scale 1, shift 0),
    not zeros that would flatten torch_pre's output to its generator's bias."""
    models = Models("encoder_decoder", Config())
    blog, pre = get_variant("encoder_decoder", "postnorm_blog"), get_variant("encoder_decoder", "torch_pre")
    fills = models.zero(blog, pre)
    assert fills["encoder.norm.weight"] == fills["decoder.norm.weight"] == 1.0
    assert fills["encoder.norm.bias"] == fills["decoder.norm.bias"] == 0.0
    weights = models.weights(fills)
    assert torch.equal(weights["decoder.norm.weight"], torch.ones_like(weights["decoder.norm.weight"]))
    with torch.no_grad():
        out = pre.call(models.get(pre, fills), models.inputs)
    assert out.std(dim=-1).min() > 1e-3
    _, portmap = build(blog, Config())
    halved = {**portmap.export(), "encoder.norm.weight": torch.full_like(weights["encoder.norm.weight"], 0.5)}
    with pytest.raises(PortingError, match="encoder.norm.weight.*reads as 1"):
        portmap.load(halved)


@pytest.mark.parametrize("family,cached", [
    ("encoder_decoder", {"t2t"}),
    ("decoder_only_model", {"decoder_only", "decoder_only_1e20", "nanogpt"}),
])
def test_cache_gives_the_log_probabilities_of_full_recomputation(family, cached):
    results = decoding.check_cache(family, Config())
    assert {r.variant for r in results} == cached
    assert all(r.ok and r.steps == Config().tgt_len for r in results), results


def test_a_cache_that_forgets_is_caught(monkeypatch):
    """Wrong on purpose: the cached path keeps no keys from one step to the next."""
    right = DECODINGS["decoder_only_model/nanogpt"]

    def forgetful(model, state, ys):
        if state["cache"] is not None:
            state["cache"].clear()
        return right.step(model, state, ys)

    monkeypatch.setitem(DECODINGS, "decoder_only_model/nanogpt",
                        Decoding(prepare=right.prepare, step=forgetful, cache=right.cache))
    results = {r.variant: r for r in decoding.check_cache("decoder_only_model", Config())}
    assert results["nanogpt"].verdict == "different" and not results["nanogpt"].ok
    assert results["nanogpt"].max_abs > 1e-3 and results["decoder_only"].ok


def test_one_training_step_through_the_canonical_map():
    results = {(r.a, r.b): r for r in training.compare_train_step("decoder_only_model", Config())}
    assert all(r.ok for r in results.values()), [r for r in results.values() if not r.ok]
    assert results["decoder_only", "torch_post"].verdict == "equivalent"
    assert results["nanogpt", "torch_pre_gelu"].verdict == "equivalent"
    assert results["decoder_only", "nanogpt"].verdict == "different"


def test_label_smoothing_differs_from_soft_cross_entropy_by_the_target_entropy():
    """The declared difference, measured: KL = cross-entropy - H(target), same gradient."""
    family = get_family("loss")
    inputs = family.inputs("smoothed", Config())
    target = inputs["target"]
    real = target != inputs["pad_idx"]
    kl = get_variant("loss", "annotated_preln").call(None, inputs)
    ce = get_variant("loss", "torch_ce_soft").call(None, inputs)
    v, s = inputs["logits"].size(-1), inputs["smoothing"]
    # per real row: 1 - s on the target, s / (V - 2) on V - 2 classes (pad and target excluded)
    entropy = -((1 - s) * math.log(1 - s) + s * math.log(s / (v - 2)))
    assert real.any() and (~real).any()
    torch.testing.assert_close(ce - kl, torch.tensor(entropy, dtype=torch.float64))


def test_noam_through_lambdalr_repeats_the_first_rate():
    inputs = get_family("lr_schedule").inputs("noam", Config())
    ours = get_variant("lr_schedule", "annotated_preln").call(None, inputs)
    paper = get_variant("lr_schedule", "torch_lambdalr").call(None, inputs)
    assert ours[0] == ours[1] == paper[0]               # updates 1 and 2 share step_num 1
    torch.testing.assert_close(ours[2:], paper[1:-1])   # then one update behind the paper
    assert int(paper.argmax()) + 1 == inputs["warmup"] and int(ours.argmax()) + 1 == inputs["warmup"] + 1


def test_copy_task_loss_falls():
    variant = get_variant("encoder_decoder", "torch_pre")
    run = copy_task.train_copy(variant, DECODINGS[variant.key], Config(), steps=24, batch=16, length=6, eval_batch=8)
    first, last = sum(run.losses[:4]) / 4, sum(run.losses[-4:]) / 4
    assert last < 0.7 * first, run.losses
    assert 0.0 <= run.exact_match <= run.token_accuracy <= 1.0


@pytest.mark.parametrize("argv,message", [
    (["decode", "--family", "attention"], "not a model family"),
    (["decode", "--family", "decoder_only_model", "--set", "vocab=2"], "vocab=2 is too small"),
    (["cache-bench", "--out", "unused", "--seq", "1,4"], "must be at least 2"),
    (["copy-task", "--out", "unused", "--steps", "0"], "must be positive"),
])
def test_bad_model_input_is_one_clear_error(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def readme_commands() -> list[list[str]]:
    text = MODELS_PAGE.read_text()
    block = re.search(r"<!-- models-commands -->(.*?)<!-- /models-commands -->", text, re.S).group(1)
    return [shlex.split(line)[3:] for line in block.splitlines() if line.startswith("python -m harness ")]


def _shrunk(argv: list[str], out: Path) -> list[str]:
    """The manual's command with --out in tmp and its budget shrunk: 3 updates of one
    model decoded on 4 sequences for copy-task, two short lengths for cache-bench."""
    small = {"--steps": "3", "--seq": "4,6", "--out": str(out)}
    argv = [small.get(argv[i - 1], a) if i else a for i, a in enumerate(argv)]
    return argv + (["--variant", "torch_pre", "--eval", "4"] if argv[0] == "copy-task" else [])


def test_readme_check_line_is_the_suites_family_check():
    """The manual's ``check`` line is what tests/test_equivalence.py runs per family
    (``check_all`` over the config matrix, float32): its families exist, and the suite
    checks each of them; running it a second time here would double the suite's cost."""
    [check] = [a for a in readme_commands() if a[0] == "check"]
    families = [check[i + 1] for i, a in enumerate(check) if a == "--family"]
    assert set(families) == {"encoder_decoder", "decoder_only_model", "loss", "lr_schedule"}
    assert set(families) <= {p.values[0] for p in family_params()}


@pytest.mark.parametrize("argv", [a for a in readme_commands() if a[0] != "check"], ids=lambda a: a[0])
def test_readme_whole_model_commands_run(argv, tmp_path, capsys):
    assert main(_shrunk(argv, tmp_path)) == 0
    printed = capsys.readouterr().out
    assert "contradict" not in printed or " 0 contradict" in printed
    if argv[0] == "copy-task":
        assert {p.name for p in tmp_path.iterdir()} >= {"copy_task.json", "copy_task.md", "copy_task.png"}
    if argv[0] == "cache-bench":
        assert "speed-up" in printed and (tmp_path / "cache_bench.png").exists()
