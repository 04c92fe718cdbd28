"""``python -m harness map FILE:CLASS --family F``: a parameter map found by search.

The module's parameters are matched by shape against the family's canonical ones
(``Family.canonical_shapes``, grouped by shape; ``map_slots``): a (D, D) weight is one
projection, in either orientation (square weights are the silent ones); a (3D, D) weight
holds three projections as row blocks, or as blocks inside each head (GPT-NeoX), a (D, 3D)
one as column blocks (GPT-2's Conv1D, stored (in, out)); biases follow their weights (same
chunk index, same module); norm gains go by name. Every assignment of those slots to the
canonical parameters is a candidate. A candidate is kept when its float64 output on the
first case agrees with the float64 oracle of a trait set (``map_traits``: the reference's
traits, then one or two changed), within float64's bound or float32's (the module computes
in float32 inside: declared ``internal_dtype``), then verified on every case the call form
takes, output and every gradient. The fully masked cases, where variants legitimately
differ, are not used to choose: they decide the declared trait instead.

The call adapter: the family's canonical call by default (attention: ``m(query, key,
value, mask)``, mask True = may attend), else one of ``CALL_FORMS`` (among them a library
module's: hidden states, an additive mask, its own rotary tables) or an expression of
``m, query, key, value, mask, positions, key_positions, x``; without ``--call`` each form
is tried in turn.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from harness.base.boundary import describe
from harness.base.config import Config
from harness.base.errors import InputError, PortingError, SpecError, UnknownName
from harness.base.verdicts import Verdict
from harness.check.runs import RunCache, cast_inputs
from harness.check.tensors import compare_tensors
from harness.families.base import Family
from harness.families.catalog import get_family
from harness.porting.entries import Absent, entry_code
from harness.porting.portmap import PortMap
from harness.registry import Variant, reference_of
from harness.trace.map_candidates import (
    CALL_FORMS,
    MAX_CANDIDATES,
    SELF_ONLY,
    Proposal,
    _builder,
    _case_ok,
    guess_init,
    load_class,
    make_call,
)
from harness.trace.map_fit import refuse_misfit
from harness.trace.map_print import Hit, found
from harness.trace.map_slots import candidate_maps
from harness.trace.map_traits import agreement, infer_case_traits, search_fills, trait_sets
from harness.trace.map_traits import verify_case as _verify


@dataclass
class _Search:
    """One search: the target, the family and reference it is held to, the trait sets tried,
    and what the call forms tried so far left (candidates tried, first-case gaps, why not)."""
    target: str
    family: Family
    ref: Variant
    cfg: Config
    cls: type
    import_line: str
    source: str
    init: str
    build: object
    probe: torch.nn.Module
    vid: str
    semantic_cases: set[str]
    specs: list[dict]
    refused: list[str]   # why the family refuses a trait set at this config (odd rotary dims)
    checker: RunCache
    tried: int = 0
    scored: list[tuple] = field(default_factory=list)  # (first-case gap, order, form, adapter, map, cases, ...)
    ran_forms: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    unported: dict[str, str] = field(default_factory=dict)  # call form -> why its maps did not port (the first)


@dataclass
class _Form:
    """One call form as the search runs it: its adapter, the cases it takes, the module built once."""
    name: str
    adapter: object
    code: str
    uses_mask: bool
    self_only: bool
    cases: list[str]
    module: torch.nn.Module

    def case_ok(self, s: _Search, case: str) -> bool:
        return _case_ok(s.family, case, s.cfg, self.uses_mask, self.self_only)


def propose_map(target: str, family_name: str, *, init: str | None = None, call: str | None = None,
                cfg: Config | None = None, variant_id: str | None = None) -> Proposal:
    s = _start(target, family_name, init, cfg or Config(), variant_id)
    forms = [call] if call else list(CALL_FORMS)
    for form in forms:
        if (hit := _search_form(s, form)) is not None:
            return hit
    closest = _closest(s.checker, s.scored, s.vid, s.family, s.source, s.build, s.ref)
    return Proposal(False, _why_no_map(s, forms, call, closest), tried=s.tried, closest=closest)


def _start(target: str, family_name: str, init: str | None, cfg: Config, variant_id: str | None) -> _Search:
    """The search's fixed parts: the class loaded and built once, the trait sets the family
    allows at ``cfg``; a module whose parameters fit none of them is refused here, in one line."""
    family = get_family(family_name)
    ref = reference_of(family.name)
    if ref is None:
        raise UnknownName(f"family '{family.name}' has no reference variant to search against")
    cls, import_line, source = load_class(target)
    init = guess_init(cls) if init is None else init
    build = _builder(cls, init)
    probe = build(cfg)
    specs, refused = [], []
    for spec in trait_sets(family, dict(ref.traits), probe):
        reason = family.requires(_full(ref, spec), cfg) if family.requires else None
        refused.extend([reason] if reason else [])
        specs.extend([] if reason else [spec])
    layouts = {tuple(family.params_for(cfg, _full(ref, s)).items()): {**ref.traits, **s} for s in specs}
    refuse_misfit(target, family, cfg, probe, list(layouts.values()))  # one line before any search
    return _Search(target=target, family=family, ref=ref, cfg=cfg, cls=cls, import_line=import_line, source=source,
                   init=init, build=build, probe=probe, vid=variant_id or cls.__name__.lower(),
                   semantic_cases={c for c, ts in family.case_semantic.items() if ts}, specs=specs,
                   refused=refused, checker=RunCache(cfg, record=False))


def _search_form(s: _Search, form: str) -> Proposal | None:
    """The candidate maps tried under one call form: the proposal of the first that agrees, else None."""
    made = make_call(form, s.probe, s.cfg)
    if made is None:
        return None
    adapter, code, uses_mask = made
    self_only = form in SELF_ONLY
    family = s.family
    cases = [c.name for c in family.cases  # not the regime cases ("padded@left"): their bases decide
             if not c.base and c.name not in s.semantic_cases
             and _case_ok(family, c.name, s.cfg, uses_mask, self_only)]
    if not cases:
        s.failed[form] = "nothing: no case of the family fits it (it passes no mask and every case masks a key)"
        return None
    ran = False
    f = _Form(form, adapter, code, uses_mask, self_only, cases, s.build(s.cfg).to(torch.float64).eval())
    for pmap, layout, oracles in _candidates(s.checker, family, s.cfg, s.probe, s.ref, s.specs, cases[0]):
        if s.tried >= MAX_CANDIDATES:
            break
        s.tried += 1
        variant = Variant(id=s.vid, family=family.name, source=s.source, build=s.build, call=adapter,
                          param_map=pmap, traits=layout)
        try:
            got = _forward(s.checker, variant, cases[0], f.module)
        except (PortingError, InputError) as exc:
            s.unported.setdefault(form, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            continue
        except _CallFailed as exc:
            s.failed[form] = str(exc)
            break  # this call form does not run the module: the next form
        ran = True
        if (hit := _agreeing(s, f, variant, got, oracles)) is not None:
            return hit
    if ran:
        s.ran_forms.append(form)
    return None


def _agreeing(s: _Search, f: _Form, candidate: Variant, got: torch.Tensor, oracles: _Oracles) -> Proposal | None:
    """The proposal for ``candidate`` if it agrees with a trait set's oracle on the first case and verifies."""
    pmap, layout = candidate.param_map, candidate.traits
    zero = search_fills(s.checker, candidate)
    for k, (spec, want) in enumerate(oracles.outputs(zero)):
        level = agreement(got, want)
        if k == 0:
            s.scored.append((_gap(got, want), s.tried, f.name, f.adapter, pmap, f.cases, f.module, layout))
        if level is None:
            continue
        variant = Variant(id=s.vid, family=s.family.name, source=s.source, build=s.build, call=f.adapter,
                          param_map=pmap, traits=_traits_of(s.family, s.ref, spec, level, s.cfg))
        if not all(_verify(s.checker, variant, _full(s.ref, spec), c) for c in f.cases):
            continue
        return _hit(s, f, variant, spec)
    return None


