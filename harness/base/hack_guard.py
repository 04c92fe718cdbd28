"""One call of a candidate, watched: ``guarded_call(fn, args, kwargs)`` returns its outputs and
the hacks the call showed (``harness.base.hacks.HackFinding``):

- an input modified in place (its values against a clone taken before; its version counter),
  or the result written into an input (an output sharing an input's storage);
- an output that is not a plain ``torch.Tensor`` (a subclass, a lazy wrapper, an object with
  ``__torch_function__``): its values could be made up when read;
- an output buffer never written: during the call, fresh memory holds a poison pattern
  (``poisoned_allocations``: all bits set, a NaN in every floating dtype that no arithmetic
  produces), so ``torch.empty`` hands it out instead of a stale result; an output holding the
  pattern was never written;
- work left on a background thread (a thread of the user's code still alive after the return,
  or an output that changes in a short wait after it);
- on CUDA, work left on another stream (an output read after ``torch.cuda.synchronize()``
  differs from the one read after the current stream's synchronisation only). On the CPU the
  stream check is skipped.

The reference's memory must not be reusable either: keep its outputs alive (the caller holds
them) while the candidate runs, so no allocation of the candidate's can return them.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping, Sequence

import torch

from harness.base.errors import _theirs
from harness.base.hacks import HackFinding, HackKind

POISON_BYTE = 0xFF
POISON_BUDGET = 1 << 30  # bytes of poison per call at most (the largest sizes get one copy)
STALE_FRACTION = 0.5  # an output with at least this share of poisoned values was never written
WAIT_S = 0.02  # the wait after a return in which an output must not change
THREAD_JOIN_S = 1.0


def _leaves(value: Any, name: str) -> Iterator[tuple[str, Any]]:
    if isinstance(value, (list, tuple)) and not hasattr(value, "__torch_function__"):
        for i, v in enumerate(value):
            yield from _leaves(v, f"{name} {i}" if name else str(i))
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from _leaves(v, f"{name} {k!r}")
    else:
        yield name, value


def _named_inputs(args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[tuple[str, torch.Tensor]]:
    out = [(f"input {n}", t) for n, t in _leaves(list(args), "")]
    out += [(f"input {k!r}", t) for k, t in _leaves(dict(kwargs), "")]
    return [(n.replace("  ", " "), t) for n, t in out if isinstance(t, torch.Tensor)]


def _named_outputs(result: Any) -> list[tuple[str, Any]]:
    if isinstance(result, (list, tuple, Mapping)) and not hasattr(result, "__torch_function__"):
        return [(f"output {n}", v) for n, v in _leaves(result, "")]
    return [("its output", result)]


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes, as a flat uint8 tensor on the CPU (NaN compares by its bits)."""
    return t.detach().reshape(-1).contiguous().view(torch.uint8).to("cpu", copy=True)


def _storage(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return 0


def _version(t: torch.Tensor) -> int | None:
    try:
        return t._version
    except (RuntimeError, AttributeError):  # an inference tensor has none
        return None


def poison_freed(sizes: Iterable[int], device: torch.device | str = "cpu", copies: int = 3) -> None:
    """Fill memory of each size (bytes) with ``POISON_BYTE`` and free it, ``copies`` blocks a
    size (fewer past ``POISON_BUDGET``): an allocator hands a freed block of the size out again,
    so an output buffer allocated and never written is likelier to hold the poison than a
    result freed earlier. Best effort; ``poisoned_allocations`` is exact where it can be."""
    budget = POISON_BUDGET
    blocks: list[torch.Tensor] = []
    for n in sorted({int(s) for s in sizes if int(s) > 0}, reverse=True):
        for _ in range(copies):
            if n > budget and blocks:
                break
            blocks.append(torch.empty(n, dtype=torch.uint8, device=device).fill_(POISON_BYTE))
            budget -= n
    del blocks


_M_PERTURB = -6  # glibc's mallopt parameter


def _libc_mallopt() -> Any:
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):
        return None
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt


