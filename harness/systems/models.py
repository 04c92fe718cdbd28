"""The seed systems whole: greedy decoding compared, the k/v cache against full
recomputation, one training step compared, losses and schedules, the copy task, and
the cache benchmark. Works on any model registered in the model families with
``register_decoding``; knows no variant by name.

Every comparison ports the same seeded canonical weights into each model (the Zero()
entries of the pair zeroed for both, as the pairwise check does) and decides with the
check's own verdict (``compare_tensors``: float32 against each model's float64 run).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from harness.base.config import Config
from harness.base.errors import UnknownName
from harness.base.verdicts import Verdict
from harness.check.runs import RunCache
from harness.check.spec import one_thread
from harness.families.catalog import get_family
from harness.families.models import DECODINGS, Decoding
from harness.porting.portmap import Fills
from harness.registry import Variant, build, variants_of

MODEL_FAMILIES = ("encoder_decoder", "decoder_only_model", "llama_model")
DECODE_CASE = {"encoder_decoder": "src_padded", "decoder_only_model": "full", "llama_model": "full"}
PROMPT = 1  # decoder-only greedy decoding starts from the case's first PROMPT tokens


def _model_family(name: str):
    if name not in MODEL_FAMILIES:
        raise UnknownName(f"'{name}' is not a model family; model families: {list(MODEL_FAMILIES)}")
    return get_family(name)


def expectation(family, a: Variant, b: Variant) -> tuple[Verdict, str]:
    """'equivalent' when the two declare the same semantic traits (the family's decode
    case reads them all), else 'different' with the differing traits as the reason."""
    sa, sb = family.semantic_traits(a.traits), family.semantic_traits(b.traits)
    differing = [f"{t}: {sa.get(t)} vs {sb.get(t)}" for t in family.traits if sa.get(t) != sb.get(t)]
    return (Verdict.DIFFERENT, "; ".join(differing)) if differing else (Verdict.EQUIVALENT, "")


def matches(verdict: Verdict | str, expected: Verdict | str) -> bool:
    return Verdict(verdict).agrees if expected == Verdict.EQUIVALENT else verdict == expected


def decodable(family: str, cfg: Config) -> list[tuple[Variant, Decoding]]:
    """The family's models that declare how they decode and can be built for ``cfg``."""
    _model_family(family)
    return [(v, DECODINGS[v.key]) for v in variants_of(family) if v.key in DECODINGS and not v.supports(cfg)]


_MEMO: dict[tuple, Any] = {}


def _memo(name: str, family: str, cfg: Config, compute: Callable[[], Any]) -> Any:
    """One result per (comparison, family, config, registered models and decodings): the
    CLI and the tests ask for the same comparison in one process; a changed registration
    (a scratch registry, a patched decoding) is a new key."""
    key = (name, family, cfg, tuple((v.key, id(v), id(DECODINGS.get(v.key))) for v in variants_of(family)))
    if key not in _MEMO:
        with one_thread():
            _MEMO[key] = compute()
    return _MEMO[key]


class Models:
    """Builds models with the family's canonical weights, the given names zeroed; caches."""

    def __init__(self, family: str, cfg: Config, transform: Callable[[dict], dict] | None = None):
        self.family = _model_family(family)
        self.transform = transform  # applied to the canonical weights (greedy decoding sharpens them)
        self.cfg = cfg
        self.checker = RunCache(cfg)
        self.inputs = self.family.inputs(DECODE_CASE[family], cfg)
        self._built: dict[tuple, Any] = {}

    def zero(self, *variants: Variant) -> Fills:
        out = Fills()
        for v in variants:
            out = out | self.checker.fills(v)
        return out

    def weights(self, zero: Fills, variant: Variant | None = None) -> dict[str, torch.Tensor]:
        """The canonical weights (those ``variant``'s traits bring among them), ``zero`` filled."""
        weights = self.checker.weights(self.family, zero, variant.traits if variant else None)
        return self.transform(weights) if self.transform else weights

    def get(self, variant: Variant, zero: Fills, dtype: torch.dtype = torch.float32):
        key = (variant.key, zero, dtype)
        if key not in self._built:
            self._built[key] = build(variant, self.cfg, dtype=dtype, weights=self.weights(zero, variant))[0]
        return self._built[key]
