"""The registry of variants.

A variant file registers its classes with ``register(...)`` next to their definitions.
The harness never imports a variant by name: ``load_packs()`` imports every package
declared in the entry-point group ``attention_harness.variants`` (the project's own
``variants`` package is one, declared in pyproject.toml; a pip-installed pack is found
the same way), ``load_file(path)`` imports a user's file, and everything else iterates
over ``REGISTRY``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import torch

from harness.base.boundary import UserCodeError, user_code
from harness.base.config import Config
from harness.base.devices import DeviceSet
from harness.base.dtypes import FLOAT_DTYPES
from harness.base.errors import ConfigError, RegistryError, UnknownName, VariantFileError
from harness.base.files import no_bytecode
from harness.base.seeding import seed_everything
from harness.families.catalog import FAMILIES, get_family
from harness.porting.portmap import PortMap
from harness.registry.guard import guard, import_failure, variant_files, where_in
from harness.registry.ids import namespaced
from harness.registry.variant import Variant, call_supports

REGISTRY: dict[str, Variant] = {}
_loading_origin: list[str] = []


def register(**fields: Any) -> Variant:
    """Register a variant; see ``Variant`` for the fields. Returns the entry."""
    try:
        variant = Variant(**fields, origin=_loading_origin[-1] if _loading_origin else "")
    except TypeError as exc:
        raise RegistryError(f"bad register(...) call: {exc}") from None
    if variant.devices is not None and not isinstance(variant.devices, DeviceSet):
        raise RegistryError(f"variant '{variant.key}': devices={variant.devices!r} must be a "
                            "harness.DeviceSet(types, why)")
    if variant.family not in FAMILIES:
        raise RegistryError(
            f"variant '{variant.id}' names unknown family '{variant.family}'; "
            f"families: {sorted(FAMILIES)}"
        )
    problems = FAMILIES[variant.family].validate_traits(variant.id, variant.traits)
    if problems:
        raise RegistryError(f"variant '{variant.key}': " + "; ".join(problems))
    if isinstance(variant.dtypes, str) or any(d not in FLOAT_DTYPES for d in variant.dtypes):
        raise RegistryError(f"variant '{variant.key}': dtypes {variant.dtypes!r} must be a tuple of "
                            f"{list(FLOAT_DTYPES)}")
    variant = dataclasses.replace(variant, dtypes=tuple(variant.dtypes))
    if not variant.id or not variant.id.replace("_", "").replace("-", "").isalnum():
        raise RegistryError(f"variant id {variant.id!r} must be letters, digits, '_' or '-'")
    requires = FAMILIES[variant.family].requires
    if requires is not None:
        own = variant.supports
        variant = dataclasses.replace(variant, supports=lambda cfg, case=None: requires(variant.traits, cfg)
                                      or call_supports(own, cfg, case))
    variant = guard(variant)
    if variant.key in REGISTRY and variant.origin in _user_files and REGISTRY[variant.key].origin not in _user_files:
        variant = namespaced(variant, REGISTRY)
    if variant.key in REGISTRY:
        raise RegistryError(
            f"variant '{variant.key}' is registered twice "
            f"({REGISTRY[variant.key].origin} and {variant.origin})"
        )
    REGISTRY[variant.key] = variant
    return variant


PACK_GROUP = "attention_harness.variants"
_loaded_packs: dict[str, str] = {}   # entry-point name -> what it loaded (module)
_user_files: dict[str, str] = {}      # origins of the user files loaded (resolved) -> the path as given
PACK_NOTES: dict[str, str] = {}      # pack name -> where its ``source`` files come from


def pack_entry_points() -> list[importlib.metadata.EntryPoint]:
    """The installed variant packs, sorted by name (one per name)."""
    found = {ep.name: ep for ep in importlib.metadata.entry_points(group=PACK_GROUP)}
    return [found[name] for name in sorted(found)]


def load_packs() -> list[str]:
    """Import every installed variant pack (each registers on import); returns their names.

    A pack is a module named in the entry-point group ``attention_harness.variants``::

        [project.entry-points."attention_harness.variants"]
        mine = "my_package.variants"

    A pack module may set ``SOURCES`` to a line saying where its ``source`` files are.
    """
    for ep in pack_entry_points():
        if ep.name in _loaded_packs:
            continue
        _loading_origin.append(ep.value)  # a pack's variants have its module as origin
        try:
            with user_code("import", timeout=0):  # an import may be slow (torch, transformers): never timed
                module = ep.load()
        except UserCodeError as failed:  # the pack's code: one line naming the pack and where
            exc = failed.original
            if isinstance(exc, RegistryError):
                raise VariantFileError(f"variant pack '{ep.name}' ({ep.value}): {exc}") from None
            raise VariantFileError(
                f"variant pack '{ep.name}' ({ep.value}) failed to import: "
                + (f"{type(exc).__name__}: {exc}{where_in(exc, None)}" if exc is not None else failed.problem)
            ) from None
        finally:
            _loading_origin.pop()
        _loaded_packs[ep.name] = ep.value
        note = getattr(module, "SOURCES", None)
        if isinstance(note, str) and note:
            PACK_NOTES[ep.name] = note
    return list(_loaded_packs)


def load_file(path: str | Path) -> list[Variant]:
    """Import a user's variant file once, however it is named (relative or absolute
    path, symlink); returns what it registered. Its folder goes on ``sys.path`` (at the
    end, so it never hides an installed module): a helper module beside it imports."""
    given = str(path)
    path = Path(path)
    if path.is_dir():
        raise VariantFileError(f"variant file '{given}' is a directory; give a .py file that calls register(...)")
    if not path.is_file():
        raise VariantFileError(f"variant file '{given}' does not exist")
    if path.suffix != ".py":
        raise VariantFileError(f"variant file '{given}' is not a Python file (.py)")
    resolved = path.resolve()
    origin = str(resolved)
    already = [v for v in REGISTRY.values() if v.origin == origin]
    if already:  # loaded already (e.g. by pytest's --variants and a test in one process)
        return already
    before = set(REGISTRY)
    name = f"user_variants_{abs(hash(origin))}"
    spec = importlib.util.spec_from_file_location(name, resolved)
    if spec is None or spec.loader is None:
        raise VariantFileError(f"variant file '{given}' is not a Python file")
    module = importlib.util.module_from_spec(spec)
    if str(resolved.parent) not in sys.path:  # its own folder importable, as for `python file.py`
        sys.path.append(str(resolved.parent))
    _loading_origin.append(origin)
    _user_files[origin] = given
    try:
        sys.modules[name] = module
        with user_code("import", files=(origin,), timeout=0) as printed, no_bytecode():
            spec.loader.exec_module(module)
    except UserCodeError as failed:
        _undo(name, before)
        raise VariantFileError(import_failure(given, resolved, failed)) from None
    finally:
        _loading_origin.pop()
    if printed.text.strip():  # what it printed at import goes to stderr: stdout is the harness's
        sys.stderr.write(printed.text if printed.text.endswith("\n") else printed.text + "\n")
    added = [REGISTRY[k] for k in REGISTRY if k not in before]
    if not added:
        raise VariantFileError(f"variant file '{given}' registered no variant (call harness.register)")
    return added


def _undo(module_name: str, before: set[str]) -> None:
    """A file that failed half-way leaves nothing behind."""
    sys.modules.pop(module_name, None)
    for key in set(REGISTRY) - before:
        del REGISTRY[key]


def from_user_file(variant: Variant) -> bool:
    """Registered by a user's file (``--variants``), not by an installed pack."""
    return variant.origin in _user_files


