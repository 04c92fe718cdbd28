"""Every family the harness knows, listed here where it is looked up: the layer families
(the LLaMA-style block after them), the whole models (the LLaMA-style model after them),
the training pieces, attention kernels over projected heads (in this order: ``check`` and
the reports follow it).

The family modules only define families; nothing adds to ``FAMILIES`` from outside."""

from __future__ import annotations

from harness.base.errors import UnknownName
from harness.families.base import Family
from harness.families.kernel import ATTENTION_KERNEL
from harness.families.layers import LAYER_FAMILIES
from harness.families.llama import LLAMA_BLOCK, LLAMA_MODEL
from harness.families.models import MODEL_FAMILIES
from harness.families.training import TRAINING_FAMILIES

FAMILIES: dict[str, Family] = {f.name: f for f in (*LAYER_FAMILIES, LLAMA_BLOCK, *MODEL_FAMILIES, LLAMA_MODEL,
                                                    *TRAINING_FAMILIES, ATTENTION_KERNEL)}


def get_family(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        raise UnknownName(f"unknown family '{name}'; families: {sorted(FAMILIES)}") from None
