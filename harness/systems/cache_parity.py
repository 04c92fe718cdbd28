"""KV-cache parity: a model's cached decoding against its own full forward.

For every model with a cache (``register_decoding(..., cache=...)``) and every padding side
its cache declares (``Decoding.padding``: the family's right-padded case, and the
left-padded one where the model handles it), one cached session per schedule:

- ``prefill + steps``: the first half of the sequence in one call, then one token a call;
- ``chunked prefill``: ``CHUNK`` tokens a call.

Each call's log-probabilities (the token after the prefix fed so far) are compared with the
family call's (the full forward over the whole sequence) at that position, on the rows whose
token there is real, with the check's verdict (float32, the float64 runs of both giving the
noise). One verdict per call: a cache that rotates a step's keys at 0..n-1 instead of after
what it holds fails from the first step after the prefill; one that lets a step attend to
left padding fails only on the left-padded case.

Only the last position of each call is compared (the ``step`` interface returns it); the
others of a chunk are in the cache the next calls read, so a chunk that corrupts it shows
there.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch

from harness.base.boundary import describe, variant_failure
from harness.base.config import Config
from harness.base.failures import harness_traceback, traceback_if_any
from harness.base.verdicts import Verdict
from harness.check.tensors import compare_tensors
from harness.families.models import Decoding
from harness.registry import Variant
from harness.systems.decoding import check_cache
from harness.systems.models import Models, _memo, decodable, matches

CHUNK = 2
# The family's case for each padding side.
PADDED_CASES = {"encoder_decoder": {"right": "src_padded"}, "decoder_only_model": {"right": "right_pad"},
                "llama_model": {"right": "right_pad", "left": "left_pad"}}


@dataclass
class StepVerdict:
    fed: int          # tokens fed so far (the prefix length after this call)
    position: int     # the full forward's position compared
    verdict: str
    max_abs: float
    noise_ratio: float


@dataclass
class CacheParityResult:
    family: str
    variant: str
    padding: str          # "right" or "left"
    schedule: str         # "prefill + steps" or "chunked prefill"
    ok: bool
    steps: list = field(default_factory=list)   # StepVerdict per call
    error: str = ""   # the model's code raised or answered wrongly: this row, the others go on
    traceback: str | None = None  # where the harness itself failed: its whole traceback (then in as_dict)

    @property
    def first_bad(self) -> StepVerdict | None:
        return next((s for s in self.steps if not matches(s.verdict, Verdict.EQUIVALENT)), None)

    def as_dict(self) -> dict:
        return traceback_if_any(asdict(self))


def schedules(length: int) -> dict[str, list[int]]:
    """Prefix lengths after each call, for a sequence of ``length`` tokens."""
    prefill = max(1, length // 2)
    return {"prefill + steps": list(range(prefill, length + 1)),
            "chunked prefill": sorted({*range(CHUNK, length + 1, CHUNK), length})}


def _session(decoding: Decoding, module, inputs: dict, tokens: torch.Tensor, lengths: list[int]) -> list:
    with torch.no_grad():
        state = decoding.prepare(module, inputs, True)
        return [decoding.step(module, state, tokens[:, :k]).double() for k in lengths]


def check_cache_parity(family: str, cfg: Config) -> list[CacheParityResult]:
    return _memo("check_cache_parity", family, cfg, lambda: _check(family, cfg))


def _check(family: str, cfg: Config) -> list[CacheParityResult]:
    models = Models(family, cfg)
    results = []
    for variant, decoding in decodable(family, cfg):
        if not decoding.cache:
            continue
        for side in decoding.padding:
            try:
                results += _parity(models, variant, decoding, side)
            except Exception as exc:  # this model's failure: its error row, the others go on
                if not variant_failure(exc):
                    raise
                results.append(CacheParityResult(family, variant.id, side, "-", False, error=describe(exc),
                                                 traceback=harness_traceback(exc)))
    return results


def _parity(models: Models, variant: Variant, decoding: Decoding, side: str) -> list[CacheParityResult]:
    family = models.family.name
    inputs = models.family.inputs(PADDED_CASES[family][side], models.cfg)
    tokens = inputs["tgt"] if "tgt" in inputs else inputs["tokens"]
    real = inputs.get("pad", torch.ones_like(tokens, dtype=torch.bool))             # (B, T)
    shift = 0 if decoding.bos else 1   # a model that builds its own start: k tokens fed -> position k
    zero = models.zero(variant)
    full, runs = {}, {}
    plan = schedules(tokens.shape[1] - shift)
    for dtype in (torch.float32, torch.float64):
        module = models.get(variant, zero, dtype)
        with torch.no_grad():
            full[dtype] = variant.call(module, inputs).double()                     # (B, T, V)
        for name, lengths in plan.items():
            runs[dtype, name] = _session(decoding, module, inputs, tokens, lengths)
    results = []
    for name, lengths in plan.items():
        steps = []
        for i, k in enumerate(lengths):
            pos = k - 1 + shift
            rows = real[:, pos]
            c = compare_tensors(runs[torch.float32, name][i][rows], full[torch.float32][rows, pos],
                                runs[torch.float64, name][i][rows], full[torch.float64][rows, pos], torch.float32)
            steps.append(StepVerdict(k, pos, Verdict(c.verdict).value, c.max_abs, c.noise_ratio))
        ok = all(matches(s.verdict, Verdict.EQUIVALENT) for s in steps)
        results.append(CacheParityResult(family, variant.id, side, name, ok, steps))
    return results


# -- one model's cache, as check and decode both run it ----------------------------------------

@dataclass
class CacheCheck:
    """One model's k/v cache: its two cached sessions against re-running the prefix
    (``decoding.check_cache``: a cache kept across sessions) and its parity with the full
    forward on each padding side and schedule (``check_cache_parity``). ``check`` reports it
    as one row, ``decode`` as the rows of both tables."""
    family: str
    variant: str
    cache: str
    sessions: list = field(default_factory=list)   # decoding.CacheResult (one)
    parity: list = field(default_factory=list)     # CacheParityResult per padding side and schedule

    @property
    def ok(self) -> bool:
        return all(r.ok for r in (*self.sessions, *self.parity))

    @property
    def error(self) -> str:
        return next((r.error for r in (*self.sessions, *self.parity) if r.error), "")

    def worst(self) -> tuple[str, str, float]:
        """(where, verdict, max_abs) of the first regime that fails, ("", "", nan) if none."""
        for s in self.sessions:
            if not s.ok:
                return "two sessions against re-running the prefix", s.verdict, s.max_abs
        for p in self.parity:
            bad = p.first_bad
            if p.error or bad is None:
                if not p.ok:
                    return f"{p.padding} padding", Verdict.ERROR.value, float("nan")
                continue
            return (f"{p.padding} padding, {p.schedule}, from call {bad.fed} (position {bad.position})",
                    bad.verdict, bad.max_abs)
        return "", "", float("nan")

    def as_dict(self) -> dict:
        where, verdict, max_abs = self.worst()
        return {"family": self.family, "variant": self.variant, "cache": self.cache, "ok": self.ok,
                "where": where, "verdict": verdict, "max_abs": max_abs, "error": self.error,
                "sessions": [r.as_dict() for r in self.sessions], "parity": [r.as_dict() for r in self.parity]}


def check_caches(family: str, cfg: Config) -> list[CacheCheck]:
    """Every model with a cache, every regime ``check`` and ``decode`` run on it (the one
    function both commands call, so the two cannot run different regimes)."""
    sessions, parity = check_cache(family, cfg), check_cache_parity(family, cfg)
    return [CacheCheck(family, s.variant, s.cache, [s], [p for p in parity if p.variant == s.variant])
            for s in sessions]
