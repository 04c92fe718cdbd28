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

import importlib
import importlib.util
import inspect
import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from .adapt import masked, per_head
from .compare import Checker, compare_tensors, worst
from .config import Config
from .errors import (
    ConfigError, HarnessError, InputError, PortingError, SpecError, UnknownName, VariantFileError,
)
from .families import Family, get_family
from .porting import Chunk, Param, Transposed, Zero, entry_code
from .registry import Variant, reference_of, scratch

MAX_CANDIDATES = 20000
AGREE = ("identical", "equivalent")

# name -> (code of the adapter's call, whether it passes the mask)
CALL_FORMS: dict[str, tuple[str, bool]] = {
    "qkv_mask": ('m(i["query"], i["key"], i["value"], i["mask"])', True),
    "qkv_masked": ('m(i["query"], i["key"], i["value"], ~i["mask"])', True),
    "qkv_attn_mask": ('m(i["query"], i["key"], i["value"], attn_mask=per_head(masked(i["mask"]), {heads}), '
                      'need_weights=False)', True),
    "qkv": ('m(i["query"], i["key"], i["value"])', False),
    "self": ('m(i["query"])', False),
}
CALL_NOTES = {
    "qkv_mask": "mask (B, T, S) bool, True = may attend",
    "qkv_masked": "mask (B, T, S) bool, True = masked",
    "qkv_attn_mask": "attn_mask (B*H, T, S) bool, True = not allowed (nn.MultiheadAttention)",
    "qkv": "no mask: compared only on cases whose mask hides nothing",
    "self": "self-attention, no mask: compared only on cases with query = key = value and nothing masked",
}
WIDTH_NAMES = ("d_model", "hidden_size", "hidden_dim", "embed_dim", "n_embd", "dim", "model_dim",
               "width", "num_hiddens", "d", "emb_dim", "embedding_dim")
HEAD_NAMES = ("heads", "num_heads", "n_head", "nhead", "n_heads", "head_num", "nums_head",
              "num_attention_heads", "h", "head_size")
FF_NAMES = ("d_ff", "dim_feedforward", "filter_size", "ffn_dim", "hidden_features", "intermediate_size")
HEAD_ATTRS = ("num_heads", "heads", "n_head", "nhead", "n_heads", "head_num", "nums_head", "head_size")


@dataclass
class Proposal:
    found: bool
    text: str
    code: str = ""
    tried: int = 0
    call_form: str = ""
    param_map: dict = field(default_factory=dict)
    traits: dict = field(default_factory=dict)
    closest: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"found": self.found, "text": self.text, "code": self.code, "tried": self.tried,
                "call_form": self.call_form, "traits": self.traits, "closest": self.closest,
                "param_map": {k: entry_code(v) for k, v in self.param_map.items()}}


# -- loading the class ----------------------------------------------------------------------------

def load_class(target: str) -> tuple[type, str, str]:
    """``FILE.py:CLASS`` or ``package.module:CLASS`` -> (class, import line, source).
    A file is imported with its registrations undone (it may register variants itself)."""
    where, sep, name = target.rpartition(":")
    if not sep or not where or not name:
        raise UnknownName(f"bad target '{target}': expected FILE.py:CLASS or module.path:CLASS")
    if where.endswith(".py") or Path(where).is_file():
        path = Path(where)
        if not path.is_file():
            raise VariantFileError(f"file '{where}' does not exist")
        spec = importlib.util.spec_from_file_location(f"harness_map_{abs(hash(str(path.resolve())))}", path)
        if spec is None or spec.loader is None:
            raise VariantFileError(f"'{where}' is not a Python file")
        module = importlib.util.module_from_spec(spec)
        with scratch():
            try:
                spec.loader.exec_module(module)
            except HarnessError as exc:
                raise VariantFileError(f"'{where}' failed to import: {exc}") from None
            except Exception as exc:  # the user's code: one line
                raise VariantFileError(f"'{where}' failed to import: {type(exc).__name__}: {exc}") from None
        import_line, source = "", str(where)
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as exc:
            raise VariantFileError(f"cannot import '{where}': {exc}") from None
        import_line, source = f"from {where} import {name}", f"{where}.{name}"
    cls = getattr(module, name, None)
    if not isinstance(cls, type) or not issubclass(cls, torch.nn.Module):
        raise UnknownName(f"'{name}' in '{where}' is not an nn.Module class")
    return cls, import_line, source


