"""The defaults and choices the command line's ``--help`` shows, in a module that imports
nothing heavy: ``python -m harness --help`` and a usage error build every parser from it
without importing torch. Each value's owner imports it from here (one definition):
``harness.check.precision`` the precision factor, ``harness.bench.cases`` the timing,
``harness.systems.checkpoint_sides`` what ``parity`` compares, ``harness.check.reference``
``Gradients``."""

from __future__ import annotations

import enum

# A variant may have this many times the baseline's RMS error (benchmarks/precision_calibration.py)
PRECISION_FACTOR = 3.0
# float64 decides semantics: |x - oracle| <= FLOAT64_ATOL + FLOAT64_RTOL |oracle| at every element
# (``harness.check.precision``; ``harness.families.reach`` asks whether a convention bends a score by more)
FLOAT64_RTOL = 1e-10
FLOAT64_ATOL = 1e-10

# Timing per profile: seconds of timed calls per variant per round, and rounds per group.
TIMING = {"quick": {"min_time": 0.02, "rounds": 7}, "full": {"min_time": 0.05, "rounds": 7}}
# The same two defaults for every profile from the environment (a CI smoke run of the
# documented commands times fewer, shorter rounds through the same code); --min-time and
# --rounds still win. Each log's stamp records what its rows were timed with.
TIMING_ENV = {"min_time": "HARNESS_MIN_TIME", "rounds": "HARNESS_ROUNDS"}

# The families a checkpoint is compared in, and the dtypes the comparison runs in (parity)
PARITY_FAMILIES = ("llama_model", "decoder_only_model")
PARITY_DTYPES = ("float32", "bfloat16", "float16")


class Gradients(str, enum.Enum):
    """Which gradients are judged: every one (``REQUIRED``: an output without a gradient is
    wrong), those the candidate's output carries (``AUTO``: a forward-only kernel is judged on
    its output, said in a note), or none (``NONE``)."""

    REQUIRED = "required"
    AUTO = "auto"
    NONE = "none"
