"""Runs that spread: each pytest-xdist worker pinned to its own GPU on a host with several."""

from __future__ import annotations

import pytest

from harness.pytest_plugin import worker_gpu, worker_threads


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


W2 = {"PYTEST_XDIST_WORKER": "gw1", "PYTEST_XDIST_WORKER_COUNT": "2"}


@pytest.mark.parametrize("env,cpus,expected", [
    (W2, 2, "1"),                                             # this project's machines: one thread each
    (W2, 16, "8"),
    ({**W2, "PYTEST_XDIST_WORKER_COUNT": "32"}, 16, "1"),     # more workers than CPUs: still one
    ({}, 2, None),                                            # not a worker
    ({**W2, "OMP_NUM_THREADS": "4"}, 2, None),                # the user's own setting wins
    ({**W2, "HARNESS_NO_THREAD_SHARING": "1"}, 2, None),
])
def test_each_worker_takes_its_share_of_the_cpus(env, cpus, expected):
    assert worker_threads(env, cpus) == expected


def test_this_suites_workers_run_torch_on_their_share():
    """The project's conftest shares the CPUs in its own xdist workers, and the commands a
    test starts (the documentation's, in the slow half) inherit the share."""
    import os
    import subprocess
    import sys

    if not os.environ.get("PYTEST_XDIST_WORKER") or os.environ.get("HARNESS_NO_THREAD_SHARING"):
        pytest.skip("not an xdist worker of this suite")
    share = os.environ.get("OMP_NUM_THREADS")
    assert share and int(share) >= 1
    started = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
                             capture_output=True, text=True, check=True)
    assert started.stdout.strip() == share
