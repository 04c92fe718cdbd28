"""The seed systems whole: greedy decoding compared, the k/v cache against full
recomputation, one training step compared, losses and schedules, the copy task, and
the cache benchmark. Works on any model registered in the model families with
``register_decoding``; knows no variant by name.

Every comparison ports the same seeded canonical weights into each model (the Zero()
entries of the pair zeroed for both, as the pairwise check does) and decides with the
check's own verdict (``compare_tensors``: float32 against each model's float64 run).
"""

from __future__ import annotations

import itertools
import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F

from .compare import RANK, Checker, compare_tensors, worst
from .config import Config
from .errors import ConfigError, UnknownName
from .families import get_family
from .model_families import DECODINGS, PAD, START, Decoding
from .porting import Fills, absent_fills, zero_unrepresented
from .registry import Variant, variants_of
from .seeding import build
from .spec import one_thread

MODEL_FAMILIES = ("encoder_decoder", "decoder_only_model")
DECODE_CASE = {"encoder_decoder": "src_padded", "decoder_only_model": "full"}
PROMPT = 1  # decoder-only greedy decoding starts from the case's first PROMPT tokens


def _model_family(name: str):
    if name not in MODEL_FAMILIES:
        raise UnknownName(f"'{name}' is not a model family; model families: {list(MODEL_FAMILIES)}")
    return get_family(name)


def expectation(family, a: Variant, b: Variant) -> tuple[str, str]:
    """'equivalent' when the two declare the same semantic traits (the family's decode
    case reads them all), else 'different' with the differing traits as the reason."""
    sa, sb = family.semantic_traits(a.traits), family.semantic_traits(b.traits)
    differing = [f"{t}: {sa.get(t)} vs {sb.get(t)}" for t in family.traits if sa.get(t) != sb.get(t)]
    return ("different", "; ".join(differing)) if differing else ("equivalent", "")


def matches(verdict: str, expected: str) -> bool:
    return verdict in ("identical", "equivalent") if expected == "equivalent" else verdict == expected


def decodable(family: str, cfg: Config) -> list[tuple[Variant, Decoding]]:
    """The family's models that declare how they decode and can be built for ``cfg``."""
    _model_family(family)
    return [(v, DECODINGS[v.key]) for v in variants_of(family) if v.key in DECODINGS and not v.supports(cfg)]


_MEMO: dict[tuple, Any] = {}


def _memo(name: str, family: str, cfg: Config, compute: Callable[[], Any]) -> Any:
    """One result per (comparison, family, config, registered models and decodings): the
    CLI and the tests ask for the same comparison in one process; a changed registration
    (a scratch registry, a patched decoding) is a new key."""
    key = (name, family, cfg, tuple((v.key, id(v), id(DECODINGS.get(v.key))) for v in variants_of(family)))
    if key not in _MEMO:
        with one_thread():
            _MEMO[key] = compute()
    return _MEMO[key]


class Models:
    """Builds models with the family's canonical weights, the given names zeroed; caches."""

    def __init__(self, family: str, cfg: Config):
        self.family = _model_family(family)
        self.cfg = cfg
        self.checker = Checker(cfg)
        self.inputs = self.family.inputs(DECODE_CASE[family], cfg)
        self._built: dict[tuple, Any] = {}

    def zero(self, *variants: Variant) -> Fills:
        out = Fills()
        for v in variants:
            out = out | self.checker.zero_names(v)
        return out

    def weights(self, zero: Fills) -> dict[str, torch.Tensor]:
        return self.checker.weights(self.family, zero)

    def get(self, variant: Variant, zero: Fills, dtype: torch.dtype = torch.float32):
        key = (variant.key, zero, dtype)
        if key not in self._built:
            self._built[key] = build(variant, self.cfg, dtype=dtype, weights=self.weights(zero))[0]
        return self._built[key]


# -- greedy decoding compared ------------------------------------------------------------------

