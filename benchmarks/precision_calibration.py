"""Precision calibrated by its false-alarm rate: random (seed, shape) draws of the float32
check over the registry, the distribution of each variant's error ratio to its baseline,
and how many draws raise a false alarm.

    nice -n 5 python benchmarks/precision_calibration.py --dump calib.json   # 1,000 draws (an hour or more)
    python benchmarks/precision_calibration.py --draws 20 --seed 3

Every registered variant is declared correct, so in float32 a "less precise" verdict on a
variant whose float64 semantics hold is a false alarm, and so is a float64 contradiction
(a shape the variant cannot honour and does not refuse with ``supports``). Each draw is one
config (``draw_config``: the shapes users give, B 1..5, T and S 1..12 or 130..160, H 1..8,
D from 4) and one family, taken in turn so every family gets its share of draws; the
family's variants are checked against their spec in float64 and float32 on every case, as
``check`` does. ``--dump`` keeps every judged tensor's ratio and size, so the rule's
figures can be re-read without a rerun (docs/verdict-calibration.md gives them).

Two statistics are compared, each as a ratio to the baseline's (the oracle evaluated in
float32, and the family reference where it shares the variant's traits):

- **max** (the rule the RMS replaced): the largest absolute error of the tensor; the verdict
  was "equivalent" while ``err <= 2 x baseline + 1 ulp``. On a tensor of a few dozen
  elements the largest error is one draw from the tail: its ratio swings with the shape.
- **rms** (the rule now): the root mean square of the error; the verdict is "equivalent"
  while ``rms <= factor x baseline rms + 1 ulp`` (``harness.check.precision``). An average
  over every element of the tensor: the ratio of two of them is stable across shapes.

Prints, per family, the number of tensors and the median, 99th percentile and maximum of
both ratios, then the false-alarm rate of each rule (draws with at least one false alarm)
and the variants behind them.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections import defaultdict

import torch

from harness.base.config import Config
from harness.base.verdicts import Verdict
from harness.check import precision as P
from harness.check.spec import CALIBRATED_LENGTH, SpecChecker, outside_calibration
from harness.families.catalog import FAMILIES
from harness.registry import load_all, variants_of

OLD_FACTOR = 2.0
DRAWS = 1000


LONG = (130, 160)     # T and S of a long draw: over two 64-wide key blocks, one 128-wide
LONG_SHARE = 0.05     # the share of draws at those lengths (each costs as much as dozens of short ones)


def draw_config(rng: random.Random) -> Config:
    """A random config over the shapes users give: B 1..5, T and S 1..12 each (or, one draw
    in twenty, both 130..160), H 1..8, d_k even 2..16 (D = H d_k, at least 4), F 2 or 4 D.
    Every size is drawn on its own, so the families' edge shapes come up: B = 1, T = 1,
    S = 1, one head, d_k = 2, T > S and S > T."""
    heads = rng.randint(1, 8)
    d_k = rng.choice((2, 4, 6, 8, 12, 16))
    if heads * d_k < 4:  # D >= 4: a LayerNorm over 2 features is +-1 whatever its input
        d_k = 4 // heads
    d_model = heads * d_k
    if rng.random() < LONG_SHARE:
        tgt, src, batch = rng.randint(*LONG), rng.randint(*LONG), rng.randint(1, 2)
    else:
        tgt, src, batch = rng.randint(1, 12), rng.randint(1, 12), rng.randint(1, 5)
    return Config(d_model=d_model, heads=heads, d_ff=d_model * rng.choice((2, 4)), batch=batch,
                  tgt_len=tgt, src_len=src, seed=rng.randrange(2 ** 31))


def families() -> list[str]:
    """The families with a floating-point output in float32 (not the bool masks)."""
    return [name for name, fam in FAMILIES.items() if not fam.dtypes and variants_of(name)]


def old_ok(t, factor: float) -> bool:
    """The "max" rule on one tensor: largest error <= 2 x the baseline's + 1 ulp
    (the floor read back from ``allowed = factor x ref_err + floor``, the check's own)."""
    ref = t.ref_err or 0.0
    floor = t.allowed - factor * ref
    return t.err <= OLD_FACTOR * ref + floor


def _write(path: str | None, raw: list[dict], done: int, seed: int, seconds: float) -> None:
    if path:
        with open(path, "w") as f:
            json.dump({"draws": done, "seed": seed, "seconds": seconds, "tensors": raw}, f)


def run(draws: int, seed: int, only: list[str] | None, factor: float, dump: str | None = None) -> dict:
    rng = random.Random(seed)
    fams = only or families()
    ratios: dict[str, dict[str, list[float]]] = defaultdict(lambda: {"rms": [], "max": []})
    by_size: dict[str, list[float]] = defaultdict(list)  # rms ratios by the tensor's element count
    alarms_new: dict[int, list[str]] = defaultdict(list)
    alarms_old: dict[int, list[str]] = defaultdict(list)
    raw: list[dict] = []  # every tensor judged: the rule can be re-read from these without a rerun
    checked = 0
    start = time.perf_counter()
    for i in range(draws):
        if i and i % 20 == 0:  # a long run keeps what it has measured
            _write(dump, raw, i, seed, time.perf_counter() - start)
        family = fams[i % len(fams)]
        cfg = draw_config(rng)
        checker = SpecChecker({"draw": cfg}, factor=factor)
        for cache in checker.checkers.values():  # the kernel path is not part of a verdict: not recorded
            cache.record = False
        shape = (f"seed {cfg.seed} D={cfg.d_model} H={cfg.heads} B={cfg.batch} T={cfg.tgt_len} "
                 f"S={cfg.src_len} F={cfg.d_ff}")
        for v in variants_of(family):
            if v.supports(cfg):
                continue
            for r in checker.check_specs(v, ["float32"]):
                if r.dtype != "float32":
                    continue
                sem = checker.check(v, "draw", r.case, "float64")
                if sem is None:
                    continue
                if not sem.ok:  # a registered variant is declared correct: a float64 contradiction is one too
                    alarms_new[i].append(f"{family}/{v.id} {r.case}: float64 {sem.verdict} {sem.note[:80]} ({shape})")
                    raw.append({"draw": i, "family": family, "variant": v.id, "case": r.case, "tensor": "float64",
                                "verdict": str(sem.verdict), "note": sem.note[:200], "shape": shape})
                    alarms_old[i].append(alarms_new[i][-1])
                    continue
                checked += 1
                for t in r.tensors:
                    if t.verdict not in (Verdict.EQUIVALENT, Verdict.LESS_PRECISE) or t.note.startswith("semantics"):
                        continue
                    raw.append({"draw": i, "family": family, "variant": v.id, "case": r.case, "tensor": t.name,
                                "n": t.n, "ratio": t.ratio, "max_ratio": t.max_ratio, "shape": shape})
                    if math.isfinite(t.ratio):
                        ratios[family]["rms"].append(t.ratio)
                        by_size[size_bin(t.n)].append(t.ratio)
                    if math.isfinite(t.max_ratio):
                        ratios[family]["max"].append(t.max_ratio)
                    where = f"{family}/{v.id} {r.case} {t.name} ({shape})"
                    if t.verdict == Verdict.LESS_PRECISE:
                        alarms_new[i].append(f"{where}: rms ratio {t.ratio:.3g}")
                    if not old_ok(t, factor):
                        alarms_old[i].append(f"{where}: max ratio {t.max_ratio:.3g}")
                if r.verdict == Verdict.ERROR and r.ok is False:
                    alarms_new[i].append(f"{family}/{v.id} {r.case}: error {r.note[:80]} ({shape})")
    return {"ratios": ratios, "new": alarms_new, "old": alarms_old, "checked": checked, "by_size": by_size,
            "raw": raw}


SIZES = ((1, 15), (16, 63), (64, 255), (256, 10 ** 12))


def size_bin(n: int) -> str:
    lo, hi = next((lo, hi) for lo, hi in SIZES if n <= hi)
    return f"{lo}-{hi}" if hi < 10 ** 12 else f">={lo}"


def quantile(xs: list[float], q: float) -> float:
    if not xs:
        return math.nan
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))]


