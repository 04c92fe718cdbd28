"""Reward hacks: what a candidate can do to pass a comparison without computing the function,
named by kind, and the first defence (torch's functions replaced at import).

Every defence answers ``HackFinding``s: a ``HackKind`` and one line (``str(finding)``,
"hack: ...") that a verdict row shows as it is. The defences:

- ``harness.base.patches``: the problem's own code (its module, its classes), the modules it
  imports (``math.sqrt``), ``builtins`` and the harness's functions, changed by a candidate;
- here: ``snapshot_torch()`` before a candidate's file is imported, ``replaced_since(snap)``
  after it (every torch function, ``torch.nn.functional`` function, ``torch.Tensor`` and
  ``torch.nn`` module method replaced, an aten kernel registered over torch's own through
  ``torch.library``, a torch function or dispatch mode left switched on), and
  ``originals(snap)``, inside which the reference runs with torch's own functions;
- ``harness.base.hack_guard``: ``guarded_call`` (one call of the candidate: inputs modified,
  the result written into an input, an output that is not a plain tensor, an output never
  written, work left on a background thread or on another CUDA stream);
- ``harness.check.hack_probes``: calls in sequence (outputs cached by identity, shape, seed or
  a fingerprint of the values, an output buffer a later call overwrites, code keyed to the
  evaluation's seed or sizes), signed draws (code that assumes non-negative inputs) and the
  float64 bound (a lower-precision compute that passes a loose tolerance).
"""

from __future__ import annotations

import contextlib
import enum
import gc
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from harness.base.errors import _theirs
from harness.base.process_state import _namespaces, torch_functions


class HackKind(enum.Enum):
    """What a candidate did instead of computing its function."""

    REPLACED_FUNCTION = "replaced_function"  # a torch function replaced (the reference would run it)
    REFERENCE_PATCHED = "reference_patched"  # the problem's code, a module it imports or the judge's changed
    INPUT_MODIFIED = "input_modified"  # an input written in place
    OUTPUT_IN_INPUT = "output_in_input"  # the result written into an input's storage
    NOT_PLAIN_TENSOR = "not_plain_tensor"  # a tensor subclass, a lazy wrapper, a non-tensor
    STALE_MEMORY = "stale_memory"  # an output buffer never written
    BACKGROUND_THREAD = "background_thread"  # work still running on a thread after the return
    SIDE_STREAM = "side_stream"  # work on a CUDA stream the caller does not wait for
    CACHED_BY_IDENTITY = "cached_by_identity"  # the same tensors, changed in place: the old answer
    CACHED_BY_SHAPE = "cached_by_shape"  # other values of the same shape: the old answer
    CACHED_BY_SEED = "cached_by_seed"  # other values under the same global seed: the old answer
    CACHED_BY_FINGERPRINT = "cached_by_fingerprint"  # other values sharing a first or last element: the old answer
    OUTPUT_REUSED = "output_reused"  # an earlier call's output overwritten by a later call
    STATE_KEPT = "state_kept"  # the same values, after other calls: another answer
    KEYED_TO_SEED = "keyed_to_seed"  # right at the evaluation's seed only
    KEYED_TO_SIZE = "keyed_to_size"  # right at the evaluation's sizes only
    ASSUMES_NON_NEGATIVE = "assumes_non_negative"  # right on non-negative draws only
    LOW_PRECISION = "low_precision"  # computes below its dtype, inside a loose tolerance


@dataclass(frozen=True)
class HackFinding:
    """One hack found: its kind and what was seen, as a sentence (``detail``)."""

    kind: HackKind
    detail: str

    def __str__(self) -> str:
        return f"hack: {self.detail}"

    @property
    def line(self) -> str:
        """The line a verdict shows: "hack: KIND: what was seen"."""
        return f"hack: {self.kind.value}: {self.detail}"

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind.value, "detail": self.detail, "line": self.line}


# -- torch's functions, replaced -------------------------------------------------------------------

# torch's C function modules that Python wrappers call at call time (F.cross_entropy calls
# torch._C._nn.cross_entropy_loss): replacing one changes the wrapper
_C_MODULES = ("_nn", "_fft", "_linalg", "_special")


def _spaces() -> dict[str, tuple[Any, bool]]:
    """label -> (namespace, whether a name added to it shadows an inherited one)."""
    out = _namespaces()
    for name in _C_MODULES:
        ns = getattr(torch._C, name, None)
        if ns is not None:
            out[f"torch._C.{name}"] = (ns, False)
    return out


def _functions(spaces: dict[str, tuple[Any, bool]]) -> dict[tuple[str, str], Any]:
    out = torch_functions()
    for label, (ns, _) in spaces.items():
        if label.startswith("torch._C."):
            out.update({(label, n): v for n, v in list(vars(ns).items()) if callable(v)})
    return out


def _impls() -> frozenset[str]:
    """'aten/OP/KEY' for every kernel registered from Python through ``torch.library``."""
    return frozenset(getattr(torch.library, "_impls", ()))


def _modes() -> tuple[int, int]:
    return torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack()


@dataclass(frozen=True)
class TorchSnapshot:
    """What torch's functions were when ``snapshot_torch()`` ran (compare with ``replaced_since``)."""

    functions: dict[tuple[str, str], Any]
    impls: frozenset[str]
    modes: tuple[int, int]


