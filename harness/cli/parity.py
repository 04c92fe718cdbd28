"""``python -m harness parity CHECKPOINT --port ID``: a port against the class its checkpoint
belongs to, on that checkpoint's weights and real token sequences (see
``harness.systems.checkpoint_parity``). Exit 0 when every metric and cache agrees, 1 when
one does not, 2 on a usage mistake (one line)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from harness.base.config import ModelConfig
from harness.base.errors import ConfigError, InputError
from harness.cli.common import _load
from harness.report.checkpoint_text import parity_text
from harness.report.io import write_json
from harness.systems.checkpoint_parity import (
    compare,
    prepare,
    read_token_file,
    sample_tokens,
    tokenize,
)
from harness.trace.checkpoint_trace import first_divergence


def _changes(items: list[str] | None) -> dict:
    """``--set KEY=VALUE`` pairs for a ``ModelConfig`` (integers, rope_base a number)."""
    known = {"layers", "d_model", "heads", "kv_heads", "d_ff", "vocab", "tgt_len", "rope_base"}
    out = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or key not in known:
            raise ConfigError(f"bad --set {item!r}: expected KEY=VALUE with KEY one of {sorted(known)}")
        try:
            out[key] = float(raw) if key == "rope_base" else int(raw)
        except ValueError:
            raise ConfigError(f"bad --set {item!r}: {key} takes a number") from None
    return out


def cmd_parity(args) -> int:
    _load(args)
    if min(args.batch, args.length or 2, args.prompt) < 1 or (args.length is not None and args.length < 2):
        raise InputError(f"--batch {args.batch}, --length {args.length} and --prompt {args.prompt} must be positive "
                         "(a length of at least 2)")
    length = args.length or 16
    comparison = prepare(args.checkpoint, args.port, reference=args.reference, family=args.family,
                         dtype=args.dtype, changes=_changes(args.model_set), tokens=(args.batch, length))
    cfg: ModelConfig = comparison.cfg
    if args.tokens:
        tokens, source = read_token_file(args.tokens, cfg, args.length), f"{args.tokens}"
    elif args.text:
        tokens, source = tokenize(Path(args.checkpoint), args.text, cfg, args.length), "--text (its tokenizer)"
    else:
        tokens = sample_tokens(cfg, args.batch, length, args.seed)
        source = f"sampled from the vocabulary (seed {args.seed})"
    report = compare(comparison, tokens, prompt=args.prompt, source=source)
    if report.hidden_by_rounding:  # the half dtype's rounding hides it: located in the float32 runs
        comparison = dataclasses.replace(comparison, dtype=torch.float32)
    if not report.agrees and not args.no_trace and (not report.metrics[0].ok or report.hidden_by_rounding):
        if comparison.by_name:
            report.notes.append("the port is mapped by the class's own names: the first-divergence trace runs over "
                                "a family's canonical sub-modules, not traced")
        else:
            found = first_divergence(comparison, tokens)
            report.divergence = found.text if found else ""
    if args.json:
        write_json(args.json, report.as_dict())
    print(parity_text(report, comparison.checkpoint.describe()))
    return 0 if report.agrees else 1