def _hit(s: _Search, f: _Form, variant: Variant, spec: dict) -> Proposal:
    """The proposal: the traits the no-key cases decide, the cases shown (a failing regime case drops its base)."""
    family, ref, cfg = s.family, s.ref, s.cfg
    traits, trait_notes, undecided = infer_case_traits(
        s.checker, family, variant, spec, dict(ref.traits), s.semantic_cases, uses_mask=f.uses_mask,
        case_ok=lambda c: f.case_ok(s, c))
    plain = {t: v for t, v in spec.items() if t in family.semantic}
    traits = _printed(family, ref, {**plain, **traits}, cfg) | _descriptive(variant.traits)
    shown = [c.name for c in family.cases if not c.base and f.case_ok(s, c.name) and c.name not in undecided]
    for c in family.cases:
        if c.base in shown and not _verify(s.checker, variant, _full(ref, spec), c.name):
            shown.remove(c.base)
            undecided.append(c.base)
            trait_notes.append(f"'{c.name}' does not agree within the declared precision: "
                               f"'{c.base}' is left out of its cases")
    return found(Hit(family=family, ref=ref, variant=variant, pmap=variant.param_map, form=f.name, code=f.code,
                     import_line=s.import_line, source=s.source, cls=s.cls, init=s.init, traits=traits,
                     notes=trait_notes, cases=shown,
                     tried=s.tried, ran_forms=s.ran_forms + [f.name], target=s.target, uses_mask=f.uses_mask,
                     cfg=cfg, restrict=f.self_only or not f.uses_mask or bool(undecided)))


