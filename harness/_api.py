"""The public API's names, imported by ``harness`` on the first one a program reads (a
variant file's ``from harness import register``): ``python -m harness --help`` and a usage
error then answer before torch is imported. The list of names is ``harness.__all__``."""

# ruff: noqa: F401
from harness.base.config import Config
from harness.base.devices import DeviceSet
from harness.base.errors import (
    ConfigError,
    HarnessError,
    InputError,
    PortingError,
    RegistryError,
    SpecError,
    UnknownName,
    VariantFileError,
)
from harness.base.library import library_config, rotary_tables
from harness.base.masks import additive_mask, causal_and_pad, key_pad_to_attn, masked, per_head
from harness.check.reference import Gradients, judge
from harness.check.reference_result import Judgement
from harness.families.base import PathFinding
from harness.families.models import PAD, START, dropout_sites, incremental, layers, register_decoding
from harness.families.no_key_rows import ByCause, ByDtype
from harness.families.rope_scaling import RopeScaling, RopeType
from harness.families.rope_scaling import frequencies as rope_frequencies
from harness.families.training import SPREADS, STEP_COUNTS, noam, optimizer_rates, smoothed_target
from harness.porting.entries import (
    Absent,
    Chunk,
    Concat,
    Identity,
    Offset,
    Param,
    PerHeadChunk,
    RopePermuted,
    Tied,
    Transposed,
    Zero,
    fused_entries,
    linear_entries,
    nest,
    norm_entries,
)
from harness.porting.portmap import absent_norm
from harness.registry import REGISTRY, Target, Variant, get_variant, register, register_target
from harness.registry.kernels import register_kernel
