"""Parity of a port with the class its checkpoint belongs to, on that checkpoint's weights.

``prepare(path, port, reference=...)`` opens a checkpoint (``harness.porting.checkpoint``),
takes the class it belongs to (its Hugging Face class through ``config.json``, or a
registered variant whose ``state_dict`` it is) and the user's port (a registered variant
of the same family, or a ``Variant`` built by hand: a module with a map), and holds the
checkpoint to the class's map strictly. ``compare(comparison, tokens)`` loads the
checkpoint into both, one layer at a time, through the family's canonical names, and
measures on real token sequences:

- per-token KL(reference || port) at every position, with the worst (row, position): the
  pair agrees when the worst is at most the bound. float32: ``KL_BOUND`` (the registry's
  model parity bound); bfloat16/float16: ``NOISE_MULTIPLE`` times the reference's own KL
  against its float32 run (what rounding in that dtype alone costs), at least ``KL_BOUND``;
- top-1 and top-``TOP_K`` agreement: the fraction of positions whose argmax (top-k set)
  agree; positions where the reference's own top-1/top-2 (k-th/k+1-th) gap is within
  twice its rounding (its largest log-probability change against its run in the next
  wider dtype) are ties and may differ;
- greedy generation from each row's first ``prompt`` tokens, both by their full forward:
  the first differing (row, step), with each side's top-1/top-2 margin there;
- each side's k/v cache against its own full forward (prefill + steps, and chunked
  prefill), every call's log-probabilities with the check's verdict (the wider dtype's
  runs giving the noise).

Where the port does not agree, each classic porting mistake is undone in turn (``FIXES``:
the q/k rows' RoPE permutation, K/V heads tiled instead of grouped, a norm gain 1 + w read
as w, a missing embedding scale, an untied head the checkpoint holds no tensor for); the
one after which the port agrees with the reference names the mistake; a config value the
port ignores or misreads (the window, a soft cap, the RoPE base) and a q/k norm after RoPE
are reproduced in the class instead (``checkpoint_class_fixes``), and a cache that does not
offset positions in the side's own full forward. Each feature the config declares is reached
by the tokens or by a stress setting (``checkpoint_stress``), with a per-token KL there.
``harness.trace`` adds the first diverging sub-module on the same weights.

A canonical tensor the checkpoint does not hold (a tied head saved once) that the port
keeps as a parameter of its own is left at the port's initial values, as loading the
checkpoint by name leaves it, and said.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

import torch

from harness.base.errors import InputError
from harness.base.verdicts import Verdict
from harness.check.spec import one_thread
from harness.check.tensors import NOISE_MULTIPLE, compare_tensors
from harness.systems.cache_parity import schedules
from harness.systems.checkpoint_mistakes import name_mistakes
from harness.systems.checkpoint_sides import (
    DTYPES,
    FAMILIES,
    Comparison,
    Side,
    inputs_of,
    load,
    logprobs,
    prepare,
    read_token_file,
    run,
    sample_tokens,
    tokenize,
)
from harness.systems.checkpoint_stress import stresses
from harness.systems.parity import KL_BOUND, TOP_K, token_kl, topk_overlap

__all__ = ["DTYPES", "FAMILIES", "KL_BOUND", "ParityReport", "compare", "prepare", "read_token_file",
           "sample_tokens", "tokenize"]
TIE = 2.0  # a top-1/top-2 gap within TIE x the reference's rounding is a tie


# -- results ------------------------------------------------------------------------------------

@dataclass
class Metric:
    name: str
    verdict: Verdict     # equivalent, or different
    value: str           # the measurement, as text
    bound: str           # what it was held to
    detail: str = ""

    @property
    def ok(self) -> bool:
        return Verdict(self.verdict).agrees


@dataclass
class CacheCheck:
    side: str
    model: str
    schedule: str
    verdict: Verdict
    max_abs: float
    first_bad: str        # "call k (position p)" or ""
    ok: bool
    mistake: dict | None = None   # a cache that does not offset positions: see _positions_restarted


@dataclass
class ParityReport:
    checkpoint: str
    family: str
    reference: str
    port: str
    dtype: str
    tokens: str                      # where the sequences came from
    shape: tuple[int, int]
    kl_worst: float
    kl_mean: float
    kl_at: str
    kl_bound: float
    top1: float
    topk: float
    greedy_steps: int
    greedy_same: int                 # steps before the first difference (all: none)
    metrics: list[Metric] = field(default_factory=list)
    cache: list[CacheCheck] = field(default_factory=list)
    kl_per_position: list = field(default_factory=list)
    left_at_init: list = field(default_factory=list)
    mistakes: list = field(default_factory=list)      # [{name, explanation, kl_undone}]: see name_mistakes
    divergence: str = ""
    notes: list = field(default_factory=list)
    reached: list = field(default_factory=list)       # [{feature, how, reached, kl_removed, shape}]: see stresses
    # a half dtype: its per-token KL within the bound, the same weights' float32 run not (_wide_run)
    hidden_by_rounding: bool = False

    @property
    def agrees(self) -> bool:
        return all(m.ok for m in self.metrics) and all(c.ok for c in self.cache)

    def as_dict(self) -> dict:
        return {**asdict(self), "agrees": self.agrees}


# -- the comparison -----------------------------------------------------------------------------

def _gap(logp: torch.Tensor, k: int) -> torch.Tensor:
    """(B, T) the k-th largest minus the (k+1)-th largest log-probability (inf when the
    vocabulary has no (k+1)-th: no tie is possible there)."""
    if k >= logp.shape[-1]:
        return torch.full(logp.shape[:-1], float("inf"), dtype=logp.dtype)
    top = logp.topk(k + 1, -1).values
    return top[..., k - 1] - top[..., k]


def _greedy(side: Side, module, family: str, prompt: torch.Tensor, steps: int) -> tuple[torch.Tensor, list]:
    """Greedy tokens after ``prompt`` by the full forward each step, and every step's
    log-probabilities (B, V)."""
    ys, per_step = prompt, []
    with torch.no_grad():
        for _ in range(steps):
            lp = side.variant.call(module, inputs_of(family, ys))[:, -1].double()
            per_step.append(lp)
            ys = torch.cat([ys, lp.argmax(-1, keepdim=True)], dim=1)
    return ys[:, prompt.shape[1]:], per_step


def _cache_checks(side: Side, runs: Mapping[torch.dtype, Any], family: str, tokens: torch.Tensor,
                  dtype: torch.dtype, base: torch.dtype) -> list[CacheCheck]:
    """``side``'s cached sessions against its full forward, a verdict per call."""
    if side.decoding is None or not side.decoding.cache:
        return []
    out = []
    inputs = inputs_of(family, tokens)
    for schedule, lengths in schedules(tokens.shape[1]).items():
        results = {}
        for dt in (dtype, base):
            module, full = runs[dt]
            with torch.no_grad():
                state = side.decoding.prepare(module, inputs, True)
                results[dt] = [side.decoding.step(module, state, tokens[:, :k]).double() for k in lengths]
        checks = [compare_tensors(results[dtype][i], runs[dtype][1][:, k - 1], results[base][i],
                                  runs[base][1][:, k - 1], dtype) for i, k in enumerate(lengths)]
        bad = [i for i, ch in enumerate(checks) if not Verdict(ch.verdict).agrees]
        first = "" if not bad else f"call {bad[0] + 1} ({lengths[bad[0]]} tokens fed, position {lengths[bad[0]] - 1})"
        verdict = Verdict.worst(ch.verdict for ch in checks)
        mistake = _positions_restarted(side, runs, family, tokens, lengths, results, dtype, base) if bad else None
        out.append(CacheCheck(side.role, side.name, schedule, verdict, max(ch.max_abs for ch in checks), first,
                              not bad, mistake))
    return out


