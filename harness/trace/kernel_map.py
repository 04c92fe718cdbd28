"""``python -m harness map MODULE:FUNCTION --family attention_kernel``: how a plain attention
function reads its call, found by trying.

Every layout (``BHSD``, ``BSHD``, the packed ones, ``varlen``) and mask form
(``register_kernel``'s) is tried; a form the function cannot take fails on every case and
drops out. For each form that runs, the function's float64 run on *every* case it takes
(output and every gradient) is held to the oracle of each set of conventions (causal
diagonal, K/V grouping); the candidate failing the fewest cases wins (then the most cases
taken, then the smallest gap). The cases with rows that see no key decide, for the winner,
what such a row gives (the mask method and the dead-row traits, as ``map`` infers them for
modules): the mask's rows first, then, where the rows a window or the causal diagonal empties
differ, a ``ByCause``. Nothing fits: the closest candidate is printed with the cases it fails, each
named, and its mistake (``kernel_explain``). Something fits: the ``register_kernel(...)``
call is printed only after it was executed and checked in a scratch registry, clean.
"""

from __future__ import annotations

import inspect
import itertools
from dataclasses import dataclass, field
from pathlib import Path

import torch

from harness.base.config import Config
from harness.base.errors import HarnessError
from harness.check.runs import RunCache, applicable
from harness.check.spec import expected_names, float64_check
from harness.families import kernel_oracle as K
from harness.families.catalog import get_family
from harness.families.kernel import NO_KEY_CASES
from harness.families.no_key_rows import ByCause
from harness.registry import REGISTRY, Variant, scratch
from harness.registry.kernels import LAYOUTS, MASK_FORMS, accepted_options, register_kernel
from harness.trace.kernel_explain import explain_kernel
from harness.trace.map_candidates import Proposal, load_object
from harness.trace.map_verify import on_path, verify_registration

FAMILY = "attention_kernel"
DEAD_CASE = "fully_masked"
# Conventions tried on every case (each candidate a combination); defaults first (ties).
CONVENTIONS = {"causal": K.CAUSAL, "gqa_grouping": K.GQA_GROUPINGS}


@dataclass
class Candidate:
    layout: str
    mask: str
    traits: dict
    cases: list[str]
    failing: dict[str, str] = field(default_factory=dict)   # case -> why (max_abs or the error)
    gap: float = 0.0

    def key(self, order: int) -> tuple:
        return (len(self.failing), -len(self.cases), self.gap, order)

    def describe(self) -> str:
        conv = ", ".join(f"{k}={v!r}" for k, v in self.traits.items())
        return f"layout {self.layout}, mask {self.mask}, {conv}"


def _gap(run, oracle, names) -> float | None:
    """The worst float64 gap when the run misses the oracle, None when it meets it."""
    worst = None
    for n in names:
        c = float64_check(n, run.tensors.get(n), oracle.tensors[n], None)
        if c.verdict != "equivalent":
            worst = max(worst or 0.0, c.err if c.err == c.err else float("inf"))
    return worst


def _read(family, checker: RunCache, case: str, traits: dict) -> dict:
    """``traits`` with the conventions ``case`` cannot tell apart set to their first value
    (the causal diagonal off the causal cases, the K/V grouping where H_kv = H), so the
    oracles of candidates that differ only there are one cached run."""
    inputs = checker.inputs(family, case)
    out = dict(traits)
    if "causal" not in family.case_semantic.get(case, ()):
        out["causal"] = CONVENTIONS["causal"][0]
    if inputs["k"].shape[1] == inputs["q"].shape[1]:
        out["gqa_grouping"] = CONVENTIONS["gqa_grouping"][0]
    return out


def _score(checker: RunCache, variant: Variant, form: tuple[str, str], traits: dict, cases: list[str]) -> Candidate:
    """The candidate (form, conventions) held to its oracle on every case in ``cases``."""
    family = variant.family_spec
    zero = checker.fills(variant)
    cand = Candidate(form[0], form[1], dict(traits), list(cases))
    for case in cases:
        run = checker.run(variant, case, zero, torch.float64)
        if run.error:
            cand.failing[case] = run.error[:120]
            cand.gap = float("inf")
            continue
        oracle = checker.oracle(family, _read(family, checker, case, traits), case, zero, torch.float64)
        gap = _gap(run, oracle, expected_names(family, oracle, checker, variant))
        if gap is not None:
            cand.failing[case] = f"max_abs {gap:.3g}"
            cand.gap = max(cand.gap, gap)
    return cand