def summarise(paths: list[str], factor: float) -> int:
    """The figures of one or more dumps under the rule as it is now: draws, float32 spec
    tensors, the RMS ratio's median, 99th percentile and maximum overall and by tensor size,
    and the draws with a false alarm (a tensor over ``max(factor, exp(SIZE_Z / sqrt(n)))``, or
    a float64 contradiction)."""
    draws, seconds, tensors = 0, 0.0, []
    for i, path in enumerate(paths):
        with open(path) as f:
            dump = json.load(f)
        draws += dump["draws"]
        seconds += dump["seconds"]
        tensors += [{**t, "draw": (i, t["draw"])} for t in dump["tensors"] if t["draw"] < dump["draws"]]
    judged = [t for t in tensors if t["tensor"] != "float64" and math.isfinite(t["ratio"])]
    ratios = [t["ratio"] for t in judged]
    alarms: dict[tuple, list[str]] = defaultdict(list)
    reported: dict[tuple, list[str]] = defaultdict(list)  # over the allowance where "less precise" is no contradiction
    for t in tensors:
        if t["tensor"] == "float64":
            alarms[t["draw"]].append(f"{t['family']}/{t['variant']} {t['case']}: float64 {t['verdict']} ({t['shape']})")
        elif math.isfinite(t["ratio"]) and t["ratio"] > P.size_factor(factor, t["n"]):
            line = (f"{t['family']}/{t['variant']} {t['case']} {t['tensor']} ({t['shape']}): "
                    f"rms ratio {t['ratio']:.3g} on {t['n']} elements")
            (reported if _outside(t) else alarms)[t["draw"]].append(line)
    print(f"{draws} draws ({len(paths)} dump(s), {seconds:.0f} s of drawing), {len(judged)} float32 tensors judged")
    print(f"rms ratio: median {quantile(ratios, 0.5):.3g}, p99 {quantile(ratios, 0.99):.3g}, "
          f"max {max(ratios, default=math.nan):.3g}")
    for lo, hi in SIZES:
        xs = [t["ratio"] for t in judged if lo <= t["n"] <= hi]
        name = f"{lo}-{hi}" if hi < 10 ** 12 else f">={lo}"
        print(f"  n {name:<10} {len(xs):>6} tensors  p99 {quantile(xs, 0.99):.3g}  max {max(xs, default=math.nan):.3g}"
              f"  allowed {P.size_factor(factor, lo):.3g}x at n={lo}")
    print(f"false alarms (rms error <= max({factor:g}, exp({P.SIZE_Z:g}/sqrt(n)))x; float64 contradictions): "
          f"{len(alarms)} of {draws} draws")
    for key in sorted(alarms)[:10]:
        print(f"  {alarms[key][0]}" + (f" (+{len(alarms[key]) - 1} more)" if len(alarms[key]) > 1 else ""))
    print(f"over the allowance outside the calibrated regime (logits scaled, T or S > {CALIBRATED_LENGTH}: "
          f"'less precise' reported, no contradiction): {len(reported)} of {draws} draws")
    for key in sorted(reported)[:5]:
        print(f"  {reported[key][0]}" + (f" (+{len(reported[key]) - 1} more)" if len(reported[key]) > 1 else ""))
    return 1 if alarms else 0


