"""Runs that spread: each pytest-xdist worker pinned to its own GPU on a host with several."""

from __future__ import annotations

import pytest

from harness.pytest_plugin import worker_gpu


@pytest.mark.parametrize("env,count,expected", [
    ({"PYTEST_XDIST_WORKER": "gw3"}, 8, "3"),
    ({"PYTEST_XDIST_WORKER": "gw9"}, 8, "1"),                                   # more workers than GPUs
    ({"PYTEST_XDIST_WORKER": "gw1", "CUDA_VISIBLE_DEVICES": "4,5"}, 0, "5"),   # the outer choice honoured
    ({"PYTEST_XDIST_WORKER": "gw2", "CUDA_VISIBLE_DEVICES": "4, 5,6"}, 0, "6"),
    ({"PYTEST_XDIST_WORKER": "gw0", "CUDA_VISIBLE_DEVICES": "2"}, 0, None),     # one GPU: nothing to split
    ({"PYTEST_XDIST_WORKER": "gw1"}, 1, None),
    ({"PYTEST_XDIST_WORKER": "gw1"}, 0, None),                                  # no GPU
    ({}, 8, None),                                                              # not under xdist
    ({"PYTEST_XDIST_WORKER": "gw1", "HARNESS_NO_GPU_PINNING": "1"}, 8, None),
])
def test_each_worker_keeps_one_gpu(env, count, expected):
    assert worker_gpu(env, count) == expected


def test_workers_cover_every_gpu_once():
    gpus = {worker_gpu({"PYTEST_XDIST_WORKER": f"gw{i}", "CUDA_VISIBLE_DEVICES": "0,1,2,3"}, 0) for i in range(4)}
    assert gpus == {"0", "1", "2", "3"}
