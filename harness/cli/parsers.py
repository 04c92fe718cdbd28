"""Every command's parser, built from light modules only: ``python -m harness --help``,
a command's ``--help`` and a usage mistake answer before torch is imported. Each command is
a ``Command`` (its module and function by name), imported when it runs."""

from __future__ import annotations

import argparse
import importlib
from dataclasses import dataclass

from harness.base.defaults import PARITY_DTYPES, PARITY_FAMILIES, PRECISION_FACTOR, TIMING, TIMING_ENV, Gradients

VARIANTS_ENV = "HARNESS_VARIANTS"


@dataclass(frozen=True)
class Command:
    """A command's function by module and name (``harness.cli.check``, ``cmd_check``): the
    module, and the torch it imports, load on the call, after the command line is read."""

    module: str
    name: str

    def __call__(self, args: argparse.Namespace) -> int:
        return getattr(importlib.import_module(self.module), self.name)(args)


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line on stderr and exit 2 (no usage block), and a
    long option is never abbreviated (``--var`` is not taken for ``--variant``)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(2, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


def common(p, families=True):
    """The options every command that loads variants takes."""
    p.add_argument("--variants", action="append", metavar="FILE",
                   help=f"also load variants from this file (repeatable; or ${VARIANTS_ENV})")
    if families:
        p.add_argument("--family", action="append", metavar="F", help="only this family (repeatable)")


def add_commands(sub) -> None:
    """Every command, in the order ``--help`` reads them."""
    add_check_commands(sub)
    add_review_commands(sub)
    add_bench_commands(sub)
    add_model_commands(sub)
    add_parity_command(sub)
    add_kernelbench_command(sub)


def add_check_commands(sub) -> None:
    """``list`` and ``check``."""
    p = sub.add_parser("list", help="print every registered variant and its traits")
    common(p)
    p.add_argument("--json", metavar="PATH", help="also write the list as JSON")
    p.add_argument("--params", action="store_true",
                   help="each family's canonical parameter names and shapes (what a parameter map targets)")
    p.set_defaults(func=Command("harness.cli.check", "cmd_list"))

    p = sub.add_parser("check",
                       help="every variant against its spec, and the verdict matrix; exit 1 on a contradiction")
    common(p)
    p.add_argument("--device", default="cpu", help="cpu (default), cuda or auto")
    p.add_argument("--dtype", action="append",
                   help="precision dtype (repeatable; default float32 on CPU; float64 always runs, for semantics)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="config override, e.g. d_model=128 (replaces the default config matrix by one config)")
    p.add_argument("--variant", action="append", metavar="ID",
                   help="check only this variant (repeatable; its family's reference still runs, as the baseline)")
    p.add_argument("--pairs", choices=("derived", "all"), default="derived",
                   help="derive the pair matrix from the equivalence classes (default), or measure every pair")
    p.add_argument("--precision-factor", type=float, default=PRECISION_FACTOR,
                   help="a variant may have this many times the baseline's RMS error "
                        f"(default {PRECISION_FACTOR:g}, calibrated: benchmarks/precision_calibration.py)")
    p.add_argument("--strict-precision", action="store_true",
                   help="'less precise' in bfloat16/float16 is a contradiction too")
    p.add_argument("--explain", action="store_true",
                   help="also trace where each declared difference first shows (seconds per difference)")
    p.add_argument("--compiled", action="store_true",
                   help="also check each attention/layer variant under torch.compile against itself eager (slow)")
    p.add_argument("--compile-backend", metavar="NAME",
                   help="torch.compile backend for --compiled (default inductor; aot_eager skips code generation)")
    p.add_argument("--explore", type=int, default=0, metavar="N",
                   help="also check N configs drawn by Hypothesis (sizes, padding, scales, pad index, factor)")
    p.add_argument("--seed", type=int, default=0, metavar="K",
                   help="the seed of --explore's draws (the same N and K draw the same configs; default 0)")
    p.add_argument("--json", metavar="PATH", help="also write every spec, pair, path, gradcheck and dropout result")
    p.set_defaults(func=Command("harness.cli.check", "cmd_check"))


def add_review_commands(sub) -> None:
    """``diff``, ``map`` and ``differences``: reviewing where and why variants differ."""
    p = sub.add_parser("diff", help="where two variants first diverge, why, and what it costs")
    common(p, families=False)
    p.add_argument("family", help="the family of both variants")
    p.add_argument("a", help="variant A")
    p.add_argument("b", help="variant B")
    p.add_argument("--case", help="the case to trace (default: the first case where they differ)")
    p.add_argument("--dtype", default=None,
                   help="float32 (default; the first dtype both run in when a variant declares its dtypes), "
                        "float64, ...")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda or auto")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="config override, e.g. heads=8")
    p.add_argument("--json", metavar="PATH", help="also write everything as JSON")
    p.set_defaults(func=Command("harness.cli.review", "cmd_diff"))

    p = sub.add_parser("map", help="propose a parameter map for a module, by search")
    common(p, families=False)
    p.add_argument("target", help="FILE.py:CLASS or a module path such as torch.nn:MultiheadAttention "
                                  "(with --family attention_kernel: FILE.py:FUNCTION or module.path:FUNCTION)")
    p.add_argument("--family", required=True, help="the family the module belongs to")
    p.add_argument("--init", help="constructor keyword arguments, e.g. 'embed_dim=cfg.d_model, "
                                  "num_heads=cfg.heads' (default: guessed from the signature)")
    p.add_argument("--call", help="how to call it: a call form name (see harness.trace.map_candidates.CALL_FORMS) "
                                  "or an expression of m, query, key, value, mask (default: try the forms)")
    p.add_argument("--id", help="the id to register it under (default: the class name, lower case)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="config override")
    p.add_argument("--json", metavar="PATH", help="also write the proposal as JSON")
    p.set_defaults(func=Command("harness.cli.review", "cmd_map"))

    p = sub.add_parser("differences", help="write reports/DIFFERENCES.md (classes, reasons, costs)")
    common(p)
    p.add_argument("--out", default="reports/DIFFERENCES.md", help="where to write it")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="config override")
    p.set_defaults(func=Command("harness.cli.review", "cmd_differences"))


def add_bench_commands(sub) -> None:
    """``bench`` and ``report``, with the same sweep options."""
    p = sub.add_parser("bench", help="speed and memory benchmarks (resumable)")
    common(p)
    sweep_options(p, "bench")
    p.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    p.add_argument("--log", metavar="PATH",
                   help="the JSONL log (default reports/<device>/bench-<profile>.jsonl, "
                        "bench-<profile>-shard<I>of<N>.jsonl with --shard)")
    p.add_argument("--shard", metavar="I/N",
                   help="measure shard I of N (whole groups, split by key: N machines run 1/N each; "
                        "merge with report --from LOG1 --from LOG2 ...)")
    p.set_defaults(func=Command("harness.cli.bench", "cmd_bench"))

    p = sub.add_parser("report", help="check + benchmarks -> reports/<device>/<profile>/")
    common(p)
    sweep_options(p, "report")
    p.add_argument("--out", default="reports", help="parent folder of <device>/ (default reports)")
    p.add_argument("--from", dest="from_file", metavar="FILE", action="append",
                   help="make the report from rows measured before; measure nothing "
                        "(written to <out>/<device>/from/); repeatable: the logs of "
                        "bench --shard runs merge into one report (rows from different "
                        "environments are refused)")
    p.add_argument("--compare", metavar="OLD.json",
                   help="a change column against an earlier results.json "
                        "(default: the committed reference <out>/<device>/full/results.json)")
    p.add_argument("--no-compare", action="store_true", help="no change column")
    p.add_argument("--threshold", type=float, default=0.10, help="regression threshold (default %(default).2f)")
    p.add_argument("--skip-check", action="store_true", help="leave the verdicts out")
    p.set_defaults(func=Command("harness.cli.report", "cmd_report"))


def sweep_options(p, name: str) -> None:
    """The options ``bench`` and ``report`` share (what to measure and how), defined once."""
    p.add_argument("--device", default="auto", help="cpu, cuda or auto (default: cuda when present)")
    prof = p.add_mutually_exclusive_group()
    prof.add_argument("--quick", dest="profile", action="store_const", const="quick",
                      help="the quick profile (default; about 80 s with the check on an idle 2-core CPU)")
    prof.add_argument("--full", dest="profile", action="store_const", const="full", help="the full sweep")
    p.set_defaults(profile=None)
    p.add_argument("--variant", action="append", metavar="ID",
                   help="only this variant (repeatable; the family's reference is timed beside it)")
    p.add_argument("--seq", type=str, help="override the sequence lengths, e.g. 64,128")
    p.add_argument("--batch", type=str, help="override the batch sizes, e.g. 1,8")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="config override on every case, as check's: d_model, heads, d_ff, batch and "
                        "tgt_len (= seq) set the shape; kv_heads=2, window=3,0 ... the attention's config")
    p.add_argument("--dtype", action="append", metavar="DTYPE",
                   help="time in this dtype (repeatable; default: the profile's), e.g. bfloat16")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's default, set explicitly)")
    p.add_argument("--fresh", action="store_true", help="ignore rows already measured in the log")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress (a bar on a terminal; elsewhere one line per finished group)")
    p.add_argument("--min-time", type=float,
                   help="seconds of timed calls per variant per round (default: quick "
                        f"{TIMING['quick']['min_time']:g}, full {TIMING['full']['min_time']:g}; "
                        f"${TIMING_ENV['min_time']} sets it for every profile)")
    p.add_argument("--rounds", type=int, help="interleaved rounds per group (default: quick "
                   f"{TIMING['quick']['rounds']}, full {TIMING['full']['rounds']}; "
                   f"${TIMING_ENV['rounds']} sets it for every profile)")
    p.add_argument("--no-rss", action="store_true", help="skip the CPU resident-set probe process")
    p.add_argument("--time-budget", type=float, metavar="S",
                   help="seconds for the whole command: a group is started only if it ends in time (the "
                        "longest group so far as its length" + (", and a reserve for writing the report)"
                                                                 if name == "report" else ")")
                        + "; the groups the targets read go first; the same command resumes the rest")


def add_model_commands(sub) -> None:
    """``decode``, ``train-step``, ``copy-task`` and ``cache-bench``."""
    def with_config(p):
        p.add_argument("--set", action="append", metavar="KEY=VALUE", help="config override, e.g. d_model=128")

    p = sub.add_parser("decode", help="greedy decoding compared; cache vs full recomputation")
    common(p)
    with_config(p)
    p.add_argument("--variant", action="append", metavar="ID",
                   help="only the rows of this model (repeatable; the pairs it is in, its cache)")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    p.set_defaults(func=Command("harness.cli.models", "cmd_decode"))

    p = sub.add_parser("train-step", help="one training step compared across models")
    common(p)
    with_config(p)
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    p.set_defaults(func=Command("harness.cli.models", "cmd_train_step"))

    p = sub.add_parser("copy-task", help="train every encoder-decoder model on 004's copy task (CPU)")
    common(p, families=False)
    with_config(p)
    p.add_argument("--out", required=True, metavar="DIR", help="writes copy_task.{json,md,png} here")
    p.add_argument("--steps", type=int, default=300, help="updates per model (default %(default)s)")
    p.add_argument("--batch", type=int, default=32, help="sequences per update (default %(default)s)")
    p.add_argument("--eval", type=int, default=64, help="held-out sequences decoded for accuracy (default %(default)s)")
    p.add_argument("--variant", action="append", metavar="ID", help="only this model (repeatable)")
    p.set_defaults(func=Command("harness.cli.models", "cmd_copy_task"))

    p = sub.add_parser("cache-bench", help="tokens/s and memory with and without the cache as T grows")
    common(p, families=False)
    with_config(p)
    p.add_argument("--out", required=True, metavar="DIR", help="writes cache_bench.{json,md,png} here")
    p.add_argument("--seq", default="8,16,32,64", help="generated lengths (default %(default)s)")
    p.set_defaults(func=Command("harness.cli.models", "cmd_cache_bench"))


def add_parity_command(sub) -> None:
    p = sub.add_parser("parity", help="a port against its checkpoint's own class, on the checkpoint's weights")
    common(p, families=False)
    p.add_argument("checkpoint", help="a Hugging Face model folder (config.json + safetensors), or a state_dict "
                                      "file (.safetensors, .pt, .bin)")
    p.add_argument("--port", required=True, metavar="ID", help="the port: a registered variant of the family")
    p.add_argument("--reference", metavar="ID",
                   help="the checkpoint's class as a registered variant whose state_dict the checkpoint is "
                        "(default: the Hugging Face class config.json names, through transformers)")
    p.add_argument("--family", choices=PARITY_FAMILIES, help="the family, for a checkpoint without config.json")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", dest="model_set",
                   help="model config for a checkpoint without config.json: layers, d_model, heads, kv_heads, "
                        "d_ff, vocab, tgt_len, rope_base")
    p.add_argument("--dtype", default="float32", choices=PARITY_DTYPES, help="the dtype both run in (default float32)")
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
    p.set_defaults(func=Command("harness.cli.parity", "cmd_parity"))


