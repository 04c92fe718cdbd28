"""A registered implementation: ``Variant``, what a registration holds and how it answers
whether it runs for a config, a device and a case (``call_supports``)."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Mapping

import torch

from harness.base.config import Config
from harness.base.devices import DeviceSet
from harness.families.base import Family
from harness.families.catalog import get_family
from harness.porting.entries import ParamMap
from harness.porting.portmap import MapSpec


def takes_case(supports: Callable[..., Any]) -> bool:
    """Whether a ``supports`` function takes the case name too (two positional parameters)."""
    try:
        params = inspect.signature(supports).parameters.values()
    except (TypeError, ValueError):
        return False
    kinds = [p.kind for p in params]
    return inspect.Parameter.VAR_POSITIONAL in kinds or sum(
        k in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD) for k in kinds) >= 2


def call_supports(supports: Callable[..., Any], cfg: Config, case: str | None = None) -> Any:
    return supports(cfg, case) if takes_case(supports) else supports(cfg)


@dataclass(frozen=True)
class Variant:
    """One implementation of one family.

    id        unique within its family (``annotated``, ``torch_mha``)
    family    a name in ``harness.families.catalog.FAMILIES``
    source    the seed file it is faithful to, or ``torch``
    build     Config -> module (or, for the masks family, an object of builders)
    call      adapter: (module, canonical inputs) -> canonical output; converts the
              canonical mask convention (bool, True = may attend) to the variant's own
    param_map canonical name -> Param/Chunk/Concat/Zero, or a function of Config
    traits    declared facts; the family's semantic traits decide the expectations
    fixed     module parameters outside the family, with the reason they are held
    reference True for the family's baseline (speed ratios, error against it)
    supports  Config -> None, or a reason the variant cannot be built for it; or (Config, case)
              -> the same, case a case name where one case cannot run (a model that takes no
              segment ids refusing ``packed``), None when asked for the config as a whole
    dtypes    the dtypes it runs in (``("float16", "bfloat16")``); empty: any. Without float64:
              semantics decided in each of them (``harness.check.own_dtype``)
    devices   the device types it runs on and why only there (``DeviceSet``); None: any
    """

    id: str
    family: str
    source: str
    build: Callable[[Config], Any]
    call: Callable[[Any, Mapping[str, Any]], Any]
    param_map: MapSpec = field(default_factory=dict)
    traits: Mapping[str, Any] = field(default_factory=dict)
    fixed: Mapping[str, str] = field(default_factory=dict)
    summary: str = ""
    reference: bool = False
    supports: Callable[..., str | None] = lambda cfg: None
    dtypes: tuple[str, ...] = ()
    devices: DeviceSet | None = None
    origin: str = ""  # module or file that registered it

    @property
    def key(self) -> str:
        return f"{self.family}/{self.id}"

    @cached_property
    def family_spec(self) -> Family:
        """The family this variant belongs to, resolved once (``get_family(self.family)``
        still works; registration has already checked the name)."""
        return get_family(self.family)

    def refuses(self, cfg: Config, device: str | torch.device = "cpu", case: str | None = None) -> str | None:
        """Why the variant is not run for ``cfg`` on ``device`` (None: it is), or with ``case``
        on that case: its declared device set first, then ``supports``."""
        return ((self.devices.refuses(device) if self.devices is not None else None)
                or call_supports(self.supports, cfg, case))

    def map_for(self, cfg: Config) -> ParamMap:
        return self.param_map(cfg) if callable(self.param_map) else self.param_map

    @property
    def own_dtype_semantics(self) -> bool:
        """Whether it declares dtypes without float64 (its semantics decided in each of them)."""
        return bool(self.dtypes) and "float64" not in self.dtypes

    def semantic_dtypes(self) -> tuple[str, ...]:
        """The dtypes its semantics are decided in: float64, or its own (``own_dtype_semantics``)."""
        return self.dtypes if self.own_dtype_semantics else ("float64",)

    def dtype_reason(self, dtype: str) -> str | None:
        """Why it does not run in ``dtype`` (None when it does)."""
        return None if dtype in (self.dtypes or (dtype,)) else f"runs in {', '.join(self.dtypes)} only"
