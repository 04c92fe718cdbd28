"""The data-safety contract's primitives: every output is written to a temporary name beside
its target and renamed into place only when whole; a file the harness did not write is never
replaced; two runs that would write one target take a lock beside it (docs/data-safety.md)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

from harness.base.errors import HarnessError
from harness.base.output import STDOUT, OutputError, data_stream, write_failed

OUTPUT_MAGIC = "attention-harness"
# The schema of every JSON object and log header the harness writes (``"schema": N``). A file
# without it is schema 1 (written before files carried it); readers take every schema up to
# this one and refuse a later one in one line (``read_json``).
SCHEMA_VERSION = 2


@contextlib.contextmanager
def no_bytecode() -> Iterator[None]:
    """Inside, Python writes no ``__pycache__`` folder: a user's file the harness imports (and
    the modules it imports beside it) leaves nothing in the user's folders, whatever
    PYTHONDONTWRITEBYTECODE says."""
    before = sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    try:
        yield
    finally:
        sys.dont_write_bytecode = before


def read_text(path: str | Path) -> str:
    """A file the harness reads (JSON, a log), as text: UTF-8, a byte-order mark tolerated."""
    return Path(path).read_bytes().decode("utf-8-sig")


def check_schema(data: object, path: str | Path, field: str = "schema") -> None:
    """Refuse, in one line naming the field and the versions, an object written by a later
    version of the harness (``field`` above ``SCHEMA_VERSION``); earlier ones are read."""
    version = data.get(field) if isinstance(data, dict) else None
    if version is None:
        return
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise HarnessError(f"'{path}': field '{field}' is {version!r}, not a schema number (1 to {SCHEMA_VERSION})")
    if version > SCHEMA_VERSION:
        raise HarnessError(f"'{path}' is schema {version} (field '{field}'), written by a later version of the "
                           f"harness; this version reads schema 1 to {SCHEMA_VERSION}: update the harness to read it")


def _group_mode(directory: bool) -> int:
    """The mode a plain ``open``/``mkdir`` would give: 0o666/0o777 less the umask."""
    umask = os.umask(0)
    os.umask(umask)
    return (0o777 if directory else 0o666) & ~umask


def make_public(path: Path) -> None:
    """mkstemp and mkdtemp create 0600/0700: give the file or folder the group's normal mode."""
    os.chmod(path, _group_mode(path.is_dir()))


