"""The registry of variants.

A variant file registers its classes with ``register(...)`` next to their definitions.
The harness never imports a variant by name: ``load_builtin()`` imports the
``variants`` package, ``load_file(path)`` imports a user's file the same way, and
everything else iterates over ``REGISTRY``.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from .config import Config
from .errors import RegistryError, UnknownName, VariantFileError
from .families import FAMILIES, get_family
from .porting import MapSpec, ParamMap


@dataclass(frozen=True)
class Variant:
    """One implementation of one family.

    id        unique within its family (``annotated``, ``torch_mha``)
    family    a name in ``harness.families.FAMILIES``
    source    the seed file it is faithful to, or ``torch``
    build     Config -> module (or, for the masks family, an object of builders)
    call      adapter: (module, canonical inputs) -> canonical output; converts the
              canonical mask convention (bool, True = may attend) to the variant's own
    param_map canonical name -> Param/Chunk/Concat/Zero, or a function of Config
    traits    declared facts; the family's semantic traits decide the expectations
    fixed     module parameters outside the family, with the reason they are held
    reference True for the family's baseline (speed ratios, error against it)
    supports  Config -> None, or a reason the variant cannot be built for it
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
    supports: Callable[[Config], str | None] = lambda cfg: None
    origin: str = ""  # module or file that registered it

    @property
    def key(self) -> str:
        return f"{self.family}/{self.id}"

    def map_for(self, cfg: Config) -> ParamMap:
        return self.param_map(cfg) if callable(self.param_map) else self.param_map


REGISTRY: dict[str, Variant] = {}
_loading_origin: list[str] = []


def register(**fields: Any) -> Variant:
    """Register a variant; see ``Variant`` for the fields. Returns the entry."""
    try:
        variant = Variant(**fields, origin=_loading_origin[-1] if _loading_origin else "")
    except TypeError as exc:
        raise RegistryError(f"bad register(...) call: {exc}") from None
    if variant.family not in FAMILIES:
        raise RegistryError(
            f"variant '{variant.id}' names unknown family '{variant.family}'; "
            f"families: {sorted(FAMILIES)}"
        )
    problems = FAMILIES[variant.family].validate_traits(variant.id, variant.traits)
    if problems:
        raise RegistryError(f"variant '{variant.key}': " + "; ".join(problems))
    if not variant.id or not variant.id.replace("_", "").replace("-", "").isalnum():
        raise RegistryError(f"variant id {variant.id!r} must be letters, digits, '_' or '-'")
    if variant.key in REGISTRY:
        raise RegistryError(
            f"variant '{variant.key}' is registered twice "
            f"({REGISTRY[variant.key].origin} and {variant.origin})"
        )
    REGISTRY[variant.key] = variant
    return variant


def load_builtin() -> None:
    """Import the project's own ``variants`` package (registers on import)."""
    _loading_origin.append("variants")
    try:
        importlib.import_module("variants")
    finally:
        _loading_origin.pop()


def load_file(path: str | Path) -> list[Variant]:
    """Import a user's variant file; returns what it registered."""
    path = Path(path)
    if not path.is_file():
        raise VariantFileError(f"variant file '{path}' does not exist")
    already = [v for v in REGISTRY.values() if v.origin == str(path)]
    if already:  # loaded already (e.g. by pytest's --variants and a test in one process)
        return already
    before = set(REGISTRY)
    name = f"user_variants_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise VariantFileError(f"variant file '{path}' is not a Python file")
    module = importlib.util.module_from_spec(spec)
    _loading_origin.append(str(path))
    try:
        sys.modules[name] = module
        spec.loader.exec_module(module)
    except RegistryError as exc:
        sys.modules.pop(name, None)
        raise VariantFileError(f"variant file '{path}': {exc}") from None
    except Exception as exc:  # the user's code: report it in one line
        sys.modules.pop(name, None)
        where = traceback.extract_tb(exc.__traceback__)[-1]
        raise VariantFileError(
            f"variant file '{path}' failed to import: {type(exc).__name__}: {exc} "
            f"(line {where.lineno})"
        ) from None
    finally:
        _loading_origin.pop()
    added = [REGISTRY[k] for k in REGISTRY if k not in before]
    if not added:
        raise VariantFileError(f"variant file '{path}' registered no variant (call harness.register)")
    return added


@contextlib.contextmanager
def scratch():
    """Registrations made inside are undone on exit (tests of deliberately wrong variants)."""
    saved = dict(REGISTRY)
    try:
        yield REGISTRY
    finally:
        REGISTRY.clear()
        REGISTRY.update(saved)


def load_all(files: list[str] | None = None) -> None:
    load_builtin()
    for path in files or []:
        load_file(path)


def variants_of(family: str) -> list[Variant]:
    get_family(family)
    return [v for v in REGISTRY.values() if v.family == family]


def get_variant(family: str, variant_id: str) -> Variant:
    key = f"{family}/{variant_id}"
    if key not in REGISTRY:
        known = [v.id for v in variants_of(family)]
        raise UnknownName(f"unknown variant '{variant_id}' in family '{family}'; known: {known}")
    return REGISTRY[key]


def reference_of(family: str) -> Variant | None:
    refs = [v for v in variants_of(family) if v.reference]
    return refs[0] if refs else None