def _why_no_map(s: _Search, forms: list[str], call: str | None, closest: dict) -> str:
    """Why no map: what was tried, then the closest candidate or, where no call form ran, why per form."""
    why = (f"no candidate map makes {s.target} agree with the float64 oracle of any of {len(s.specs)} trait sets "
           f"around {s.ref.id}'s ({s.tried} candidates tried; call forms that ran: {', '.join(s.ran_forms) or 'none'})")
    if s.refused:
        why += f"\nleft out: {len(s.refused)} trait set(s) the family refuses at this config ({s.refused[0]})"
    if closest:
        fails = "; ".join(f"{c} (max_abs {g:.3g})" for c, g in closest["failing"].items())
        why += (f"\nclosest (the {CLOSEST_POOL} nearest on the first case, scored over every case, forward float64): "
                f"call form {closest['call_form']}, fails on {fails}" + (f" ({closest['note']})" if closest.get("note")
                else "") + f"; agrees on {', '.join(closest['agrees']) or 'no case'}; map {closest['map']}")
    else:
        why += "\nno call form ran the module on the family's inputs; why, per call form:"
        for reason, named in _reasons_per_form(s, forms).items():
            why += f"\n  {', '.join(named)}: {reason}"
        why += "\npass --call (and --init) for a call form of your own"
    if call and call in s.failed:
        why += f"\n--call {call!r} " + ("ran " if s.failed[call].startswith("nothing") else "raised ") + s.failed[call]
    return why


def _reasons_per_form(s: _Search, forms: list[str]) -> dict[str, list[str]]:
    """Why each call form found nothing (no map ported, no case fits, the call raised) -> those forms."""
    reasons: dict[str, list[str]] = {}
    for form in forms:
        if form in s.unported:
            reasons.setdefault(f"no candidate map ported: {s.unported[form]}", []).append(form)
        elif form in s.failed:
            said = s.failed[form]
            reasons.setdefault(f"not tried: {said.removeprefix('nothing: ')}" if said.startswith("nothing")
                               else f"the call raised {said}", []).append(form)
    return reasons


def _candidates(checker: RunCache, family: Family, cfg: Config, probe, ref: Variant, specs: list[dict], case: str):
    """Each candidate map, the traits deciding its canonical parameters and its oracles: trait sets grouped by the
    parameters they bring (``Family.params_for``: QK-norm's gains), the reference's first; a map holding none of a
    group's own parameters is left to the reference's group."""
    groups: dict[tuple, list[dict]] = {}
    for spec in specs:
        groups.setdefault(tuple(family.params_for(cfg, _full(ref, spec)).items()), []).append(spec)
    for group in groups.values():
        layout = {**ref.traits, **group[0]}
        oracles = _Oracles(checker, family, [_full(ref, t) for t in group], case, layout)
        own = set(family.params_for(cfg, layout)) - set(family.params(cfg))
        for pmap in candidate_maps(family, cfg, probe, layout):
            if not own or not all(isinstance(pmap[n], Absent) for n in own):
                yield pmap, layout, oracles


def _full(ref: Variant, spec: dict) -> dict:
    """A trait set, the reference's values where it gives none (a fully masked row's: inferred on its own case)."""
    return {**ref.family_spec.semantic_traits(ref.traits), **spec}


class _CallFailed(Exception):
    """The call form raised (its message, one line)."""


class _Oracles:
    """The distinct float64 oracle outputs of the trait sets on one case, per fills (the
    canonical parameters a candidate leaves absent): forward only, computed once. A set
    changing two traits is skipped when changing either alone gives the reference's output
    on this case (two changes that do not show here: an eps with no LayerNorm, a RoPE
    fraction with no RoPE)."""

    def __init__(self, checker: RunCache, family: Family, specs: list[dict], case: str, layout: dict):
        self.checker, self.family, self.specs, self.case, self.layout = checker, family, specs, case, layout
        self._by_fills: dict = {}

    def outputs(self, zero) -> list[tuple[dict, torch.Tensor]]:
        if zero not in self._by_fills:
            family, checker = self.family, self.checker
            inputs = cast_inputs(checker.inputs(family, self.case), torch.float64, "cpu")
            weights = checker.weights(family, zero, self.layout)
            kept: list[tuple[dict, torch.Tensor]] = []
            seen: set[bytes] = set()
            silent: set[tuple] = set()  # single changes that do not show on this case
            base, base_key = self.specs[0], None
            for spec in self.specs:
                changed = [(t, spec[t]) for t in spec if spec[t] != base.get(t)]
                if len(changed) > 1 and all(c in silent for c in changed):
                    continue
                try:
                    with torch.no_grad():
                        out = family.oracle(family.semantic_traits(spec), checker.cfg, weights, inputs, torch.float64)
                except (SpecError, RuntimeError, KeyError):  # a combination no module can have
                    continue
                key = out.numpy().tobytes() if out.is_floating_point() else bytes(str(out.tolist()), "utf8")
                base_key = key if base_key is None else base_key
                if len(changed) == 1 and key == base_key:
                    silent.add(changed[0])
                if key not in seen:
                    seen.add(key)
                    kept.append((spec, out))
            self._by_fills[zero] = kept
        return self._by_fills[zero]


