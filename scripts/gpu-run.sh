#!/usr/bin/env bash
# A whole GPU run in one command, on a GPU machine as it is: installs the project alone
# (pip install --no-deps --no-build-isolation -e .), then the CUDA test cases beside
# `check --device cuda`, the quick report and the full profile in the time left, within
# 8 minutes, everything under reports/cuda-<gpu>/ with one log (reports/cuda-<gpu>/gpu-run.log).
# Options go to scripts/gpu_run.py (--help lists them; --dry-run prints the plan).
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-python3}" scripts/gpu_run.py "$@"