def greedy(variant: Variant, decoding: Decoding, module, inputs: dict, steps: int) -> torch.Tensor:
    """(B, steps) tokens from the model's own greedy loop, or the harness's loop over
    ``step`` after ``prefix`` (the start symbol, or the decoder-only prompt)."""
    with torch.no_grad():
        if decoding.greedy is not None:
            return decoding.greedy(module, inputs, steps)
        state = decoding.prepare(module, inputs, False)
        ys = prefix(variant, decoding, inputs)
        start = ys.size(1)
        for _ in range(steps):
            ys = torch.cat([ys, decoding.step(module, state, ys).argmax(-1, keepdim=True)], dim=1)
        return ys[:, start:]


def prefix(variant: Variant, decoding: Decoding, inputs: dict) -> torch.Tensor:
    """What the generated tokens follow: the start symbol (none for a model whose own
    start is built in, ``bos=False``), or the decoder-only prompt."""
    if variant.family == "decoder_only_model":
        return inputs["tokens"][:, :PROMPT]
    return torch.full((inputs["src"].size(0), 1 if decoding.bos else 0), inputs["start"], dtype=torch.long)


def decode_steps(family: str, cfg: Config) -> int:
    return cfg.tgt_len - 1 if family == "encoder_decoder" else cfg.tgt_len - PROMPT


def _upto_pad(row: torch.Tensor) -> list[int]:
    """Tokens up to and including the first pad: what follows is past the sentence's end
    (003 masks the query row of a pad, the others do not)."""
    out = []
    for tok in row.tolist():
        out.append(tok)
        if tok == PAD:
            break
    return out


@dataclass
class DecodeResult:
    family: str
    a: str
    b: str
    expected: str
    reason: str
    same_tokens: bool
    ok: bool
    first_diff: str        # "row r, step s" or ""
    margin_a: float        # top-1 minus top-2 log-probability of a at that step
    margin_b: float
    tokens_a: list = field(default_factory=list)
    tokens_b: list = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


