"""The machine and software a measurement ran on (each row's environment)."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import torch


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
