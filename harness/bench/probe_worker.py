"""The memory probe's process: ``python -m harness.bench.probe_worker THREADS FILES...`` reads
cases on stdin and answers each one's resident-set rise on stdout."""

from __future__ import annotations

import json
import sys
from typing import Any

import torch

from harness.base.errors import exception_line
from harness.bench.cases import BenchCase, prepare
from harness.bench.memprobe import rss_rise
from harness.registry import load_all


def serve(files: list[str], threads: int) -> None:
    torch.set_num_threads(threads)
    load_all(files)
    for line in sys.stdin:
        case = BenchCase(**json.loads(line))
        try:
            prepared = prepare(case)
            prepared.step()  # warm: one-time caches (oneDNN primitives, BLAS buffers) are not the call's
            answer: dict[str, Any] = {"rss_peak_bytes": rss_rise(prepared.step)}
            del prepared
        except Exception as exc:  # reported on the row, the sweep goes on
            answer = {"error": exception_line(exc)}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    serve(sys.argv[2:], int(sys.argv[1]))
