"""The one boundary around code a user wrote: every call the harness makes into a variant's
build, call adapter, parameter map, ``supports``, decoding functions, a kernel's function or
a variants file's import goes through ``guarded``/``user_code``. Inside it:

- what the code prints (stdout and stderr) is captured, so it can corrupt no table and no
  protocol (the memory probe's answers); it is shown with the error row when the call fails;
- any exception becomes ``UserCodeError``: one line naming the stage, the exception and the
  user's file and line; the command turns it into that variant's error row and goes on;
- a KeyboardInterrupt raised by the code itself is told apart from the user's Ctrl-C (a
  SIGINT handler marks the real one): the first is an error, the second stops the command;
- a call past ``HARNESS_CALL_TIMEOUT`` seconds (default 600) is stopped and is an error;
- ``check_output`` checks what comes back: a tensor, on the call's device, of the call's
  dtype and shape, not a view of an input; one message per mistake.

``describe(exc)`` is the one formatter of an exception for a row or a line; a failure of the
harness's own code is one line there too (``harness.base.failures`` keeps its traceback).
"""

from __future__ import annotations

import contextlib
import functools
import io
import math
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, Callable, Iterable, Iterator, Literal, Mapping, NoReturn

import torch

from harness.base.errors import HarnessError, exception_line, user_frame, where_raised
from harness.base.process_state import ProcessExit, exit_raises, replaced_since, torch_functions

TIMEOUT_ENV = "HARNESS_CALL_TIMEOUT"
DEFAULT_TIMEOUT = 600.0

_HARNESS_DIR = Path(__file__).resolve().parents[1]
_LIBRARY_MARKERS = ("site-packages", "dist-packages", f"{os.sep}lib{os.sep}python", "<frozen")


class UserCodeError(Exception):
    """A user's code failed, or answered wrongly, at one stage. Its message is one line (the
    variant's error row). Not a ``HarnessError``: a command never ends on it, the row says it."""

    def __init__(self, stage: str, problem: str, *, output: str = "", who: str = "",
                 original: BaseException | None = None):
        self.stage, self.problem, self.output, self.who = stage, problem, output, who
        self.original = original  # what the code raised (None: a wrong answer)
        shown = _first_line(output)  # the stage is said, except for the call itself (the usual one)
        super().__init__(("" if stage == "call" else f"{stage}: ") + problem
                         + (f" [it printed: {shown}]" if shown else ""))


class FailedReason(str):
    """What a guarded ``supports`` answers when the user's ``supports`` itself fails: a reason
    not to build the variant (every command skips it) that is also its error row (``error``)."""

    error: UserCodeError

    def __new__(cls, error: UserCodeError) -> "FailedReason":
        reason = super().__new__(cls, f"its supports(cfg) failed: {error}")
        reason.error = error
        return reason


class CallTimeout(Exception):
    """Raised inside a user's call that ran past the timeout."""


# -- the user's Ctrl-C, told apart from a KeyboardInterrupt raised by code -----------------------

_ctrl_c = threading.Event()


def _on_sigint(signum: int, frame: FrameType | None) -> NoReturn:
    _ctrl_c.set()
    raise KeyboardInterrupt


_watching = False


def watch_ctrl_c() -> None:
    """Mark every SIGINT this process receives (a KeyboardInterrupt is still raised)."""
    global _watching
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _on_sigint)
        _watching = True


def user_pressed_ctrl_c() -> bool:
    return _ctrl_c.is_set()


# -- the one formatter ---------------------------------------------------------------------------


def _first_line(text: str, limit: int = 160) -> str:
    for line in str(text).splitlines():
        if line.strip():
            line = line.strip()
            return line if len(line) <= limit else line[:limit - 3] + "..."
    return ""


@functools.lru_cache(maxsize=4096)
def _is_library(filename: str) -> bool:
    if not filename or filename.startswith("<frozen"):
        return True
    if filename.startswith("<"):  # code compiled from a string (exec, a REPL): the user's
        return False
    path = Path(filename)
    try:
        path = path.resolve()
    except OSError:
        return True
    return _HARNESS_DIR in path.parents or any(m in filename for m in _LIBRARY_MARKERS)


