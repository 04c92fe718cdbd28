"""A harness that compares hand-written Transformer components: equivalence verdicts,
seeded weight porting between parameter layouts, benchmarks and reports.

A variant file needs only this package's public names::

    from harness import register, Param, Chunk, Concat, Transposed, Zero
    from harness import register_kernel   # a plain attention function over projected heads
"""

from .config import Config
from .errors import (
    ConfigError, HarnessError, InputError, PortingError, RegistryError, UnknownName,
    VariantFileError,
)
from .porting import Absent, Chunk, Concat, Param, Tied, Transposed, Zero, fused_entries, linear_entries, nest, norm_entries
from .registry import REGISTRY, Variant, register
from .kernels import register_kernel

__all__ = [
    "Config", "register", "register_kernel", "REGISTRY", "Variant",
    "Param", "Chunk", "Concat", "Transposed", "Zero", "Absent", "Tied", "nest", "linear_entries", "norm_entries", "fused_entries",
    "HarnessError", "ConfigError", "PortingError", "InputError", "UnknownName",
    "VariantFileError", "RegistryError",
]
