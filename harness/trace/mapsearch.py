"""``python -m harness map FILE:CLASS --family F``: a parameter map found by search.

The module's parameters are matched by shape against the family's canonical ones
(``Family.canonical_shapes``): a (D, D) weight is one projection, in either orientation
(square weights are the silent ones); a (3D, D) weight holds three projections as row
blocks, a (D, 3D) one as column blocks (GPT-2's Conv1D, stored (in, out)); biases follow
their weights (same chunk index, same module). Every assignment of those slots to the
canonical projections (which one is q, k, v, o; the chunk order; the orientation) is a
candidate; a candidate is kept when its float64 output is equivalent to the family's
reference on the family's cases, then verified with every gradient. The fully masked
cases, where variants legitimately differ, are not used to choose: they decide the
declared trait instead (the value of a registered variant the module agrees with).

The call adapter: the family's canonical call by default (attention: ``m(query, key,
value, mask)``, mask True = may attend), else one of ``CALL_FORMS`` or an expression of
``m, query, key, value, mask``; without ``--call`` each form is tried in turn.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, fields

import torch

from harness.base.config import Config
from harness.base.errors import (
    HarnessError,
    InputError,
    PortingError,
    SpecError,
    UnknownName,
)
from harness.base.masks import masked, per_head
from harness.base.verdicts import Verdict
from harness.check.runs import RunCache, cast_inputs, run_variant
from harness.check.tensors import compare_tensors, worst
from harness.families.base import Family
from harness.families.catalog import get_family
from harness.porting.entries import Transposed, entry_code
from harness.porting.portmap import PortMap
from harness.registry import Variant, build, reference_of
from harness.trace.map_candidates import (
    CALL_FORMS,
    CALL_NOTES,
    MAX_CANDIDATES,
    Proposal,
    _builder,
    _case_ok,
    candidate_maps,
    guess_init,
    load_class,
    make_call,
)
from harness.trace.map_verify import verify_registration


def propose_map(target: str, family_name: str, *, init: str | None = None, call: str | None = None,
                cfg: Config | None = None, variant_id: str | None = None) -> Proposal:
    cfg = cfg or Config()
    family = get_family(family_name)
    ref = reference_of(family.name)
    if ref is None:
        raise UnknownName(f"family '{family.name}' has no reference variant to search against")
    cls, import_line, source = load_class(target)
    init = guess_init(cls) if init is None else init
    build = _builder(cls, init)
    probe = build(cfg)
    vid = variant_id or cls.__name__.lower()
    semantic_cases = {c for c, ts in family.case_semantic.items() if ts}
    forms = [call] if call else list(CALL_FORMS)
    checker = RunCache(cfg)
    tried = 0
    scored: list[tuple] = []   # (first-case gap, order, call form, adapter, map, cases, module): those that ran
    ran_forms = []
    for form in forms:
        made = make_call(form, probe, cfg)
        if made is None:
            continue
        adapter, code, uses_mask = made
        self_only = form == "self"
        cases = [c.name for c in family.cases  # not the regime cases ("padded@left"): their bases decide
                 if not c.base and c.name not in semantic_cases and _case_ok(family, c.name, cfg, uses_mask, self_only)]
        if not cases:
            continue
        first_case = cases[0]
        ran = False
        module = build(cfg).to(torch.float64).eval()
        for pmap in candidate_maps(family, cfg, probe):
            if tried >= MAX_CANDIDATES:
                break
            tried += 1
            variant = Variant(id=vid, family=family.name, source=source, build=build, call=adapter,
                              param_map=pmap, traits=dict(ref.traits))
            try:
                verdict, gap, note = _forward_verdict(checker, variant, ref, first_case, module)
            except (PortingError, InputError):
                continue
            if verdict == Verdict.ERROR:
                break  # this call form does not run the module: the next form
            ran = True
            scored.append((gap, tried, form, adapter, pmap, cases, module))
            if not verdict.agrees:
                continue
            verdicts = {c: _compare(checker, variant, ref, c)[0] for c in cases}
            if all(v.agrees for v in verdicts.values()):
                traits, trait_notes = _infer_traits(checker, family, variant, ref, semantic_cases, uses_mask=uses_mask)
                return _found(Hit(family=family, ref=ref, variant=variant, pmap=pmap, form=form, code=code,
                                  import_line=import_line, source=source, cls=cls, init=init, traits=traits,
                                  notes=trait_notes, cases=cases, tried=tried, ran_forms=ran_forms + [form],
                                  target=target, uses_mask=uses_mask, cfg=cfg))
        if ran:
            ran_forms.append(form)
    why = (f"no candidate map makes {target} equivalent to {ref.id} in float64 "
           f"({tried} candidates tried; call forms that ran: {', '.join(ran_forms) or 'none'})")
    closest = _closest(checker, scored, vid, family, source, build, ref)
    if closest:
        fails = "; ".join(f"{c} (max_abs {g:.3g})" for c, g in closest["failing"].items())
        why += (f"\nclosest (the {CLOSEST_POOL} nearest on the first case, scored over every case, forward "
                f"float64): call form {closest['call_form']}, "
                f"fails on {fails}" + (f" ({closest['note']})" if closest.get("note") else "")
                + f"; agrees on {', '.join(closest['agrees']) or 'no case'}; map {closest['map']}")
    else:
        why += "\nno call form ran the module on the family's inputs: pass --call and --init"
    return Proposal(False, why, tried=tried, closest=closest)


CLOSEST_POOL = 12  # candidates nearest on the first case that are scored over every case


def _closest(checker: RunCache, scored: list[tuple], vid: str, family: Family, source: str, build, ref) -> dict:
    """The candidate that fails the fewest cases (then the smallest worst gap), each of the
    ``CLOSEST_POOL`` candidates nearest on the first case (and every one that agreed there)
    held, float64 forward, to the reference's on every case it takes."""
    best, best_key = {}, None
    pool = sorted(scored, key=lambda s: (s[0], s[1]))
    pool = [s for i, s in enumerate(pool) if i < CLOSEST_POOL or s[0] == 0.0]
    for _, _, form, adapter, pmap, cases, module in pool:
        variant = Variant(id=vid, family=family.name, source=source, build=build, call=adapter,
                          param_map=pmap, traits=dict(ref.traits))
        gaps, notes = {}, []
        for case in cases:
            try:
                verdict, gap, note = _forward_verdict(checker, variant, ref, case, module)
            except (PortingError, InputError):
                verdict, gap, note = Verdict.ERROR, math.inf, ""
            if not verdict.agrees:
                gaps[case] = gap
                notes += [note] if note else []
        key = (len(gaps), max(gaps.values(), default=0.0))
        if best_key is None or key < best_key:
            best_key = key
            best = {"call_form": form, "map": {k: entry_code(v) for k, v in pmap.items()}, "failing": gaps,
                    "agrees": [c for c in cases if c not in gaps],
                    "max_abs": key[1], "note": notes[0] if notes else ""}
    return best


