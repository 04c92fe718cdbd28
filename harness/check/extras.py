"""Checks beside the spec: gradcheck in float64, the dropout draws, torch.compile against eager."""

from __future__ import annotations

import math

import torch

from harness.base.boundary import describe, user_code
from harness.base.config import Config
from harness.base.dtypes import dtype_of
from harness.base.errors import HarnessError, PortingError
from harness.base.failures import harness_traceback
from harness.base.verdicts import Verdict
from harness.check import precision as P
from harness.check.dropout_stats import DRAW_OPS, statistical_checks
from harness.check.results import CompiledResult, DropoutResult, GradcheckResult
from harness.check.runs import (
    OpRecorder,
    RunCache,
    applicable,
    cast_inputs,
    run_variant,
    unique_grad_inputs,
)
from harness.check.spec import NO_KEY_CASES, _lower_check, expected_names
from harness.porting.portmap import zero_unrepresented
from harness.registry import Variant, build

# Gradcheck runs on a tiny config per variant: the first one it supports (one K/V head last,
# for a multi-query module that refuses the others).
GRADCHECK_CONFIGS = (
    Config(d_model=8, heads=2, d_ff=32, batch=2, tgt_len=3, src_len=4),
    Config(d_model=16, heads=8, d_ff=64, batch=2, tgt_len=3, src_len=4),
    Config(d_model=8, heads=2, kv_heads=1, d_ff=32, batch=2, tgt_len=3, src_len=4),
)


DROPOUT_P = 0.5






# -- gradcheck ---------------------------------------------------------------------------------------

def gradcheck_tolerance(variant: Variant) -> dict:
    """gradcheck's step and tolerances: its float64 defaults, or, for a variant that declares
    ``internal_dtype`` (computes in float32 inside), the step that balances that dtype's
    rounding against the finite difference's error (eps^(1/3)) and a tolerance of eps^(1/2)
    (float32: step 4.9e-3, tolerance 3.5e-4); a wrong backward is off by far more."""
    internal = variant.traits.get("internal_dtype")
    if not internal:
        return {}
    eps = torch.finfo(dtype_of(internal)).eps
    return {"eps": eps ** (1 / 3), "atol": eps ** 0.5, "rtol": eps ** 0.5}


def gradcheck_variant(variant: Variant) -> GradcheckResult | None:
    """``torch.autograd.gradcheck`` (float64, fast mode) of the variant's whole call,
    inputs and every parameter together, on the first tiny config it supports and its
    family's first applicable case whose rows all see a key."""
    family = variant.family_spec
    if not family.differentiable or variant.dtype_reason("float64"):
        return None  # gradcheck needs float64: a half-only kernel's gradients are judged in its dtype
    cfg = next((c for c in GRADCHECK_CONFIGS if not variant.refuses(c, "cpu")), None)  # gradcheck runs on CPU
    if cfg is None:
        return None
    cases = [c.name for c in family.cases if applicable(variant, c.name)
             and c.name not in NO_KEY_CASES]
    if not cases:
        return None
    case = cases[0]
    name = f"D={cfg.d_model} H={cfg.heads}" + (f" H_kv={cfg.kv_heads}" if cfg.kv_heads != cfg.heads else "")
    try:
        module, portmap = build(variant, cfg, dtype=torch.float64)
        if portmap is not None:
            portmap.load(zero_unrepresented(family.canonical_weights(cfg, traits=variant.traits), portmap.zero_names()))
        inputs = cast_inputs(family.inputs(case, cfg), torch.float64, "cpu", family.grad_inputs)
        leaves = unique_grad_inputs(family, inputs)
        params = dict(module.named_parameters()) if isinstance(module, torch.nn.Module) else {}
        names = list(leaves) + [f"param:{n}" for n in params]
        tensors = [leaves[n] for n in leaves] + [p.detach().clone().requires_grad_(True) for p in params.values()]

        def fn(*args):
            values = dict(zip(names, args))
            call_inputs = dict(inputs)
            by_id = {id(inputs[n]): values[n] for n in leaves}
            for key, value in inputs.items():
                if isinstance(value, torch.Tensor) and id(value) in by_id:
                    call_inputs[key] = by_id[id(value)]
            new_params = {n.removeprefix("param:"): v for n, v in values.items() if n.startswith("param:")}
            with torch.nn.utils.stateless._reparametrize_module(module, new_params):
                return variant.call(module, call_inputs)

        with user_code("gradcheck (its backward)", who=variant.key):
            ok = torch.autograd.gradcheck(fn, tuple(tensors), fast_mode=True, raise_exception=False,
                                          check_undefined_grad=False, **gradcheck_tolerance(variant))
        note = "" if ok else _gradcheck_cause(variant, fn, tuple(tensors), f"{case} ({name})")
    except PortingError as exc:  # the variant's own port fails: its error row
        ok, note = False, f"PortingError: {exc}"[:300]
    except NotImplementedError as exc:  # no backward on this device: nothing to check, said
        first = str(exc).splitlines()[0] if str(exc) else ""
        return GradcheckResult(family.name, variant.id, name, case, True,
                               f"not run: no backward on cpu (NotImplementedError: {first})"[:300])
    except HarnessError:
        raise
    except Exception as exc:
        return GradcheckResult(family.name, variant.id, name, case, False, describe(exc)[:300],
                               traceback=harness_traceback(exc))
    return GradcheckResult(family.name, variant.id, name, case, bool(ok), note)


