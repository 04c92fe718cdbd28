"""Inputs that reach each feature the checkpoint's config declares.

A checkpoint's own tokens can leave a feature idle: sequences no longer than the sliding
window, attention scores far below the soft cap, hidden states whose RMS hides the norm's
eps. A port that drops such a feature computes what the class computes there, and passes.
``stresses`` finds, for each declared feature, a setting that reaches it: the tokens as
given, longer sequences (the window), or the same weights scaled on both sides (q for the
attention cap, the head for the final cap, the embedding down for the eps): a correct
port computes what the class computes on any weights. A setting *reaches* a feature when
the class with the feature taken out of its config (``class_with``) differs from the class
by more than ``REACH`` times the comparison's bound; the first setting that does is kept,
and a feature no setting reaches is said.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

from harness.systems.checkpoint_class_fixes import class_with
from harness.systems.checkpoint_sides import Comparison, run, sample_tokens
from harness.systems.parity import token_kl

REACH = 10.0          # reached: the class without the feature differs by more than REACH x the bound
SCALES = (4.0, 16.0, 64.0)      # factors tried on q (the attention cap) and on the head (the final cap)
SHRINKS = (1e-2, 1e-4)          # factors tried on the embedding (the eps)
Transform = Callable[[dict], dict]


@dataclass
class Stress:
    feature: str                    # "sliding window (3, 0)"
    how: str                        # "the tokens as given", "sequences of 24 tokens", "q scaled x16"
    tokens: torch.Tensor
    transform: Transform | None     # on the canonical weights of both sides (None: as they are)
    reached: bool
    kl_removed: float               # the class's worst KL against itself without the feature

    def as_dict(self) -> dict:
        return {"feature": self.feature, "how": self.how, "reached": self.reached, "kl_removed": self.kl_removed,
                "shape": tuple(self.tokens.shape)}


def _scaled(names: Callable[[dict], list[str]], factor: float) -> Transform:
    def transform(w: dict) -> dict:
        return {**w, **{n: w[n] * factor for n in names(w)}}
    return transform


def _queries(w: dict) -> list[str]:
    """Each layer's q projection (weight and bias), or its q norm's gain where the layer
    normalises q (scaling the projection would be undone)."""
    out = []
    for name in w:
        if name.endswith("self_attn.q.weight"):
            norm = name.replace("q.weight", "q_norm.weight")
            out += [norm] if norm in w else [name, name.replace("weight", "bias")]
    return [n for n in out if n in w]


def _tied(c: Comparison) -> bool:
    return "head.weight" not in c.reader.entries or not c.reader.held("head.weight")


def _head(c: Comparison) -> Callable[[dict], list[str]]:
    """The head (and the embedding it is tied to: one tensor)."""
    names = ("embed.weight", "head.weight") if _tied(c) else ("head.weight",)
    return lambda w: [n for n in names if n in w]


def _embedding(c: Comparison) -> Callable[[dict], list[str]]:
    """The embedding (and the head tied to it: one tensor)."""
    names = ("embed.weight", "head.weight") if _tied(c) else ("embed.weight",)
    return lambda w: [n for n in names if n in w]


Setting = tuple[str, torch.Tensor, Optional[Transform]]


def _features(c: Comparison, tokens: torch.Tensor) -> list[tuple[str, dict, list[Setting]]]:
    """(feature, the config change that takes it out, the settings to try) of each declared one."""
    cfg = c.cfg
    plain: Setting = ("the tokens as given", tokens, None)
    by_weights = c.shapes is None and c.family == "llama_model"

    def scaled(what: str, names, factors) -> list[Setting]:
        return [plain] + ([(f"{what} scaled x{f:g}", tokens, _scaled(names, f)) for f in factors] if by_weights
                          else [])

    out: list[tuple[str, dict, list[Setting]]] = []
    if cfg.window is not None:
        settings: list[Setting] = [plain]
        limit = cfg.max_positions or 4 * (cfg.window[0] + 2)
        length = min(limit, max(2 * (cfg.window[0] + 2), tokens.shape[1]))
        if length > tokens.shape[1]:
            longer = sample_tokens(cfg, tokens.shape[0], length, seed=cfg.seed + 1)
            settings.append((f"sequences of {length} tokens", longer, None))
        inert = cfg.max_positions is not None and cfg.window[0] + 1 >= cfg.max_positions
        spans = f" (it spans all {cfg.max_positions} positions the class takes)" if inert else ""
        out.append((f"sliding window {cfg.window}{spans}", {"window": None}, settings))
    if cfg.softcap:
        out.append((f"attention softcap {cfg.softcap:g}", {"softcap": 0.0}, scaled("q", _queries, SCALES)))
    if cfg.final_softcap:
        out.append((f"final logit softcap {cfg.final_softcap:g}", {"final_softcap": 0.0},
                    scaled("head", _head(c), SCALES)))
    if c.family == "llama_model" and "embed.weight" in c.reader.entries:
        out.append((f"norm eps {cfg.norm_eps:g}", {"norm_eps": cfg.norm_eps * 10},
                    scaled("embedding", _embedding(c), SHRINKS)))
    return out


def stresses(c: Comparison, tokens: torch.Tensor, bound: float) -> list[Stress]:
    """For each declared feature, the first setting that reaches it (or the last tried, not
    reached)."""
    out = []
    for feature, changes, settings in _features(c, tokens):
        changed, side = class_with(c, changes)
        for k, (how, toks, transform) in enumerate(settings):
            kl = float(token_kl(run(c, c.reference, toks, transform), run(changed, side, toks, transform)).max())
            reached = kl > REACH * bound
            if reached or k == len(settings) - 1:
                out.append(Stress(feature, how, toks, transform, reached, kl))
                break
    return out