def _forward(checker: RunCache, variant: Variant, case: str, module: torch.nn.Module) -> torch.Tensor:
    """The quick test of a candidate: the module built once, the candidate's weights ported
    in, float64 forward only, no op recording."""
    family = variant.family_spec
    zero = search_fills(checker, variant)
    PortMap(variant.key, module, variant.map_for(checker.cfg), family.canonical_shapes(checker.cfg, variant.traits)
            ).load(checker.weights(family, zero, variant.traits))
    try:
        with torch.no_grad():
            got = variant.call(module, cast_inputs(checker.inputs(family, case), torch.float64, "cpu"))
    except Exception as exc:  # noqa: BLE001  (this call form does not run the module: said when asked for)
        raise _CallFailed(describe(exc)) from None
    if not isinstance(got, torch.Tensor):
        raise _CallFailed(f"it returned {type(got).__name__}, not a tensor")
    return got.detach().double().cpu()


CLOSEST_POOL = 12  # candidates nearest on the first case that are scored over every case


def _closest(checker: RunCache, scored: list[tuple], vid: str, family: Family, source: str, build, ref) -> dict:
    """The candidate that fails the fewest cases (then the smallest worst gap), each of the
    ``CLOSEST_POOL`` candidates nearest on the first case (and every one that agreed there)
    held, float64 forward, to its traits' oracle on every case it takes (a reference may refuse the config)."""
    best, best_key = {}, None
    pool = sorted(scored, key=lambda s: (s[0], s[1]))
    pool = [s for i, s in enumerate(pool) if i < CLOSEST_POOL or s[0] == 0.0]
    for _, _, form, adapter, pmap, cases, module, layout in pool:
        variant = Variant(id=vid, family=family.name, source=source, build=build, call=adapter,
                          param_map=pmap, traits=layout)
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
    """A candidate's float64 forward on one case (module built once, no op recording) against its traits' oracle."""
    family, traits, cfg = ref.family_spec, variant.traits, checker.cfg
    weights = checker.weights(family, search_fills(checker, variant), traits)
    inputs = cast_inputs(checker.inputs(family, case), torch.float64, "cpu")
    PortMap(variant.key, module, variant.map_for(cfg), family.canonical_shapes(cfg, traits)).load(weights)
    try:
        with torch.no_grad():
            want = family.oracle(family.semantic_traits(_full(ref, traits)), cfg, weights, inputs, torch.float64)
            got = variant.call(module, inputs)
    except Exception:  # noqa: BLE001  (this call form does not run the module on this case)
        return Verdict.ERROR, math.inf, ""
    if not isinstance(want, torch.Tensor) or not isinstance(got, torch.Tensor):
        return Verdict.ERROR, math.inf, ""
    tv = compare_tensors(got.detach().double().cpu(), want, None, None, torch.float64)
    note = f"output: {tv.note}, the module's vs the oracle of {ref.id}'s traits" if tv.note else ""
    return tv.verdict, tv.max_abs, note


def _gap(got: torch.Tensor, want: torch.Tensor) -> float:
    if got.shape != want.shape or not got.numel():
        return math.inf if got.shape != want.shape else 0.0
    return float((got - want).abs().nan_to_num(math.inf).max())


def _traits_of(family: Family, ref: Variant, spec: dict, level: str, cfg: Config) -> dict:
    return _printed(family, ref, spec, cfg) | ({"internal_dtype": "float32"} if level == "float32" else {})


def _printed(family: Family, ref: Variant, traits: dict, cfg: Config) -> dict:
    """The semantic traits a registration declares: the reference's, those off the family's
    default, and GQA's grouping when the search ran with fewer K/V heads."""
    keep = {"gqa_grouping"} if cfg.n_kv_heads < cfg.heads else set()
    return {t: v for t, v in traits.items() if t in family.traits
            and (t in ref.traits or t in keep or v != family.traits[t].default)}


def _descriptive(traits: dict) -> dict:
    return {t: traits[t] for t in ("internal_dtype",) if t in traits}
