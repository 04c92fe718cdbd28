"""A family's whole check kept on disk, for processes that check the same code again
(``$HARNESS_CHECK_CACHE``, a folder): the test suite runs the documented commands in dozens
of processes, several of which check the same families on the same configs.

A family's part of a ``CheckReport`` is stored under a key that covers everything it is a
function of: the family, its configs, the check's settings, each member variant (its id and
the source of the files that build and call it), the source of the whole ``harness``
package, and the versions of Python, torch and transformers. The check is deterministic
(the same seed gives the same numbers), so a part read back is the part the check would make.
What the key cannot see, a helper module a variant's file imports, is why the cache is off
unless the folder is named: clear it after changing such a module. A part is written whole
(a temporary file, then renamed), so a second process reading it never sees half of one; two processes that need one
part at once compute it once (the second waits on the key's lock, then reads it).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import os
import pickle
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from harness.base.config import Config
from harness.check.settings import CheckSettings

CACHE_ENV = "HARNESS_CHECK_CACHE"
_FORMAT = 2  # bumped when what a part holds changes shape


def cache_dir() -> Path | None:
    """The folder ``$HARNESS_CHECK_CACHE`` names, or None (no cache)."""
    where = os.environ.get(CACHE_ENV, "").strip()
    return Path(where) if where else None


@functools.lru_cache(maxsize=1)
def _package_digest() -> str:
    """The source of every module of the ``harness`` package."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def _file_digest(path: str) -> str:
    try:
        stat = os.stat(path)
    except OSError:
        return "unreadable"
    return _digest_of(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=None)
def _digest_of(path: str, mtime_ns: int, size: int) -> str:  # read again when the file changes
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return "unreadable"


def _source_files(variant: Any) -> list[str]:
    """The files that define how ``variant`` is built and called."""
    files: set[str] = set()
    for fn in (variant.build, variant.call, variant.supports):
        target = inspect.unwrap(fn) if callable(fn) else fn
        try:
            found = inspect.getsourcefile(target)
        except TypeError:  # a builtin or a C-defined callable
            found = None
        if found:
            files.add(found)
    origin = getattr(variant, "origin", "")
    if origin and origin.endswith(".py"):
        files.add(origin)
    elif origin and (module_file := getattr(sys.modules.get(origin), "__file__", None)):
        files.add(module_file)
    return sorted(files)


def _versions() -> str:
    import torch
    parts = [sys.version, torch.__version__]
    if "transformers" in sys.modules:
        parts.append(getattr(sys.modules["transformers"], "__version__", ""))
    return "|".join(parts)


def part_key(family: str, configs: Mapping[str, Config], settings: CheckSettings, members: Iterable[Any]) -> str:
    """The key of ``family``'s part of a check: see the module's docstring."""
    h = hashlib.sha256()
    h.update(f"{_FORMAT}|{family}|{_versions()}|{_package_digest()}|{settings!r}".encode())
    for name, cfg in configs.items():
        h.update(f"|{name}={cfg!r}".encode())
    for v in members:
        h.update(f"|{v.key}|{v.traits!r}|{v.dtypes!r}|{v.reference}".encode())
        for path in _source_files(v):
            h.update(f"|{Path(path).name}:{_file_digest(path)}".encode())
    return h.hexdigest()


def cached_part(key: str, compute: Callable[[], Any]) -> Any:
    """The part stored under ``key``, or ``compute()``'s, stored there (where a cache folder is
    named and the part can be stored: one that cannot is computed, never an error). Processes
    asking for one key at once compute it once: the others wait on its lock, then read it."""
    where = cache_dir()
    if where is None:
        return compute()
    path = where / f"{key}.pkl"
    part = _read(path)
    if part is not None:
        return part
    with _key_lock(where, key):
        part = _read(path)  # written while this process waited
        if part is not None:
            return part
        part = compute()
        _write(where, key, path, part)
    return part


def _read(path: Path) -> Any:
    try:
        with path.open("rb") as f:
            return pickle.load(f)
    except (OSError, pickle.PickleError, EOFError, AttributeError, ImportError):
        return None


@contextlib.contextmanager
def _key_lock(where: Path, key: str) -> Iterator[None]:
    """An exclusive lock on ``key`` (``flock``: released when its holder ends, however it ends);
    none where the folder cannot hold one or the platform has no ``fcntl``."""
    try:
        import fcntl
        where.mkdir(parents=True, exist_ok=True)
        handle = (where / f".{key}.lock").open("a")
    except (ImportError, OSError):
        yield
        return
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX)
        except OSError:
            pass
        yield


def _write(where: Path, key: str, path: Path, part: Any) -> None:
    try:
        where.mkdir(parents=True, exist_ok=True)
        blob = pickle.dumps(part, protocol=pickle.HIGHEST_PROTOCOL)
    except (OSError, pickle.PickleError, TypeError, AttributeError):
        return  # a part that cannot be pickled (a user's object in a result) is just not kept
    fd, tmp = tempfile.mkstemp(dir=where, prefix=f".{key[:12]}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        os.replace(tmp, path)
    except OSError:
        Path(tmp).unlink(missing_ok=True)
