"""A harness that compares hand-written Transformer components: equivalence verdicts,
seeded weight porting between parameter layouts, benchmarks and reports.

This module is the public API: a variant file (``variants/*.py``, a user's pack) needs only
the names below::

    from harness import register, Param, Chunk, Concat, Transposed, Zero

Where the rest lives: docs/layout.md, a section per sub-package.
    from harness import register_kernel   # a plain attention function over projected heads
    from harness import judge             # any candidate against the user's own reference
"""
# ruff: noqa: F405  (__all__ names what harness._api defines)

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

import harness._interrupt  # noqa: F401  (first: Ctrl-C during start-up is one line, exit 130)

if TYPE_CHECKING:  # the names, for type checkers; at run time ``__getattr__`` below imports them
    from harness._api import *  # noqa: F403

__all__ = [
    # registering a variant, and reading one back
    "register", "REGISTRY", "Variant", "get_variant", "Config",
    # the device types a variant runs on, where it is bound to some
    "DeviceSet",
    # a path finding declared for some devices or dtypes only (traits['path_findings'])
    "PathFinding",
    # what a row without keys becomes, by what emptied it or by the dtype (the dead-row traits)
    "ByCause", "ByDtype",
    # a plain attention function over projected heads, its layout given as data
    "register_kernel",
    # its parameter map
    "Param", "Chunk", "PerHeadChunk", "Concat", "Transposed", "RopePermuted", "Offset", "Zero", "Absent", "Tied",
    "nest", "linear_entries", "norm_entries", "fused_entries", "absent_norm",
    "Identity",  # a square weight the variant leaves out, read as the identity
    # masks: converting the canonical bool mask (True = may attend) at the variant's edge
    "masked", "per_head", "causal_and_pad", "key_pad_to_attn", "additive_mask",
    # library modules (transformers): their config object from the harness config, their rotary tables
    "library_config", "rotary_tables",
    # RoPE scaling (linear, dynamic NTK, YaRN, llama3, LongRoPE): the rope_scaling trait's values, and
    # (inverse frequencies, attention factor) of one at a call's positions
    "RopeScaling", "RopeType", "rope_frequencies",
    # whole models: how a model decodes, its layers and dropout sites
    "register_decoding", "incremental", "layers", "dropout_sites", "PAD", "START",
    # the training families' declared forms
    "SPREADS", "STEP_COUNTS", "noam", "optimizer_rates", "smoothed_target",
    # a candidate judged against a reference of the user's (no family): docs/reference-oracle.md
    "judge", "Judgement", "Gradients",
    # performance claims
    "register_target", "Target",
    # errors
    "HarnessError", "ConfigError", "PortingError", "InputError", "UnknownName",
    "VariantFileError", "RegistryError", "SpecError",
]


def __getattr__(name: str) -> Any:
    """A public name, from ``harness._api`` (torch and the families load with it, on first use)."""
    if name not in __all__:
        raise AttributeError(f"module 'harness' has no attribute {name!r}")
    api = importlib.import_module("harness._api")
    globals().update({n: getattr(api, n) for n in __all__})
    return globals()[name]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
