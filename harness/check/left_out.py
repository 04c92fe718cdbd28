"""Learnable parameters a variant leaves out: a norm's gain or bias that the family's traits
imply but the variant's map reads as a constant (``Absent(1.0)``, ``Zero()``).

Such a parameter must be declared (``traits['not_learned']``, a tuple of canonical names), or
be implied absent by the traits themselves: the bias of an RMS norm (``norm_formula='rms'``
has none), a final norm of a model that declares ``final_norm=False``. An undeclared one is
*not* filled for the oracle: the oracle keeps the canonical value, drawn away from its init
(gains ~ 1 + N(0, 0.1^2), biases ~ N(0, 0.1^2)), so a post-LN layer written with
``F.layer_norm(x, shape)`` and no gain or bias differs from its spec, and the note names
the parameters (before, the oracle silently held them at their init and it matched)."""

from __future__ import annotations

from typing import Any, Mapping

from harness.base.config import Config
from harness.porting.entries import Absent

NOT_LEARNED = "not_learned"
NORM_KINDS = ("norm_weight", "norm_bias")
FINAL_NORMS = ("norm", "encoder.norm", "decoder.norm")  # the model families' final norms


def implied_absent(traits: Mapping[str, Any], name: str, kind: str) -> bool:
    """Whether the traits themselves say the canonical parameter ``name`` is not learned."""
    if name in tuple(traits.get(NOT_LEARNED, ())):
        return True
    if kind not in NORM_KINDS:  # biases of bias-free Linear layers, a learned PE left out: not norms
        return True
    if kind == "norm_bias" and traits.get("norm_formula") == "rms":
        return True
    return name.rsplit(".", 1)[0] in FINAL_NORMS and traits.get("final_norm") is False


def undeclared_absent(family, traits: Mapping[str, Any], entries: Mapping[str, object], cfg: Config) -> list[str]:
    """The canonical norm parameters the map reads as a constant without the traits saying so."""
    kinds = {name: kind for name, (_, kind) in family.params_for(cfg, traits).items()}
    return [name for name, entry in entries.items()
            if isinstance(entry, Absent) and not implied_absent(traits, name, kinds.get(name, ""))]


def left_out_note(names: list[str]) -> str:
    shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    return (f"learnable parameter(s) left out: {shown} (Absent in the map) while the traits imply them; "
            f"declare traits['{NOT_LEARNED}'] if the design has none (the oracle keeps their canonical values)")
