"""Commands for the whole models.

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

from pathlib import Path

from harness.base.config import Config
from harness.base.errors import ConfigError, UnknownName
from harness.base.files import check_output_folder, file_set
from harness.bench.cache_bench import write_cache_bench
from harness.cli.bench import _int_list
from harness.cli.common import _load
from harness.registry import REGISTRY, get_variant
from harness.report.io import write_json
from harness.report.models_md import copy_task_table, write_cache_bench_report, write_copy_task_report
from harness.report.models_text import decode_text, train_step_text
from harness.systems.cache_parity import check_caches
from harness.systems.copy_task import write_copy_task
from harness.systems.decoding import compare_greedy
from harness.systems.models import MODEL_FAMILIES, _model_family
from harness.systems.parity import KL_BOUND, TOP_K, compare_distributions
from harness.systems.training import ADAM, compare_train_step


def _families(args) -> list[str]:
    """The model families asked for (all by default); any other family is an error."""
    return [_model_family(name).name for name in args.family or MODEL_FAMILIES]


def cmd_decode(args) -> int:

    _load(args)
    cfg = Config.parse(args.set)
    families = _families(args)
    wanted = set(args.variant or [])
    for vid in wanted:  # a model that is not there would select nothing, silently
        if not any(f"{f}/{vid}" in REGISTRY for f in families):
            known = sorted({v.id for v in REGISTRY.values() if v.family in families})
            raise UnknownName(f"no model '{vid}' in {families}; known: {known}")

    def mine(rows: list) -> list:
        if not wanted:
            return rows
        return [r for r in rows if {getattr(r, n, None) for n in ("variant", "a", "b")} & wanted
                or str(getattr(r, "b", "")).split(" ")[0] in wanted]

    greedy_rows, cache_rows, kl_rows, parity_rows = [], [], [], []
    for family in families:
        greedy_rows += mine(compare_greedy(family, cfg))
        kl_rows += mine(compare_distributions(family, cfg))
        caches = check_caches(family, cfg)  # the regimes check runs too
        cache_rows += mine([r for c in caches for r in c.sessions])
        parity_rows += mine([r for c in caches for r in c.parity])
    if args.json:
        write_json(args.json, {"greedy": [r.as_dict() for r in greedy_rows],
                               "cache": [r.as_dict() for r in cache_rows],
                               "distributions": [r.as_dict() for r in kl_rows],
                               "cache_parity": [r.as_dict() for r in parity_rows]})
    print(decode_text(greedy_rows, kl_rows, cache_rows, parity_rows, kl_bound=KL_BOUND, top_k=TOP_K))
    return 1 if any(not r.ok for rows in (greedy_rows, kl_rows, cache_rows, parity_rows) for r in rows) else 0


def cmd_train_step(args) -> int:

    _load(args)
    cfg = Config.parse(args.set)
    rows = []
    for family in _families(args):
        rows += compare_train_step(family, cfg)
    if args.json:
        write_json(args.json, {"train_steps": [r.as_dict() for r in rows]})
    print(train_step_text(rows, adam=ADAM))
    return 1 if any(not r.ok for r in rows) else 0


def cmd_copy_task(args) -> int:
    _load(args)
    if min(args.steps, args.batch, args.eval) < 1:
        raise ConfigError(f"--steps {args.steps}, --batch {args.batch} and --eval {args.eval} must be positive")
    for vid in args.variant or []:  # a model that is not there would train nothing, silently
        get_variant("encoder_decoder", vid)
    check_output_folder(Path(args.out), ("copy_task.json", "copy_task.md", "copy_task.png"), "copy-task --out")
    cfg = Config.parse(args.set)
    with file_set(args.out) as stage:  # the three files replaced together, or none of them
        runs = write_copy_task(stage, cfg, args.steps, args.batch, args.variant, args.eval)
        write_copy_task_report(runs, stage)
    print(copy_task_table(runs))
    print(f"\nwrote {args.out}/copy_task.json, copy_task.md, copy_task.png")
    return 0


def cmd_cache_bench(args) -> int:
    _load(args)
    lengths = _int_list(args.seq)
    if min(lengths) < 2:  # refused here, before anything is built (write_cache_bench says the same)
        raise ConfigError(f"impossible sweep: --seq {args.seq}: generated lengths must be at least 2")
    check_output_folder(Path(args.out), ("cache_bench.json", "cache_bench.md", "cache_bench.png"), "cache-bench --out")
    cfg = Config.parse(args.set)
    with file_set(args.out) as stage:  # the three files replaced together, or none of them
        rows = write_cache_bench(stage, lengths, cfg)
        write_cache_bench_report(rows, stage)
    print((Path(args.out) / "cache_bench.md").read_text())
    return 0
