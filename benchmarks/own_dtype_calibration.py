"""The half-precision rule's factor, calibrated by measurement: false alarms over random
draws of correct kernels judged in their own dtype, and the deliberately wrong half-only
kernels still caught.

    nice -n 5 python benchmarks/own_dtype_calibration.py            # 40 draws (minutes)
    python benchmarks/own_dtype_calibration.py --draws 2 --seed 1

Rule (``harness.check.own_dtype``): a tensor passes while
``max|kernel - oracle64| <= factor * max|oracle_in_dtype - oracle64| + atol``. For every
tensor of every spec this script records the smallest factor that tensor needs,
``(err - atol) / ref_err`` (0 when ``err <= atol``), so the false alarms at any factor are
counted from one run.

Correct kernels: ``half_tiled`` (float16/bfloat16 only) and every CPU kernel of the registry
that computes the same function in half precision, judged by the same rule as if it ran only
in half: ``eager`` and ``sdpa_math`` (PyTorch's own ops), ``sdpa_flash_cpu`` (PyTorch's CPU
flash kernel; the cases its bottom-right diagonal meets); ``blocked`` (the project's float
flash kernel) is not among them: in half it keeps its running sum and accumulator in the half
dtype, and is measured beside the wrong kernels), and ``triton_flash`` with ``--triton``
(the interpreter; slow). Each draw is
one random config (seed, H, d, B, T, S, H_kv); every case of the family, both half dtypes.
Wrong kernels: tests/wrong_half_kernels.py, the same draws; a wrong kernel is caught in a
draw when some case needs more than the factor.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

from harness.base.config import Config
from harness.base.dtypes import HALF_DTYPES
from harness.check import own_dtype
from harness.check.spec import SpecChecker
from harness.registry import get_variant, load_file, load_packs, scratch
from harness.trace.kernel_explain import candidates

DRAWS = 40
FACTORS = (1.5, 2.0, 3.0, 4.0, 6.0, 8.0)
# The atol scales tried per statistic (the absolute term is at the scale of the largest error).
ATOL_SCALES = {"max": (1.0, 0.25, 0.1), "rms": (0.1, 0.02), "mean": (0.1, 0.02)}
CORRECT = ("half_tiled", "eager", "sdpa_math", "sdpa_flash_cpu")
# Run in half, the float kernel ``blocked`` keeps its running sum and accumulator in the half
# dtype: not the careful implementation, measured beside the wrong kernels.
CARELESS = ("blocked",)
WRONG_FILE = Path(__file__).resolve().parent.parent / "tests" / "wrong_half_kernels.py"


def draw_config(rng: random.Random) -> Config:
    """A small random kernel config: H, d, B, T, S and the K/V heads drawn on their own."""
    heads = rng.choice((1, 2, 3, 4, 6, 8))
    d_k = rng.choice((4, 8, 12, 16, 32))
    kv = rng.choice([h for h in (1, 2, heads) if heads % h == 0])
    return Config(d_model=heads * d_k, heads=heads, d_ff=4 * heads * d_k, batch=rng.randint(1, 3),
                  tgt_len=rng.randint(1, 12), src_len=rng.randint(1, 12), kv_heads=kv,
                  seed=rng.randrange(2 ** 31))


def needed(figures: tuple, atol_scale: float, statistic: str) -> float:
    """The smallest factor under which ``err <= factor * ref + atol_scale * atol`` holds, on
    the largest error (``max``, flash-attention's) or the mean one (``mean``, FlexAttention's)."""
    e_max, r_max, e_mean, r_mean, atol, e_rms, r_rms = figures
    err, ref = {"max": (e_max, r_max), "mean": (e_mean, r_mean), "rms": (e_rms, r_rms)}[statistic]
    slack = err - atol_scale * atol
    if slack <= 0:
        return 0.0
    return slack / ref if ref > 0 else math.inf


def half_only(variant):
    """The variant as if it ran only in half precision (judged by the own-dtype rule)."""
    return variant if variant.own_dtype_semantics else dataclasses.replace(variant, dtypes=HALF_DTYPES)


def _stats(a: torch.Tensor, truth: torch.Tensor) -> tuple[float, float]:
    """(max, mean) of |a - truth| over the elements finite in both (inf: a NaN pattern differs)."""
    if a.shape != truth.shape or not torch.equal(torch.isfinite(a), torch.isfinite(truth)):
        return math.inf, math.inf, math.inf
    ok = torch.isfinite(truth)
    d = (a[ok] - truth[ok]).abs()
    return (float(d.max()), float(d.mean()), float(d.pow(2).mean().sqrt())) if d.numel() else (0.0, 0.0, 0.0)


def measure(variants, cfg: Config, cases: tuple[str, ...] | None = None) -> dict[str, list[tuple]]:
    """Per variant: (case, dtype, tensor, figures) for every tensor of every case it takes,
    figures = (max err, max ref err, mean err, mean ref err, atol at scale 1, rms err, rms ref
    err), the spec's own runs
    (``SpecChecker``'s cache: the variant in the dtype, the float64 oracle on the rounded
    inputs, the oracle computed in the dtype)."""
    engine = SpecChecker({"draw": cfg})
    checker = engine.checkers["draw"]
    out = defaultdict(list)
    for v in variants:
        family = v.family_spec
        for dtype_name in HALF_DTYPES:
            dtype = getattr(torch, dtype_name)
            for case in (c.name for c in family.cases if cases is None or c.name in cases):
                if engine.check(v, "draw", case, dtype_name) is None:
                    continue
                zero = engine._zero(v, case, checker)
                run = checker.run(v, case, zero, dtype)
                if run.error:
                    out[v.id].append((case, dtype_name, "run", (math.inf, 0.0, math.inf, 0.0, 0.0, math.inf, 0.0)))
                    continue
                truth = checker.oracle(family, v.traits, case, zero, dtype, rounded=dtype)
                ref = checker.oracle(family, v.traits, case, zero, dtype, compute=dtype)
                scale = own_dtype.gradient_scale(truth.tensors)
                for name, t in truth.tensors.items():
                    if name not in run.tensors:
                        continue
                    e_max, e_mean, e_rms = _stats(run.tensors[name], t)
                    r_max, r_mean, r_rms = (x if x < math.inf else 0.0 for x in _stats(ref.tensors[name], t))
                    atol = own_dtype.rounding_atol(t, dtype, 0.0 if name == "output" else scale) / own_dtype.ATOL_SCALE
                    out[v.id].append((case, dtype_name, name, (e_max, r_max, e_mean, r_mean, atol, e_rms, r_rms)))
    return out


# Each wrong kernel's mistake as a reading of the declared traits (``harness.trace.kernel_explain``'s
# candidates): a draw can show it only where the two float64 oracles differ on some case.
MISREADS = {"half_causal_swapped": "causal='bottom_right'", "half_heads_tiled": "gqa_grouping='tiled'",
            "half_softcap_missing": "the softcap ignored", "half_window_off_by_one": "window left +1"}


def can_show(vid: str, cfg: Config, cases: tuple[str, ...] | None = None) -> bool:
    """Whether the mistake of wrong kernel ``vid`` changes the float64 oracle on some case of
    ``cfg`` (True for the numerics bug and the careless kernel, whose mistake is rounding)."""
    if vid not in MISREADS:
        return True
    variant = get_variant("attention_kernel", vid)
    family = variant.family_spec
    make = next(m for label, _, m in candidates() if label == MISREADS[vid])
    checker = SpecChecker({"draw": cfg}).checkers["draw"]
    declared = family.semantic_traits(variant.traits)
    for case in (c.name for c in family.cases if cases is None or c.name in cases):
        traits = make(declared, checker.inputs(family, case))
        if traits is None:
            continue
        zero = checker.fills(variant)
        a = checker.oracle(family, declared, case, zero, torch.float64)
        b = checker.oracle(family, traits, case, zero, torch.float64)
        for name, t in a.tensors.items():
            u = b.tensors[name]
            if not torch.equal(t.isnan(), u.isnan()) or float((t - u).nan_to_num().abs().max()) > 1e-9:
                return True
    return False


def quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else math.nan


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=DRAWS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--triton", action="store_true", help="also triton_flash (TRITON_INTERPRET=1 on CPU)")
    parser.add_argument("--cases", help="only these cases, comma-separated (default: every case)")
    parser.add_argument("--save", metavar="PATH", help="also write every tensor's figures as JSON lines")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    load_packs()
    cases = tuple(args.cases.split(",")) if args.cases else None
    names = CORRECT + (("triton_flash",) if args.triton else ())
    rng = random.Random(args.seed)
    start = time.perf_counter()
    correct: dict[str, list] = defaultdict(list)     # variant -> (draw, (err, ref, atol)) of every tensor
    wrong: dict[str, list] = defaultdict(list)
    shows: dict[str, set] = defaultdict(set)         # wrong kernel -> the draws whose shapes can show its mistake
    with scratch():
        wrongs = load_file(WRONG_FILE) + [half_only(get_variant("attention_kernel", n)) for n in CARELESS]
        good = [half_only(get_variant("attention_kernel", n)) for n in names]
        for draw in range(args.draws):
            cfg = draw_config(rng)
            for vid, rows in measure(good, cfg, cases).items():
                correct[vid] += [(draw, x[3]) for x in rows]
            for vid, rows in measure(wrongs, cfg, cases).items():
                wrong[vid] += [(draw, x[3]) for x in rows]
                if can_show(vid, cfg, cases):
                    shows[vid].add(draw)
    took = time.perf_counter() - start
    if args.save:
        with open(args.save, "w") as f:
            for kind, rows in (("correct", correct), ("wrong", wrong)):
                for vid, xs in rows.items():
                    for draw, fig in xs:
                        f.write(json.dumps({"kind": kind, "variant": vid, "draw": draw, "figures": fig}) + "\n")
    print(f"{args.draws} draws (seed {args.seed}), float16 and bfloat16, "
          f"{'cases ' + ', '.join(cases) if cases else 'every case'}; {took:.0f} s")
    for statistic, scales in ATOL_SCALES.items():
        for scale in scales:
            now = " (now)" if (scale, statistic) == (own_dtype.ATOL_SCALE, own_dtype.STATISTIC) else ""
            print(f"\n{statistic} error, atol x {scale:g}{now}: the factor each tensor needs, "
                  "(err - atol) / ref_err, on correct kernels:")
            print(f"  {'kernel':16s} {'tensors':>8s} {'median':>7s} {'p99':>7s} {'max':>7s}")
            every = []
            for vid in names:
                xs = [needed(f, scale, statistic) for _, f in correct.get(vid, [])]
                every += xs
                print(f"  {vid:16s} {len(xs):8d} {quantile(xs, 0.5):7.3g} {quantile(xs, 0.99):7.3g} "
                      f"{max(xs, default=math.nan):7.3g}")
            print(f"  {'all':16s} {len(every):8d} {quantile(every, 0.5):7.3g} {quantile(every, 0.99):7.3g} "
                  f"{max(every, default=math.nan):7.3g}")
            print("  false alarms (draws where some correct kernel's tensor needs more than the factor): "
                  + ", ".join(f"{f:g}x {_draws_over(correct, f, scale, statistic)}/{args.draws}" for f in FACTORS))
            print("  wrong kernels caught (draws where some tensor needs more than the factor, of the draws "
                  "whose shapes can show the mistake):")
            for vid in sorted(wrong):
                print(f"    {vid:24s} " + ", ".join(
                    f"{f:g}x {_draws_over({vid: wrong[vid]}, f, scale, statistic, shows[vid])}/{len(shows[vid])}"
                    for f in FACTORS))
    return 0


def _draws_over(rows: dict[str, list], factor: float, scale: float, statistic: str, among=None) -> int:
    """Draws where some tensor needs more than ``factor`` (of the draws ``among``, when given)."""
    return len({draw for xs in rows.values() for draw, f in xs
                if needed(f, scale, statistic) > factor and (among is None or draw in among)})


if __name__ == "__main__":
    sys.exit(main())