def _forward_verdict(checker: RunCache, variant: Variant, ref: Variant, case: str,
                     module: torch.nn.Module) -> tuple[str, float, str]:
    """The quick test of a candidate: the module built once, the candidate's weights
    ported in, float64 forward only, no op recording."""
    family = ref.family_spec
    zero = checker.fills(variant) | checker.fills(ref)
    want = checker.run(ref, case, zero, torch.float64).tensors.get("output")
    PortMap(variant.key, module, variant.map_for(checker.cfg), family.canonical_shapes(checker.cfg)).load(
        checker.weights(family, zero))
    try:
        with torch.no_grad():
            got = variant.call(module, cast_inputs(checker.inputs(family, case), torch.float64, "cpu"))
    except HarnessError:
        raise
    except Exception:  # noqa: BLE001  (this call form does not run the module)
        return Verdict.ERROR, math.inf, ""
    if want is None or not isinstance(got, torch.Tensor):
        return Verdict.ERROR, math.inf, ""
    tv = compare_tensors(got.detach().double().cpu(), want, None, None, torch.float64)
    note = f"output: {tv.note}, the module's vs {ref.id}'s" if tv.note else ""
    return tv.verdict, tv.max_abs, note


def _compare(checker: RunCache, variant: Variant, ref: Variant, case: str, forward_only: bool = False):
    zero = checker.fills(variant) | checker.fills(ref)
    dtype = torch.float64
    ra = checker.run(ref, case, zero, dtype)
    family = ref.family_spec

    rb = run_variant(variant, checker.cfg, checker.inputs(family, case), checker.weights(family, zero), dtype,
                     backward=not forward_only)
    if rb.error or ra.error:
        return Verdict.ERROR, math.inf
    verdicts, gap = [], 0.0
    for name, t in rb.tensors.items():
        if name in ra.tensors:
            tv = compare_tensors(t, ra.tensors[name], None, None, dtype)
            verdicts.append(tv.verdict)
            if name == "output":
                gap = tv.max_abs
    return worst(verdicts), gap