def _positions_restarted(side: Side, runs: Mapping[torch.dtype, Any], family: str, tokens: torch.Tensor,
                         lengths: list[int], results: dict, dtype: torch.dtype, base: torch.dtype) -> dict | None:
    """A cache that does not offset positions, named by reproducing it in ``side``'s own full
    forward: fed positions restarting at 0 with each call's tokens (what a step that numbers
    only the tokens it feeds gives RoPE), it agrees with every cached call. None where it
    does not, or where the family's call takes no positions."""
    if family != "llama_model":
        return None
    starts = [0] + lengths[:-1]
    positions = torch.cat([torch.arange(end - start) for start, end in zip(starts, lengths)])
    inputs = {**inputs_of(family, tokens), "positions": positions.expand_as(tokens).contiguous()}
    full = {}
    with torch.no_grad():
        for dt in (dtype, base):
            full[dt] = side.variant.call(runs[dt][0], inputs).double()
    checks = [compare_tensors(results[dtype][i], full[dtype][:, k - 1], results[base][i], full[base][:, k - 1], dtype)
              for i, k in enumerate(lengths)]
    if not all(Verdict(ch.verdict).agrees for ch in checks):
        return None
    kl = max(float(token_kl(full[dtype][:, k - 1], results[dtype][i]).max()) for i, k in enumerate(lengths))
    return {"name": "KV cache does not offset positions",
            "explanation": f"the {side.role}'s cached calls give RoPE positions counted from 0 in each call's new "
                           "tokens, not from the tokens the cache already holds (its step must pass positions "
                           "fed .. k-1)", "kl_undone": kl, "by": f"reproduced in the {side.role}'s full forward"}


