"""A checkpoint on disk, read lazily and strictly through a parameter map.

``open_checkpoint(path)`` takes a Hugging Face model folder (``config.json`` and
``model.safetensors``, or shards with ``model.safetensors.index.json``, or
``pytorch_model.bin``), a single ``.safetensors`` file, or a ``state_dict`` saved with
``torch.save`` (``.pt``/``.pth``/``.bin``). Nothing is read until a tensor is asked for:
safetensors files are memory mapped (``safetensors.safe_open``) and a ``torch.save`` file is
opened with ``torch.load(mmap=True)``, so names, shapes and dtypes come from the headers
and a tensor is copied out only when it is ported.

``CheckpointReader(checkpoint, param_map, shapes)`` holds a checkpoint to a map whose
module paths are the checkpoint's tensor names (the map of the class the checkpoint
belongs to): every tensor the map reads must be there with a shape the canonical one
comes out of, and every tensor there must be read by exactly one entry. A missing, extra
or misshaped tensor is a ``CheckpointError`` of one line naming it. ``groups()`` then reads
the canonical tensors one layer at a time.

``check_memory`` refuses, before anything is loaded, a comparison whose estimate exceeds
the memory this machine has available (``available_memory``).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Iterator, Mapping

import torch

from harness.base.errors import InputError
from harness.porting.entries import Absent, MapEntry, Tied
from harness.porting.portmap import coverage_counters, read_entry

CONFIG = "config.json"
INDEX = "model.safetensors.index.json"
SAFETENSORS_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
                      "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
                      "U8": torch.uint8, "BOOL": torch.bool}


class CheckpointError(InputError):
    """A checkpoint that cannot be read as asked: one line naming the file or the tensor."""


class Checkpoint:
    """The tensors of one checkpoint, by name; ``config`` is its ``config.json`` (or None)."""

    def __init__(self, path: Path, config: dict | None, files: Mapping[str, Path] | None = None):
        """``files``: tensor name -> the file holding it (a sharded folder's index); files
        without an index are added with ``add_file``."""
        self.path = path
        self.config = config
        self._files = dict(files or {})
        self._open: dict[Path, Any] = {}
        self._meta: dict[str, tuple[tuple[int, ...], torch.dtype]] = {}
        for file in dict.fromkeys(self._files.values()):
            self._read_header(file)

    def add_file(self, file: Path) -> "Checkpoint":
        """Every tensor of ``file``; a name already held from another file is refused."""
        handle = self._handle(file)
        names = list(handle) if isinstance(handle, Mapping) else list(handle.keys())
        twice = sorted(set(self._meta) & set(names))
        if twice:
            raise CheckpointError(f"{self.path}: tensor '{twice[0]}' is in two files "
                                  f"({self._files[twice[0]].name} and {file.name})")
        for name in names:
            self._files[name] = file
        self._read_header(file)
        return self

    # -- reading ------------------------------------------------------------------------------
    def _handle(self, file: Path):
        if file not in self._open:
            if file.suffix == ".safetensors":
                try:
                    from safetensors import safe_open
                except ImportError:
                    raise CheckpointError(f"{file}: reading .safetensors needs the safetensors package "
                                          "(pip install -e '.[hf]')") from None
                try:
                    self._open[file] = safe_open(str(file), framework="pt")
                except Exception as exc:  # the library's own message, one line
                    raise CheckpointError(f"{file}: not a readable safetensors file: {_one_line(exc)}") from None
            else:
                try:
                    state = torch.load(file, map_location="cpu", mmap=True, weights_only=True)
                except Exception as exc:
                    raise CheckpointError(f"{file}: not a readable torch.save file: {_one_line(exc)}") from None
                state = state.get("state_dict", state) if isinstance(state, dict) else state
                if not isinstance(state, Mapping) or not all(isinstance(v, torch.Tensor) for v in state.values()):
                    raise CheckpointError(f"{file}: holds a {type(state).__name__}, not a state_dict "
                                          "(a mapping of names to tensors)")
                self._open[file] = state
        return self._open[file]

    def _read_header(self, file: Path) -> None:
        handle = self._handle(file)
        if isinstance(handle, Mapping):
            names = [n for n, f in self._files.items() if f == file] or list(handle)
            for name in names:
                if name not in handle:
                    raise CheckpointError(f"{file}: its index names tensor '{name}', which the file does not hold")
                self._meta[name] = (tuple(handle[name].shape), handle[name].dtype)
                self._files[name] = file
            return
        for name in handle.keys():
            if name in self._files and self._files[name] != file:
                continue
            piece = handle.get_slice(name)
            dtype = SAFETENSORS_DTYPES.get(piece.get_dtype())
            if dtype is None:
                raise CheckpointError(f"{file}: tensor '{name}' has dtype {piece.get_dtype()}, which the "
                                      f"harness does not read")
            self._meta[name] = (tuple(piece.get_shape()), dtype)
            self._files[name] = file
        missing = [n for n, f in self._files.items() if f == file and n not in self._meta]
        if missing:
            raise CheckpointError(f"{file}: its index names tensor '{missing[0]}', which the file does not hold")

    @property
    def names(self) -> list[str]:
        return list(self._meta)

    def shape(self, name: str) -> tuple[int, ...]:
        return self._meta[name][0]

    def dtype(self, name: str) -> torch.dtype:
        return self._meta[name][1]

    def tensor(self, name: str) -> torch.Tensor:
        """The tensor, copied out of the memory-mapped file."""
        handle = self._handle(self._files[name])
        if isinstance(handle, Mapping):
            return handle[name].clone()
        return handle.get_tensor(name)

    def numel(self) -> int:
        n = 0
        for shape, _ in self._meta.values():
            k = 1
            for s in shape:
                k *= s
            n += k
        return n

    def nbytes(self) -> int:
        total = 0
        for shape, dtype in self._meta.values():
            k = dtype.itemsize
            for s in shape:
                k *= s
            total += k
        return total

    def describe(self) -> str:
        return f"{self.path} ({len(self._meta)} tensors, {self.numel():,} numbers)"


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def open_checkpoint(path: str | Path) -> Checkpoint:
    """A folder (HF layout) or one file; refuses, in one line, what it cannot read."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint '{path}' does not exist")
    if path.is_file():
        if path.suffix not in (".safetensors", ".pt", ".pth", ".bin"):
            raise CheckpointError(f"checkpoint '{path}' is neither a folder nor a .safetensors, .pt, .pth or "
                                  ".bin file")
        return Checkpoint(path, None).add_file(path)
    config = None
    if (path / CONFIG).is_file():
        try:
            config = json.loads((path / CONFIG).read_text())
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"{path / CONFIG}: not readable JSON: {_one_line(exc)}") from None
    if (path / INDEX).is_file():
        try:
            weight_map = json.loads((path / INDEX).read_text())["weight_map"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CheckpointError(f"{path / INDEX}: no weight_map: {_one_line(exc)}") from None
        files = {name: path / file for name, file in weight_map.items()}
        for file in set(files.values()):
            if not file.is_file():
                raise CheckpointError(f"{path / INDEX} names shard '{file.name}', which the folder does not hold")
        return Checkpoint(path, config, files)
    found = sorted(path.glob("*.safetensors")) or sorted(path.glob("pytorch_model*.bin")) or \
        sorted(p for p in path.iterdir() if p.suffix in (".pt", ".pth"))
    if not found:
        raise CheckpointError(f"checkpoint folder '{path}' holds no .safetensors, pytorch_model.bin or .pt file")
    ckpt = Checkpoint(path, config)
    for file in found:
        ckpt.add_file(file)
    return ckpt



# -- memory -------------------------------------------------------------------------------------

def available_memory() -> int:
    """Bytes this machine can give now: MemAvailable from /proc/meminfo, else the free pages."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0


def check_memory(what: str, need: int, how: str) -> None:
    """Refuse, in one line, ``need`` bytes that this machine does not have available."""
    have = available_memory()
    if have and need > have:
        raise CheckpointError(f"{what} needs about {need / 2**30:.3g} GiB ({how}); this machine has "
                              f"{have / 2**30:.3g} GiB available: refused before loading anything")


# -- strict reading through a map ----------------------------------------------------------------

def _layer_of(name: str) -> str:
    """The group a canonical name is read in: its layer (``layers.3``, ``blocks.0``), else ''."""
    m = re.match(r"^((?:layers|blocks|encoder|decoder)\.\d+)\.", name)
    return m.group(1) if m else ""


class CheckpointReader:
    """A checkpoint held to ``param_map`` (canonical name -> entry over the checkpoint's
    tensor names) and the canonical ``shapes``; validated on creation, reading nothing."""

    def __init__(self, checkpoint: Checkpoint, param_map: Mapping[str, MapEntry],
                 shapes: Mapping[str, tuple[int, ...]], what: str):
        self.checkpoint = checkpoint
        self.entries = dict(param_map)
        self.shapes = {n: tuple(s) for n, s in shapes.items()}
        self.what = what
        self._validate()

    def _fail(self, message: str) -> CheckpointError:
        return CheckpointError(f"checkpoint {self.checkpoint.path} ({self.what}): {message}")

    def _validate(self) -> None:
        ckpt = self.checkpoint
        meta = {n: torch.empty(ckpt.shape(n), dtype=ckpt.dtype(n), device="meta") for n in ckpt.names}
        for canonical, entry in self.entries.items():
            for region in entry.regions():
                if region.path not in meta:
                    raise self._fail(f"missing tensor '{region.path}' (canonical '{canonical}')")
        coverage = coverage_counters(meta, self.entries.values())
        for canonical, entry in self.entries.items():
            for region in entry.regions():
                path = region.path
                try:
                    region.view(coverage[path]).add_(1)
                except Exception as exc:
                    raise self._fail(f"tensor '{path}' of shape {ckpt.shape(path)} cannot be split as canonical "
                                     f"'{canonical}' reads it ({exc})") from None
            if isinstance(entry, (Absent, Tied)):
                continue
            try:
                shape = tuple(read_entry(entry, meta.get).shape)
            except Exception as exc:
                raise self._fail(f"canonical '{canonical}' cannot be read from its tensors ({_one_line(exc)})") \
                    from None
            want = self.shapes.get(canonical)
            if want is not None and shape != want:
                paths = ", ".join(f"'{r.path}' {ckpt.shape(r.path)}" for r in entry.regions())
                raise self._fail(f"tensor {paths} gives canonical '{canonical}' the shape {shape}; "
                                 f"the model's is {want}")
        for name, count in coverage.items():
            if (count == 0).all():
                raise self._fail(f"extra tensor '{name}' {ckpt.shape(name)}: no canonical parameter of the "
                                 "model reads it")
            if (count == 0).any():
                raise self._fail(f"tensor '{name}' {ckpt.shape(name)} is read only in part")
            if (count > 1).any():
                raise self._fail(f"tensor '{name}' is read by more than one canonical parameter")

    def held(self, canonical: str) -> bool:
        """Whether the checkpoint holds a tensor for ``canonical`` (not an ``Absent`` value
        and not saved once for a tied pair)."""
        return not isinstance(self.entries[canonical], (Absent, Tied))

    def read(self, names, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        """Canonical tensors (``Absent`` ones as their value, ``Tied`` ones as what they are tied
        to), in ``dtype``; the checkpoint's tensors are read once each."""
        cache: dict[str, torch.Tensor] = {}

        def lookup(path: str) -> torch.Tensor:
            if path not in cache:
                cache[path] = self.checkpoint.tensor(path)
            return cache[path]

        out = {}
        for name in names:
            entry = self.entries[name]
            while isinstance(entry, Tied):
                entry = self.entries[entry.to]
            if isinstance(entry, Absent):
                out[name] = entry.value(self.shapes[name], dtype)
            else:
                out[name] = read_entry(entry, lookup).to(dtype).contiguous()
        return out

    def groups(self) -> list[list[str]]:
        """The canonical names in loading groups: each layer, and the rest (a tied name goes
        with the name it is tied to)."""
        order: dict[str, list[str]] = {}
        for name, entry in self.entries.items():
            key = _layer_of(entry.to if isinstance(entry, Tied) else name)
            order.setdefault(key, []).append(name)
        return list(order.values())

    def read_groups(self, dtype: torch.dtype) -> Iterator[dict[str, torch.Tensor]]:
        for names in self.groups():
            yield self.read(names, dtype)

    def read_all(self, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        return self.read(list(self.entries), dtype)