def _outside(t: dict) -> bool:
    """Whether a dumped tensor's case lies outside the calibrated regime (its config read back
    from the draw's shape)."""
    f = dict(kv.split("=") for kv in t["shape"].split()[2:])
    cfg = Config(d_model=int(f["D"]), heads=int(f["H"]), batch=int(f["B"]), tgt_len=int(f["T"]),
                 src_len=int(f["S"]), d_ff=int(f["F"]), seed=int(t["shape"].split()[1]))
    return outside_calibration(FAMILIES[t["family"]].case_config(t["case"], cfg))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--draws", type=int, default=DRAWS, help=f"(seed, shape) draws (default {DRAWS})")
    parser.add_argument("--seed", type=int, default=0, help="seed of the draws (default 0)")
    parser.add_argument("--family", action="append", help="only these families (repeatable)")
    parser.add_argument("--factor", type=float, default=P.PRECISION_FACTOR,
                        help=f"the rms rule's factor (default: the harness's, {P.PRECISION_FACTOR:g})")
    parser.add_argument("--dump", metavar="PATH", help="also write every judged tensor's ratio and size (JSON)")
    parser.add_argument("--read", metavar="PATH", nargs="+",
                        help="summarise dumps (--dump) instead of drawing: the rule re-read over every tensor")
    args = parser.parse_args(argv)
    if args.read:
        return summarise(args.read, args.factor)
    if args.draws < 1:
        parser.error("--draws must be at least 1")
    load_all()
    unknown = [f for f in args.family or [] if f not in FAMILIES]
    if unknown:
        parser.error(f"unknown family {unknown}; families: {sorted(FAMILIES)}")
    start = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: one intra-op thread (the check's own setting)
    try:
        out = run(args.draws, args.seed, args.family, args.factor, args.dump)
    finally:
        torch.set_num_threads(threads)
    seconds = time.perf_counter() - start
    _write(args.dump, out["raw"], args.draws, args.seed, seconds)
    print(f"{args.draws} draws (seed {args.seed}), {out['checked']} float32 spec checks, {seconds:.0f} s")
    print(f"{'family':<22} {'tensors':>7}  {'rms: median':>11} {'p99':>6} {'max':>6}  "
          f"{'max: median':>11} {'p99':>6} {'max':>6}")
    everything = {"rms": [], "max": []}
    for family, r in sorted(out["ratios"].items()):
        everything["rms"] += r["rms"]
        everything["max"] += r["max"]
        print(f"{family:<22} {len(r['rms']):>7}  {quantile(r['rms'], 0.5):>11.3g} {quantile(r['rms'], 0.99):>6.3g} "
              f"{max(r['rms'], default=math.nan):>6.3g}  {quantile(r['max'], 0.5):>11.3g} "
              f"{quantile(r['max'], 0.99):>6.3g} {max(r['max'], default=math.nan):>6.3g}")
    print(f"{'all':<22} {len(everything['rms']):>7}  {quantile(everything['rms'], 0.5):>11.3g} "
          f"{quantile(everything['rms'], 0.99):>6.3g} {max(everything['rms'], default=math.nan):>6.3g}  "
          f"{quantile(everything['max'], 0.5):>11.3g} {quantile(everything['max'], 0.99):>6.3g} "
          f"{max(everything['max'], default=math.nan):>6.3g}")
    print(f"\nrms ratio by the tensor's element count (the allowance: max(factor, exp({P.SIZE_Z:g}/sqrt(n))))")
    for lo, hi in SIZES:
        name = f"{lo}-{hi}" if hi < 10 ** 12 else f">={lo}"
        xs = out["by_size"].get(name, [])
        print(f"  n {name:<10} {len(xs):>6} tensors  p99 {quantile(xs, 0.99):.3g}  max {max(xs, default=math.nan):.3g}"
              f"  allowed {P.size_factor(args.factor, lo):.3g}x at n={lo}")
    now = f"rms error <= max({args.factor:g}, exp({P.SIZE_Z:g}/sqrt(n)))x"
    for label, key, rule in (("max rule (before)", "old", f"largest error <= {OLD_FACTOR:g}x + 1 ulp"),
                             ("rms rule (now)", "new", now)):
        bad = out[key]
        print(f"\n{label}, {rule}: false alarms in {len(bad)} of {args.draws} draws "
              f"({100 * len(bad) / args.draws:.1f}%)")
        for i in sorted(bad)[:10]:
            print(f"  draw {i}: {bad[i][0]}" + (f" (+{len(bad[i]) - 1} more)" if len(bad[i]) > 1 else ""))
    return 1 if out["new"] else 0


if __name__ == "__main__":
    sys.exit(main())