def variants_file(variant: Variant) -> str | None:
    """The user's file that registered ``variant``, as its path was given (``--variants``,
    the environment or ``load_file``), so a printed command loads it again; None for a
    variant of the project or of a pack."""
    return _user_files.get(variant.origin)


@contextlib.contextmanager
def scratch():
    """Registrations made inside are undone on exit (tests of deliberately wrong variants)."""
    saved = dict(REGISTRY)
    try:
        yield REGISTRY
    finally:
        REGISTRY.clear()
        REGISTRY.update(saved)


@contextlib.contextmanager
def packs_only():
    """Inside, the registry holds only the installed packs' variants: the project's own
    tests use it so that a user's ``--variants`` file can never fail them."""
    saved = dict(REGISTRY)
    try:
        for key in [k for k, v in REGISTRY.items() if from_user_file(v)]:
            del REGISTRY[key]
        yield REGISTRY
    finally:
        REGISTRY.clear()
        REGISTRY.update(saved)


def load_all(files: list[str] | None = None) -> list[Variant]:
    """Every installed pack, then each user file; returns the user files' variants."""
    load_packs()
    if not REGISTRY:
        raise RegistryError(
            f"no variant found: no installed package declares the entry-point group '{PACK_GROUP}' "
            "(install the project with: pip install -e .)"
        )
    added: dict[str, Variant] = {}
    for path in files or []:
        added.update((v.key, v) for v in load_file(path))
    return list(added.values())


