"""A user's variant file with many attention variants: the registered ones, again and again
under new ids, until the attention family holds ``HARNESS_MANY`` variants (default 45).
It measures how ``check`` scales with the number of variants (the aim: 45 attention
variants within 60 s on an idle 2-core machine):

    python -m harness check --family attention --variants benchmarks/many_variants.py

Each copy is the same class, map and traits as the variant it copies (a new id, its
``source`` kept), so it lands in that variant's equivalence class: the check compares
every variant with its spec and the family reference, and the pairs come from the classes,
so the time grows linearly with the number of variants, not with the number of pairs.
"""

from __future__ import annotations

import dataclasses
import os

from harness import register
from harness.registry import variants_of

WANTED = int(os.environ.get("HARNESS_MANY", "45"))

originals = [v for v in variants_of("attention") if not v.reference]
copy = 0
while len(variants_of("attention")) < WANTED:
    base = originals[copy % len(originals)]
    fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(base) if f.name not in ("origin", "reference")}
    register(**{**fields, "id": f"copy{copy}_{base.id}", "summary": f"a copy of {base.id} (scaling run)"})
    copy += 1
