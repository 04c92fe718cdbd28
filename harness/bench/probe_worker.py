"""The memory probe's process: ``python -m harness.bench.probe_worker THREADS FILES...`` reads
cases on stdin and answers each one's resident-set rise on stdout. The answers go through a
private copy of the stdout descriptor; descriptor 1 itself is pointed at stderr, so nothing a
variant prints (from Python or from C) can reach the protocol."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import torch

from harness.base.boundary import describe
from harness.bench.cases import BenchCase, prepare
from harness.bench.memprobe import rss_rise
from harness.registry import load_all


def serve(files: list[str], threads: int) -> None:
    sys.stdout.flush()
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # anything else written to stdout lands on stderr
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
            answer = {"error": describe(exc)[:200]}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


if __name__ == "__main__":
    serve(sys.argv[2:], int(sys.argv[1]))
