"""The registry's side of the boundary around a user's code (``harness.base.boundary``): each
function a registration gives wrapped once, at registration, so that every command calls it
behind the guard; and the one line for a variants file that failed to import."""

from __future__ import annotations

import dataclasses
import traceback
from pathlib import Path
from typing import Any, Mapping

from harness.base.boundary import FailedReason, UserCodeError, guarded, tensor_result
from harness.base.config import Config
from harness.base.errors import RegistryError, not_python_source
from harness.base.process_state import ProcessExit
from harness.registry.variant import Variant, takes_case


def variant_files(variant: Variant) -> tuple[str, ...]:
    """The user's file a variant came from (its errors name lines in it), if any."""
    return (variant.origin,) if variant.origin.endswith(".py") else ()


def guard(variant: Variant) -> Variant:
    """Every function of ``variant`` a user wrote, behind the one boundary
    (``harness.base.boundary``): build, call (its answer checked), a parameter map that is a
    function, and ``supports``. Wherever the harness calls them (check, diff, bench, map,
    decode, the pytest plugin), a failure is one line naming the stage, file and line."""
    files = variant_files(variant)

    def wrap(stage, fn, check=None):
        return guarded(stage, fn, files=files, who=variant.key, check=check)
    checked_supports = wrap("supports", variant.supports, _reason)
    with_case = takes_case(variant.supports)

    def supports(cfg: Config, case: str | None = None) -> str | None:  # a failing supports: its error row
        try:
            return checked_supports(cfg, case) if with_case else checked_supports(cfg)
        except UserCodeError as exc:
            return FailedReason(exc)

    supports.harness_guarded = "supports"  # type: ignore[attr-defined]
    changes = {"build": wrap("build", variant.build), "call": wrap("call", variant.call, tensor_result),
               "supports": supports}
    if callable(variant.param_map):
        changes["param_map"] = wrap("param map", variant.param_map, _param_map)
    return dataclasses.replace(variant, **changes)


def _reason(result: Any, args: tuple, kwargs: dict) -> str | None:
    if result is not None and not isinstance(result, str):
        return f"supports returned {type(result).__name__}; it returns None (supported) or a reason (a str)"
    return None


def _param_map(result: Any, args: tuple, kwargs: dict) -> str | None:
    if not isinstance(result, Mapping):
        return f"the param map returned {type(result).__name__}, not a dict of canonical name -> entry"
    return None


def where_in(exc: BaseException, path: Path | None) -> str:
    """' (line N)' in the user's file when the error came from there; else the last frame."""
    frames = traceback.extract_tb(exc.__traceback__)
    if path is not None:
        mine = [f for f in frames if f.filename and Path(f.filename).resolve() == path]
        if mine:
            return f" (line {mine[-1].lineno})"
    if frames:
        return f" ({Path(frames[-1].filename).name}, line {frames[-1].lineno})"
    return ""


def import_failure(given: str, resolved: Path, failed: UserCodeError) -> str:
    """One line for a variants file that failed to import."""
    exc = failed.original
    if isinstance(exc, RegistryError):
        return f"variant file '{given}': {exc}"
    source = None if exc is None else not_python_source(exc)
    if source is not None:  # a binary, null bytes, another encoding: no line to name
        return f"variant file '{given}' is not valid Python source: {source}"
    if isinstance(exc, SyntaxError):  # its own lineno is the user's line; the traceback's is ours
        where = exc.filename if exc.filename and Path(exc.filename).resolve() != resolved else None
        return (f"variant file '{given}' has a syntax error at line {exc.lineno}"
                f"{f' of {where}' if where else ''}: {exc.msg}")
    if isinstance(exc, ProcessExit):
        return (f"variant file '{given}' called os._exit({exc.code!r}) at import{where_in(exc, resolved)}: a variants "
                "file must not end the process; guard script code with if __name__ == '__main__':")
    if isinstance(exc, SystemExit):
        return (f"variant file '{given}' exited at import with SystemExit({exc.code!r}){where_in(exc, resolved)}: "
                "a variants file must not call sys.exit; guard script code with if __name__ == '__main__':")
    shown = f" [it printed: {failed.output.strip().splitlines()[-1][:160]}]" if failed.output.strip() else ""
    if exc is None or isinstance(exc, KeyboardInterrupt):
        return f"variant file '{given}' failed to import: {failed.problem}{shown}"
    return f"variant file '{given}' failed to import: {type(exc).__name__}: {exc}{where_in(exc, resolved)}{shown}"
