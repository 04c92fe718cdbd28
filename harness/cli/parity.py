"""``python -m harness parity CHECKPOINT --port ID``: a port against the class its checkpoint
belongs to, on that checkpoint's weights and real token sequences (see
``harness.systems.checkpoint_parity``). Exit 0 when every metric and cache agrees, 1 when
one does not, 2 on a usage mistake (one line)."""

from __future__ import annotations

from pathlib import Path

from harness.base.config import ModelConfig
from harness.base.errors import ConfigError, InputError
from harness.cli.common import _load
from harness.report.checkpoint_text import parity_text
from harness.report.io import write_json
from harness.systems.checkpoint_parity import (
    DTYPES,
    FAMILIES,
    compare,
    prepare,
    read_token_file,
    sample_tokens,
    tokenize,
)
from harness.trace.checkpoint_trace import first_divergence


def add_commands(sub, common) -> None:
    p = sub.add_parser("parity", help="a port against its checkpoint's own class, on the checkpoint's weights")
    common(p, families=False)
    p.add_argument("checkpoint", help="a Hugging Face model folder (config.json + safetensors), or a state_dict "
                                      "file (.safetensors, .pt, .bin)")
    p.add_argument("--port", required=True, metavar="ID", help="the port: a registered variant of the family")
    p.add_argument("--reference", metavar="ID",
                   help="the checkpoint's class as a registered variant whose state_dict the checkpoint is "
                        "(default: the Hugging Face class config.json names, through transformers)")
    p.add_argument("--family", choices=FAMILIES, help="the family, for a checkpoint without config.json")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", dest="model_set",
                   help="model config for a checkpoint without config.json: layers, d_model, heads, kv_heads, "
                        "d_ff, vocab, tgt_len, rope_base")
    p.add_argument("--dtype", default="float32", choices=DTYPES, help="the dtype both run in (default float32)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--tokens", metavar="FILE", help="token ids, one sequence per line")
    src.add_argument("--text", action="append", metavar="TEXT",
                     help="a text, through the checkpoint's own tokenizer (repeatable: one sequence each)")
    p.add_argument("--batch", type=int, default=4, help="sampled sequences (no --tokens/--text; default 4)")
    p.add_argument("--length", type=int, help="tokens per sequence (default 16 sampled; a file's shortest row)")
    p.add_argument("--seed", type=int, default=0, help="the seed of the sampled sequences (default 0)")
    p.add_argument("--prompt", type=int, default=2, help="greedy generation starts after this many tokens (default 2)")
    p.add_argument("--no-trace", action="store_true", help="skip the first-divergence trace where they differ")
    p.add_argument("--json", metavar="PATH", help="also write the report as JSON")
    p.set_defaults(func=cmd_parity)


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
    if not report.agrees and not args.no_trace and not report.metrics[0].ok:
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