def guess_init(cls: type) -> str:
    """Constructor keywords guessed from the signature: widths, heads, feed-forward size,
    dropout 0, ``batch_first=True``."""
    try:
        sig = inspect.signature(cls.__init__)
    except (TypeError, ValueError):
        return ""
    parts = []
    for pname, p in list(sig.parameters.items())[1:]:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        required = p.default is inspect.Parameter.empty
        if pname in WIDTH_NAMES:
            parts.append(f"{pname}=cfg.d_model")
        elif pname in HEAD_NAMES:
            parts.append(f"{pname}=cfg.heads")
        elif pname in FF_NAMES:
            parts.append(f"{pname}=cfg.d_ff")
        elif pname == "batch_first":
            parts.append("batch_first=True")
        elif "dropout" in pname and required:
            parts.append(f"{pname}=0.0")
        elif required:
            raise ConfigError(f"cannot guess {cls.__name__}(...)'s argument '{pname}': pass "
                              f"--init '{pname}=...' (cfg.d_model, cfg.heads, cfg.d_ff are at hand)")
    return ", ".join(parts)


def _builder(cls: type, init: str) -> Callable[[Config], torch.nn.Module]:
    try:
        compiled = compile(f"dict({init})", "--init", "eval")
    except SyntaxError as exc:
        raise ConfigError(f"bad --init '{init}': {exc.msg}") from None

    def build(cfg: Config):
        try:
            kwargs = eval(compiled, {"cfg": cfg, "torch": torch})  # noqa: S307  (the user's own CLI text)
        except Exception as exc:
            raise ConfigError(f"bad --init '{init}': {type(exc).__name__}: {exc}") from None
        try:
            return cls(**kwargs)
        except Exception as exc:
            raise ConfigError(f"{cls.__name__}({init}) failed: {type(exc).__name__}: {exc}") from None
    return build


# -- call forms ---------------------------------------------------------------------------------------

def _heads_attr(module: torch.nn.Module, cfg: Config) -> str | None:
    for name in HEAD_ATTRS:
        if getattr(module, name, None) == cfg.heads:
            return f"m.{name}"
    return None


def _first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def make_call(form: str, module: torch.nn.Module, cfg: Config) -> tuple[Callable, str, bool] | None:
    """(adapter, its code, passes the mask) for a named form or an expression."""
    if form in CALL_FORMS:
        code, uses_mask = CALL_FORMS[form]
        if "{heads}" in code:
            heads = _heads_attr(module, cfg)
            if heads is None:
                return None
            code = code.format(heads=heads)
    else:  # an expression of m, query, key, value, mask
        code = form
        for name in ("query", "key", "value", "mask"):
            code = _replace_name(code, name, f'i["{name}"]')
        uses_mask = "mask" in form
    try:
        compiled = compile(code, "--call", "eval")
    except SyntaxError as exc:
        raise ConfigError(f"bad --call '{form}': {exc.msg}") from None
    scope = {"per_head": per_head, "masked": masked, "torch": torch}

    def call(m, i):
        return _first(eval(compiled, {**scope, "m": m, "i": i}))  # noqa: S307
    return call, code, uses_mask


def _replace_name(code: str, name: str, new: str) -> str:
    import re

    return re.sub(rf"(?<![\w\"'.]){name}(?![\w\"'])", new, code)


# -- candidate maps -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Slot:
    """One place a canonical weight can live: a whole parameter or one chunk of it."""

    path: str
    index: int
    chunks: int
    transposed: bool

    def entry(self):
        if self.chunks == 1:
            inner = Param(self.path)
        else:
            inner = Chunk(self.path, self.index, self.chunks, dim=1 if self.transposed else 0)
        return Transposed(inner) if self.transposed else inner


def _weight_slots(params: dict[str, torch.Tensor], out: int, inp: int) -> list[list[Slot]]:
    """Per 2-D parameter, its slots for a canonical (out, inp) weight; a square
    parameter yields both orientations as alternatives (one list per orientation)."""
    groups = []
    for path, p in params.items():
        if p.dim() != 2:
            continue
        r, c = p.shape
        if (r, c) == (out, inp):
            groups.append([[Slot(path, 0, 1, False)]] + ([[Slot(path, 0, 1, True)]] if out == inp else []))
        elif c == inp and r % out == 0 and r // out > 1:
            n = r // out
            groups.append([[Slot(path, i, n, False) for i in range(n)]])
        elif r == inp and c % out == 0 and c // out > 1:
            n = c // out
            groups.append([[Slot(path, i, n, True) for i in range(n)]])
        elif (r, c) == (inp, out):
            groups.append([[Slot(path, 0, 1, True)]])
    return groups