def where(exc: BaseException, files: Iterable[str] = ()) -> str:
    """' (at FILE:LINE, in FUNCTION)' of the user's line that raised ``exc``, or ''
    (``harness.base.errors.where_raised``: one way of naming it everywhere)."""
    return where_raised(exc)


def describe(exc: BaseException, files: Iterable[str] = (), limit: int = 300) -> str:
    """One line for an exception in a row or a message: ``UserCodeError`` and the harness's own
    errors speak for themselves; anything else is ``exception_line`` (its type, its message's
    first line, the user's file and line)."""
    if isinstance(exc, UserCodeError) or (isinstance(exc, HarnessError) and user_frame(exc) is None):
        text = _first_line(str(exc), limit)
    else:
        text = exception_line(exc, limit)
    return text if len(text) <= limit else text[:limit - 3] + "..."


# -- the guard ------------------------------------------------------------------------------------


def variant_failure(exc: BaseException) -> bool:
    """Whether ``exc``, raised while a command ran one variant, is that variant's failure (its
    error row; the command goes on) rather than the command's own usage mistake: anything but a
    ``HarnessError`` raised by the harness itself, and a weight that cannot be ported."""
    from harness.base.errors import PortingError

    if isinstance(exc, (KeyboardInterrupt, SystemExit, GeneratorExit)):
        return False
    return isinstance(exc, (UserCodeError, PortingError)) or not isinstance(exc, HarnessError)


def failure_text(exc: BaseException) -> str:
    """A variant's failure in a row that names more than one variant: who failed, and why."""
    who = getattr(exc, "who", "")
    return f"{who}: {describe(exc)}" if who else describe(exc)


