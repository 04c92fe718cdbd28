"""Commands for the whole models (issue 11).

decode       greedy tokens of every pair of models compared, per-token KL and top-k
             agreement of their distributions, each cache against re-running the whole
             prefix, and each cache's prefill + steps and chunked prefill against the full
             forward (right and left padding, a verdict per call); exit 1 when an equivalent
             pair emits different tokens or distributions, or a cache changes the
             log-probabilities
train-step   one Adam step on the same weights and batch, updated parameters compared
             through the canonical map; exit 1 on a contradiction
copy-task    004's copy task trained for every encoder-decoder model -> DIR
cache-bench  tokens/s and peak memory with and without each cache as T grows -> DIR
"""

from __future__ import annotations

import math
from pathlib import Path

from tabulate import tabulate

from harness.base.config import Config
from harness.base.errors import ConfigError
from harness.base.files import check_output_folder
from harness.base.verdicts import Verdict
from harness.bench.cache_bench import write_cache_bench
from harness.cli.bench import _int_list
from harness.cli.common import _load
from harness.registry import get_variant
from harness.report.io import write_json
from harness.report.models_md import copy_task_table, write_cache_bench_report, write_copy_task_report
from harness.systems.cache_parity import check_cache_parity
from harness.systems.copy_task import write_copy_task
from harness.systems.decoding import check_cache, compare_greedy
from harness.systems.models import MODEL_FAMILIES, _model_family
from harness.systems.parity import KL_BOUND, TOP_K, compare_distributions
from harness.systems.training import ADAM, compare_train_step


def add_commands(sub, common) -> None:
    def with_config(p):
        p.add_argument("--set", action="append", metavar="KEY=VALUE", help="config override, e.g. d_model=128")

    p = sub.add_parser("decode", help="greedy decoding compared; cache vs full recomputation")
    common(p)
    with_config(p)
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    p.set_defaults(func=cmd_decode)

    p = sub.add_parser("train-step", help="one training step compared across models")
    common(p)
    with_config(p)
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    p.set_defaults(func=cmd_train_step)

    p = sub.add_parser("copy-task", help="train every encoder-decoder model on 004's copy task (CPU)")
    common(p, families=False)
    with_config(p)
    p.add_argument("--out", required=True, metavar="DIR", help="writes copy_task.{json,md,png} here")
    p.add_argument("--steps", type=int, default=300, help="updates per model (default 300)")
    p.add_argument("--batch", type=int, default=32, help="sequences per update (default 32)")
    p.add_argument("--eval", type=int, default=64, help="held-out sequences decoded for accuracy (default 64)")
    p.add_argument("--variant", action="append", metavar="ID", help="only this model (repeatable)")
    p.set_defaults(func=cmd_copy_task)

    p = sub.add_parser("cache-bench", help="tokens/s and memory with and without the cache as T grows")
    common(p, families=False)
    with_config(p)
    p.add_argument("--out", required=True, metavar="DIR", help="writes cache_bench.{json,md,png} here")
    p.add_argument("--seq", default="8,16,32,64", help="generated lengths (default 8,16,32,64)")
    p.set_defaults(func=cmd_cache_bench)


def _families(args) -> list[str]:
    """The model families asked for (all by default); any other family is an error."""
    return [_model_family(name).name for name in args.family or MODEL_FAMILIES]


def _fmt(x: float) -> str:
    return "-" if isinstance(x, float) and math.isnan(x) else f"{x:.3g}"