def _stem(path: str) -> str:
    base = path.rsplit(".", 1)
    leaf = base[-1]
    for a, b in (("weight", ""), ("bias", ""), ("w_", ""), ("b_", ""), ("w", ""), ("b", "")):
        if leaf.startswith(a) or leaf.endswith(a):
            leaf = leaf.replace(a, b, 1)
            break
    return (base[0] + "." if len(base) == 2 else "") + leaf


def _bias_for(slot: Slot, biases: dict[str, torch.Tensor], out: int) -> Any:
    """The bias entry that goes with a weight slot: a 1-D parameter of the slot's module
    (or of the same stem: ``w_qkv``/``b_qkv``, ``in_proj_weight``/``in_proj_bias``)."""
    want = out * slot.chunks
    fits = [p for p, t in biases.items() if t.numel() == want]
    prefix = slot.path.rsplit(".", 1)[0] if "." in slot.path else ""
    same = [p for p in fits if (p.rsplit(".", 1)[0] if "." in p else "") == prefix and "." in p] \
        or [p for p in fits if _stem(p) == _stem(slot.path)]
    pick = same[0] if len(same) == 1 else (fits[0] if len(fits) == 1 else None)
    if pick is None:
        return Zero()
    return Param(pick) if slot.chunks == 1 else Chunk(pick, slot.index, slot.chunks)


def candidate_maps(family: Family, cfg: Config, module: torch.nn.Module):
    """Every assignment of the module's weight slots to the family's canonical (2-D)
    weights, biases following their weights; other canonical parameters (norm gains)
    by shape and name order."""
    shapes = family.canonical_shapes(cfg)
    params = dict(module.named_parameters())
    weights = [n for n, s in shapes.items() if len(s) == 2]
    if not weights:
        raise ConfigError(f"family '{family.name}' has no canonical weight matrix to search for")
    out, inp = shapes[weights[0]]
    if any(shapes[n] != (out, inp) for n in weights):
        raise ConfigError(f"map searches families whose weights share one shape; '{family.name}' does not")
    groups = _weight_slots(params, out, inp)
    biases = {p: t for p, t in params.items() if t.dim() == 1}
    for choice in itertools.product(*groups):
        slots = [s for group in choice for s in group]
        if len(slots) != len(weights):
            continue
        for perm in itertools.permutations(slots):
            pmap: dict[str, Any] = {}
            for name, slot in zip(weights, perm):
                pmap[name] = slot.entry()
                bias = name.removesuffix(".weight") + ".bias"
                if bias in shapes:
                    pmap[bias] = _bias_for(slot, biases, out)
            for name in shapes:
                pmap.setdefault(name, Zero())
            yield pmap


# -- the search ------------------------------------------------------------------------------------------

def _case_ok(family: Family, case: str, cfg: Config, uses_mask: bool, self_only: bool) -> bool:
    inputs = family.inputs(case, cfg)
    mask = inputs.get("mask")
    if not uses_mask and isinstance(mask, torch.Tensor) and not bool(mask.all()):
        return False
    if self_only and not (inputs.get("query") is inputs.get("key") is inputs.get("value")):
        return False
    return True


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
    checker = Checker(cfg)
    tried = 0
    closest: dict = {}
    ran_forms = []
    for form in forms:
        made = make_call(form, probe, cfg)
        if made is None:
            continue
        adapter, code, uses_mask = made
        self_only = form == "self"
        cases = [c.name for c in family.cases
                 if c.name not in semantic_cases and _case_ok(family, c.name, cfg, uses_mask, self_only)]
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
                verdict, gap = _forward_verdict(checker, variant, ref, first_case, module)
            except (PortingError, InputError):
                continue
            if verdict == "error":
                break  # this call form does not run the module: the next form
            ran = True
            if not closest or gap < closest["max_abs"]:
                closest = {"max_abs": gap, "call_form": form, "map": {k: entry_code(v) for k, v in pmap.items()}}
            if verdict not in AGREE:
                continue
            verdicts = {c: _compare(checker, variant, ref, c)[0] for c in cases}
            if all(v in AGREE for v in verdicts.values()):
                traits, trait_notes = _infer_traits(checker, family, variant, ref, semantic_cases, uses_mask)
                return _found(family, ref, variant, pmap, form, code, import_line, source, cls, init,
                              traits, trait_notes, cases, tried, ran_forms + [form], target, uses_mask, cfg)
        if ran:
            ran_forms.append(form)
    why = (f"no candidate map makes {target} equivalent to {ref.id} in float64 "
           f"({tried} candidates tried; call forms that ran: {', '.join(ran_forms) or 'none'})")
    if closest:
        why += (f"\nclosest: call form {closest['call_form']}, max_abs {closest['max_abs']:.3g} on "
                f"{family.cases[0].name}, map {closest['map']}")
    else:
        why += "\nno call form ran the module on the family's inputs: pass --call and --init"
    return Proposal(False, why, tried=tried, closest=closest)