def call_timeout() -> float:
    """The seconds a call into user code may run (``$HARNESS_CALL_TIMEOUT``; 0 turns it off);
    a value that is not a number of seconds is refused in one line, not silently replaced."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not value >= 0 or math.isinf(value):
        raise HarnessError(f"${TIMEOUT_ENV}={raw!r} is not a number of seconds (e.g. 60; 0 turns the limit off)")
    return value


_timeout = call_timeout


class _Alarm:
    """One SIGALRM handler, put back whenever a guard finds the alarm free (a program that set its own
    alarm keeps it): a guard arms the timer for its call (none armed
    already, main thread only); when it rings, a call still in the user's own code raises
    ``CallTimeout``. While the interpreter is inside a library (torch, an import, the
    harness) the ring is put off a moment and tried again: an exception raised there could
    leave that library half-done."""

    seconds = 0.0

    @classmethod
    def ring(cls, signum: int, frame: FrameType | None) -> None:
        if not cls.seconds:
            return
        if frame is not None and _is_library(frame.f_code.co_filename):
            signal.setitimer(signal.ITIMER_REAL, 0.05)
            return
        raise CallTimeout(f"ran past {cls.seconds:g} s (${TIMEOUT_ENV}); stopped")

    @classmethod
    def arm(cls, seconds: float) -> bool:
        if not seconds or cls.seconds or threading.current_thread() is not threading.main_thread():
            return False
        if signal.getsignal(signal.SIGALRM) != cls.ring:  # not ours (never set, or replaced since)
            if signal.getsignal(signal.SIGALRM) not in (signal.SIG_DFL, signal.SIG_IGN, None) \
                    or signal.getitimer(signal.ITIMER_REAL)[0] > 0:  # the program's own alarm: left alone
                return False
            signal.signal(signal.SIGALRM, cls.ring)
        cls.seconds = seconds
        signal.setitimer(signal.ITIMER_REAL, seconds)
        return True

    @classmethod
    def disarm(cls) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        cls.seconds = 0.0


class user_code:  # noqa: N801  (used as a function: ``with user_code("call"): ...``)
    """Run the block as a user's code at ``stage`` (see the module's docstring). ``as``
    gives what it printed (``.text``). Raises ``UserCodeError`` for anything the code raises,
    except the user's own Ctrl-C (a KeyboardInterrupt after a real SIGINT) and a
    ``UserCodeError`` from a guard inside (passed on as it is). ``watch_torch=False``: an
    import that replaces torch functions is not refused here (the caller compares them itself:
    ``harness.base.hacks.snapshot_torch``, as the KernelBench judge does)."""

    __slots__ = ("stage", "files", "who", "timeout", "buffer", "_redirects", "_armed", "_state", "_exits",
                 "_functions", "watch_torch")

    def __init__(self, stage: str, *, files: Iterable[str] = (), who: str = "", timeout: float | None = None,
                 watch_torch: bool = True):
        self.stage, self.files, self.who, self.watch_torch = stage, tuple(files), who, watch_torch
        self.timeout = _timeout() if timeout is None else timeout
        self.buffer = io.StringIO()

    @property
    def text(self) -> str:
        return self.buffer.getvalue()

    def __enter__(self) -> "user_code":
        if not _watching and threading.current_thread() is threading.main_thread() \
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            watch_ctrl_c()  # a program using the harness as a library: the same KeyboardInterrupt, marked
        _ctrl_c.clear()  # consulted only for a KeyboardInterrupt raised inside this block
        self._redirects = (contextlib.redirect_stdout(self.buffer), contextlib.redirect_stderr(self.buffer))
        for r in self._redirects:
            r.__enter__()
        self._state = (torch.get_default_dtype(), torch.is_grad_enabled())
        # what an import does to torch's functions is compared after it (a call's would cost every call)
        self._functions = torch_functions() if self.stage == "import" and self.watch_torch else None
        self._exits = exit_raises()
        self._exits.__enter__()
        self._armed = _Alarm.arm(self.timeout)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        if self._armed:
            _Alarm.disarm()
        self._exits.__exit__(None, None, None)
        for r in reversed(self._redirects):
            r.__exit__(None, None, None)
        changed = self._restore()
        replaced = replaced_since(self._functions) if self._functions is not None else []
        if replaced and exc is None:  # put back by replaced_since; the import is refused
            shown = "; ".join(replaced[:3]) + (f" and {len(replaced) - 3} more" if len(replaced) > 3 else "")
            self._raise(f"it replaced {shown} (put back): every variant and the references would run the "
                        "replacement; call your own function from your module instead", None)
        if exc is None and changed:  # torch's global state changed under every later call: said, and undone
            if self.stage == "import":
                print(f"note: {changed} at import (undone: a variants file must leave torch's global state as "
                      "it found it)", file=sys.stderr)
            else:
                self._raise(f"{changed} and left it so (undone; set it inside a context manager)", None)
        if exc is None or isinstance(exc, (UserCodeError, GeneratorExit)):
            return False
        if isinstance(exc, KeyboardInterrupt):
            if _ctrl_c.is_set():
                return False  # the user's Ctrl-C: the command stops
            self._raise("raised KeyboardInterrupt itself (no Ctrl-C was pressed)" + where(exc, self.files), exc)
        if isinstance(exc, CallTimeout):
            self._raise(str(exc), exc)
        if isinstance(exc, ProcessExit):
            self._raise(f"called os._exit({exc.code!r}){where(exc, self.files)}: a variant must not end the "
                        "process", exc)
        if isinstance(exc, SystemExit):
            self._raise(f"called sys.exit({exc.code!r}){where(exc, self.files)}: a variant must not exit the "
                        "process", exc)
        if isinstance(exc, HarnessError) and user_frame(exc) is None:
            return False  # the harness's own refusal (a weight that cannot be ported) passes as it is
        self._raise(describe(exc, self.files), exc)  # the user's code: pytest.skip, any exception
        return False

    def _restore(self) -> str:
        """Undo a change to torch's default dtype or grad mode made inside; what it was, or ''."""
        dtype, grad = self._state
        said = []
        if torch.get_default_dtype() != dtype:
            said.append(f"set torch's default dtype to {_dtype(torch.get_default_dtype())}")
            torch.set_default_dtype(dtype)
        if torch.is_grad_enabled() != grad:
            said.append(f"turned autograd {'on' if torch.is_grad_enabled() else 'off'}")
            torch.set_grad_enabled(grad)
        return " and ".join(said)

    def _raise(self, problem: str, exc: BaseException | None) -> NoReturn:
        error = UserCodeError(self.stage, problem, output=self.text, who=self.who, original=exc)
        raise error from None


