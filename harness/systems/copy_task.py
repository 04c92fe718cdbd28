"""The copy task: each decoding model trained to copy a sequence, its loss curve and accuracy."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from harness.base.boundary import user_code
from harness.base.config import Config
from harness.base.errors import ConfigError
from harness.base.files import OUTPUT_MAGIC, SCHEMA_VERSION, atomic_write, check_output_folder
from harness.check.results import CopyRun
from harness.check.spec import one_thread
from harness.families.models import PAD, START, Decoding
from harness.porting.portmap import absent_fills, zero_unrepresented
from harness.registry import Variant, build
from harness.systems.decoding import greedy
from harness.systems.models import _model_family, decodable

COPY_VOCAB = 14  # <pad> 0, <start> 1, the letters a..k 2..12, <end> 13 (the 004 write-up's)
COPY_END = 13


def copy_batch(gen: torch.Generator, batch: int, length: int) -> torch.Tensor:
    """004's ``data_gen``: <start>, random letters, <end>; source and target the same."""
    data = torch.randint(START + 1, COPY_END, (batch, length), generator=gen)
    data[:, 0] = START
    data[:, -1] = COPY_END
    return data


def _copy_inputs(decoding: Decoding, data: torch.Tensor) -> dict:
    """Teacher forcing: the decoder input is the target shifted by the caller (tgt[:, :-1])
    or, for a model that shifts inside (``bos=False``), the unshifted labels tgt[:, 1:]."""
    tgt = data[:, :-1] if decoding.bos else data[:, 1:]
    return {"src": data, "tgt": tgt, "pad_idx": PAD, "start": START}


def train_copy(variant: Variant, decoding: Decoding, cfg: Config, steps: int, batch: int = 32,
               *, length: int = 8, warmup: int | None = None, eval_batch: int = 64,
               on_step: Callable[[int, float], None] | None = None) -> CopyRun:
    with one_thread():  # tiny tensors: one intra-op thread is faster, and steady on a loaded machine
        return _train_copy(variant, decoding, cfg, steps, batch, length=length, warmup=warmup,
                           eval_batch=eval_batch, on_step=on_step)


def _train_copy(variant, decoding, cfg, steps, batch, *, length, warmup, eval_batch, on_step) -> CopyRun:
    """004's recipe on CPU: Adam(betas 0.9/0.98, eps 1e-9), rate 0.5 x Noam(d_model, factor 1,
    ``warmup``, default steps // 4), dropout 0, loss NLL per real token (004's LabelSmoothing
    with smoothing 0 is the same, see the ``loss`` family); then the model's own greedy
    decoding on ``eval_batch`` fresh sequences: exact-match and token accuracy."""
    cfg = cfg.replace(vocab=COPY_VOCAB, dropout=0.0, src_len=length, tgt_len=length)
    family = _model_family(variant.family)
    weights = zero_unrepresented(family.canonical_weights(cfg, traits=variant.traits),
                                 absent_fills(variant.map_for(cfg)))
    module, _ = build(variant, cfg, weights=weights)
    module.train()
    warmup = warmup or max(1, steps // 4)
    optimizer = torch.optim.Adam(module.parameters(), lr=0.5, betas=(0.9, 0.98), eps=1e-9)
    noam = lambda s: cfg.d_model ** -0.5 * min(max(s, 1) ** -0.5, max(s, 1) * warmup ** -1.5)  # noqa: E731
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, noam)
    gen = torch.Generator().manual_seed(cfg.seed)
    losses = []
    started = time.perf_counter()
    for step in range(steps):
        data = copy_batch(gen, batch, length)
        logp = variant.call(module, _copy_inputs(decoding, data))
        with user_code("train step", who=variant.key):  # its backward and the update of its parameters
            loss = F.nll_loss(logp.reshape(-1, logp.size(-1)), data[:, 1:].reshape(-1), ignore_index=PAD)
            loss.backward()
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
        losses.append(loss.item())
        if on_step:
            on_step(step, losses[-1])
    seconds = time.perf_counter() - started
    module.eval()
    data = copy_batch(torch.Generator().manual_seed(cfg.seed + 99), eval_batch, length)
    out = greedy(variant, decoding, module, {"src": data, "pad_idx": PAD, "start": START}, length - 1)
    hits = out == data[:, 1:]
    return CopyRun(variant.id, steps, losses, float(hits.all(1).float().mean()), float(hits.float().mean()), seconds)


def write_copy_task(out_dir: str | Path, cfg: Config | None = None, steps: int = 300, batch: int = 32,
                    variants: list[str] | None = None, eval_batch: int = 64) -> list[CopyRun]:
    """Trains every decodable encoder-decoder model on the copy task for ``steps`` updates;
    writes copy_task.json (each run as it finishes) and returns the runs. Their table and
    plot (copy_task.md, copy_task.png) are rendered by ``harness.report.models_md``; the
    folder is checked for all three before anything is trained."""
    cfg = cfg or Config()
    out = Path(out_dir)
    check_output_folder(out, ("copy_task.json", "copy_task.md", "copy_task.png"), "copy-task --out")
    out.mkdir(parents=True, exist_ok=True)
    runs: list[CopyRun] = []
    for variant, decoding in decodable("encoder_decoder", cfg):
        if variants and variant.id not in variants:
            continue
        runs.append(train_copy(variant, decoding, cfg, steps, batch, eval_batch=eval_batch))
        atomic_write(out / "copy_task.json", json.dumps(
            {"written_by": OUTPUT_MAGIC, "schema": SCHEMA_VERSION, "config": asdict(cfg), "steps": steps,
             "batch": batch, "runs": [r.as_dict() for r in runs]}, indent=1))
    if not runs:
        raise ConfigError(f"no encoder-decoder model to train (asked for {variants})")
    return runs
