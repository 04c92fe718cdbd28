"""Greedy decoding of whole models, and the incremental cache against re-running the prefix."""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass, field

import torch

from harness.base.boundary import describe, failure_text, variant_failure
from harness.base.config import Config
from harness.base.failures import harness_traceback, traceback_if_any
from harness.base.verdicts import Verdict
from harness.check.tensors import compare_tensors
from harness.families.models import PAD, Decoding
from harness.registry import Variant
from harness.systems.models import PROMPT, Models, _memo, decodable, expectation, matches


def greedy(variant: Variant, decoding: Decoding, module, inputs: dict, steps: int) -> torch.Tensor:
    """(B, steps) tokens from the model's own greedy loop, or the harness's loop over
    ``step`` after ``prefix`` (the start symbol, or the decoder-only prompt)."""
    if decoding.greedy is not None:
        with torch.no_grad():
            return decoding.greedy(module, inputs, steps)
    ys = greedy_steps(variant, decoding, module, inputs, steps, cached=False)
    return ys[:, ys.size(1) - steps:]


def greedy_steps(variant: Variant, decoding: Decoding, module, inputs: dict, steps: int, *,
                 cached: bool) -> torch.Tensor:
    """``prefix`` and ``steps`` greedy tokens after it through ``step``, with or without the
    model's cache (the harness's one greedy loop)."""
    with torch.no_grad():
        state = decoding.prepare(module, inputs, cached)
        ys = prefix(variant, decoding, inputs)
        for _ in range(steps):
            ys = torch.cat([ys, decoding.step(module, state, ys).argmax(-1, keepdim=True)], dim=1)
        return ys


def prefix(variant: Variant, decoding: Decoding, inputs: dict) -> torch.Tensor:
    """What the generated tokens follow: the start symbol (none for a model whose own
    start is built in, ``bos=False``), or the decoder-only prompt."""
    if variant.family != "encoder_decoder":  # the decoder-only families
        return inputs["tokens"][:, :PROMPT]
    return torch.full((inputs["src"].size(0), 1 if decoding.bos else 0), inputs["start"], dtype=torch.long,
                      device=inputs["src"].device)


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


# Greedy decoding compares nothing on weights where every model emits one repeated token (on
# the canonical weights the tied embedding makes "repeat the newest token" a fixed point of the
# pre-norm models, and the post-norm reference emits the same token at every step), so a
# loop that feeds only the newest token "agrees". Greedy runs on sharpened weights: every
# feed-forward input weight (``...w1.weight``) x3, a deterministic change that keeps tied
# tensors tied (measured: the encoder-decoder reference then emits 2 tokens with 4 changes
# over 3 rows x 6 steps, the decoder-only one 3 tokens, 4 changes; before: 0 changes).
SHARPEN = 3.0
SHARPENED = ("w1.weight",)


