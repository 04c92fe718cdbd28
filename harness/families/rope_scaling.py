"""RoPE scaling types as pure functions: a Hugging Face config's rope parameters (its
``rope_parameters`` dict, or the older ``rope_scaling`` with ``rope_theta`` beside it) read
into one frozen ``RopeScaling``, and from it, with the base (``rope_theta``), the rotary
width and the call's positions, the inverse frequencies and the attention factor (the
factor cos and sin are multiplied by: YaRN's mscale, LongRoPE's).

- ``default``: inv_freq_i = base^(-2i / r) for i < r / 2 (r the rotary width);
- ``linear``: the default divided by ``factor`` (positions interpolated);
- ``dynamic`` (NTK): the base raised to base * (factor * L / M - (factor - 1))^(r / (r - 2))
  where L = max(the call's largest position + 1, M) and M = ``max_positions`` (HF's
  ``max_position_embeddings``): the default up to M;
- ``yarn``: per frequency a ramp between the interpolated (/ factor) and the extrapolated
  (default) one over the dims whose rotations at ``original_max_positions`` fall between
  ``beta_slow`` and ``beta_fast``; the attention factor 0.1 ln(factor) + 1, or
  mscale(factor, mscale) / mscale(factor, mscale_all_dim), or the declared one;
- ``llama3``: wavelengths above original / low_freq_factor divided by ``factor``, below
  original / high_freq_factor kept, smoothly between;
- ``longrope``: the default divided per frequency by ``long_factor`` when the call reaches
  past ``original_max_positions``, else ``short_factor``; attention factor
  sqrt(1 + ln(factor) / ln(original)).

What transformers' ``ROPE_INIT_FUNCTIONS`` compute (tests/test_rope_scaling.py holds them
to it to 1e-12 in float64), as functions of declared numbers rather than of a config
object: ``harness.families.rope.rope`` applies them (the ``rope_scaling`` trait of the
attention family), and a port reads ``ModelConfig.rope_scaling``.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any, Mapping

import torch

from harness.base.errors import ConfigError
from harness.families import reach


class RopeType(enum.Enum):
    DEFAULT = "default"
    LINEAR = "linear"
    DYNAMIC = "dynamic"
    YARN = "yarn"
    LLAMA3 = "llama3"
    LONGROPE = "longrope"


ROPE_TYPES = tuple(t.value for t in RopeType)


@dataclass(frozen=True)
class RopeScaling:
    """One RoPE scaling: its type and the numbers it reads (None where the type reads none).
    ``max_positions``: the model's ``max_position_embeddings`` (dynamic NTK's threshold, and
    YaRN's / LongRoPE's factor when none is given); ``original_max_positions``: the
    pretraining length YaRN, llama3 and LongRoPE scale from."""

    type: RopeType = RopeType.DEFAULT
    factor: float | None = None
    max_positions: int | None = None
    original_max_positions: int | None = None
    low_freq_factor: float | None = None
    high_freq_factor: float | None = None
    beta_fast: float | None = None
    beta_slow: float | None = None
    truncate: bool = True
    attention_factor: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None
    short_factor: tuple[float, ...] | None = None
    long_factor: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.type, RopeType):
            try:
                object.__setattr__(self, "type", RopeType(self.type))
            except ValueError:
                raise ConfigError(f"RoPE type {self.type!r}: the harness computes {list(ROPE_TYPES)}") from None
        for name in ("short_factor", "long_factor"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, tuple(float(v) for v in value))
        needs = {RopeType.LINEAR: ("factor",), RopeType.DYNAMIC: ("factor", "max_positions"),
                 RopeType.YARN: ("original_max_positions",),
                 RopeType.LLAMA3: ("factor", "low_freq_factor", "high_freq_factor", "original_max_positions"),
                 RopeType.LONGROPE: ("short_factor", "long_factor", "original_max_positions")}.get(self.type, ())
        missing = [n for n in needs if getattr(self, n) is None]
        if missing:
            raise ConfigError(f"RoPE type '{self.type.value}' needs {', '.join(missing)}")
        if self.type is RopeType.YARN and self.factor is None and self.max_positions is None:
            raise ConfigError("RoPE type 'yarn' needs factor (or max_positions to derive it)")
        if self.type is RopeType.LLAMA3 and self.high_freq_factor == self.low_freq_factor:
            raise ConfigError("RoPE type 'llama3' needs high_freq_factor != low_freq_factor")

    @property
    def is_default(self) -> bool:
        return self.type is RopeType.DEFAULT

    def describe(self) -> str:
        if self.is_default:
            return "default"
        shown = {k: v for k, v in self.__dict__.items() if k != "type" and v is not None
                 and not (k == "truncate" and v) and not isinstance(v, tuple)}
        return f"{self.type.value}(" + ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                                                  for k, v in shown.items()) + ")"

    # -- the numbers ------------------------------------------------------------------------------
    def _factor(self) -> float:
        if self.factor is not None:
            return float(self.factor)
        return self.max_positions / self.original_max_positions   # YaRN / LongRoPE without a factor

    def attention(self) -> float:
        """The factor cos and sin are multiplied by (1 but for YaRN and LongRoPE)."""
        if self.type not in (RopeType.YARN, RopeType.LONGROPE):
            return 1.0
        if self.attention_factor is not None:
            return float(self.attention_factor)
        factor = self._factor()
        if self.type is RopeType.LONGROPE:
            if factor <= 1.0:
                return 1.0
            return math.sqrt(1 + math.log(factor) / math.log(self.original_max_positions))
        if self.mscale and self.mscale_all_dim:
            return float(_mscale(factor, self.mscale) / _mscale(factor, self.mscale_all_dim))
        return _mscale(factor)

    def inv_freq(self, base: float, dim: int, seq_len: int | None = None,
                 dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """(dim / 2,) inverse frequencies for a rotary width ``dim``; ``seq_len`` the call's
        largest position + 1 (dynamic NTK and LongRoPE read it)."""
        exponent = torch.arange(0, dim, 2, dtype=torch.int64).to(dtype) / dim
        kind = self.type
        if kind is RopeType.DYNAMIC:
            m = int(self.max_positions)
            length = max(int(seq_len or m), m)
            base = base * ((self.factor * length / m) - (self.factor - 1)) ** (dim / (dim - 2))
        inv = 1.0 / (base ** exponent)
        if kind is RopeType.LINEAR:
            return inv / self.factor
        if kind is RopeType.YARN:
            return self._yarn(inv, base, dim, dtype)
        if kind is RopeType.LLAMA3:
            return self._llama3(inv)
        if kind is RopeType.LONGROPE:
            long = seq_len is not None and seq_len > self.original_max_positions
            ext = torch.tensor(self.long_factor if long else self.short_factor, dtype=dtype)
            if ext.numel() != inv.numel():
                raise ConfigError(f"longrope: {ext.numel()} factors for {inv.numel()} frequencies (rotary width "
                                  f"{dim})")
            return inv / ext
        return inv

    def acts_from(self) -> int | None:
        """The call length (largest position + 1) beyond which the scaling acts, for a type that
        acts only there (dynamic NTK: ``max_positions``; LongRoPE's long factors:
        ``original_max_positions``); None for one that acts at every position."""
        if self.type is RopeType.DYNAMIC:
            return int(self.max_positions)
        if self.type is RopeType.LONGROPE:
            return int(self.original_max_positions)
        return None

    def reached(self, base: float, dim: int, positions: torch.Tensor) -> reach.Reach:
        """Whether a call at ``positions`` reaches the scaling: past ``acts_from`` where it acts
        only there, else where its angles or its attention factor differ from the default's by
        more than the float64 tolerance (a llama3 scaling whose scaled band holds none of the
        rotary width's frequencies is not reached)."""
        seq_len = int(positions.max()) + 1 if positions.numel() else 0
        threshold = self.acts_from()
        if threshold is not None:
            return reach.Reach("rope_scaling", seq_len > threshold, seq_len, threshold + 1,
                               f"no case has a position beyond {{amount}}; {self.describe()} acts only from "
                               f"a length of {{needed}}")
        inv = self.inv_freq(base, dim, seq_len or None)
        default = DEFAULT.inv_freq(base, dim)
        turned = max(seq_len - 1, 0) * float((inv - default).abs().max()) if inv.numel() else 0.0
        acts = reach.bends(1.0, self.attention()) or turned > reach.FLOAT64_ATOL
        return reach.Reach("rope_scaling", acts, seq_len, math.inf,
                           f"{self.describe()} turns no case's rotation off the default's (largest length "
                           "{amount})")

    def _yarn(self, inv: torch.Tensor, base: float, dim: int, dtype: torch.dtype) -> torch.Tensor:
        factor = self._factor()
        fast, slow = self.beta_fast or 32, self.beta_slow or 1
        original = self.original_max_positions

        def correction(rotations: float) -> float:
            return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))

        low, high = correction(fast), correction(slow)
        if self.truncate:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        if low == high:
            high += 0.001                                              # HF's guard against a zero ramp
        ramp = ((torch.arange(dim // 2, dtype=dtype) - low) / (high - low)).clamp(0, 1)
        extrapolation = 1 - ramp
        return (inv / factor) * (1 - extrapolation) + inv * extrapolation

    def _llama3(self, inv: torch.Tensor) -> torch.Tensor:
        factor, low, high = self.factor, self.low_freq_factor, self.high_freq_factor
        old = self.original_max_positions
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > old / low, inv / factor, inv)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < old / high) & ~(wavelen > old / low)
        return torch.where(medium, smoothed, scaled)


def _mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


DEFAULT = RopeScaling()

_KEYS = {"factor": "factor", "low_freq_factor": "low_freq_factor", "high_freq_factor": "high_freq_factor",
         "beta_fast": "beta_fast", "beta_slow": "beta_slow", "attention_factor": "attention_factor",
         "mscale": "mscale", "mscale_all_dim": "mscale_all_dim", "short_factor": "short_factor",
         "long_factor": "long_factor", "original_max_position_embeddings": "original_max_positions"}
# what HF reads besides the scaling's own numbers (rope_theta, partial_rotary_factor) or ignores
_OTHER_KEYS = {"rope_type", "type", "rope_theta", "partial_rotary_factor", "truncate"}


@dataclass(frozen=True)
class RopeSettings:
    """What a config says about its rotary embedding: the base, the rotating fraction of
    each head, and the scaling; ``theta_from`` names the field the base was read from."""

    theta: float
    fraction: float
    scaling: RopeScaling
    theta_from: str


def _get(hf: Any, name: str) -> Any:
    return hf.get(name) if isinstance(hf, Mapping) else getattr(hf, name, None)


def rope_settings(hf: Any, default_theta: float = 10000.0) -> RopeSettings:
    """A Hugging Face config's (its object, or ``config.json`` as a dict) RoPE: the
    ``rope_parameters`` dict (transformers 5) or the ``rope_scaling`` one (older files, with
    ``type`` or ``rope_type``), ``rope_theta`` inside it or beside it, Phi-3's
    ``original_max_position_embeddings`` beside it, GPT-NeoX's ``rotary_pct``. A dict nested by
    layer type (Gemma 3's sliding and full layers) is refused: ``rope_settings_by_layer``."""
    params = _get(hf, "rope_parameters") or _get(hf, "rope_scaling") or {}
    if not isinstance(params, Mapping):
        raise ConfigError(f"rope parameters {params!r} are not a mapping")
    if params and all(isinstance(v, Mapping) or v is None for v in params.values()):
        raise ConfigError("rope parameters nested by layer type: read them with rope_settings_by_layer")
    return _settings(params, hf, default_theta)


def rope_settings_by_layer(hf: Any, default_theta: float = 10000.0) -> dict[str, RopeSettings]:
    """{layer type: settings} of a config whose rope parameters are nested by layer type
    (Gemma 3: ``full_attention`` and ``sliding_attention``); {"": settings} otherwise."""
    params = _get(hf, "rope_parameters") or _get(hf, "rope_scaling") or {}
    if params and isinstance(params, Mapping) and all(isinstance(v, Mapping) or v is None for v in params.values()):
        return {k: _settings(v or {}, hf, default_theta) for k, v in params.items()}
    return {"": rope_settings(hf, default_theta)}


def _settings(params: Mapping, hf: Any, default_theta: float) -> RopeSettings:
    kind = params.get("rope_type", params.get("type", "default")) or "default"
    theta_from = "rope_parameters.rope_theta" if params.get("rope_theta") is not None else "rope_theta"
    theta = params.get("rope_theta") if params.get("rope_theta") is not None else _get(hf, "rope_theta")
    if theta is None:
        theta, theta_from = default_theta, "the default"
    fraction = params.get("partial_rotary_factor") or _get(hf, "partial_rotary_factor") or \
        _get(hf, "rotary_pct") or 1.0
    unknown = sorted(set(params) - set(_KEYS) - _OTHER_KEYS)
    if kind != "default" and unknown:
        raise ConfigError(f"RoPE type '{kind}': unknown parameter(s) {unknown}")
    fields = {ours: params[theirs] for theirs, ours in _KEYS.items() if params.get(theirs) is not None}
    if kind in ("llama3", "yarn", "longrope"):
        # Phi-3 keeps the pretraining length beside the rope parameters, and it wins (as in HF)
        original = _get(hf, "original_max_position_embeddings")
        fields["original_max_positions"] = int(original if original is not None else fields.get(
            "original_max_positions", _get(hf, "max_position_embeddings")))
    if kind == "default":
        fields = {}
    else:
        fields["max_positions"] = _get(hf, "max_position_embeddings")
        fields["truncate"] = bool(params.get("truncate", True))
    return RopeSettings(float(theta), float(fraction), RopeScaling(RopeType(kind) if kind in ROPE_TYPES else kind,
                                                                   **fields), theta_from)


def frequencies(scaling: RopeScaling | None, base: float, dim: int, positions: torch.Tensor,
                dtype: torch.dtype) -> tuple[torch.Tensor, float]:
    """(inv_freq (dim / 2,), attention factor) for a call at ``positions``: the one place
    the oracles' RoPE (``harness.families.rope.rope``) reads a scaling."""
    scaling = scaling or DEFAULT
    if reach.active() and not scaling.is_default:
        reach.note(scaling.reached(base, dim, positions))
    seq_len = int(positions.max()) + 1 if positions.numel() else None
    return scaling.inv_freq(base, dim, seq_len, dtype), scaling.attention()