def _forward_verdict(checker: Checker, variant: Variant, ref: Variant, case: str,
                     module: torch.nn.Module) -> tuple[str, float]:
    """The quick test of a candidate: the module built once, the candidate's weights
    ported in, float64 forward only, no op recording."""
    from .compare import cast_inputs
    from .porting import PortMap

    family = get_family(ref.family)
    zero = checker.zero_names(variant) | checker.zero_names(ref)
    want = checker.run(ref, case, zero, torch.float64).tensors.get("output")
    PortMap(variant.key, module, variant.map_for(checker.cfg), family.canonical_shapes(checker.cfg)).load(
        checker.weights(family, zero))
    try:
        with torch.no_grad():
            got = variant.call(module, cast_inputs(checker.inputs(family, case), torch.float64, "cpu"))
    except HarnessError:
        raise
    except Exception:  # noqa: BLE001  (this call form does not run the module)
        return "error", math.inf
    if want is None or not isinstance(got, torch.Tensor):
        return "error", math.inf
    tv = compare_tensors(got.detach().double().cpu(), want, None, None, torch.float64)
    return tv.verdict, tv.max_abs


def _compare(checker: Checker, variant: Variant, ref: Variant, case: str, forward_only: bool = False):
    zero = checker.zero_names(variant) | checker.zero_names(ref)
    dtype = torch.float64
    ra = checker.run(ref, case, zero, dtype)
    family = get_family(ref.family)
    from .compare import run_variant

    rb = run_variant(variant, checker.cfg, checker.inputs(family, case), checker.weights(family, zero), dtype,
                     backward=not forward_only)
    if rb.error or ra.error:
        return "error", math.inf
    verdicts, gap = [], 0.0
    for name, t in rb.tensors.items():
        if name in ra.tensors:
            tv = compare_tensors(t, ra.tensors[name], None, None, dtype)
            verdicts.append(tv.verdict)
            if name == "output":
                gap = tv.max_abs
    return worst(verdicts), gap


def _infer_traits(checker, family, variant, ref, semantic_cases, uses_mask):
    """The family's semantic traits: the reference's where the module agrees with it on
    the plain cases; on a case with traits of its own (a fully masked row), the values
    whose float64 oracle (``harness.oracles``) the module agrees with there."""
    case_traits = {t for names in family.case_semantic.values() for t in names}
    full = family.semantic_traits(ref.traits)
    traits = {t: ref.traits[t] for t in family.traits if t in ref.traits and t not in case_traits}
    notes = []
    for case in sorted(semantic_cases):
        if not uses_mask:
            continue
        names = family.case_semantic[case]
        zero = checker.zero_names(variant)
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
            if verdicts and worst(verdicts) in AGREE:
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
                     + (f" (and {len(matches) - 1} other value set(s) it cannot tell apart)" if len(matches) > 1 else ""))
    return traits, notes


def _entry_classes(entry) -> set[str]:
    if isinstance(entry, Transposed):
        return {"Transposed"} | _entry_classes(entry.inner)
    return {type(entry).__name__}


def _returns_tuple(variant: Variant, family: Family, cfg: Config, case: str, code: str) -> bool:
    """Whether the module's own call (``code``) returns a tuple (nn.MultiheadAttention)."""
    from .seeding import build

    module, _ = build(variant, cfg, dtype=torch.float64)
    inputs = family.inputs(case, cfg)
    scope = {"per_head": per_head, "masked": masked, "torch": torch, "m": module, "i": inputs}
    with torch.no_grad():
        return isinstance(eval(compile(code, "--call", "eval"), scope), (tuple, list))  # noqa: S307


def _found(family, ref, variant, pmap, form, code, import_line, source, cls, init, traits, notes, cases,
           tried, ran_forms, target, uses_mask, cfg) -> Proposal:
    uses = sorted(set().union(*(_entry_classes(e) for e in pmap.values())))
    lines = [import_line] if import_line else []
    lines.append(f"from harness import {', '.join(uses + ['register'])}")
    if "per_head(" in code:
        lines.append("from harness.adapt import masked, per_head")
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
    where = "paste into a variant file" if import_line else "paste at the end of the file that defines the class"
    text = "\n".join(head) + f"\n\n# {where}\n" + code_text
    return Proposal(True, text, code_text, tried, form, pmap, all_traits)
