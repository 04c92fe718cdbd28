"""The reference's own code, patched: what a candidate's file (or its calls) can change outside
torch that the reference then runs (``harness.base.hacks`` covers torch's functions).

``snapshot_reference(modules)`` before a candidate's file is imported records:

- each problem module's every attribute (``Model``, ``get_inputs``, the module-level sizes),
  and every attribute of each class it defines (``Model.forward``; a method added to it
  shadows an inherited one, so an added name counts too);
- the code and defaults of each of those functions (``Model.forward.__code__ = ...`` keeps
  the function's identity);
- the callables of each module those modules import, torch's aside (``numpy.exp``), of every
  loaded module of the standard library (``math.sqrt``: a later candidate would run it too),
  of ``builtins``, and of the harness's own modules and their classes (the judge itself:
  ``Judgement.ok``).

``patched_since(snap)`` names each change (a ``HackFinding`` of kind ``REFERENCE_PATCHED``)
and puts it back as it was: the reference, and every candidate after, run the code the
problem file defined.
"""

from __future__ import annotations

import builtins
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from harness.base.hacks import HackFinding, HackKind

_FUNCTION_PARTS = ("__code__", "__defaults__", "__kwdefaults__")
_SCALARS = (int, float, complex, str, bytes, bool, type(None))
_OWN = ("harness",)  # the harness's own modules: the judge's functions (its callables)
_SKIPPED = ("torch",)  # torch's: harness.base.hacks.snapshot_torch compares them


def _function(value: Any) -> types.FunctionType | None:
    inner = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
    inner = inner.fget if isinstance(inner, property) else inner
    return inner if isinstance(inner, types.FunctionType) else None


def _parts(value: Any) -> tuple:
    fn = _function(value)
    return tuple(getattr(fn, p, None) for p in _FUNCTION_PARTS) if fn is not None else ()


@dataclass(frozen=True)
class _Space:
    """One namespace watched: its label, the object, whether every attribute counts (else
    callables only) and whether a name added to it counts (a class: it shadows)."""

    label: str
    obj: Any
    every: bool
    added: bool
    runs: str = "the reference"  # who would run what is changed there


@dataclass(frozen=True)
class ReferenceSnapshot:
    """What the watched namespaces held when ``snapshot_reference`` ran."""

    spaces: tuple[_Space, ...]
    values: dict[tuple[int, str], Any]    # (space index, name) -> the value
    parts: dict[tuple[int, str], tuple]   # (space index, name) -> a function's code and defaults


def _watched(value: Any, every: bool) -> bool:
    return every or callable(value) or _function(value) is not None


def _spaces(problems: Iterable[tuple[str, types.ModuleType]]) -> list[_Space]:
    out: list[_Space] = []
    seen: set[int] = set()

    def add(label: str, obj: Any, every: bool, added: bool, runs: str = "the reference") -> None:
        if id(obj) not in seen:
            seen.add(id(obj))
            out.append(_Space(label, obj, every, added, runs))

    problems = list(problems)
    for label, module in problems:
        add(label, module, True, False)
        for name, value in list(vars(module).items()):
            if isinstance(value, type) and value.__module__ == module.__name__:
                add(f"{label}.{name}", value, True, True)
    for _, module in problems:
        for value in list(vars(module).values()):
            if isinstance(value, types.ModuleType) and not value.__name__.startswith(_SKIPPED):
                add(value.__name__, value, False, False)
    add("builtins", builtins, False, False)
    for name, module in list(sys.modules.items()):  # the standard library's loaded modules, the harness's
        top = name.split(".")[0]
        if not isinstance(module, types.ModuleType) or (top not in sys.stdlib_module_names and top not in _OWN):
            continue
        add(name, module, False, False, "the judge" if top in _OWN else "the reference")
        if top in _OWN:  # and the harness's classes' methods
            for cls_name, value in list(vars(module).items()):
                if isinstance(value, type) and value.__module__ == name:
                    add(f"{name}.{cls_name}", value, False, True, "the judge")
    return out


def snapshot_reference(problems: Iterable[tuple[str, types.ModuleType]]) -> ReferenceSnapshot:
    """``problems``: (label, module) of each problem (``problem_modules``). Take it before importing a
    candidate's file (see the module)."""
    spaces = tuple(_spaces(problems))
    values, parts = {}, {}
    for i, space in enumerate(spaces):
        for name, value in list(vars(space.obj).items()):
            if _watched(value, space.every):
                values[(i, name)], parts[(i, name)] = value, _parts(value)
    return ReferenceSnapshot(spaces, values, parts)


def _same(old: Any, new: Any) -> bool:
    return new is old or (type(new) is type(old) and isinstance(old, _SCALARS) and new == old)


def _where(code: types.CodeType) -> str:
    return f"{code.co_name} ({Path(code.co_filename).name}:{code.co_firstlineno})"


def _by(value: Any) -> str:
    fn = _function(value)
    return f" by a {type(value).__name__}" if fn is None else f" by {_where(fn.__code__)}"


_ABSENT = object()


@dataclass(frozen=True)
class _Change:
    space: _Space
    name: str
    old: Any       # _ABSENT: the name was added
    parts: tuple   # the old function's code and defaults
    verb: str
    by: str = ""


def _changed(space: _Space, name: str, old: Any, parts: tuple) -> _Change | None:
    new = vars(space.obj).get(name, _ABSENT)
    if new is _ABSENT:
        return _Change(space, name, old, parts, "removed")
    if not _same(old, new):
        return _Change(space, name, old, parts, "replaced", _by(new))
    now = _parts(new)
    if all(a is b for a, b in zip(now, parts)):
        return None
    if now[0] is not parts[0]:
        return _Change(space, name, old, parts, "rewrote the code of", f" with {_where(now[0])}")
    return _Change(space, name, old, parts, "changed the defaults of")


def _changes(snap: ReferenceSnapshot) -> list[_Change]:
    out = [c for (i, name), old in snap.values.items()
           if (c := _changed(snap.spaces[i], name, old, snap.parts[(i, name)])) is not None]
    for i, space in enumerate(snap.spaces):
        if space.added:
            out += [_Change(space, n, _ABSENT, (), "added", _by(v)) for n, v in list(vars(space.obj).items())
                    if (i, n) not in snap.values and _watched(v, space.every)]
    return out


def _restore(c: _Change) -> None:
    if c.old is _ABSENT:
        delattr(c.space.obj, c.name)
        return
    if vars(c.space.obj).get(c.name, _ABSENT) is not c.old:
        setattr(c.space.obj, c.name, c.old)
    fn = _function(c.old)
    if fn is not None:
        for part, value in zip(_FUNCTION_PARTS, c.parts):
            if getattr(fn, part) is not value:
                setattr(fn, part, value)


def patched_since(snap: ReferenceSnapshot) -> list[HackFinding]:
    """A ``REFERENCE_PATCHED`` finding for each change since ``snap`` (see the module), each
    put back as it was."""
    found = []
    for c in _changes(snap):
        found.append(HackFinding(HackKind.REFERENCE_PATCHED, f"the candidate {c.verb} {c.space.label}.{c.name}{c.by}: "
                                 f"{c.space.runs} would run it"))
        _restore(c)
    return found


def problem_modules(prefix: str) -> list[tuple[str, types.ModuleType]]:
    """(label, module) for each loaded module whose name opens with ``prefix`` (the KernelBench
    judge's problem files), labelled by its file's stem (the problem's name)."""
    return [(Path(getattr(m, "__file__", None) or n).stem, m) for n, m in list(sys.modules.items())
            if n.startswith(prefix) and isinstance(m, types.ModuleType)]
