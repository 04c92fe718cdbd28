"""Families: the interface of each kind of component.

A family fixes
- the canonical call (what the adapter of every variant receives),
- the canonical parameters (names and shapes) that weights are ported through,
- the seeded cases (inputs) that every pair of its variants is compared on,
- the semantic traits and their vocabulary: declared traits whose values say *what* a
  variant computes. The family's float64 oracle (``harness.families.oracles``) is built from them,
  and every variant is checked against the oracle of its own traits. Two variants whose
  semantic traits are equal fall in one equivalence class. Other traits (scale
  placement, QKV layout, ...) describe *how* a variant computes; they are known by name
  (``DESCRIPTIVE_TRAITS``) and must not change the result beyond rounding.

Declarations are validated at ``register``: an unknown trait key, a semantic value the oracle
cannot build, or an unknown case name in ``traits["cases"]`` is an error listing what is known.

Mask convention everywhere in the harness: bool, True = may attend. Pad masks are (B, L) with
True on real tokens; a padded query position's output is unspecified (``Family.padding``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch

from harness.base.config import CONFIG_MATRIX, Config
from harness.base.devices import device_type
from harness.base.errors import UnknownName
from harness.base.masks import leave_out_padded
from harness.families import conventions, no_key_rows, oracles
from harness.families.kernel_oracle import DEFAULT_SCALE
from harness.families.trait_spec import REQUIRED, TraitSpec  # noqa: F401 (the families' vocabulary)

ParamSpec = dict[str, tuple[tuple[int, ...], str]]  # name -> (shape, init kind)


@dataclass(frozen=True)
class ScaleSpec(TraitSpec):
    """``1/sqrt(d)`` or a number > 0."""

    def accepts(self, value: Any) -> bool:
        if value == DEFAULT_SCALE:
            return True
        return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < float("inf")

    def known(self) -> str:
        return f"{DEFAULT_SCALE!r}, a number > 0"


# Traits every family knows besides its semantic ones: how a variant computes, not what.
DESCRIPTIVE_TRAITS = {
    "qkv_layout": "how Q, K, V projections are stored",
    "bias": "which Linear layers carry a bias",
    "scale": "where 1/sqrt(d_k) is applied",
    "mask_convention": "the variant's own mask polarity (its adapter converts)",
    "fill": "the value masked scores are filled with (a finite fill can overflow float16)",
    "std": "how the norm's spread is computed",
    "dropout_sites": "tuple of the places dropout draws a mask in training (checked: one draw each)",
    "internal_dtype": "a dtype some of the work is done in whatever the input dtype ('float32'):"
                      " in float64 the variant is then expected 'less precise', not 'different'",
    "not_learned": "tuple of canonical parameters the variant does not learn (a norm without gain or bias):"
                   " each reads as its map's Absent value; an undeclared norm gain or bias left out is"
                   " a difference",
    "cases": "tuple of the family cases the variant applies to (default: all)",
    "data_dependent": "where the call reads tensor values back to Python (.item(), nonzero, a branch on a "
                      "tensor): it cannot run on the meta device, where the tests check device placement "
                      "(tests/test_meta_device.py holds the declaration to it)",
    "compiled": "True: the variant runs under torch.compile (its kernel path is not recorded: under a"
                " dispatch mode Dynamo would run it eager)",
    "path_findings": "{'CASE' or 'CASE@CONFIG': why or PathFinding(why, devices=..., dtypes=...)}: behaviour "
                     "that depends on the path taken there (another kernel for that shape, device or dtype), "
                     "declared: reported as a finding, not a contradiction",
    "note": "free text",
}
EPS = TraitSpec("the norm's epsilon", values=oracles.EPS_NAMES, number=True)


@dataclass(frozen=True)
class PathFinding:
    """A path finding that holds only on some device types or dtypes (a fused CUDA kernel
    picked for half precision; a no-grad fast path whose CUDA kernel differs from the CPU
    one); elsewhere the case is held to the spec as usual. Empty ``devices`` or ``dtypes``:
    every one."""

    why: str
    devices: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = ()

    def applies(self, device: str, dtype: str) -> bool:
        return ((not self.devices or device_type(device) in self.devices)
                and (not self.dtypes or dtype in self.dtypes))

    def __str__(self) -> str:  # how tables and JSON show the declaration
        return f"{self.why} ({self.scope()})" if self.scope() else self.why

    def scope(self) -> str:
        """'on cuda in bfloat16, float16' (empty when it holds everywhere)."""
        return " ".join(x for x in (f"on {', '.join(self.devices)}" if self.devices else "",
                                    f"in {', '.join(self.dtypes)}" if self.dtypes else "") if x)


def path_finding_problems(findings: Any, cases: set[str]) -> list[str]:
    """What is wrong with a ``path_findings`` declaration (a mapping of 'CASE' or
    'CASE@CONFIG' to the reason, or to a ``PathFinding``)."""
    if findings is None:
        return []
    if not isinstance(findings, Mapping) or not all(
            isinstance(k, str) and ((isinstance(v, str) and v) or (isinstance(v, PathFinding) and v.why and not any(
                isinstance(x, str) for x in (v.devices, v.dtypes))))  # a str there is read as its letters
            for k, v in findings.items()):
        return [f"traits['path_findings'] must map 'CASE' or 'CASE@CONFIG' to a reason or a PathFinding(why, "
                f"devices=(...,), dtypes=(...,)) (tuples of names), got {findings!r}"]
    unknown = sorted({k.partition("@")[0] for k in findings} - cases)
    return [f"traits['path_findings'] names unknown case(s) {unknown}; cases: {sorted(cases)}"] if unknown else []


def declared_path_finding(traits: Mapping[str, Any], case: str, config: str, device: str = "cpu",
                          dtype: str = "float64") -> PathFinding | None:
    """The finding declared for (case, config) in ``path_findings`` that holds on this device
    and dtype, if any (a reason given alone is a ``PathFinding`` that holds everywhere)."""
    findings = traits.get("path_findings") or {}
    found = findings.get(f"{case}@{config}") or findings.get(case)
    found = (PathFinding(found) if found else None) if isinstance(found, str) else found
    return found if found is not None and found.applies(device, dtype) else None


@dataclass(frozen=True)
class Case:
    name: str
    note: str  # what the case exercises
    make: Callable[[Config, torch.Generator], dict[str, Any]]
    # A regime case ("padded@left") is the case ``base`` on the config changed by ``changes``
    # ((field, value) pairs: regime fields, lengths): the variants that declare ``base`` take
    # it, its semantic traits are ``base``'s, and the call sees ``inputs["case"] == base``.
    base: str = ""
    changes: tuple[tuple[str, Any], ...] = ()
    declarer: str = ""  # a trait: only the variants declaring it off its default run the case (declared_for)


def regime_case(case: Case, label: str, note: str, **changes: Any) -> Case:
    """``case`` on the config changed by ``changes``, named ``case@label``: the default
    matrix's fixed regimes are built this way from the family's cases."""
    return Case(f"{case.name}@{label}", f"{case.note}; {note}", case.make, base=case.base or case.name,
                changes=tuple(sorted({**dict(case.changes), **changes}.items())), declarer=case.declarer)


def case_named(cases: tuple[Case, ...], name: str) -> Case:
    """The case ``name`` of ``cases`` (a family's, before the family is built): cases are
    named, never counted."""
    for case in cases:
        if case.name == name:
            return case
    raise UnknownName(f"no case '{name}'; cases: {[c.name for c in cases]}")


def convention_regimes(family: str, cases: tuple[Case, ...]) -> tuple[Case, ...]:
    """The regime cases the family's conventions add (``Convention.regimes``), on its cases by name."""
    out = []
    for trait, r in conventions.regimes(family):
        case = regime_case(case_named(cases, r.base), r.label, r.note, **dict(r.changes))
        out.append(dataclasses.replace(case, declarer=trait) if r.declared_only else case)
    return tuple(out)


@dataclass(frozen=True)
class Family:
    name: str
    call: str
    doc: str
    params: Callable[[Config], ParamSpec]
    cases: tuple[Case, ...]
    traits: Mapping[str, TraitSpec]       # the semantic traits and their vocabulary
    oracle: oracles.Oracle | None = None  # float64, built from a variant's semantic traits
    grad_inputs: tuple[str, ...] = ()
    differentiable: bool = True
    dtypes: tuple[str, ...] = ()  # fixed dtypes (the masks family: bool); else the device's
    case_semantic: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # Which configs of the default matrix its check runs (None: all). Whole models run on the
    # default config only: their layers are checked over the whole matrix in their own families.
    matrix: tuple[str, ...] | None = None
    matrix_note: str = "its layers run the whole matrix in their families"  # why (shown by check)
    # Configs this family adds to the whole default matrix (the attention family's GQA config).
    extra_configs: Mapping[str, Config] = field(default_factory=dict)
    # (a variant's traits, config) -> why the variant cannot run it, or None; joined to each
    # variant's own ``supports`` at registration (a multi-head-only variant on a GQA config).
    requires: Callable[[Mapping[str, Any], Config], str | None] | None = None
    # case -> traits: the case runs only for variants declaring one of them (the attention
    # family's RoPE, window and decode cases, for the variants that declare RoPE, a window or
    # GQA; to the others they are masks like the other cases' and cost check time).
    case_declarers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # Dropout judged by statistics (``harness.check.dropout_stats``): traits -> "mean" (the
    # output is linear in every dropped tensor: the mean of train calls approaches the eval
    # output), or the canonical names of the residual branches' output projections to zero (a
    # norm follows the dropout: the mean is biased, zeroed branches leave the output as in
    # eval), or None (only the draw count and the kept fraction).
    dropout_stats: Callable[[Mapping[str, Any]], Any] | None = None
    no_key_causes: tuple[str, ...] = ("mask",)  # what empties a row in its cases (``no_key_rows.CAUSES``)
    # (semantic traits, config) -> the parameters a declared trait brings (QK-norm's gains): ``params_for``
    trait_params: Callable[[Mapping[str, Any], Config], ParamSpec] | None = None
    padding: Callable[[Mapping[str, Any]], Any] | None = None  # inputs -> (B, T) True = real token
    # (trait, declared value, the unreached note with the most) -> a case that reaches the
    # declaration (``harness.families.reach.ReachPlan``) or None: tried when no case did
    reach_plan: Callable[[str, Any, Any], Any] | None = None

    def specified(self, inputs: Mapping[str, Any], out: Any) -> Any:  # padded query positions zeroed
        return leave_out_padded(out, self.padding(inputs) if self.padding else None)

    def configs_of(self, configs: Mapping[str, Config]) -> dict[str, Config]:
        """``configs`` narrowed to this family's matrix (a --set config always applies), with
        the family's extra configs when ``configs`` is the whole default matrix."""
        out = {n: c for n, c in configs.items()
               if self.matrix is None or n in self.matrix or n not in CONFIG_MATRIX}
        if self.extra_configs and set(configs) == set(CONFIG_MATRIX):
            out.update(self.extra_configs)
        return out

    @property
    def semantic(self) -> tuple[str, ...]:
        """Semantic traits that matter on every case."""
        per_case = {t for names in self.case_semantic.values() for t in names}
        return tuple(t for t in self.traits if t not in per_case)

    def case(self, name: str) -> Case:
        for case in self.cases:
            if case.name == name:
                return case
        raise UnknownName(
            f"family '{self.name}' has no case '{name}'; cases: {[c.name for c in self.cases]}"
        )

    def declared_for(self, case: str, traits: Mapping[str, Any]) -> bool:
        """False where ``case`` runs only for its trait's declarers (``Case.declarer``) and
        ``traits`` leave that trait at its default."""
        found = next((c for c in self.cases if c.name == case), None)
        if found is None or not found.declarer:
            return True
        spec = self.traits[found.declarer]
        return found.declarer in traits and traits[found.declarer] != spec.default

    def base_case(self, case: str) -> str:
        """The case a regime case is drawn from (itself for a family case)."""
        return next((c.base or c.name for c in self.cases if c.name == case), case)

    def case_config(self, case: str, cfg: Config) -> Config:
        """The config a case's inputs are drawn on: ``cfg``, changed by a regime case's changes."""
        changes = self.case(case).changes
        return cfg.replace(**dict(changes)) if changes else cfg

    def semantic_for(self, case: str) -> tuple[str, ...]:
        return self.semantic + tuple(self.case_semantic.get(self.base_case(case), ()))

    def semantic_traits(self, traits: Mapping[str, Any]) -> dict[str, Any]:
        """A variant's semantic traits with the family's defaults filled in."""
        return {name: traits.get(name, spec.default) for name, spec in self.traits.items()
                if name in traits or spec.default is not REQUIRED}

    def validate_traits(self, variant_id: str, traits: Mapping[str, Any]) -> list[str]:
        """Problems with a variant's declared traits (empty when they are executable)."""
        if no_key_rows.varies(traits):  # ByCause / ByDtype: each combination as a plain declaration
            return no_key_rows.problems(traits, self, lambda plain: self.validate_traits(variant_id, plain))
        problems = []
        for key in traits:
            if key not in self.traits and key not in DESCRIPTIVE_TRAITS:
                problems.append(f"unknown trait {key!r}; semantic traits of {self.name}: {list(self.traits)}; "
                                f"descriptive: {list(DESCRIPTIVE_TRAITS)}")
        if "data_dependent" in traits and not (isinstance(traits["data_dependent"], str) and traits["data_dependent"]):
            problems.append(f"traits['data_dependent'] must say where the call reads tensor values, "
                            f"got {traits['data_dependent']!r}")
        cases = traits.get("cases")
        if cases is not None:
            if isinstance(cases, str) or not all(isinstance(c, str) for c in cases):
                problems.append(f"traits['cases'] must be a tuple of case names, got {cases!r}")
            elif unknown := [c for c in cases if c not in {k.name for k in self.cases}]:
                problems.append(f"traits['cases'] names unknown case(s) {unknown}; "
                                f"cases of {self.name}: {[c.name for c in self.cases]}")
        applicable = [c.name for c in self.cases if cases is None or c.name in cases]
        needed = {t for c in applicable for t in self.semantic_for(c)}
        for name, spec in self.traits.items():
            if name in traits:
                if not spec.accepts(traits[name]):
                    alias = spec.aliases.get(traits[name]) if isinstance(traits[name], str) else None
                    hint = f" (another library's name for {alias!r}: declare that)" if alias else ""
                    problems.append(f"trait {name}={traits[name]!r} has no oracle{hint}; known: {spec.known()}")
            elif spec.default is REQUIRED and name in needed:
                problems.append(f"semantic trait {name!r} is not declared ({spec.doc}; known: {spec.known()})")
        problems += path_finding_problems(traits.get("path_findings"), {c.name for c in self.cases})
        sites = traits.get("dropout_sites")
        if sites is not None and (isinstance(sites, str) or not all(isinstance(x, str) for x in sites)):
            problems.append(f"traits['dropout_sites'] must be a tuple of site names, got {sites!r}")
        fixed = traits.get("not_learned")
        if fixed is not None and (isinstance(fixed, str) or not all(isinstance(x, str) for x in fixed)):
            problems.append(f"traits['not_learned'] must be a tuple of canonical parameter names, got {fixed!r}")
        internal = traits.get("internal_dtype")
        if internal is not None and internal not in ("float32", "bfloat16", "float16"):
            problems.append(f"traits['internal_dtype'] must be 'float32', 'bfloat16' or 'float16', got {internal!r}")
        return problems

    def params_for(self, cfg: Config, traits: Mapping[str, Any] | None = None) -> ParamSpec:
        """A variant's canonical parameters: ``params``, then those its ``traits`` bring (``trait_params``)."""
        extra = self.trait_params(self.semantic_traits(traits), cfg) if traits and self.trait_params else {}
        return {**self.params(cfg), **extra}

    def canonical_shapes(self, cfg: Config, traits: Mapping[str, Any] | None = None) -> dict[str, tuple[int, ...]]:
        return {name: shape for name, (shape, _) in self.params_for(cfg, traits).items()}

    def canonical_weights(self, cfg: Config, seed: int | None = None,
                          traits: Mapping[str, Any] | None = None) -> dict[str, torch.Tensor]:
        """Seeded float64 ``params_for`` (the traits' own drawn last: the others stay as they are):
        weights ~ N(0, 1/fan_in), biases ~ N(0, 0.1^2), norm gains ~ 1 + N(0, 0.1^2), non-trivial
        on purpose: a variant that ignores one cannot hide."""
        gen = torch.Generator().manual_seed(cfg.seed if seed is None else seed)
        out = {}
        for name, (shape, kind) in self.params_for(cfg, traits).items():
            noise = torch.randn(shape, generator=gen, dtype=torch.float64)
            if kind == "weight":
                out[name] = noise / math.sqrt(shape[-1])
            elif kind == "norm_weight":
                out[name] = 1.0 + 0.1 * noise
            else:  # bias, norm_bias
                out[name] = 0.1 * noise
        return out

    def inputs(self, case: str, cfg: Config) -> dict[str, Any]:
        """Seeded float64 (or bool / int) inputs of one case; same seed, same tensors."""
        gen = torch.Generator().manual_seed(cfg.seed + 1)
        c = self.case(case)
        cfg = self.case_config(case, cfg)
        inputs = {**c.make(cfg, gen), "case": c.base or c.name}
        return scaled(inputs, self.grad_inputs, cfg.scale) if cfg.scale != 1.0 else inputs


# -- parameter specs ---------------------------------------------------------------------

def _attn_params(prefix: str, d: int, kv_width: int | None = None, q_width: int | None = None) -> ParamSpec:
    """q, k, v, o Linear weights and biases; Q projects to ``q_width`` = H * d_k and K and V
    to ``kv_width`` = H_kv * d_k (default D: d_k = D / H, one K/V head per query head); O
    projects the H * d_k back to D."""
    spec: ParamSpec = {}
    q_width = d if q_width is None else q_width
    for proj in "qkvo":
        out = kv_width if proj in "kv" and kv_width is not None else (q_width if proj == "q" else d)
        spec[f"{prefix}{proj}.weight"] = ((out, q_width if proj == "o" else d), "weight")
        spec[f"{prefix}{proj}.bias"] = ((out,), "bias")
    return spec


def _ffn_params(prefix: str, d: int, f: int) -> ParamSpec:
    return {f"{prefix}w1.weight": ((f, d), "weight"), f"{prefix}w1.bias": ((f,), "bias"),
            f"{prefix}w2.weight": ((d, f), "weight"), f"{prefix}w2.bias": ((d,), "bias")}


def _norm_params(prefix: str, d: int) -> ParamSpec:
    return {f"{prefix}weight": ((d,), "norm_weight"), f"{prefix}bias": ((d,), "norm_bias")}


# -- seeded inputs ---------------------------------------------------------------------------

def lengths(gen: torch.Generator, batch: int, length: int) -> torch.Tensor:
    """Random valid lengths in [1, length]: row 0 full, at least one row padded."""
    lens = torch.randint(1, length + 1, (batch,), generator=gen)
    lens[0] = length
    if batch > 1 and bool((lens == length).all()):
        lens[-1] = max(1, length - 2)
    return lens


def right_pad(gen: torch.Generator, batch: int, length: int) -> torch.Tensor:  # (B, L), True = real, padding at the end
    return torch.arange(length)[None, :] < lengths(gen, batch, length)[:, None]


def left_pad(gen: torch.Generator, batch: int, length: int) -> torch.Tensor:  # padding at the start of each row
    return right_pad(gen, batch, length).flip(-1)


def arbitrary_pad(gen: torch.Generator, batch: int, length: int) -> torch.Tensor:
    """(B, L) bool: each row's real tokens at random places (holes anywhere), as many as
    ``lengths`` draws (row 0 full, at least one row padded)."""
    lens = lengths(gen, batch, length)
    order = torch.rand(batch, length, generator=gen).argsort(-1)      # a random permutation per row
    return order < lens[:, None]


def pad_pattern(kind: str, gen: torch.Generator, batch: int, length: int) -> torch.Tensor:
    """(B, L) key padding of pattern ``kind`` (``Config.padding``): right (exactly
    ``right_pad``'s draws), left, arbitrary, or per_row: row b takes right, left, arbitrary
    in turn (row 0 is full in every pattern), so a mask rebuilt from lengths, or from one
    row's pattern, cannot pass."""
    if kind == "right":
        return right_pad(gen, batch, length)
    if kind == "left":
        return left_pad(gen, batch, length)
    holes = arbitrary_pad(gen, batch, length)
    if kind == "arbitrary":
        return holes
    right = right_pad(gen, batch, length)
    return torch.stack([(right[b], right[b].flip(-1), holes[b])[b % 3] for b in range(batch)])


def scaled(inputs: dict[str, Any], names: tuple[str, ...], factor: float) -> dict[str, Any]:
    """``inputs`` with the float tensors ``names`` (query is key: shared) times ``factor`` (``Config.scale``)."""
    done: dict[int, torch.Tensor] = {}
    out = dict(inputs)
    for name in names:
        t = inputs.get(name)
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            out[name] = done.setdefault(id(t), t * factor)
    return out


def causal(length: int) -> torch.Tensor:  # (L, L) bool, True = may attend (key position <= query position)
    return torch.ones(length, length, dtype=torch.bool).tril()


def activations(gen: torch.Generator, *shape: int, std: float = 1.0) -> torch.Tensor:
    return std * torch.randn(shape, generator=gen, dtype=torch.float64)