def variants_of(family: str) -> list[Variant]:
    get_family(family)
    return [v for v in REGISTRY.values() if v.family == family]


def get_variant(family: str, variant_id: str) -> Variant:
    key = f"{family}/{variant_id}"
    if key not in REGISTRY:
        known = [v.id for v in variants_of(family)]
        raise UnknownName(f"unknown variant '{variant_id}' in family '{family}'; known: {known}")
    return REGISTRY[key]


def applicable(variant: Variant, case: str) -> bool:
    """Whether a family case applies to a variant (``traits["cases"]`` limits it, and a case
    the family keeps for the variants declaring some trait: ``Family.case_declarers``; a
    convention's case for those declaring its trait: ``Family.declared_for``)."""
    if not variant.family_spec.declared_for(case, variant.traits):
        return False
    case = variant.family_spec.base_case(case)  # a regime case applies where its base case does
    cases = variant.traits.get("cases")
    if cases is not None and case not in cases:
        return False
    declarers = variant.family_spec.case_declarers.get(case)
    return declarers is None or any(t in variant.traits for t in declarers)


def reference_of(family: str) -> Variant | None:
    refs = [v for v in variants_of(family) if v.reference]
    return refs[0] if refs else None


def build(
    variant: Variant,
    cfg: Config,
    *,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    weights: Mapping[str, torch.Tensor] | None = None,
) -> tuple[Any, PortMap | None]:
    """Seed, build ``variant`` for ``cfg`` in eval mode on ``device``/``dtype`` and, when
    ``weights`` (canonical) are given, port them in: every one of its own canonical parameters
    (``Family.params_for`` its traits), those only another's traits bring left aside (two
    variants traced on one set: ``diff``). Returns (module, port map)."""
    reason = variant.refuses(cfg, device)
    if reason:
        raise ConfigError(f"{variant.key} cannot be built for this config: {reason}")
    seed_everything(cfg.seed)
    module = variant.build(cfg)
    family = variant.family_spec
    if not isinstance(module, torch.nn.Module):
        if family.canonical_shapes(cfg, variant.traits):
            raise UserCodeError("build", f"returned {type(module).__name__}, not a torch.nn.Module (the "
                                f"{family.name} family ports weights into the module build returns)")
        return module, None  # builders without parameters (the masks family)
    files = variant_files(variant)
    with user_code("port", files=files, who=variant.key):  # the module's own .to, parameters, buffers
        module = module.to(device=device, dtype=dtype).eval()
        portmap = PortMap(
            variant.key, module, variant.map_for(cfg), family.canonical_shapes(cfg, variant.traits), variant.fixed
        )
        if weights is not None:
            portmap.load({n: t for n, t in weights.items() if n in portmap.canonical_shapes})
    return module, portmap


# -- performance targets: claims a pack registers, evaluated by the report ----------------------

@dataclass(frozen=True)
class Target:
    """kind: 'speedup' (variant vs baseline, >= threshold), 'peak_fraction' (executed FLOP/s
    over the matmul peak, >= threshold), 'growth' (fitted exponent of ``metric`` against T,
    <= threshold). Speed-up and peak fraction are read from the interleaved rounds as the
    ratio of the medians with a bootstrap interval over the rounds: met only when the
    interval's low end meets the threshold, not met when its high end misses it, and
    undecided when the threshold lies inside it."""

    name: str
    kind: str
    family: str
    variant: str
    threshold: float
    where: Mapping[str, object] = field(default_factory=dict)  # row filters: batch, seq, mode, ...
    baseline: str = ""
    metric: str = "saved_bytes"
    minimum: float | None = None  # growth: also at least this exponent
    text: str = ""

    @property
    def device(self) -> str | None:
        """The device kind the target is about ('cpu', 'cuda'): ``where``'s device; None
        for a target that names none (decided on any device's rows)."""
        device = self.where.get("device")
        return None if device is None else str(device).split(":")[0]


TARGETS: list[Target] = []


def register_target(**fields: Any) -> Target:
    target = Target(**fields)
    TARGETS.append(target)
    return target