def _infer_traits(checker, family, variant, ref, semantic_cases, *, uses_mask):
    """The family's semantic traits: the reference's where the module agrees with it on
    the plain cases; on a case with traits of its own (a fully masked row), the values
    whose float64 oracle (``harness.families.oracles``) the module agrees with there."""
    case_traits = {t for names in family.case_semantic.values() for t in names}
    full = family.semantic_traits(ref.traits)
    traits = {t: ref.traits[t] for t in family.traits if t in ref.traits and t not in case_traits}
    notes = []
    for case in sorted(semantic_cases):
        if not uses_mask:
            continue
        names = family.case_semantic[case]
        zero = checker.fills(variant)
        run = checker.run(variant, case, zero, torch.float64)
        if run.error:
            notes.append(f"{', '.join(names)}: the module fails on '{case}' ({run.error}); declare them yourself")
            continue
        options = [family.traits[n].values or (full.get(n),) for n in names]
        matches = []
        for combo in itertools.product(*options):
            spec = {**full, **traits, **dict(zip(names, combo))}
            try:
                oracle = checker.oracle(family, spec, case, zero, torch.float64)
            except (SpecError, RuntimeError):  # a combination no module can have, or an oracle that fails
                continue
            verdicts = [compare_tensors(t, oracle.tensors[n], None, None, torch.float64).verdict
                        for n, t in run.tensors.items() if n in oracle.tensors]
            if verdicts and worst(verdicts).agrees:
                matches.append(dict(zip(names, combo)))
        if not matches:
            notes.append(f"{', '.join(names)}: on '{case}' no oracle of the known values agrees; "
                         "declare them yourself")
            continue
        defaults = {n: family.traits[n].default for n in names}
        pick = max(matches, key=lambda m: sum(m[n] == defaults[n] for n in names))
        traits.update({n: v for n, v in pick.items() if n in ref.traits or v != defaults[n]})
        shown = ", ".join(f"{n} = {v!r}" for n, v in pick.items())
        notes.append(f"{shown}: on '{case}' the module agrees with that oracle"
                     + (f" (and {len(matches) - 1} other value set(s) it cannot tell apart)"
                        if len(matches) > 1 else ""))
    return traits, notes


def _entry_classes(entry) -> set[str]:
    if isinstance(entry, Transposed):
        return {"Transposed"} | _entry_classes(entry.inner)
    return {type(entry).__name__}


def _returns_tuple(variant: Variant, family: Family, cfg: Config, case: str, code: str) -> bool:
    """Whether the module's own call (``code``) returns a tuple (nn.MultiheadAttention)."""
    module, _ = build(variant, cfg, dtype=torch.float64)
    inputs = family.inputs(case, cfg)
    scope = {"per_head": per_head, "masked": masked, "torch": torch, "m": module, "i": inputs}
    with torch.no_grad():
        return isinstance(eval(compile(code, "--call", "eval"), scope), (tuple, list))  # noqa: S307


@dataclass(frozen=True)
class Hit:
    """The candidate that passed, with what the search knew when it found it."""

    family: Family
    ref: Variant
    variant: Variant
    pmap: dict
    form: str
    code: str
    import_line: str
    source: str
    cls: type
    init: str
    traits: dict
    notes: list[str]
    cases: list[str]
    tried: int
    ran_forms: list[str]
    target: str
    uses_mask: bool
    cfg: Config


def _found(hit: Hit) -> Proposal:
    (family, ref, variant, pmap, form, code, import_line, source, cls, init, traits, notes, cases, tried,
     ran_forms, target, uses_mask, cfg) = (getattr(hit, f.name) for f in fields(hit))
    uses = sorted(set().union(*(_entry_classes(e) for e in pmap.values())))
    lines = [import_line] if import_line else []
    lines.append(f"from harness import {', '.join(uses + ['register'])}")
    if "per_head(" in code:
        lines.append("from harness import masked, per_head")
    all_traits = dict(traits)
    if not uses_mask:  # a mask-free module is compared only where nothing is masked
        all_traits["cases"] = tuple(cases)
    tail = "[0]" if _returns_tuple(variant, family, cfg, cases[0], code) else ""
    lines += ["", "register(", f'    id="{variant.id}",', f'    family="{family.name}",',
              f'    source="{source}",',
              f"    build=lambda cfg: {cls.__name__}({init}),",
              f"    call=lambda m, i: {code}{tail},",
              "    param_map={"]
    lines += [f'        "{name}": {entry_code(entry)},' for name, entry in pmap.items()]
    lines += ["    },", "    traits={" + ", ".join(f'"{k}": {v!r}' for k, v in all_traits.items()) + "},", ")"]
    code_text = "\n".join(lines)
    head = [f"map {target} as family '{family.name}': found",
            f"call form: {form} ({CALL_NOTES.get(form, 'custom expression')})",
            f"{tried} candidate maps tried (call forms: {', '.join(ran_forms)}); this one is equivalent to "
            f"{ref.id} in float64, output and every gradient, on {', '.join(cases)}"]
    head += [f"trait {n}" for n in notes]
    clean, checked = verify_registration(code_text, family.name, variant.id, cfg, scope={cls.__name__: cls},
                                         dtypes=("float64",), extras=False)
    head.append(checked)
    where = "paste into a variant file" if import_line else "paste at the end of the file that defines the class"
    text = "\n".join(head) + f"\n\n# {where}\n" + code_text
    return Proposal(clean, text, code_text, tried, form, pmap, all_traits)