def _margin(decoding: Decoding, variant: Variant, module, inputs: dict, row: int, generated: list[int]) -> float:
    """Top-1 minus top-2 log-probability of the model at one step of one row."""
    one = {k: (v[row:row + 1] if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
    ys = torch.cat([prefix(variant, decoding, one), torch.tensor([generated], dtype=torch.long)], dim=1)
    with torch.no_grad():
        top = decoding.step(module, decoding.prepare(module, one, False), ys)[0].topk(2).values
    return float(top[0] - top[1])


def compare_greedy(family: str, cfg: Config) -> list[DecodeResult]:
    """Every pair of decodable models: tokens from each model's own greedy loop, compared;
    pairs declared equivalent (on the family's decode case) must emit the same tokens."""
    return _memo("compare_greedy", family, cfg, lambda: _compare_greedy(family, cfg))


def _compare_greedy(family: str, cfg: Config) -> list[DecodeResult]:
    models = Models(family, cfg)
    fam = models.family
    steps = decode_steps(family, cfg)
    results = []
    tokens: dict[tuple, torch.Tensor] = {}

    def run(v, d, module, zero):
        if (v.key, zero) not in tokens:
            tokens[v.key, zero] = greedy(v, d, module, models.inputs, steps)
        return tokens[v.key, zero]

    for (va, da), (vb, db) in itertools.combinations(decodable(family, cfg), 2):
        zero = models.zero(va, vb)
        ma, mb = models.get(va, zero), models.get(vb, zero)
        ta, tb = run(va, da, ma, zero), run(vb, db, mb, zero)
        rows_a, rows_b = [_upto_pad(r) for r in ta], [_upto_pad(r) for r in tb]
        expected, reason = expectation(fam, va, vb)
        first, margin_a, margin_b = "", math.nan, math.nan
        for r, (ra, rb) in enumerate(zip(rows_a, rows_b)):
            if ra != rb:
                s = next((i for i, (x, y) in enumerate(zip(ra, rb)) if x != y), min(len(ra), len(rb)))
                first = f"row {r}, step {s}"
                margin_a = _margin(da, va, ma, models.inputs, r, ra[:s])
                margin_b = _margin(db, vb, mb, models.inputs, r, rb[:s])
                break
        same = not first
        ok = same if expected == "equivalent" else True  # different models may still agree
        results.append(DecodeResult(family, va.id, vb.id, expected, reason, same, ok, first,
                                    margin_a, margin_b, rows_a, rows_b))
    return results


# -- incremental decoding vs full recomputation -----------------------------------------------

@dataclass
class CacheResult:
    family: str
    variant: str
    cache: str
    verdict: str
    ok: bool
    max_abs: float
    noise_ratio: float
    steps: int

    def as_dict(self) -> dict:
        return asdict(self)


def step_logprobs(decoding: Decoding, module, inputs: dict, tokens: torch.Tensor, cached: bool) -> torch.Tensor:
    """(B, n, V): the log-probabilities after each prefix tokens[:, :k], k = 1..n, from
    one decoding session (the cache, when ``cached``, carried from step to step)."""
    with torch.no_grad():
        state = decoding.prepare(module, inputs, cached)
        return torch.stack([decoding.step(module, state, tokens[:, :k]) for k in range(1, tokens.size(1) + 1)], 1)


def _session_tokens(family: str, inputs: dict) -> torch.Tensor:
    return inputs["tgt"] if family == "encoder_decoder" else inputs["tokens"]


def check_cache(family: str, cfg: Config) -> list[CacheResult]:
    """For every model with a cache: per-step log-probabilities with the cache against the
    same steps re-running the whole prefix, float32 with float64 runs for the noise."""
    return _memo("check_cache", family, cfg, lambda: _check_cache(family, cfg))


def _check_cache(family: str, cfg: Config) -> list[CacheResult]:
    models = Models(family, cfg)
    tokens = _session_tokens(family, models.inputs)
    results = []
    for variant, decoding in decodable(family, cfg):
        if not decoding.cache:
            continue
        zero = models.zero(variant)
        runs = {}
        for dtype in (torch.float32, torch.float64):
            module = models.get(variant, zero, dtype)
            for cached in (True, False):
                runs[dtype, cached] = step_logprobs(decoding, module, models.inputs, tokens, cached).double()
        v = compare_tensors(runs[torch.float32, True], runs[torch.float32, False],
                            runs[torch.float64, True], runs[torch.float64, False], torch.float32)
        results.append(CacheResult(family, variant.id, decoding.cache, v.verdict,
                                   matches(v.verdict, "equivalent"), v.max_abs, v.noise_ratio, tokens.size(1)))
    return results


# -- one training step ---------------------------------------------------------------------------

ADAM = {"lr": 1e-3, "betas": (0.9, 0.98), "eps": 1e-9}  # 004's betas and eps; a small rate


@dataclass
class StepResult:
    family: str
    a: str
    b: str
    expected: str
    reason: str
    verdict: str
    ok: bool
    worst_param: str
    max_abs: float
    noise_ratio: float

    def as_dict(self) -> dict:
        return asdict(self)


def _labels(family: str, inputs: dict, cfg: Config) -> torch.Tensor:
    gen = torch.Generator().manual_seed(cfg.seed + 3)
    tokens = _session_tokens(family, inputs)
    labels = torch.randint(START + 1, cfg.vocab, tokens.shape, generator=gen)
    return labels.masked_fill(tokens == PAD, PAD)


def train_step(variant: Variant, cfg: Config, weights: dict, inputs: dict, labels: torch.Tensor,
               dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Canonical parameters after one Adam step on the NLL of the family call (pad ignored),
    dropout 0, train mode."""
    module, portmap = build(variant, cfg.replace(dropout=0.0), dtype=dtype, weights=weights)
    module.train()
    optimizer = torch.optim.Adam(module.parameters(), **ADAM)
    logp = variant.call(module, inputs)
    loss = F.nll_loss(logp.reshape(-1, logp.size(-1)), labels.reshape(-1), ignore_index=PAD)
    loss.backward()
    optimizer.step()
    return {k: t.double() for k, t in portmap.export().items()}


def compare_train_step(family: str, cfg: Config) -> list[StepResult]:
    """Every pair: the canonical parameters after one Adam step (``train_step``) compared;
    the expectation is the pair's, on the family's decode case."""
    return _memo("compare_train_step", family, cfg, lambda: _compare_train_step(family, cfg))


def _compare_train_step(family: str, cfg: Config) -> list[StepResult]:
    models = Models(family, cfg)
    fam = models.family
    labels = _labels(family, models.inputs, cfg)
    usable = [v for v in variants_of(family) if not v.supports(cfg)]
    after: dict[tuple, dict] = {}

    def run(v, zero, dtype):
        key = (v.key, zero, dtype)
        if key not in after:
            after[key] = train_step(v, cfg, models.weights(zero), models.inputs, labels, dtype)
        return after[key]

    results = []
    for a, b in itertools.combinations(usable, 2):
        zero = models.zero(a, b)
        pa, pb = run(a, zero, torch.float32), run(b, zero, torch.float32)
        pa64, pb64 = run(a, zero, torch.float64), run(b, zero, torch.float64)
        verdicts = {n: compare_tensors(pa[n], pb[n], pa64[n], pb64[n], torch.float32) for n in pa}
        name = max(verdicts, key=lambda n: (RANK[verdicts[n].verdict], verdicts[n].max_abs))
        verdict = worst(v.verdict for v in verdicts.values())
        expected, reason = expectation(fam, a, b)
        results.append(StepResult(family, a.id, b.id, expected, reason, verdict, matches(verdict, expected),
                                  name, verdicts[name].max_abs, verdicts[name].noise_ratio))
    return results


# -- the copy task (004) ------------------------------------------------------------------------

COPY_VOCAB = 14  # <pad> 0, <start> 1, the letters a..k 2..12, <end> 13 (the 004 write-up's)
COPY_END = 13


def copy_batch(gen: torch.Generator, batch: int, length: int) -> torch.Tensor:
    """004's ``data_gen``: <start>, random letters, <end>; source and target the same."""
    data = torch.randint(START + 1, COPY_END, (batch, length), generator=gen)
    data[:, 0] = START
    data[:, -1] = COPY_END
    return data


@dataclass
class CopyRun:
    variant: str
    steps: int
    losses: list[float]
    exact_match: float
    token_accuracy: float
    seconds: float

    def as_dict(self) -> dict:
        return asdict(self)


def _copy_inputs(decoding: Decoding, data: torch.Tensor) -> dict:
    """Teacher forcing: the decoder input is the target shifted by the caller (tgt[:, :-1])
    or, for a model that shifts inside (``bos=False``), the unshifted labels tgt[:, 1:]."""
    tgt = data[:, :-1] if decoding.bos else data[:, 1:]
    return {"src": data, "tgt": tgt, "pad_idx": PAD, "start": START}


def train_copy(variant: Variant, decoding: Decoding, cfg: Config, steps: int, batch: int = 32,
               length: int = 8, warmup: int | None = None, eval_batch: int = 64,
               on_step: Callable[[int, float], None] | None = None) -> CopyRun:
    with one_thread():  # tiny tensors: one intra-op thread is faster, and steady on a loaded machine
        return _train_copy(variant, decoding, cfg, steps, batch, length, warmup, eval_batch, on_step)


def _train_copy(variant, decoding, cfg, steps, batch, length, warmup, eval_batch, on_step) -> CopyRun:
    """004's recipe on CPU: Adam(betas 0.9/0.98, eps 1e-9), rate 0.5 x Noam(d_model, factor 1,
    ``warmup``, default steps // 4), dropout 0, loss NLL per real token (004's LabelSmoothing
    with smoothing 0 is the same, see the ``loss`` family); then the model's own greedy
    decoding on ``eval_batch`` fresh sequences: exact-match and token accuracy."""
    cfg = cfg.replace(vocab=COPY_VOCAB, dropout=0.0, src_len=length, tgt_len=length)
    family = _model_family(variant.family)
    weights = zero_unrepresented(family.canonical_weights(cfg), absent_fills(variant.map_for(cfg)))
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
    writes copy_task.json (each run as it finishes), copy_task.md and copy_task.png
    (loss curves; exact-match accuracy)."""
    cfg = cfg or Config()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs: list[CopyRun] = []
    for variant, decoding in decodable("encoder_decoder", cfg):
        if variants and variant.id not in variants:
            continue
        runs.append(train_copy(variant, decoding, cfg, steps, batch, eval_batch=eval_batch))
        (out / "copy_task.json").write_text(json.dumps(
            {"config": asdict(cfg), "steps": steps, "batch": batch, "runs": [r.as_dict() for r in runs]}, indent=1))
    if not runs:
        raise ConfigError(f"no encoder-decoder model to train (asked for {variants})")
    (out / "copy_task.md").write_text(copy_task_table(runs) + "\n")
    _plot_copy(runs, out / "copy_task.png")
    return runs


def copy_task_table(runs: list[CopyRun]) -> str:
    from tabulate import tabulate

    rows = [(r.variant, r.steps, f"{r.losses[0]:.3f}", f"{sum(r.losses[-10:]) / len(r.losses[-10:]):.3f}",
             f"{r.exact_match:.1%}", f"{r.token_accuracy:.1%}", f"{r.seconds:.1f}") for r in runs]
    return tabulate(rows, headers=("model", "steps", "first loss", "last-10 loss", "exact match",
                                   "token accuracy", "train s"), tablefmt="github")


def _plot_copy(runs: list[CopyRun], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for r in runs:
        left.plot(range(1, len(r.losses) + 1), r.losses, label=r.variant, linewidth=1)
    left.set_xlabel("update")
    left.set_ylabel("loss per token (NLL)")
    left.set_yscale("log")
    left.set_title("copy task: training loss")
    left.legend(fontsize=8)
    right.bar([r.variant for r in runs], [100 * r.exact_match for r in runs])
    right.set_ylabel("exact-match accuracy (%)")
    right.set_title("greedy decoding, held-out sequences")
    right.tick_params(axis="x", rotation=30, labelsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- the cache benchmark ------------------------------------------------------------------------

def generate(variant: Variant, decoding: Decoding, module, inputs: dict, steps: int, cached: bool) -> torch.Tensor:
    """Greedy tokens through ``step``, with or without the model's cache."""
    with torch.no_grad():
        state = decoding.prepare(module, inputs, cached)
        ys = prefix(variant, decoding, inputs)
        for _ in range(steps):
            ys = torch.cat([ys, decoding.step(module, state, ys).argmax(-1, keepdim=True)], dim=1)
        return ys


@dataclass
class CacheBenchRow:
    family: str
    variant: str
    seq: int
    batch: int
    cached: bool
    seconds: float
    tokens_per_s: float
    peak_bytes: int
    load: float
    threads: int

    def as_dict(self) -> dict:
        return asdict(self)


def cache_bench(lengths: list[int], cfg: Config | None = None, repeats: int = 3) -> list[CacheBenchRow]:
    """Tokens/s and peak memory of greedy generation with and without each model's cache,
    as the generated length T grows. Cached and uncached runs alternate (one window), the
    median of ``repeats`` is kept; the 1-minute load average is recorded with each row.
    One intra-op thread (the tensors are tiny; the note in the written table says so)."""
    cfg = cfg or Config()
    rows = []
    with one_thread():
        _cache_sweep(rows, lengths, cfg, repeats)
    return rows


def _cache_sweep(rows: list, lengths: list[int], cfg: Config, repeats: int) -> None:
    import os
    import statistics

    from .measure import peak_bytes

    for family in MODEL_FAMILIES:
        for t in lengths:
            c = cfg.replace(tgt_len=t, src_len=t)
            models = Models(family, c)
            for variant, decoding in decodable(family, c):
                if not decoding.cache:
                    continue
                module = models.get(variant, models.zero(variant))
                steps = t - prefix(variant, decoding, models.inputs).size(1)
                times = {True: [], False: []}
                for _ in range(repeats):
                    for cached in (True, False):
                        start = time.perf_counter()
                        generate(variant, decoding, module, models.inputs, steps, cached)
                        times[cached].append(time.perf_counter() - start)
                for cached in (True, False):
                    seconds = statistics.median(times[cached])
                    peak = peak_bytes(lambda: generate(variant, decoding, module, models.inputs, steps, cached), "cpu")
                    rows.append(CacheBenchRow(family, variant.id, t, c.batch, cached, seconds,
                                              c.batch * steps / seconds, peak, os.getloadavg()[0],
                                              torch.get_num_threads()))


def write_cache_bench(out_dir: str | Path, lengths: list[int] | None = None, cfg: Config | None = None) -> list[CacheBenchRow]:
    """Runs ``cache_bench`` and writes cache_bench.json, cache_bench.md and cache_bench.png."""
    from tabulate import tabulate

    lengths = lengths or [8, 16, 32, 64]
    if min(lengths) < 2:
        raise ConfigError(f"impossible sweep: generated lengths {lengths} must be at least 2")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = cache_bench(lengths, cfg)
    (out / "cache_bench.json").write_text(json.dumps([r.as_dict() for r in rows], indent=1))
    table = []
    for r in rows:
        if r.cached:
            base = next(x for x in rows if (x.family, x.variant, x.seq, x.cached) == (r.family, r.variant, r.seq, False))
            table.append((r.family, r.variant, r.seq, f"{r.tokens_per_s:.0f}", f"{base.tokens_per_s:.0f}",
                          f"{r.tokens_per_s / base.tokens_per_s:.2f}x", r.peak_bytes, base.peak_bytes, f"{r.load:.1f}"))
    text = tabulate(table, headers=("family", "model", "T", "tokens/s cached", "tokens/s full", "speed-up",
                                    "peak B cached", "peak B full", "load avg"), tablefmt="github")
    (out / "cache_bench.md").write_text(_machine_note(rows) + "\n\n" + text + "\n")
    _plot_cache(rows, out / "cache_bench.png")
    return rows


def _machine_note(rows: list[CacheBenchRow]) -> str:
    """Method and machine, and a warning when the machine was loaded during the sweep."""
    import os
    import platform

    cores, load = os.cpu_count() or 1, max(r.load for r in rows)
    note = (f"Greedy generation on CPU ({platform.processor() or platform.machine()}, {cores} cores, "
            f"torch {torch.__version__}, {rows[0].threads} intra-op thread(s)); per length, cached and "
            f"full-prefix runs alternate 3 times and the median is kept; peak = live tensor storages "
            f"created during one generation. B={rows[0].batch}.")
    if load > cores:
        note += (f"\n\n**Disturbed:** the 1-minute load average reached {load:.1f} on {cores} cores during "
                 f"the sweep (other jobs on the machine); timings and speed-ups are indicative only.")
    return note


def _plot_cache(rows: list[CacheBenchRow], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for key in sorted({(r.variant, r.cached) for r in rows}):
        pts = sorted((r.seq, r.tokens_per_s) for r in rows if (r.variant, r.cached) == key)
        ax.plot(*zip(*pts), marker="o", linestyle="-" if key[1] else "--",
                label=f"{key[0]} {'cache' if key[1] else 'full prefix'}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("generated length T")
    ax.set_ylabel("tokens/s (greedy, CPU)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