def compare(comparison: Comparison, tokens: torch.Tensor, *, prompt: int = 2, steps: int | None = None,
            source: str = "", explain: bool = True) -> ParityReport:
    """Every metric of the module docstring on ``tokens`` (B, T)."""
    with one_thread():
        return _compare(comparison, tokens, prompt, steps, source, explain)


def _compare(c: Comparison, tokens: torch.Tensor, prompt: int, steps: int | None, source: str,
             explain: bool) -> ParityReport:
    fam, dt, base = c.family, c.dtype, c.base
    if tokens.shape[1] < 2:
        raise InputError("the comparison needs sequences of at least 2 tokens")
    if fam == "decoder_only_model" and tokens.shape[1] > c.cfg.tgt_len:
        raise InputError(f"sequences of {tokens.shape[1]} tokens exceed the model's {c.cfg.tgt_len} positions")
    prompt = max(1, min(prompt, tokens.shape[1] - 1))
    steps = tokens.shape[1] - prompt if steps is None else steps
    if fam == "decoder_only_model":
        steps = min(steps, c.cfg.tgt_len - prompt)
    runs = _runs(c, tokens)
    la, lb, la0 = runs["reference"][dt][1], runs["port"][dt][1], runs["reference"][base][1]
    kl = token_kl(la, lb)
    r, t = divmod(int(kl.argmax()), kl.shape[1])
    bound, bound_text = _bound(dt, la, la0)
    kl_worst = float(kl.max())
    metrics = [Metric("per-token KL", _verdict(kl_worst <= bound),
                      f"worst {kl_worst:.3g} at row {r}, position {t}; mean {float(kl.mean()):.3g}", bound_text)]
    if dt != torch.float32:  # a difference below the half dtype's rounding shows in the same weights in float32
        metrics.append(_wide_run(runs, base))
    tie = TIE * float((la - la0).abs().max())
    (top1, topk), ranked = _agreement(la, lb, tie)
    greedy, first_step = _greedy_metric(c, runs, tokens, prompt, steps, tie)
    metrics += [*ranked, greedy]
    cache = []
    for side in (c.reference, c.port):
        cache += _cache_checks(side, runs[side.role], fam, tokens, dt, base)
    report = ParityReport(
        str(c.checkpoint.path), fam, c.reference.name, c.port.name, _name(dt), source, tuple(tokens.shape),
        kl_worst, float(kl.mean()), f"row {r}, position {t}", bound, top1, topk, steps, first_step,
        metrics, cache, kl.max(0).values.tolist(), list(c.left_at_init))
    for side in (c.reference, c.port):
        if side.decoding is None or not side.decoding.cache:
            report.notes.append(f"{side.role} {side.name} declares no cache: its cache parity is not measured")
    if c.left_at_init:
        report.notes.append(
            f"the checkpoint holds no tensor for {', '.join(c.left_at_init)} (saved once, tied to "
            f"{', '.join(sorted({c.reader.entries[n].to for n in c.left_at_init}))}); the port keeps its own "
            "parameter there at its initial values, as loading the checkpoint by name leaves it")
    failing = _stressed(c, report, tokens, bound, bound_text)
    report.hidden_by_rounding = dt != torch.float32 and metrics[0].ok and not metrics[1].ok
    if explain and not report.agrees and not metrics[0].ok:
        report.mistakes = name_mistakes(c, tokens, la, bound)
    elif explain and report.hidden_by_rounding:  # named in float32, where the half dtype cannot hide it
        report.mistakes = name_mistakes(dataclasses.replace(c, dtype=base), tokens, la0, KL_BOUND)
    elif explain and failing is not None:
        stress, reference = failing
        report.mistakes = name_mistakes(c, stress.tokens, reference, bound, stress.transform)
    if explain:
        report.mistakes += list({ch.mistake["name"]: ch.mistake for ch in cache if ch.mistake}.values())
    return report