def _gradcheck_cause(variant: Variant, fn, tensors: tuple, where: str) -> str:
    """Why gradcheck failed: a forward that is not finite there (finite differences judge
    nothing), a forward that rounds below float64 inside without declaring it (gradcheck
    holds at float32's step and tolerance), or else the backward itself."""
    with torch.no_grad(), user_code("gradcheck (its forward)", who=variant.key):
        out = fn(*tensors)
    if isinstance(out, torch.Tensor) and out.is_floating_point() and not bool(out.isfinite().all()):
        bad = int((~out.isfinite()).sum())
        return (f"the forward gives NaN/inf in {bad} of {out.numel()} output elements on {where}: finite "
                "differences cannot judge the backward there (the spec rows show the forward's mistake)")
    if not variant.traits.get("internal_dtype"):
        eps = torch.finfo(torch.float32).eps
        with user_code("gradcheck (its backward)", who=variant.key):
            ok32 = torch.autograd.gradcheck(fn, tuple(tensors), fast_mode=True, raise_exception=False,
                                            check_undefined_grad=False, eps=eps ** (1 / 3), atol=eps ** 0.5,
                                            rtol=eps ** 0.5)
        if ok32:
            return ("the backward agrees with finite differences at float32's step and tolerance, not at "
                    "float64's: the forward rounds below float64 inside (declare internal_dtype='float32' "
                    "if it is meant to)")
    return "the backward disagrees with finite differences of the forward"


# -- dropout -----------------------------------------------------------------------------------------

def expected_draws(variant: Variant, cfg: Config) -> int:
    sites = variant.traits.get("dropout_sites", ())
    return sum(cfg.heads if site.endswith("(per head)") else 1 for site in sites)


def dropout_checks(variant: Variant, cfg: Config) -> list[DropoutResult]:
    """Built with dropout p (``cfg.dropout``, or ``DROPOUT_P`` when it is 0): eval mode gives the
    dropout-0 output and draws nothing; train mode draws once per declared site; then the
    statistics of ``harness.check.dropout_stats`` (kept fraction per site at two rates, the
    mean of train calls or the zeroed residual branches against eval)."""
    family = variant.family_spec
    if not family.differentiable or variant.refuses(cfg, "cpu") or variant.dtype_reason("float64"):
        return []  # the dropout checks run on CPU in float64 (a kernel without float64: judged in its dtype)
    case = next((c.name for c in family.cases if applicable(variant, c.name)), None)
    if case is None:
        return []
    p = cfg.dropout if cfg.dropout > 0 else DROPOUT_P  # --set dropout=p chooses it
    cfg = cfg.replace(dropout=0.0)
    dropped = cfg.replace(dropout=p)
    weights = family.canonical_weights(cfg, traits=variant.traits)
    inputs = family.inputs(case, cfg)
    out = []

    def forward(c: Config, train: bool) -> tuple[torch.Tensor | None, list[str], str]:
        try:
            module, portmap = build(variant, c, dtype=torch.float64)
            if portmap is not None:
                portmap.load(zero_unrepresented(weights, portmap.zero_names()))
            if train and isinstance(module, torch.nn.Module):
                module.train()
            recorder = OpRecorder()
            with torch.no_grad(), recorder:
                y = variant.call(module, cast_inputs(inputs, torch.float64, "cpu"))
            return y, recorder.ops, ""
        except PortingError as exc:  # the variant's own port fails: its error row
            return None, [], f"PortingError: {exc}"[:200]
        except HarnessError:
            raise
        except Exception as exc:
            return None, [], describe(exc, limit=200)

    base, _, err0 = forward(cfg, False)
    evald, eval_ops, err1 = forward(dropped, False)
    if base is None or evald is None:
        out.append(DropoutResult(family.name, variant.id, "eval: output unchanged", "unchanged",
                                 err0 or err1, False))
    else:
        # Both runs are seeded alike, so a dropout that acts in eval mode may draw the same
        # mask twice: a random draw in eval mode is itself the failure.
        draws = sum(op in DRAW_OPS for op in eval_ops)
        same = P.gap(evald, base.to(torch.float64)).comparable and P.within(evald, base.to(torch.float64), 0.0, 0.0)
        measured = ("unchanged" if same else f"changed by {P.gap(evald, base).max_abs:.3g}") + (
            f", {draws} random draw(s) in eval mode" if draws else "")
        out.append(DropoutResult(family.name, variant.id, f"eval: output unchanged (p={p:g})", "unchanged",
                                 measured, same and not draws))
    _, train_ops, err2 = forward(dropped, True)
    want = expected_draws(variant, cfg)
    if err2:
        out.append(DropoutResult(family.name, variant.id, f"train: draws per call (p={p:g})", str(want), err2, False))
    else:
        draws = sum(op in DRAW_OPS for op in train_ops)
        out.append(DropoutResult(family.name, variant.id, f"train: draws per call (p={p:g})", str(want), str(draws),
                                 draws == want))
    return out + statistical_checks(variant, cfg, p, weights, inputs)