def _meets(checker: RunCache, variant: Variant, spec: dict, case: str, run=None) -> bool:
    family = variant.family_spec
    if family.validate_traits("probe", spec):
        return False
    zero = checker.fills(variant)
    run = run or checker.run(variant, case, zero, torch.float64)
    oracle = checker.oracle(family, spec, case, zero, torch.float64)
    return not run.error and _gap(run, oracle, expected_names(family, oracle, checker, variant)) is None


def _dead_rows(checker: RunCache, variant: Variant, traits: dict) -> dict | None:
    """The mask method (its own dead-row behaviour preferred) or the explicit dead-row
    traits whose oracle the function meets on the case with rows that see no key."""
    run = checker.run(variant, DEAD_CASE, checker.fills(variant), torch.float64)
    if run.error:
        return None
    options = [{"mask_method": m} for m in K.MASK_METHODS]
    options += [{"mask_method": m, "fully_masked_row": r, "fully_masked_grad": g}
                for m in K.MASK_METHODS for r, g in itertools.product(K.DEAD_ROWS, K.DEAD_GRADS)
                if K.NATURAL[m] != (r, g)]
    return next((extra for extra in options if _meets(checker, variant, {**traits, **extra}, DEAD_CASE, run)), None)


def _dead_rows_by_cause(checker: RunCache, variant: Variant, traits: dict) -> tuple[dict, list[str]] | None:
    """The dead-row traits the function meets on every case with rows that lose their keys,
    and those cases: the mask's rows decide first (``fully_masked``); where the rows the
    window or the causal diagonal empties differ from them (a kernel that never visits such
    a row), those causes get values of their own: a ``ByCause``. None where nothing meets."""
    cases = [c for c in NO_KEY_CASES if applicable(variant, c)]
    dead = _dead_rows(checker, variant, traits) if DEAD_CASE in cases else {}
    if dead is None:
        return None
    spec = {**traits, **dead}
    rows = dict(zip(("fully_masked_row", "fully_masked_grad"), K.dead_row_traits(spec)))
    by = {name: {"other": value} for name, value in rows.items()}
    for cause, case in (("window", "window_short"), ("causal", "causal_short")):
        if case not in cases or _meets(checker, variant, spec, case):
            continue
        for row, grad in itertools.product(K.DEAD_ROWS, K.DEAD_GRADS):
            tried = {name: ByCause(**{**by[name], cause: value}) for name, value in
                     (("fully_masked_row", row), ("fully_masked_grad", grad))}
            if _meets(checker, variant, {**spec, **tried}, case):
                by = {name: {**by[name], cause: tried[name].value(cause)} for name in by}
                spec.update(tried)
                break
        else:
            return None
    for name, values in by.items():  # a trait whose causes all agree stays one value
        if len(set(values.values())) == 1:
            spec[name] = values["other"]
            if name not in dead:
                del spec[name]
    return {k: v for k, v in spec.items() if k not in traits or v != traits[k]}, cases


def _import_line(target: str, name: str, import_line: str) -> tuple[str, Path | None]:
    """How the registration imports the function: the module's import, or, for a file, by
    its stem from the file's folder (a variants file's own folder is importable)."""
    if import_line:
        return import_line, None
    path = Path(target.rpartition(":")[0]).resolve()
    return f"from {path.stem} import {name}", path.parent


def _code(vid: str, name: str, import_line: str, source: str, best: Candidate) -> str:
    traits = {k: v for k, v in best.traits.items()
              if k == "causal" or v != get_family(FAMILY).traits[k].default}
    return "\n".join([
        "from harness import ByCause, register_kernel" if "ByCause(" in repr(traits) else
        "from harness import register_kernel", import_line, "",
        f'register_kernel(id="{vid}", fn={name}, layout="{best.layout}", mask="{best.mask}", source="{source}",',
        f"                traits={traits!r})",
    ])