def cmd_decode(args) -> int:

    _load(args)
    cfg = Config.parse(args.set)
    greedy_rows, cache_rows, kl_rows, parity_rows = [], [], [], []
    for family in _families(args):
        greedy_rows += compare_greedy(family, cfg)
        kl_rows += compare_distributions(family, cfg)
        cache_rows += check_cache(family, cfg)
        parity_rows += check_cache_parity(family, cfg)
    print("== Greedy decoding: each model's own loop on the same ported weights (sharpened: FFN input x3)")
    print(tabulate([(r.family, f"{r.a} ~ {r.b}", r.expected, "same" if r.same_tokens else "differ",
                     "yes" if r.ok else "NO", r.first_diff or "-", _fmt(r.margin_a), _fmt(r.margin_b),
                     r.logprobs or "-", _fmt(r.logprob_max_abs))
                    for r in greedy_rows],
                   headers=("family", "pair", "expected", "tokens", "ok", "first difference",
                            "margin a", "margin b", "log-probs", "max |Δ log-p|")))
    print(f"\n== Next-token distributions, float32: per-token KL(a || b) over real positions (agree: worst "
          f"<= {KL_BOUND:g}), top-1 and top-{TOP_K} agreement")
    print(tabulate([(r.family, f"{r.a} ~ {r.b}", r.case, r.expected, _fmt(r.kl_worst), r.worst_at, _fmt(r.kl_mean),
                     f"{r.top1:.2f}", f"{r.topk:.2f}", "hidden" if r.hidden else ("yes" if r.agrees else "no"),
                     "yes" if r.ok else "NO") for r in kl_rows],
                   headers=("family", "pair", "case", "expected", "KL worst", "at", "KL mean", "top-1",
                            f"top-{TOP_K}", "agree", "ok")))
    print("\n== Incremental decoding (cache) vs re-running the whole prefix, float32")
    print(tabulate([(r.family, r.variant, r.cache, r.steps, r.verdict, "yes" if r.ok else "NO",
                     _fmt(r.max_abs), _fmt(r.noise_ratio)) for r in cache_rows],
                   headers=("family", "model", "cache", "steps", "verdict", "ok", "max_abs", "noise_ratio")))
    print("\n== KV-cache parity: each call of a cached session vs the full forward at its position, float32")
    print(tabulate([(r.family, r.variant, r.padding, r.schedule,
                     " ".join(f"{s.fed}{Verdict(s.verdict).symbol}" for s in r.steps), "yes" if r.ok else "NO",
                     f"fed {r.first_bad.fed}: {r.first_bad.verdict}, max_abs {_fmt(r.first_bad.max_abs)}"
                     if r.first_bad else "-") for r in parity_rows],
                   headers=("family", "model", "padding", "schedule", "tokens fed: verdict", "ok",
                            "first contradiction")))
    bad = ([r for r in greedy_rows if not r.ok] + [r for r in cache_rows if not r.ok]
           + [r for r in kl_rows if not r.ok] + [r for r in parity_rows if not r.ok])
    if args.json:
        write_json(args.json, {"greedy": [r.as_dict() for r in greedy_rows],
                               "cache": [r.as_dict() for r in cache_rows],
                               "distributions": [r.as_dict() for r in kl_rows],
                               "cache_parity": [r.as_dict() for r in parity_rows]})
    print(f"\n{len(greedy_rows)} pairs decoded, {len(kl_rows)} distribution pairs compared, {len(cache_rows)} "
          f"caches checked, {len(parity_rows)} cached sessions against the full forward, {len(bad)} contradict")
    return 1 if bad else 0


def cmd_train_step(args) -> int:

    _load(args)
    cfg = Config.parse(args.set)
    rows = []
    for family in _families(args):
        rows += compare_train_step(family, cfg)
    print(f"== One Adam step {ADAM}, dropout 0: updated parameters through the canonical map")
    print(tabulate([(r.family, f"{r.a} ~ {r.b}", r.expected, r.verdict, "yes" if r.ok else "NO", r.worst_param,
                     _fmt(r.max_abs), _fmt(r.noise_ratio)) for r in rows],
                   headers=("family", "pair", "expected", "verdict", "ok", "worst parameter", "max_abs",
                            "noise_ratio")))
    bad = [r for r in rows if not r.ok]
    if args.json:
        write_json(args.json, [r.as_dict() for r in rows])
    print(f"\n{len(rows)} pairs stepped, {len(bad)} contradict")
    return 1 if bad else 0


def cmd_copy_task(args) -> int:
    _load(args)
    if min(args.steps, args.batch, args.eval) < 1:
        raise ConfigError(f"--steps {args.steps}, --batch {args.batch} and --eval {args.eval} must be positive")
    for vid in args.variant or []:  # a model that is not there would train nothing, silently
        get_variant("encoder_decoder", vid)
    check_output_folder(Path(args.out), ("copy_task.json", "copy_task.md", "copy_task.png"), "copy-task --out")
    runs = write_copy_task(args.out, Config.parse(args.set), args.steps, args.batch, args.variant, args.eval)
    write_copy_task_report(runs, Path(args.out))
    print(copy_task_table(runs))
    print(f"\nwrote {args.out}/copy_task.json, copy_task.md, copy_task.png")
    return 0


def cmd_cache_bench(args) -> int:
    _load(args)
    lengths = _int_list(args.seq)
    if min(lengths) < 2:  # refused here, before anything is built (write_cache_bench says the same)
        raise ConfigError(f"impossible sweep: --seq {args.seq}: generated lengths must be at least 2")
    check_output_folder(Path(args.out), ("cache_bench.json", "cache_bench.md", "cache_bench.png"), "cache-bench --out")
    rows = write_cache_bench(args.out, lengths, Config.parse(args.set))
    write_cache_bench_report(rows, Path(args.out))
    print((Path(args.out) / "cache_bench.md").read_text())
    return 0