def _runs(c: Comparison, tokens: torch.Tensor) -> dict[str, dict[torch.dtype, tuple]]:
    """{role: {dtype: (module, log-probabilities)}}: each side loaded in the comparison's
    dtype and in its base."""
    runs: dict[str, dict[torch.dtype, tuple]] = {}
    for side in (c.reference, c.port):
        runs[side.role] = {}
        for d in (c.dtype, c.base):
            module, _ = load(c, side, d)
            runs[side.role][d] = (module, logprobs(side, module, c.family, tokens))
    return runs


def _bound(dt: torch.dtype, la: torch.Tensor, la0: torch.Tensor) -> tuple[float, str]:
    """The per-token KL bound in ``dt`` and its text: float32's, else the noise multiple of the
    reference's own KL against its float32 run ``la0``."""
    if dt == torch.float32:
        return KL_BOUND, f"<= {KL_BOUND:g} (float32)"
    baseline = float(token_kl(la0, la).max())
    bound = max(KL_BOUND, NOISE_MULTIPLE * baseline)
    return bound, (f"<= {bound:.3g} ({NOISE_MULTIPLE:g} x the reference's own {_name(dt)} KL against its "
                   f"float32 run, {baseline:.3g})")


def _agreement(la: torch.Tensor, lb: torch.Tensor, tie: float) -> tuple[tuple[float, float], list[Metric]]:
    """((top-1, top-k) agreement, their metrics): positions outside ties must agree."""
    same1 = la.argmax(-1) == lb.argmax(-1)
    ties1 = _gap(la, 1) <= tie
    top1 = float(same1.double().mean())
    missed = int((~same1 & ~ties1).sum())
    overlap = topk_overlap(la, lb, TOP_K)
    tiesk = _gap(la, TOP_K) <= tie
    topk = float(overlap.mean())
    missed_k = int(((overlap < 1) & ~tiesk).sum())
    return (top1, topk), [
        Metric("top-1 agreement", _verdict(missed == 0),
               f"{top1:.4f} ({int(same1.sum())} of {same1.numel()} positions)",
               f"every position outside ties (a top-1/top-2 gap <= {tie:.2g}: {int(ties1.sum())})",
               "" if missed == 0 else f"{missed} positions differ outside ties"),
        Metric(f"top-{TOP_K} agreement", _verdict(missed_k == 0),
               f"{topk:.4f} (mean overlap of the top-{TOP_K} sets)",
               f"every position outside ties at the {TOP_K}th place (gap <= {tie:.2g})",
               "" if missed_k == 0 else f"{missed_k} positions' sets differ outside ties")]