def snapshot_torch() -> TorchSnapshot:
    """The identity of every function of torch's namespaces (``torch``, ``torch.nn.functional``,
    ``torch.nn.init``, ``torch.linalg``, ``torch.special``, ``torch.fft``, their ``torch._C``
    modules), of ``torch.Tensor``'s and every ``torch.nn`` module class's methods, the kernels
    registered through ``torch.library`` and the depth of torch's function and dispatch mode
    stacks. Take it before importing a candidate's file."""
    return TorchSnapshot(_functions(_spaces()), _impls(), _modes())


@dataclass(frozen=True)
class _Change:
    label: str
    name: str
    old: Any  # None: added
    new: Any  # None: removed


def _by(value: Any) -> str:
    code = getattr(getattr(value, "__func__", value), "__code__", None)
    if code is None:
        return ""
    return f" by {getattr(value, '__name__', '?')} ({Path(code.co_filename).name}:{code.co_firstlineno})"


def _library_code(value: Any) -> bool:
    """Written in a library's Python (torch's own wrappers: importing ``torch._dynamo`` wraps
    ``torch.manual_seed``), not in the user's code."""
    code = getattr(getattr(value, "__func__", value), "__code__", None)
    return code is not None and _theirs(code.co_filename)


def _changes(snap: TorchSnapshot) -> list[_Change]:
    spaces = _spaces()
    after = _functions(spaces)
    out = []
    for (label, name), old in snap.functions.items():
        new = after.get((label, name))
        if new is not old and label in spaces and not _library_code(new):
            out.append(_Change(label, name, old, new))
    known = {label for label, _ in snap.functions}
    for label, name in after.keys() - snap.functions.keys():
        ns, shadows = spaces.get(label, (None, False))
        if shadows and label in known and name in vars(ns) and not _library_code(after[(label, name)]):
            out.append(_Change(label, name, None, after[(label, name)]))
    return sorted(out, key=lambda c: (c.label, c.name))


def replaced_since(snap: TorchSnapshot) -> list[HackFinding]:
    """A finding for each torch function replaced, removed or added over an inherited one
    since ``snap``, each aten kernel registered over torch's through ``torch.library``, and a
    torch function or dispatch mode left switched on. Nothing is put back (``originals`` does,
    for the reference's run)."""
    said = []
    for c in _changes(snap):
        verb = "removed" if c.new is None else "added" if c.old is None else "replaced"
        said.append(f"{verb} {c.label}.{c.name}{'' if c.new is None else _by(c.new)}")
    said += [f"registered its own {k.split('/')[2]} kernel for {k.split('/')[0]}::{k.split('/')[1]} "
             "(torch.library)" for k in sorted(_impls() - snap.impls) if k.count("/") == 2]
    fn, dispatch = (a - b for a, b in zip(_modes(), snap.modes))
    if fn > 0:
        said.append(f"left {fn} torch function mode(s) on (every torch call goes through them)")
    if dispatch > 0:
        said.append(f"left {dispatch} torch dispatch mode(s) on (every aten op goes through them)")
    return [HackFinding(HackKind.REPLACED_FUNCTION, f"the candidate {s}: the reference would run it too")
            for s in said]


def _libraries_holding(keys: frozenset[str]) -> list[Any]:
    return [obj for obj in gc.get_objects()
            if issubclass(type(obj), torch.library.Library) and set(getattr(obj, "_op_impls", ())) & keys]


def _put_back(snap: TorchSnapshot) -> Callable[[], None]:
    """Torch's functions as they were at ``snap`` (modes left on switched off, kernels
    registered through ``torch.library`` removed for good); the function that undoes it."""
    spaces = _spaces()
    changes = _changes(snap)
    for c in changes:
        ns = spaces[c.label][0]
        if c.old is None:
            delattr(ns, c.name)
        else:
            setattr(ns, c.name, c.old)
    new = _impls() - snap.impls
    if new:
        for lib in _libraries_holding(new):
            lib._destroy()
    fn_modes = [torch._C._pop_torch_function_stack() for _ in range(max(0, _modes()[0] - snap.modes[0]))]
    dispatch_modes = [torch._C._pop_torch_dispatch_stack() for _ in range(max(0, _modes()[1] - snap.modes[1]))]

    def undo() -> None:
        for mode in reversed(dispatch_modes):
            torch._C._push_on_torch_dispatch_stack(mode)
        for mode in reversed(fn_modes):
            torch._C._push_on_torch_function_stack(mode)
        for c in changes:
            ns = spaces[c.label][0]
            if c.new is None:
                delattr(ns, c.name)
            else:
                setattr(ns, c.name, c.new)

    return undo


@contextlib.contextmanager
def originals(snap: TorchSnapshot) -> Iterator[None]:
    """Run the block (the reference) with torch's functions as they were at ``snap``: each
    replaced function is put back for the block and the replacement restored after it; modes
    left on are switched off for the block. A kernel registered through ``torch.library``
    cannot be put back after: its registration is removed for good (the candidate that
    registered it already has its finding)."""
    undo = _put_back(snap)
    try:
        yield
    finally:
        undo()


def put_back(snap: TorchSnapshot) -> None:
    """Torch's functions as they were at ``snap``, for good: what a candidate's import replaced
    is undone before the next candidate is imported."""
    _put_back(snap)