@contextlib.contextmanager
def atomic_path(target: str | Path) -> Iterator[Path]:
    """A temporary path beside ``target`` to write to; renamed onto ``target`` when the block
    ends normally, removed when it raises (an interrupt included): ``target`` is either its old
    self or the new whole file, never a part."""
    target = Path(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise write_failed(target, exc) from None
    tmp = target.parent / f".{target.name}.tmp-{os.getpid()}{target.suffix}"
    try:
        try:
            yield tmp
            if tmp.exists():
                make_public(tmp)
                os.replace(tmp, target)
        except OSError as exc:  # a full disk, a folder that cannot be written: one line naming the path
            raise write_failed(target, exc) from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def atomic_write(target: str | Path, data: str | bytes) -> Path:
    """Write ``data`` whole to ``target`` (see ``atomic_path``)."""
    with atomic_path(target) as tmp:
        tmp.write_bytes(data.encode() if isinstance(data, str) else data)
    return Path(target)


# The JSON objects earlier versions wrote, before they carried ``written_by``: each command's
# keys, so a folder from an earlier version (the committed reports/models/, a user's own runs)
# is still recognised as the harness's and can be written again.
EARLIER_OUTPUT_KEYS = (
    frozenset({"specs", "pairs", "configs"}),                 # check --json
    frozenset({"rows", "environment", "profile"}),             # a report's results.json
    frozenset({"config", "steps", "batch", "runs"}),           # copy-task's copy_task.json
    frozenset({"greedy", "cache"}),                            # decode --json
    frozenset({"family", "a", "b", "case", "dtype", "device"}),  # diff --json
    frozenset({"found", "code", "tried", "param_map"}),        # map --json
)


def is_own_json(path: Path) -> bool:
    """A JSON output of this harness: a dict marked ``written_by`` (every dict it writes), or a
    list of records (what ``list``, ``bench`` and ``train-step`` write; the one shape a user's
    file could share, see docs/data-safety.md)."""
    try:
        data = json.loads(read_text(path))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    if isinstance(data, dict):
        return (str(data.get("written_by", "")).startswith(OUTPUT_MAGIC)
                or any(keys <= data.keys() for keys in EARLIER_OUTPUT_KEYS))
    return isinstance(data, list) and all(isinstance(r, dict) for r in data)


def refuse_foreign(path: str | Path, what: str, own: Callable[[Path], bool] = is_own_json) -> None:
    """Refuse to replace an existing non-empty file the harness did not write (one line)."""
    target = Path(path)
    if not target.exists() or target.is_dir():
        return
    if not target.is_file():  # a device (/dev/null), a pipe, a socket: never renamed over, never opened
        raise HarnessError(f"{what} '{path}' is not a regular file (a device, a pipe or a socket); it is left "
                           "as it is: give a file name")
    try:
        empty = target.stat().st_size == 0
    except OSError:
        return
    if not empty and not own(target):
        raise HarnessError(f"{what} '{path}' exists and was not written by this harness; it is left as "
                           "it is: give another path (or move the file away)")


# -- locks -------------------------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def lock_path(target: str | Path) -> Path:
    target = Path(target)
    return target.parent / f".{target.name}.lock"


@contextlib.contextmanager
def output_lock(target: str | Path, what: str) -> Iterator[None]:
    """Hold ``.<name>.lock`` beside ``target`` while writing it. A second run refuses with one
    line naming the first's pid; a lock left by a process that is gone is taken over."""
    lock = lock_path(target)
    lock.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(3):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, _group_mode(False))
        except FileExistsError:
            try:
                text = lock.read_text().strip()
            except OSError:
                text = ""
            if not text.isdigit():  # not a pid (yet): a run starting this instant, or not our file
                raise HarnessError(f"{what} '{target}' is locked by {lock}, which names no process; it is "
                                   "left as it is: remove it if no run is writing, or give another path") from None
            pid = int(text)
            if pid != os.getpid() and _alive(pid):
                raise HarnessError(f"{what} '{target}' is being written by another run (pid {pid}, lock "
                                   f"{lock}); wait for it to finish, or give another path") from None
            if pid == os.getpid():
                yield  # re-entered by the same run
                return
            with contextlib.suppress(OSError):
                lock.unlink()  # it names a run that is gone
            continue
        with os.fdopen(fd, "w") as f:
            f.write(f"{os.getpid()}\n")
        break
    else:
        raise HarnessError(f"cannot take the lock {lock} for {what} '{target}'")
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            if lock.read_text().strip() == str(os.getpid()):
                lock.unlink()