def add_kernelbench_command(sub) -> None:
    p = sub.add_parser("kernelbench", help="KernelBench problems and candidates (Model / ModelNew files), judged "
                                           "against the problem's Model; exit 1 when one is wrong")
    p.add_argument("problem", help="a problem file (Model, get_inputs, get_init_inputs), or a folder of problems "
                                   "NAME.py each with its candidates in NAME/")
    p.add_argument("candidates", nargs="?", help="a candidate file (ModelNew) or a folder of them")
    p.add_argument("--time", action="store_true", help="also time each correct candidate against its reference "
                                                       "(interleaved rounds; speedup = reference / candidate time, "
                                                       "with its 90%% interval; one beyond the machine's peak is "
                                                       "flagged, not reported)")
    p.add_argument("--threads", type=int, metavar="N",
                   help="with --time: torch's intra-op thread count the pairs are timed at (default: 1 on CPU, "
                        "as torch.utils.benchmark.Timer; torch's own on CUDA); the caller's is put back after")
    p.add_argument("--gradients", choices=[g.value for g in Gradients], default=Gradients.AUTO.value,
                   help="judge every gradient (required), those the candidate's output carries (auto, the default: "
                        "a forward-only kernel is judged on its output), or none")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.add_argument("--only", action="append", metavar="REGIME",
                   help="try only this regime (repeatable: given, seed, signed, scale, offset, size, batch 1, "
                        "non-contiguous, views, calls between, mode, no grad; or a name such as 'scale x100')")
    p.add_argument("--json", metavar="PATH", help="also write a row per candidate and every verdict as JSON")
    p.add_argument("--csv", metavar="PATH", help="also write a row per candidate as CSV (KernelBench's columns)")
    p.set_defaults(func=Command("harness.cli.kernelbench", "cmd_kernelbench"))
