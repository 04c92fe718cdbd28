"""What a user's code can do to the whole process that no exception reports, and how the
boundary (``harness.base.boundary.user_code``) turns it into one:

- ``os._exit`` ends the process at once (no exception, no ``finally``, no atexit): inside the
  boundary it raises ``ProcessExit`` instead, in the process and thread that entered it; a
  forked child (multiprocessing ends its children so) exits as asked, and another thread of
  the process says who ended it on stderr before it ends;
- a torch function replaced at import (``F.softmax = mine``, ``torch.Tensor.softmax = ...``,
  ``nn.Linear.forward = ...``) would run in every variant and in the references: the
  functions of torch's namespaces are compared by identity before and after
  (``torch_functions``, ``replaced_since``), and what changed is named and put back.
"""

from __future__ import annotations

import os
import sys
import threading
import traceback
from pathlib import Path
from typing import Any, NoReturn

import torch

from harness.base.errors import _theirs

_REAL_EXIT = os._exit


class ProcessExit(BaseException):
    """``os._exit(code)`` called inside the boundary, raised in its place: a BaseException, as
    ``SystemExit`` is, so the code's own ``except Exception`` does not swallow it."""

    def __init__(self, code: Any):
        super().__init__(code)
        self.code = code


_holder: list[int] = []  # the pid that entered the boundary, once per nested entry


def _exit_in_place(status: int) -> NoReturn:
    pid = _holder[0] if _holder else None
    if os.getpid() == pid and threading.current_thread() is threading.main_thread():
        raise ProcessExit(status)
    if os.getpid() == pid:  # a thread of the user's ends the whole process: said, as it cannot be stopped
        mine = [f for f in traceback.extract_stack()[:-1] if not _theirs(f.filename)]
        at = f" at {mine[-1].filename}:{mine[-1].lineno}" if mine else ""
        print(f"error: os._exit({status!r}) called in a thread{at}: the process ends", file=sys.__stderr__, flush=True)
    _REAL_EXIT(status)


class exit_raises:  # noqa: N801  (used as a function)
    """Inside, ``os._exit`` raises ``ProcessExit`` (see the module); nests."""

    def __enter__(self) -> None:
        if not _holder:
            os._exit = _exit_in_place
        _holder.append(os.getpid())

    def __exit__(self, *exc: object) -> None:
        _holder.pop()
        if not _holder:
            os._exit = _REAL_EXIT


# -- torch's functions -------------------------------------------------------------------------

_MODULES = ("nn.functional", "nn.init", "linalg", "special", "fft")


def _namespaces() -> dict[str, tuple[Any, bool]]:
    """label -> (namespace, whether a name added to it replaces one): torch, its function
    modules, ``torch.Tensor`` and the ``torch.nn`` module classes (a method added to a class
    shadows the one it inherits)."""
    out: dict[str, tuple[Any, bool]] = {"torch": (torch, False)}
    for name in _MODULES:
        ns: Any = torch
        for part in name.split("."):
            ns = vars(ns).get(part)
        if ns is not None:
            out[f"torch.{name}"] = (ns, False)
    out["torch.Tensor"] = (torch.Tensor, True)
    for name, cls in list(vars(torch.nn).items()):
        if isinstance(cls, type) and issubclass(cls, torch.nn.Module):
            out[f"torch.nn.{name}"] = (cls, True)
    return out


def torch_functions() -> dict[tuple[str, str], Any]:
    """(namespace label, name) -> the callable it holds now (read without importing anything)."""
    out = {}
    for label, (ns, _) in _namespaces().items():
        for name, value in list(vars(ns).items()):
            if callable(value) or isinstance(value, (staticmethod, classmethod, property)):
                out[(label, name)] = value
    return out


def _by(value: Any) -> str:
    """' by NAME (FILE:LINE)' for a replacement written in Python; '' otherwise."""
    code = getattr(getattr(value, "__func__", value), "__code__", None)
    if code is None:
        return ""
    return f" by {getattr(value, '__name__', '?')} ({Path(code.co_filename).name}:{code.co_firstlineno})"


def _library_code(value: Any) -> bool:
    """Written in a library's Python (torch's own wrappers: importing ``torch._dynamo`` wraps
    ``torch.manual_seed``), not in the user's code."""
    code = getattr(getattr(value, "__func__", value), "__code__", None)
    return code is not None and _theirs(code.co_filename)


def replaced_since(before: dict[tuple[str, str], Any]) -> list[str]:
    """The torch functions the user's code replaced or removed since ``before``
    (``torch_functions()``), and the methods it added to torch's classes, each named with
    what replaced it; each is put back as it was. A library's own wrapper is not counted."""
    spaces = _namespaces()
    after = torch_functions()
    known = {label for label, _ in before}
    said = []
    for (label, name), old in before.items():
        new = after.get((label, name))
        if new is not old and label in spaces and not _library_code(new):
            said.append(f"{label}.{name}" + (" (removed)" if new is None else _by(new)))
            setattr(spaces[label][0], name, old)
    for label, name in after.keys() - before.keys():
        ns, added_counts = spaces.get(label, (None, False))
        if added_counts and label in known and name in vars(ns) and not _library_code(after[(label, name)]):
            said.append(f"{label}.{name}{_by(after[(label, name)])}")
            delattr(ns, name)
    return sorted(said)