_MALLOPT = _libc_mallopt()


@contextlib.contextmanager
def poisoned_allocations(devices: Iterable[torch.device], sizes: Iterable[int]) -> Iterator[None]:
    """Inside, memory a fresh tensor gets holds the poison, not what was freed before:

    - CPU with glibc: ``mallopt(M_PERTURB)`` (``MALLOC_PERTURB_``): every ``malloc`` inside
      returns bytes set to ``POISON_BYTE`` (and every ``free`` clears what it frees), which is
      exact whatever the allocator's state; allocations cost a fill, so time nothing inside;
    - CPU otherwise: ``poison_freed`` of ``sizes``;
    - CUDA: the caching allocator's unused blocks are released (``torch.cuda.empty_cache``)
      and blocks of ``sizes`` poisoned and freed, so they are the blocks it hands out."""
    sizes = list(sizes)
    cpu = any(d.type == "cpu" for d in devices)
    perturb = cpu and _MALLOPT is not None and bool(_MALLOPT(_M_PERTURB, 0x100 | (~POISON_BYTE & 0xFF)))
    if cpu and not perturb:
        poison_freed(sizes, "cpu")
    for d in devices:
        if d.type == "cuda":
            torch.cuda.synchronize(d)
            torch.cuda.empty_cache()
            poison_freed(sizes, d)
    try:
        yield
    finally:
        if perturb:
            _MALLOPT(_M_PERTURB, int(os.environ.get("MALLOC_PERTURB_", "0") or 0) & 0xFF)


def _poisoned(t: torch.Tensor) -> float:
    """The share of ``t``'s floating values whose bits are all set (the poison)."""
    if not (t.is_floating_point() or t.is_complex()) or t.numel() == 0 or t.device.type == "meta":
        return 0.0
    b = _bits(t).view(-1, t.element_size())
    return float((b == POISON_BYTE).all(dim=1).float().mean())


@dataclass
class _Before:
    inputs: list[tuple[str, torch.Tensor, torch.Tensor, int | None]]  # name, tensor, bits, version
    threads: set[threading.Thread]


def _user_thread(t: threading.Thread) -> bool:
    fn = getattr(t, "_target", None) or type(t).run
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    return code is not None and not _theirs(code.co_filename)


def _type_findings(outputs: list[tuple[str, Any]]) -> list[HackFinding]:
    said = []
    for name, v in outputs:
        if isinstance(v, torch.Tensor) and type(v) not in (torch.Tensor, torch.nn.Parameter):
            said.append(f"the candidate returned a {type(v).__name__} as {name} (a torch.Tensor subclass, "
                        "not a plain tensor: its values can be made up when read)")
        elif not isinstance(v, torch.Tensor) and hasattr(type(v), "__torch_function__"):
            said.append(f"the candidate returned a {type(v).__name__} as {name} (not a tensor, though it "
                        "acts as one through __torch_function__: a lazy output)")
    return [HackFinding(HackKind.NOT_PLAIN_TENSOR, s) for s in said]


def _input_findings(before: _Before, outputs: list[tuple[str, torch.Tensor]], allow_views: bool) -> list[HackFinding]:
    found = []
    for name, t, bits, version in before.inputs:
        changed = not torch.equal(_bits(t), bits)
        written = changed or (version is not None and _version(t) not in (None, version))
        shared = [o for o, out in outputs if _storage(out) and _storage(out) == _storage(t)]
        if shared and (written or not allow_views):
            what = "wrote its result into" if written else "returned a view of"
            found.append(HackFinding(HackKind.OUTPUT_IN_INPUT, f"the candidate {what} {name} ({shared[0]} shares "
                                     "its storage)"))
        elif written:
            how = "changed its values" if changed else "wrote to it and put its values back"
            found.append(HackFinding(HackKind.INPUT_MODIFIED, f"the candidate modified {name} in place ({how})"))
    return found