def _free_id(vid: str, import_line: str, folder: Path | None) -> str:
    """``vid``, or ``vid_mapped`` when importing the function registers ``vid`` already
    (the function's own file is a variants file)."""
    with scratch(), on_path(folder):
        try:
            exec(compile(import_line, "<map import>", "exec"), {})  # noqa: S102
        except Exception:  # noqa: BLE001  (verify says it, with the reason)
            return vid
        return f"{vid}_mapped" if f"{FAMILY}/{vid}" in REGISTRY else vid


def _why_no_form(fn, name: str, raised: dict[str, list[str]]) -> list[str]:
    """Why a function ran under no form: what each form's call raised (the most common first),
    and the two plain-function shapes register_kernel cannot call as they are."""
    lines = [f"  {len(forms)} form(s) ({', '.join(forms[:3])}{', ...' if len(forms) > 3 else ''}): {why}"
             for why, forms in sorted(raised.items(), key=lambda kv: -len(kv[1]))[:3]]
    if any("returned tuple" in why or "returned list" in why for why in raised):
        lines.append(f"{name} returns a tuple: register a function that returns the output alone, e.g. "
                     f"fn=lambda q, k, v, mask: {name}(q, k, v, mask)[0]")
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    where = next((i for i, p in enumerate(params) if "mask" in p.name.lower() or "bias" in p.name.lower()), None)
    if where is not None and where != 3:
        order = ", ".join(p.name for p in params[:4])
        call = ", ".join(("mask" if i == where else "qkv"[i - (i > where)]) for i in range(min(4, len(params))))
        lines.append(f"{name} takes its mask in position {where + 1} ({order}); register_kernel calls "
                     f"fn(q, k, v, mask, ...): register fn=lambda q, k, v, mask: {name}({call})")
    return lines


def _is_function(obj: object) -> bool:
    return callable(obj) and not isinstance(obj, type)


@dataclass
class _Trial:
    """Every layout/mask form tried: the candidates scored where the form ran, the variant of
    each form that ran, and, for the forms that ran on no case, why (the error -> the forms)."""
    forms: list[tuple[str, str]]
    scored: list[tuple[tuple, Candidate]] = field(default_factory=list)
    ran: dict[tuple[str, str], Variant] = field(default_factory=dict)
    raised: dict[str, list[str]] = field(default_factory=dict)


def propose_kernel_map(target: str, *, cfg: Config | None = None, variant_id: str | None = None) -> Proposal:
    cfg = cfg or Config()
    fn, import_line, source = load_object(target, "FUNCTION", _is_function, "function")
    name = target.rpartition(":")[2]
    vid = variant_id or name.lower()
    checker = RunCache(cfg, record=False)
    options = accepted_options(fn)
    with scratch():
        trial = _try_forms(checker, fn, vid, source, cfg)
        if not trial.scored:
            lines = [f"no layout or mask form of register_kernel runs {target} on the family's cases "
                     f"({len(trial.forms)} tried); options it takes: {list(options) or 'none'}"]
            return Proposal(False, "\n".join(lines + _why_no_form(fn, name, trial.raised)))
        best = min(trial.scored, key=lambda kc: kc[0])[1]
        variant = trial.ran[(best.layout, best.mask)]
        head = [f"map {target} as family '{FAMILY}'",
                f"tried {len(trial.forms)} layout/mask forms ({len(trial.ran)} ran: "
                f"{', '.join(' '.join(f) for f in trial.ran)}) x "
                f"{len(list(itertools.product(*CONVENTIONS.values())))} conventions, each over every case it takes"]
        if best.failing:
            return _closest(head, best, fn, vid, source, cfg, tried=len(trial.scored))
        found = _dead_rows_by_cause(checker, variant, best.traits)
        if found is None:
            return _no_dead_rows_fit(head, best, variant, tried=len(trial.scored))
        best.traits.update(found[0])
        best.cases += found[1]
    return _found(target, name, vid, variant_id, import_line, source, cfg, head, best, tried=len(trial.scored))