def _greedy_metric(c: Comparison, runs: Mapping[str, Mapping[torch.dtype, tuple]], tokens: torch.Tensor,
                   prompt: int, steps: int, tie: float) -> tuple[Metric, int]:
    """Greedy generation from each row's first ``prompt`` tokens on both sides, and the first
    differing step (``steps`` where none differs); a difference at a tie of the reference's
    passes."""
    pa, step_a = _greedy(c.reference, runs["reference"][c.dtype][0], c.family, tokens[:, :prompt], steps)
    pb, step_b = _greedy(c.port, runs["port"][c.dtype][0], c.family, tokens[:, :prompt], steps)
    diff = (pa != pb)
    first_step = steps
    detail, verdict = "", Verdict.EQUIVALENT
    if diff.any():
        first_step = int(diff.any(0).nonzero()[0])
        row = int(diff[:, first_step].nonzero()[0])
        ma = float(_gap(step_a[first_step][row:row + 1], 1))
        mb = float(_gap(step_b[first_step][row:row + 1], 1))
        at_tie = ma <= tie
        verdict = _verdict(at_tie)
        detail = (f"first difference at row {row}, step {first_step}: {int(pa[row, first_step])} vs "
                  f"{int(pb[row, first_step])} (top-1/top-2 margins {ma:.3g} vs {mb:.3g}"
                  + ("; the reference's is a tie" if at_tie else "") + ")")
    return Metric("greedy generation", verdict,
                  f"{first_step} of {steps} steps the same" if diff.any() else f"all {steps} steps the same",
                  f"the same tokens from a {prompt}-token prompt, {pa.shape[0]} rows", detail), first_step


def _wide_run(runs: Mapping[str, Mapping[torch.dtype, tuple]], base: torch.dtype) -> Metric:
    """The port against the class on the same weights in ``base`` (float32), held to the
    float32 bound: a half dtype's rounding allows a per-token KL in the 1e-2 range, so a
    mistake that float32 sees at 1e-5 (RoPE rows unpermuted on a small model) would pass
    within it; the port's own float32 run cannot hide it."""
    kl = token_kl(runs["reference"][base][1], runs["port"][base][1])
    worst = float(kl.max())
    r, t = divmod(int(kl.argmax()), kl.shape[1])
    return Metric(f"{_name(base)} run: per-token KL", _verdict(worst <= KL_BOUND),
                  f"worst {worst:.3g} at row {r}, position {t}; mean {float(kl.mean()):.3g}",
                  f"<= {KL_BOUND:g} (both sides' {_name(base)} run on the same weights: what the half dtype's "
                  "rounding would hide)")


def _stressed(c: Comparison, report: ParityReport, tokens: torch.Tensor, bound: float, bound_text: str):
    """Each declared feature's setting (``stresses``) in ``report.reached``; where the tokens as
    given do not reach it, a per-token KL metric on the setting that does. (the first failing
    stress, the reference's log-probabilities there) or None."""
    failing = None
    found = stresses(c, tokens, bound)
    report.reached = [s.as_dict() for s in found]
    for s in found:
        if not s.reached or (s.transform is None and s.tokens is tokens):
            continue
        reference = run(c, c.reference, s.tokens, s.transform)
        kl = token_kl(reference, run(c, c.port, s.tokens, s.transform))
        worst = float(kl.max())
        r, t = divmod(int(kl.argmax()), kl.shape[1])
        here, here_text = bound, bound_text
        if c.dtype != torch.float32:  # the setting's own rounding: scaled weights round differently
            wide = run(dataclasses.replace(c, dtype=torch.float32), c.reference, s.tokens, s.transform)
            baseline = float(token_kl(wide, reference).max())
            here = max(KL_BOUND, NOISE_MULTIPLE * baseline)
            here_text = (f"<= {here:.3g} ({NOISE_MULTIPLE:g} x the reference's own {_name(c.dtype)} KL against its "
                         f"float32 run on this setting, {baseline:.3g})")
        report.metrics.append(Metric(f"per-token KL, {s.feature}", _verdict(worst <= here),
                                     f"worst {worst:.3g} at row {r}, position {t} ({s.how})", here_text))
        if worst > here and failing is None:
            failing = (s, reference)
    return failing


def _verdict(ok: bool) -> Verdict:
    return Verdict.EQUIVALENT if ok else Verdict.DIFFERENT


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