def _stream_findings(outputs: list[tuple[str, torch.Tensor]]) -> tuple[list[HackFinding], list[torch.Tensor]]:
    """On CUDA: the outputs read after the current stream's synchronisation against those read
    after every stream's; the values to compare later (all streams done)."""
    cuda = {t.device for _, t in outputs if t.device.type == "cuda"}
    for d in cuda:
        torch.cuda.current_stream(d).synchronize()
    seen = [_bits(t) for _, t in outputs]
    if not cuda:
        return [], seen
    torch.cuda.synchronize()
    settled = [_bits(t) for _, t in outputs]
    moved = [n for (n, _), a, b in zip(outputs, seen, settled) if not torch.equal(a, b)]
    if moved:
        return [HackFinding(HackKind.SIDE_STREAM, f"the candidate left work on another CUDA stream ({moved[0]} "
                            "changed when every stream was synchronised, after its own stream was)")], settled
    return [], settled


def _thread_findings(before: _Before, outputs: list[tuple[str, torch.Tensor]], seen: list[torch.Tensor],
                     wait_s: float) -> list[HackFinding]:
    alive = [t for t in threading.enumerate() if t not in before.threads and t.is_alive() and _user_thread(t)]
    deadline = time.monotonic() + THREAD_JOIN_S
    for t in alive:
        t.join(max(0.0, deadline - time.monotonic()))
    if not alive:
        time.sleep(wait_s)
    if any(t.device.type == "cuda" for _, t in outputs):
        torch.cuda.synchronize()
    moved = [n for (n, t), a in zip(outputs, seen) if not torch.equal(_bits(t), a)]
    said = []
    if moved:
        said.append(f"{moved[0]} changed after the call returned")
    if alive:
        said.append(f"thread {alive[0].name!r} was still running after the call returned")
    if not said:
        return []
    return [HackFinding(HackKind.BACKGROUND_THREAD,
                        f"the candidate left work on a background thread ({'; '.join(said)})")]


def guarded_call(fn: Any, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None, *,
                 like: Iterable[torch.Tensor] = (), poison: bool = True, allow_views: bool = False,
                 wait_s: float = WAIT_S) -> tuple[Any, list[HackFinding]]:
    """``fn(*args, **kwargs)`` and the hacks it showed (see the module). ``like``: tensors whose
    sizes an output may have (the reference's outputs, kept alive by the caller): freed
    memory of those sizes and the inputs' is poisoned first (``poison=False``: not).
    ``allow_views``: an output may be a view of an input (where the reference's is one); the
    view is still a finding when the input was written to. What ``fn`` raises propagates."""
    kwargs = dict(kwargs or {})
    inputs = _named_inputs(args, kwargs)
    before = _Before([(n, t, _bits(t), _version(t)) for n, t in inputs], set(threading.enumerate()))
    devices = {t.device for _, t in inputs if t.device.type in ("cpu", "cuda")} or {torch.device("cpu")}
    sizes = [t.untyped_storage().nbytes() for _, t in inputs] + [t.nbytes for t in like]
    with poisoned_allocations(devices, sizes) if poison else contextlib.nullcontext():
        result = fn(*args, **kwargs)
    outputs = _named_outputs(result)
    tensors = [(n, v) for n, v in outputs if isinstance(v, torch.Tensor) and v.device.type != "meta"]
    found = _type_findings(outputs)
    streams, seen = _stream_findings(tensors)
    found += streams
    found += _thread_findings(before, tensors, seen, wait_s)
    found += _input_findings(before, tensors, allow_views)
    if poison:
        stale = [(n, share) for n, t in tensors if (share := _poisoned(t)) >= STALE_FRACTION]
        if stale:
            n, share = stale[0]
            found.append(HackFinding(HackKind.STALE_MEMORY, f"the candidate never wrote {n} ({share:.0%} of its "
                                     "values are the poison left in freed memory: an empty buffer returned)"))
    return result, found