def _try_forms(checker: RunCache, fn, vid: str, source: str, cfg: Config) -> _Trial:
    """Each layout and mask form registered (in a scratch registry) and scored under every
    set of conventions over the cases it takes; a form that raises on every case drops out."""
    family = get_family(FAMILY)
    trial = _Trial([(layout, mask) for layout in LAYOUTS
                    for mask in (("lengths",) if layout == "varlen" else [m for m in MASK_FORMS if m != "is_causal"])])
    for order, form in enumerate(trial.forms):
        try:
            variant = register_kernel(id=f"{vid}__{order}", fn=fn, layout=form[0], mask=form[1],
                                      traits={"causal": "top_left"}, source=source)
        except HarnessError:
            continue
        if variant.supports(cfg):
            continue
        cases = [c.name for c in family.cases if applicable(variant, c.name) and c.name not in NO_KEY_CASES]
        for values in itertools.product(*CONVENTIONS.values()):
            cand = _score(checker, variant, form, dict(zip(CONVENTIONS, values)), cases)
            if len(cand.failing) == len(cases) and all("max_abs" not in w for w in cand.failing.values()):
                trial.raised.setdefault(next(iter(cand.failing.values())), []).append(" ".join(form))
                break   # this form does not run the function on any case
            trial.ran[form] = variant
            trial.scored.append((cand.key(order), cand))
    return trial


def _closest(head: list[str], best: Candidate, fn, vid: str, source: str, cfg: Config, *, tried: int) -> Proposal:
    """Nothing fits: the closest candidate, the cases it fails and its mistake."""
    failing = [(cfg, c) for c in best.failing]
    probe = register_kernel(id=f"{vid}__closest", fn=fn, layout=best.layout, mask=best.mask,
                            traits=best.traits, source=source)
    mistake = (explain_kernel(probe, failing) if any(w.startswith("max_abs") for w in best.failing.values())
               else "it raises there (a shape or option it does not take), not a convention")
    fails = "; ".join(f"{c} ({why})" for c, why in best.failing.items())
    head = head + [f"nothing fits: the closest candidate ({best.describe()}) fails on {fails}; "
                   f"it agrees on the other {len(best.cases) - len(best.failing)} case(s)",
                   f"its mistake: {mistake}"]
    return Proposal(False, "\n".join(head), tried=tried,
                    closest={"layout": best.layout, "mask": best.mask, "traits": best.traits,
                             "failing": best.failing})


def _no_dead_rows_fit(head: list[str], best: Candidate, variant: Variant, *, tried: int) -> Proposal:
    """The best candidate fits every case but those with rows that see no key."""
    dead_cases = [c for c in NO_KEY_CASES if applicable(variant, c)]
    head = head + [f"nothing fits on {', '.join(dead_cases)}: no mask method or dead-row value set (one, or one "
                   f"per cause) meets the function there ({best.describe()} fits every other case); declare "
                   f"them yourself"]
    return Proposal(False, "\n".join(head), tried=tried,
                    closest={"layout": best.layout, "mask": best.mask, "traits": best.traits,
                             "failing": {c: "rows without keys" for c in dead_cases}})


def _found(target: str, name: str, vid: str, variant_id: str | None, import_line: str, source: str, cfg: Config,
           head: list[str], best: Candidate, *, tried: int) -> Proposal:
    """Something fits: the ``register_kernel(...)`` call, executed and checked in a scratch registry."""
    imports, folder = _import_line(target, name, import_line)
    if variant_id is None:
        vid = _free_id(vid, imports, folder)
    code = _code(vid, name, imports, source if import_line else Path(target.rpartition(":")[0]).name, best)
    clean, checked = verify_registration(code, FAMILY, vid, cfg, folder=folder)
    head = head + [f"found: {best.describe()}, equivalent to its oracle in float64 (output and every gradient) "
                   f"on every case it takes: {', '.join(best.cases)}", checked]
    where = "paste into a variants file" + (f" beside {folder}" if folder else "")
    return Proposal(clean, "\n".join(head) + f"\n\n# {where}\n" + code, code, tried, best.layout,
                    traits=best.traits)
