"""A user's variant id the project's registry has taken since the user's file was written."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any, Mapping

from harness.base.errors import RegistryError


def namespaced(variant, registry: Mapping[str, Any]):
    """A user's variant whose id the project's registry has taken since the file was written:
    loaded under its file's name (``<file stem>_<id>``), said in one line; refused with the
    way out when that id is taken too."""
    stem = "".join(c if c.isalnum() or c in "_-" else "_" for c in Path(variant.origin).stem)
    renamed = dataclasses.replace(variant, id=f"{stem}_{variant.id}")
    project = registry[variant.key].origin
    if renamed.key in registry:
        raise RegistryError(f"variant '{variant.key}' is a project variant ({project}) and '{renamed.key}' is taken "
                            f"too: give yours another id in {variant.origin}")
    print(f"note: variant '{variant.key}' of {Path(variant.origin).name} is a project variant's id ({project}): "
          f"yours is loaded as '{renamed.key}' (give it another id in the file to choose)", file=sys.stderr)
    return renamed