def guarded(stage: str, fn: Callable, *, files: Iterable[str] = (), who: str = "",
            check: Callable[[Any, tuple, dict], str | None] | None = None) -> Callable:
    """``fn`` wrapped in ``user_code(stage)``; ``check(result, args, kwargs)`` returns a
    problem with the result (then ``UserCodeError``) or None. Wrapping twice is once."""
    if getattr(fn, "harness_guarded", None) == stage:
        return fn
    files = tuple(files)
    hung: list[UserCodeError] = []  # a function that ran past the timeout once is not waited for again

    def call(*args: Any, **kwargs: Any) -> Any:
        if hung:
            raise UserCodeError(stage, f"{hung[0].problem} (an earlier call; not called again)", who=who)
        try:
            with user_code(stage, files=files, who=who) as printed:
                result = fn(*args, **kwargs)
        except UserCodeError as exc:
            if isinstance(exc.original, CallTimeout):
                hung.append(exc)
            raise
        if check is not None:
            problem = check(result, args, kwargs)
            if problem:
                raise UserCodeError(stage, problem, output=printed.text, who=who)
        return result

    call.harness_guarded = stage  # type: ignore[attr-defined]
    call.__wrapped__ = fn  # type: ignore[attr-defined]
    call.__name__ = getattr(fn, "__name__", stage)
    return call


# -- what comes back -----------------------------------------------------------------------------


def _tensors(value: Any, name: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    if isinstance(value, torch.Tensor):
        yield name, value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from _tensors(v, str(k))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _tensors(v, f"{name}[{i}]")


def _dtype(d: torch.dtype) -> str:
    return str(d).replace("torch.", "")


def check_output(out: Any, *, inputs: Any = (), device: str | torch.device | None = None,
                 dtype: torch.dtype | None = None, shape: tuple | None = None,
                 what: str = "the call", floating: bool = False) -> str | None:
    """The one problem with ``out`` as a call's answer, or None: not a tensor, on another
    device (the meta device included), not floating where ``floating`` asks it, another
    floating dtype, another shape, or a view of one of ``inputs`` (it would change when the
    input does)."""
    if not isinstance(out, torch.Tensor):
        extra = " (return the output tensor, e.g. m(...)[0])" if isinstance(out, (tuple, list)) else ""
        return f"{what} returned {type(out).__name__}, not a tensor{extra}"
    # the call's device: given, or any of its inputs' (an index tensor may stay on the CPU)
    devices = {torch.device(device).type} if device is not None else {t.device.type for _, t in _tensors(inputs)}
    if devices and out.device.type not in devices:
        if out.device.type == "meta":
            return (f"{what} returned a tensor on the meta device (shapes only, no values): compute it on the "
                    "inputs' device")
        return f"{what} returned a tensor on {out.device}, not on the call's device ({', '.join(sorted(devices))})"
    if floating and not (out.is_floating_point() or out.is_complex()):  # a cast or a comparison: no gradient
        return f"{what} returned a {_dtype(out.dtype)} tensor where the family's output is floating"
    if dtype is not None and out.is_floating_point() and out.dtype != dtype:
        return f"{what} returned {_dtype(out.dtype)}, not the call's {_dtype(dtype)} (a cast dropped or added)"
    if shape is not None and tuple(out.shape) != tuple(shape):
        return f"{what} returned shape {tuple(out.shape)}, not {tuple(shape)}"
    if out.device.type == "meta":
        return None  # no storage to share
    try:
        storage = out.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return None
    for name, t in _tensors(inputs):
        try:
            same = storage != 0 and t.untyped_storage().data_ptr() == storage
        except (RuntimeError, NotImplementedError):
            continue
        if same:
            return (f"{what} returned a view of its input {name or 'tensor'} (they share memory): return a new "
                    "tensor (e.g. .clone())")
    return None


def tensor_result(result: Any, args: tuple, kwargs: dict) -> str | None:
    """``check`` for a call adapter ``(module, inputs) -> tensor``."""
    inputs = args[1] if len(args) > 1 else kwargs.get("inputs", ())
    return check_output(result, inputs=inputs)