def sharpen(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The canonical weights with each feed-forward input weight scaled by ``SHARPEN``."""
    return {n: (t * SHARPEN if n.endswith(SHARPENED) else t) for n, t in weights.items()}


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
    # per-step log-probabilities of b along a's greedy tokens against a's (float32, with the
    # float64 runs for the noise): the verdict and the largest difference
    logprobs: str = ""
    logprob_max_abs: float = math.nan
    note: str = ""
    error: str = ""   # a model that failed (its code raised or answered wrongly): the pair's row says it
    traceback: str | None = None  # where the harness itself failed: its whole traceback (then in as_dict)

    def as_dict(self) -> dict:
        return traceback_if_any(asdict(self))


def _margin(decoding: Decoding, variant: Variant, module, inputs: dict, row: int, *, generated: list[int]) -> float:
    """Top-1 minus top-2 log-probability of the model at one step of one row."""
    one = {k: (v[row:row + 1] if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
    head = prefix(variant, decoding, one)
    ys = torch.cat([head, torch.tensor([generated], dtype=torch.long, device=head.device)], dim=1)
    with torch.no_grad():
        top = decoding.step(module, decoding.prepare(module, one, False), ys)[0].topk(2).values
    return float(top[0] - top[1])


def compare_greedy(family: str, cfg: Config) -> list[DecodeResult]:
    """Every pair of decodable models on sharpened weights: tokens from each model's own
    greedy loop, compared; pairs declared equivalent (on the family's decode case) must emit
    the same tokens and give the same per-step log-probabilities along them. A model's own
    loop must also emit what the argmax of its own ``step`` gives (a pair with itself)."""
    return _memo("compare_greedy", family, cfg, lambda: _compare_greedy(family, cfg))


def _loop_logprobs(variant: Variant, decoding: Decoding, module, inputs: dict, tokens: torch.Tensor) -> torch.Tensor:
    """(B, steps, V): the log-probabilities ``step`` gives before each of ``tokens``
    (the generated ones, after the prefix), re-running the prefix each step."""
    ys = torch.cat([prefix(variant, decoding, inputs), tokens], dim=1)
    start = ys.size(1) - tokens.size(1)
    with torch.no_grad():
        state = decoding.prepare(module, inputs, False)
        return torch.stack([decoding.step(module, state, ys[:, :k]) for k in range(start, ys.size(1))], 1).double()


def _first_diff(rows_a: list, rows_b: list) -> tuple[int, int] | None:
    for r, (ra, rb) in enumerate(zip(rows_a, rows_b)):
        if ra != rb:
            return r, next((i for i, (x, y) in enumerate(zip(ra, rb)) if x != y), min(len(ra), len(rb)))
    return None


def _compare_greedy(family: str, cfg: Config) -> list[DecodeResult]:
    models = Models(family, cfg, transform=sharpen)
    fam = models.family
    steps = decode_steps(family, cfg)
    results = []
    tokens: dict[tuple, torch.Tensor] = {}

    def run(v, d, module, zero):
        if (v.key, zero) not in tokens:
            tokens[v.key, zero] = greedy(v, d, module, models.inputs, steps)
        return tokens[v.key, zero]

    def failed(a: str, b: str, expected, reason: str, exc: Exception) -> DecodeResult:
        if not variant_failure(exc):
            raise exc
        return DecodeResult(family, a, b, expected, reason, False, False, "", math.nan, math.nan,
                            error=failure_text(exc), traceback=harness_traceback(exc))

    for v, d in decodable(family, cfg):  # a model's own loop against the argmax of its own step
        if d.greedy is None:
            continue
        try:
            own, loop = _own_loop(models, v, d, steps, run)
        except Exception as exc:  # this model's failure: its row, the others go on
            results.append(failed(v.id, f"{v.id} (argmax of its step)", Verdict.EQUIVALENT, "", exc))
            continue
        rows_a, rows_b = [_upto_pad(r) for r in own], [_upto_pad(r) for r in loop[:, loop.size(1) - steps:]]
        diff = _first_diff(rows_a, rows_b)
        results.append(DecodeResult(
            family, v.id, f"{v.id} (argmax of its step)", Verdict.EQUIVALENT, "", diff is None, diff is None,
            "" if diff is None else f"row {diff[0]}, step {diff[1]}", math.nan, math.nan, rows_a, rows_b,
            note="" if diff is None else "its own greedy loop does not emit the argmax of its own step"))
    for (va, da), (vb, db) in itertools.combinations(decodable(family, cfg), 2):
        try:
            results.append(_pair(models, fam, va, da, vb, db, steps, run))
        except Exception as exc:  # one of the two failed: the pair's error row
            results.append(failed(va.id, vb.id, *expectation(fam, va, vb), exc))
    return results


def _own_loop(models: Models, v: Variant, d: Decoding, steps: int, run) -> tuple[torch.Tensor, torch.Tensor]:
    zero = models.zero(v)
    module = models.get(v, zero)
    own = run(v, d, module, zero)
    return own, greedy_steps(v, d, module, models.inputs, steps, cached=False)


def _pair(models: Models, fam, va: Variant, da: Decoding, vb: Variant, db: Decoding, steps: int,
          run) -> DecodeResult:
    family = fam.name
    zero = models.zero(va, vb)
    ma, mb = models.get(va, zero), models.get(vb, zero)
    ta, tb = run(va, da, ma, zero), run(vb, db, mb, zero)
    rows_a, rows_b = [_upto_pad(r) for r in ta], [_upto_pad(r) for r in tb]
    expected, reason = expectation(fam, va, vb)
    first, margin_a, margin_b = "", math.nan, math.nan
    diff = _first_diff(rows_a, rows_b)
    if diff is not None:
        r, s = diff
        first = f"row {r}, step {s}"
        margin_a = _margin(da, va, ma, models.inputs, r, generated=rows_a[r][:s])
        margin_b = _margin(db, vb, mb, models.inputs, r, generated=rows_b[r][:s])
    same = not first
    verdict, gap, note = "", math.nan, ""
    if expected == Verdict.EQUIVALENT:  # per-step log-probabilities along a's tokens
        lp = {dt: (_loop_logprobs(va, da, models.get(va, zero, dt), models.inputs, ta),
                   _loop_logprobs(vb, db, models.get(vb, zero, dt), models.inputs, ta))
              for dt in (torch.float32, torch.float64)}
        c = compare_tensors(*lp[torch.float32], *lp[torch.float64], torch.float32)
        verdict, gap = str(c.verdict), c.max_abs
        if not matches(c.verdict, Verdict.EQUIVALENT):
            note = f"per-step log-probabilities along {va.id}'s tokens differ by {c.max_abs:.3g}"
    ok = (same and (not verdict or matches(verdict, Verdict.EQUIVALENT))) if expected == Verdict.EQUIVALENT \
        else True  # different models may still agree
    return DecodeResult(family, va.id, vb.id, expected, reason, same, ok, first,
                        margin_a, margin_b, rows_a, rows_b, verdict, gap, note)


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
    error: str = ""   # the model's code raised or answered wrongly: this row, the others go on
    traceback: str | None = None  # where the harness itself failed: its whole traceback (then in as_dict)

    def as_dict(self) -> dict:
        return traceback_if_any(asdict(self))


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
    """Two cached sessions on one module, the second on another sequence (the batch rows
    rolled), each against the whole prefix re-run: a cache kept across sessions (never
    reset by ``prepare``) shows in the second. The worst of the two is the verdict."""
    models = Models(family, cfg)
    tokens = _session_tokens(family, models.inputs)
    sessions = (tokens, tokens.roll(1, 0) if tokens.size(0) > 1 else tokens.flip(1))
    results = []
    for variant, decoding in decodable(family, cfg):
        if not decoding.cache:
            continue
        try:
            checks = _cache_sessions(models, variant, decoding, sessions)
        except Exception as exc:  # this model's failure: its error row, the others go on
            if not variant_failure(exc):
                raise
            results.append(CacheResult(family, variant.id, decoding.cache, Verdict.ERROR.value, False, math.nan,
                                       math.nan, tokens.size(1), error=describe(exc),
                                       traceback=harness_traceback(exc)))
            continue
        v = max(checks, key=lambda c: (not matches(c.verdict, Verdict.EQUIVALENT), c.max_abs))
        results.append(CacheResult(family, variant.id, decoding.cache, v.verdict,
                                   all(matches(c.verdict, Verdict.EQUIVALENT) for c in checks), v.max_abs,
                                   v.noise_ratio, tokens.size(1)))
    return results


def _cache_sessions(models: Models, variant: Variant, decoding: Decoding, sessions) -> list:
    zero = models.zero(variant)
    runs = {}
    for dtype in (torch.float32, torch.float64):
        module = models.get(variant, zero, dtype)
        for i, seq in enumerate(sessions):  # the cached sessions first, one after the other
            runs[dtype, True, i] = step_logprobs(decoding, module, models.inputs, seq, True).double()
        for i, seq in enumerate(sessions):
            runs[dtype, False, i] = step_logprobs(decoding, module, models.inputs, seq, False).double()
    return [compare_tensors(runs[torch.float32, True, i], runs[torch.float32, False, i],
                            runs[torch.float64, True, i], runs[torch.float64, False, i], torch.float32)
            for i in range(len(sessions))]