@contextlib.contextmanager
def held_signals() -> Iterator[None]:
    """Ctrl-C (SIGINT) and SIGTERM held off while the block runs, delivered after it: a set of
    renames is never cut half-way."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextlib.contextmanager
def file_set(folder: str | Path) -> Iterator[Path]:
    """One output made of several files (copy_task.json/.md/.png): the block writes them into
    the yielded staging folder (hidden, inside ``folder``); when it ends normally they replace
    their namesakes in ``folder`` together, with Ctrl-C held off; when it raises (an interrupt
    included) nothing in ``folder`` has changed. Never some files new and some old."""
    folder = Path(folder)
    created = not folder.exists()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(dir=folder, prefix=f".new-{os.getpid()}-"))
    except OSError as exc:
        raise write_failed(folder, exc) from None
    try:
        try:
            yield stage
        except BaseException:
            shutil.rmtree(stage, ignore_errors=True)
            if created:  # a folder this run made, left empty: gone again
                with contextlib.suppress(OSError):
                    folder.rmdir()
            raise
        names = sorted(p.name for p in stage.iterdir() if p.is_file() and not p.name.startswith("."))
        try:
            with held_signals():
                for name in names:
                    make_public(stage / name)
                    os.replace(stage / name, folder / name)
        except OSError as exc:
            raise write_failed(folder, exc) from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def save_figure(fig: Any, target: str | Path, **kwargs: Any) -> None:
    """``fig.savefig`` through ``atomic_path`` (a plot is whole or absent)."""
    with atomic_path(target) as tmp:
        fig.savefig(tmp, **kwargs)


def check_output_folder(out: Path, names: tuple[str, ...], what: str) -> None:
    """A folder the harness writes ``names`` into (its first name a JSON file): refuse a path
    that is a file, and any of those names already there that this harness did not write."""
    if out.exists() and not out.is_dir():
        raise HarnessError(f"{what} '{out}' is a file, not a folder; it is left as it is: give a folder")
    first = out / names[0]
    refuse_foreign(first, what.split()[0] + " output")
    ours = first.is_file()
    for name in names[1:]:
        path = out / name
        if path.exists() and not ours:
            raise HarnessError(f"'{path}' exists and was not written by this harness (no {names[0]} beside it); "
                               "it is left as it is: give another --out")


def write_text(path: str | Path, text: str) -> None:
    """``text`` to ``-`` (standard output) or written whole to a file."""
    if str(path) == STDOUT:
        stream = data_stream()
        stream.write(text)
        stream.flush()
        return
    atomic_write(path, text)


def refuse_unwritable(path: str | Path, what: str, *, folder: bool = False, create: bool = False) -> None:
    """Refuse, before any work, an output that could not be written, in one line naming the
    path and why. ``path`` is a file (``folder=False``: its folder must exist) or a folder the
    harness writes into (``folder=True``: it may be missing, its parent must exist);
    ``create``: the harness's own default place, whose missing folders are made when written.
    A missing folder is a usage mistake (exit 2); one the harness may not create files in
    (no permission, a read-only filesystem) an output that cannot be written (exit 74).
    Nothing is created, and nothing is left behind."""
    if str(path) == STDOUT:
        return
    target = Path(path).expanduser()
    place = target if folder and target.exists() else target.parent
    there = place  # the nearest folder there is: with ``create``, the rest is made when the output is written
    while not there.exists() and there != there.parent:
        there = there.parent
    if not there.is_dir():
        raise HarnessError(f"cannot write {what} '{path}': '{there}' is a file, not a folder; it is left as it is")
    if there != place and not create:
        raise HarnessError(f"cannot write {what} '{path}': the folder '{place}' does not exist; create it first "
                           "(mkdir -p), or give a path in a folder that exists")
    try:  # the one test the filesystem answers truthfully (permissions, ACLs, a read-only mount, root)
        fd, probe = tempfile.mkstemp(prefix=".harness-probe-", dir=there)
        try:
            os.close(fd)
        finally:  # the harness's own probe, gone even on an interrupt
            os.unlink(probe)
        if target.is_file():
            with open(target, "a"):
                pass
    except OSError as exc:
        raise OutputError(f"cannot write {what} '{path}': {_why(exc, there, target)}; nothing was run or "
                          "written") from None


def _why(exc: OSError, place: Path, target: Path) -> str:
    """Why a write into ``place`` (or to ``target``) fails, in words."""
    at = f"'{exc.filename}'" if exc.filename and Path(exc.filename) == target else f"the folder '{place}'"
    if exc.errno == errno.EROFS:
        return f"{at} is on a read-only filesystem"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"no permission to write in {at}" if at.startswith("the folder") else f"no permission to write {at}"
    return f"{at}: {exc.strerror or exc}"
