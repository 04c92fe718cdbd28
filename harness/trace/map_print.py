"""Map search, the registration it prints: the code to paste for the candidate that passed
(imports, build, call, the parameter map with its sizes read from ``cfg``, the traits),
itself run and checked before it is called found (``map_verify``)."""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from harness.base.config import Config
from harness.base.library import rotary_tables
from harness.base.masks import additive_mask, masked, per_head
from harness.families.base import Family
from harness.porting.entries import IDENTITY, Absent, Chunk, Transposed, entry_code
from harness.registry import Variant, build
from harness.trace.map_candidates import CALL_NOTES, Proposal, init_imports
from harness.trace.map_verify import verify_registration

HELPERS = ("additive_mask", "library_config", "rotary_tables", "ByDtype")  # imported where the registration uses them


def _entry_classes(entry) -> set[str]:
    if isinstance(entry, Transposed):
        return {"Transposed"} | _entry_classes(entry.inner)
    if isinstance(entry, Absent) and entry.fill in (0.0, IDENTITY):
        return {"Zero" if entry.fill == 0.0 else "Identity"}
    return {type(entry).__name__}


def _returns_tuple(variant: Variant, family: Family, cfg: Config, case: str, code: str) -> bool:
    """Whether the module's own call (``code``) returns a tuple (nn.MultiheadAttention)."""
    module, _ = build(variant, cfg, dtype=torch.float64)
    inputs = family.inputs(case, cfg)
    scope = {"per_head": per_head, "masked": masked, "torch": torch, "m": module, "i": inputs,
             "additive_mask": additive_mask, "rotary_tables": rotary_tables}
    with torch.no_grad():
        return isinstance(eval(compile(code, "--call", "eval"), scope), (tuple, list))  # noqa: S307


def _reads_cfg(pmap: dict) -> bool:
    """Whether the printed map is a function of ``cfg``: a per-head entry or blocks of unequal sizes."""
    return any("heads=" in entry_code(e) or "sizes=" in entry_code(e) for e in pmap.values())


def _size_code(size: int, cfg: Config) -> str:
    """A block size as the config expression it equals at ``cfg`` (the K/V heads' rows first
    where they differ from the query heads'), else the number."""
    named = (("cfg.heads * cfg.d_k", cfg.heads * cfg.d_k), ("cfg.n_kv_heads * cfg.d_k", cfg.n_kv_heads * cfg.d_k),
             ("cfg.d_model", cfg.d_model), ("cfg.d_ff", cfg.d_ff))
    return next((code for code, value in named if value == size), str(size))


def _code(entry, cfg: Config) -> str:
    """The entry's code; a per-head entry reads its head count, a block of unequal sizes its
    sizes, from the config it is built for."""
    inner = entry.inner if isinstance(entry, Transposed) else entry
    text = entry_code(entry)
    if isinstance(inner, Chunk) and inner.sizes:
        text = text.replace(f"sizes={inner.sizes}",
                            f"sizes=({', '.join(_size_code(n, cfg) for n in inner.sizes)})")
    return text.replace(f"heads={cfg.heads})", "heads=cfg.heads)").replace(f"heads={cfg.heads},", "heads=cfg.heads,")


def _within(traits: dict) -> str:
    internal = traits.get("internal_dtype")
    return f" within {internal}'s tolerance (it computes in {internal} inside)" if internal else ""


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
    restrict: bool  # registered with the cases it was compared on (no mask, or self-attention only)


def found(hit: Hit) -> Proposal:
    (family, ref, variant, pmap, form, code, import_line, source, cls, init, traits, notes, cases, tried,
     ran_forms, target, uses_mask, cfg, restrict) = (getattr(hit, f.name) for f in fields(hit))
    uses = sorted(set().union(*(_entry_classes(e) for e in pmap.values())))
    helpers = [h for h in HELPERS if f"{h}(" in code + init + repr(traits)]
    lines = (["import torch"] if "torch." in code + init else []) + ([import_line] if import_line else []) \
        + init_imports(cls, init)
    lines.append(f"from harness import {', '.join(uses + helpers + ['register'])}")
    if "per_head(" in code:
        lines.append("from harness import masked, per_head")
    all_traits = dict(traits)
    if restrict and set(cases) != {c.name for c in family.cases if not c.base}:
        # a mask-free or self-attention-only module is compared only where it can run
        all_traits["cases"] = tuple(cases)
    tail = "[0]" if _returns_tuple(variant, family, cfg, cases[0], code) else ""
    lines += ["", "register(", f'    id="{variant.id}",', f'    family="{family.name}",',
              f'    source="{source}",',
              f"    build=lambda cfg: {cls.__name__}({init}),",
              f"    call=lambda m, i: {code}{tail},",
              "    param_map=lambda cfg: {" if _reads_cfg(pmap) else "    param_map={"]
    lines += [f'        "{name}": {_code(entry, cfg)},' for name, entry in pmap.items()]
    lines += ["    },", "    traits={" + ", ".join(f'"{k}": {v!r}' for k, v in all_traits.items()) + "},", ")"]
    code_text = "\n".join(lines)
    head = [f"map {target} as family '{family.name}': found",
            f"call form: {form} ({CALL_NOTES.get(form, 'custom expression')})",
            f"{tried} candidate maps tried (call forms: {', '.join(ran_forms)}); this one agrees with the float64 "
            f"oracle of its traits{_within(traits)}, output and every gradient, on {', '.join(cases)}"]
    head += [f"trait {n}" for n in notes]
    clean, checked = verify_registration(code_text, family.name, variant.id, cfg, scope={cls.__name__: cls},
                                         dtypes=("float64",), extras=False)
    head.append(checked)
    where = "paste into a variant file" if import_line else "paste at the end of the file that defines the class"
    text = "\n".join(head) + f"\n\n# {where}\n" + code_text
    return Proposal(clean, text, code_text, tried, form, pmap, all_traits)
