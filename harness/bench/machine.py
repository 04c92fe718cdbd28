"""The machine and software a measurement ran on (each row's environment), and its load: the
check every timing makes before and after it (``load_disturbance``), and torch's intra-op
thread count a pair is timed at (``pair_threads``, ``intra_op_threads``)."""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

import torch

from harness.base.errors import ConfigError

# A CPU timing is disturbed when the 1-minute load average, read before or after it, is above
# the cores plus this: the timed process itself counts about one.
LOAD_MARGIN = 0.5


@dataclass(frozen=True)
class LoadDisturbance:
    """A CPU timing run while the 1-minute load average (the worst reading, ``load``) was above
    ``cores`` + ``LOAD_MARGIN``: other work had the cores, the figures are not the code's."""

    load: float
    cores: int

    def __str__(self) -> str:
        return f"load average {self.load:.1f} on {self.cores} cores"


def load_average() -> float | None:
    """The 1-minute load average, or None where the system does not give one."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def load_disturbance(loads: Iterable[float | None], device: str, cores: int | None = None
                     ) -> LoadDisturbance | None:
    """The disturbance of a timing on ``device`` whose load readings were ``loads`` (None where
    unread), on ``cores`` (default: this machine's): on CPU only, the worst reading above
    ``cores + LOAD_MARGIN``; None when not disturbed, or not known."""
    cores = cores or os.cpu_count() or 1
    worst = max((x for x in loads if x is not None), default=None)
    if not str(device).startswith("cpu") or worst is None or worst <= cores + LOAD_MARGIN:
        return None
    return LoadDisturbance(worst, cores)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_commit() -> str:
    root = Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return (sha + ("-dirty" if dirty else "")) if sha else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def environment(device: str) -> dict[str, Any]:
    env = {
        "torch": torch.__version__, "python": platform.python_version(), "cpu": cpu_model(),
        "cpu_count": os.cpu_count(), "threads": torch.get_num_threads(), "commit": git_commit(),
        "device": device,
        "device_name": torch.cuda.get_device_name(0) if device.startswith("cuda") else cpu_model(),
    }
    return env


def pair_threads(threads: int | None, device: str | torch.device) -> int:
    """The intra-op thread count a pair is timed at: ``threads``, else 1 on CPU (as
    ``torch.utils.benchmark.Timer``) and torch's own elsewhere. A bad count is a ``ConfigError``."""
    if threads is None:
        return 1 if torch.device(device).type == "cpu" else torch.get_num_threads()
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ConfigError(f"threads={threads!r}: give a whole number of intra-op threads, at least 1")
    return threads


@contextlib.contextmanager
def intra_op_threads(n: int) -> Iterator[int]:
    """Torch's intra-op thread count set to ``n`` inside, the caller's (yielded) put back after."""
    saved = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield saved
    finally:
        torch.set_num_threads(saved)
