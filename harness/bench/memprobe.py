"""The CPU memory probe: a separate process that measures, per case, how far one call
raises the process's resident set (``VmHWM`` above ``VmRSS`` before the call).

Why a separate process: glibc keeps freed memory for reuse, so a call that allocates and
frees buffers inside a warm process need not raise its resident set at all. This process
starts with ``MALLOC_MMAP_THRESHOLD_=65536`` (every allocation of 64 KiB or more is its own
mapping, returned to the system when freed) and ``MKL_DISABLE_FAST_MM=1``, so a call's
buffers, a kernel's internal ones included, are fresh pages; ``/proc/self/clear_refs``
resets the high-water mark just before the call. The sweep's own process keeps glibc's
defaults, so its timings are not affected.

Protocol: one JSON case per line on stdin, one JSON answer per line on stdout.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import subprocess
import sys
from pathlib import Path

ENV = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0", "MKL_DISABLE_FAST_MM": "1"}


def unavailable() -> str | None:
    """Why the probe cannot measure on this machine, or None."""
    if not sys.platform.startswith("linux"):
        return f"needs Linux /proc (this is {sys.platform})"
    if not Path("/proc/self/clear_refs").exists():
        return "/proc/self/clear_refs is missing (kernel without the high-water reset)"
    return None


def _status() -> dict[str, int]:
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            name, value = line.split(":", 1)
            out[name] = int(value.split()[0]) * 1024
    return out


def rss_rise(fn) -> int:
    """Bytes by which one call of ``fn`` raises this process's resident-set high-water."""
    libc = ctypes.CDLL("libc.so.6")
    gc.collect()
    libc.malloc_trim(0)
    Path("/proc/self/clear_refs").write_text("5")
    before = _status()["VmRSS"]
    fn()
    return max(0, _status()["VmHWM"] - before)


class MemProbe:
    """The sweep's handle on the probe process (started on first use, one per sweep)."""

    def __init__(self, files: list[str], threads: int) -> None:
        self.files, self.threads = files, threads
        self.proc: subprocess.Popen | None = None
        self.reason = unavailable()

    def measure(self, case_fields: dict) -> tuple[int | None, str]:
        """(bytes, "") or (None, why not measured)."""
        if self.reason:
            return None, self.reason
        if self.proc is None:
            root = str(Path(__file__).resolve().parents[2])
            env = {**os.environ, **ENV, "PYTHONPATH": os.pathsep.join(
                p for p in (root, os.environ.get("PYTHONPATH", "")) if p)}
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "harness.bench.probe_worker", str(self.threads), *self.files],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        try:
            self.proc.stdin.write(json.dumps(case_fields) + "\n")
            self.proc.stdin.flush()
            answer = self.proc.stdout.readline()
        except (BrokenPipeError, OSError):
            answer = ""
        if not answer:
            code = self.proc.poll()
            self.proc, self.reason = None, f"the memory probe process died (exit {code})"
            return None, self.reason
        try:
            data = json.loads(answer)
        except json.JSONDecodeError:  # cannot happen through the worker's own channel; said, never a crash
            return None, f"the memory probe answered something else than its protocol: {answer.strip()[:80]!r}"
        if not isinstance(data, dict) or not ("error" in data or "rss_peak_bytes" in data):
            return None, f"the memory probe answered something else than its protocol: {answer.strip()[:80]!r}"
        if "error" in data:
            return None, f"probe: {data['error']}"
        return int(data["rss_peak_bytes"]), ""

    def close(self) -> None:
        if self.proc is not None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
            self.proc = None