# -- torch.compile ------------------------------------------------------------------------------------

COMPILED_FAMILIES = ("attention", "encoder_layer", "decoder_layer", "decoder_only_block", "ffn", "norm")




def compiled_check(variant: Variant, checker: RunCache, config: str, dtype_name: str = "float32",
                   backend: str = "inductor", *, factor: float = P.PRECISION_FACTOR) -> CompiledResult | None:
    """The variant under ``torch.compile`` against the same variant eager, forward and
    backward, on the first applicable case: both against the float64 oracle, the compiled
    error at most ``factor`` x the eager one (plus one ulp). Dynamo's counters must show a
    compiled graph: a "compiled" result that ran eager is a failure, not a pass."""
    from torch._dynamo.utils import counters

    family = variant.family_spec
    if (not family.differentiable or variant.refuses(checker.cfg, checker.device)
            or variant.dtype_reason(dtype_name)):
        return None
    case = next((c.name for c in family.cases if applicable(variant, c.name)), None)
    if case is None:
        return None
    dtype = dtype_of(dtype_name)
    zero = checker.fills(variant)
    eager = checker.run(variant, case, zero, dtype)
    oracle = checker.oracle(family, variant.traits, case, zero, dtype)
    torch._dynamo.reset()
    graphs0, breaks0 = counters["stats"]["unique_graphs"], sum(counters["graph_break"].values())
    compiled = run_variant(variant, checker.cfg, checker.inputs(family, case),
                           checker.weights(family, zero, variant.traits), dtype, checker.device, record=False,
                           compile_backend=backend)
    graphs = counters["stats"]["unique_graphs"] - graphs0
    breaks = sum(counters["graph_break"].values()) - breaks0
    base = dict(family=family.name, variant=variant.id, config=config, case=case, dtype=dtype_name,
                backend=backend, graphs=graphs, graph_breaks=breaks)
    if compiled.error or eager.error:
        return CompiledResult(**base, verdict=Verdict.ERROR, ok=False, err=math.nan, eager_err=math.nan,
                              note=compiled.error or eager.error or "",
                              traceback=compiled.traceback if compiled.error else eager.traceback)
    names = expected_names(family, oracle, checker, variant)
    same = all(name in compiled.tensors and torch.equal(compiled.tensors[name], eager.tensors[name])
               for name in names)
    checks = [_lower_check(n, compiled.tensors.get(n), oracle.tensors[n],
                           [(eager.tensors[n], oracle.tensors[n])] if n in eager.tensors else [],
                           dtype, factor=factor, scale=0.0) for n in names]
    bad = max(checks, key=lambda c: (c.verdict.rank, c.ratio))
    verdict = Verdict.IDENTICAL if same else bad.verdict
    note = "" if graphs else "Dynamo compiled no graph: this ran eager"
    return CompiledResult(**base, verdict=verdict, ok=graphs > 0 and verdict.agrees,
                          err=bad.err, eager_err=math.nan if bad.ref_err is None else bad.ref_err,
                          note="; ".join(x for x in (note, bad.note) if x))
