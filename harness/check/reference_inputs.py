"""The inputs a reference is judged on (``harness.check.reference.judge``): where they come from
(``InputSource``: given tensors, or a function that draws them, such as KernelBench's
``get_inputs``, with the module-level sizes it reads) and the regimes a careful reviewer would
try beyond them (``Regime``, ``regimes``): other seeds, signed and scaled draws, other sizes,
inputs shifted by a large mean, batch 1, non-contiguous inputs, views into one buffer, calls
with other inputs in between, the other train/eval mode, a call without autograd. Nothing here
runs the reference or the candidate."""

from __future__ import annotations

import contextlib
import enum
import inspect
import types
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch

from harness.base.boundary import user_code
from harness.base.errors import InputError
from harness.base.seeding import seed_everything
from harness.check.reference_layouts import Layout

SCALES = (1e-3, 10.0, 100.0)  # x100: logits where a softmax without its max subtracted overflows float32
OFFSETS = (100.0, 1000.0)     # x + 100: a one-pass variance E[x^2] - E[x]^2 cancels in float32 (error 2.3e-3
#                               against LayerNorm's 8.8e-6 at features=16); x + 1000: float32 keeps x's spread
#                               to 6e-5 there, a half dtype does not (its ulp at 1000: 0.5, bfloat16 4)
GROWTH = (4, 2)               # "sizes x4", else "sizes x2": capacities fixed at 2-4x the given sizes (a rotary
#                               table of 16 positions for 7, a router with room for 32 of 10 tokens)
GROWN_BUDGET = 2**21          # elements of a grown draw's inputs and reference parameters together (16 MiB in
#                               float64): a larger problem is grown x2, or not at all, said in ``skipped``
SEEDS = (1, 2)
MAX_SIZE_REGIMES = 6  # one odd-size regime per module constant, at most this many
BATCH_NAMES = ("batch", "batch_size", "bs", "b", "n_batch", "batchsize", "num_batches")


class RegimeKind(str, enum.Enum):
    """What a regime changes, against the given draw."""

    GIVEN = "given"
    SEED = "seed"
    SIGNED = "signed"
    WEIGHTS = "weights"
    SCALE = "scale"
    OFFSET = "offset"
    SIZE = "size"
    BATCH1 = "batch 1"
    STRIDED = "non-contiguous"
    VIEWS = "views"
    BETWEEN = "calls between"
    MODE = "mode"
    NO_GRAD = "no grad"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Regime:
    """One way of calling both sides. ``name`` is what a verdict says it saw ("scale x100",
    "size dim=33"); ``changes``: module constants (or factory arguments) set for the draw;
    ``slice_batch``: the inputs cut to their first row (no batch constant to set);
    ``offset``: added to every floating input after its scale (x + 100: the same spread around
    a large mean); ``layout``: the inputs' memory layout (``Layout``);
    ``growth``: every size times this factor (drawn only within ``GROWN_BUDGET``);
    ``between``: three calls on one instance (the inputs, other inputs, the first tensors
    rewritten in place); ``flip_mode``: the other of train/eval; ``redraw_weights``: every
    parameter of the reference moved off its initial value (a norm's gain of ones, a bias of
    zeros hide a candidate that leaves them out); ``grad``: inputs and
    parameters require grad and every gradient is judged."""

    name: str
    kind: RegimeKind
    seed: int = 0
    changes: tuple[tuple[str, int], ...] = ()
    scale: float = 1.0
    offset: float = 0.0
    signed: bool = False
    slice_batch: bool = False
    layout: Layout = Layout.GIVEN
    growth: int = 1
    between: bool = False
    flip_mode: bool = False
    redraw_weights: bool = False
    grad: bool = True
    fallback: Regime | None = None  # tried where the reference cannot take this one (an odd width, H does not divide)
    moved: frozenset[str] = frozenset()  # an offset regime's tensors the offset moves (``judge`` finds them)

    @property
    def loose(self) -> bool:
        """Outside the regime the precision rule was calibrated on (unit-scale inputs): a lower
        dtype is judged there as the half dtypes are (``harness.check.verdict.outside_calibration``)."""
        return self.scale != 1.0

    def loose_for(self, tensor: str) -> bool:
        """``loose``, or a tensor an offset moves: x + 100 is a test of cancellation where the
        reference is shift invariant (a LayerNorm, a softmax: the tensor stays where it was);
        where the offset moves the tensor (a linear, attention's logits of 1e4), its rounding is
        amplified as a scale's is, not a mistake."""
        return self.loose or tensor in self.moved

    def __str__(self) -> str:
        return self.name


GIVEN = Regime("given", RegimeKind.GIVEN)


@dataclass
class Case:
    """A regime's draw: the constructor's arguments and the call's inputs (as drawn, before any
    cast), and for ``between`` the other inputs of the second call and the values the first
    call's tensors are rewritten with before the third."""

    init: tuple
    inputs: Sequence | Mapping
    others: tuple = ()


def _call_factory(fn: Callable, kwargs: Mapping[str, int], what: str) -> Any:
    with user_code(what):
        return fn(**kwargs)


def _int_constant(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 1


def _read_names(fn: Callable, seen: set[int] | None = None) -> set[str]:
    """The global names ``fn`` reads, with those of the module's own functions it calls."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return set()
    seen = seen if seen is not None else set()
    if id(code) in seen:
        return set()
    seen.add(id(code))
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):  # a comprehension or nested function
            names |= set(const.co_names)
    g = getattr(fn, "__globals__", {})
    for name in list(names):
        other = g.get(name)
        if isinstance(other, types.FunctionType) and other.__globals__ is g:
            names |= _read_names(other, seen)
    return names


@dataclass
class InputSource:
    """Where the inputs come from: ``inputs`` (a list or tuple of call arguments, a dict of
    keyword arguments, or a function returning either: KernelBench's ``get_inputs``) and
    ``init_inputs`` (the constructor's arguments, or a function returning them:
    ``get_init_inputs``). The sizes that can vary are the integer module constants the
    functions read (``batch_size = 16``) and their integer keyword defaults."""

    inputs: Any
    init_inputs: Any = ()
    _globals: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.inputs is None:
            raise InputError("judge needs inputs: a list of tensors, or a function that draws them (get_inputs)")
        fns = [f for f in (self.inputs, self.init_inputs) if callable(f)]
        self._globals = getattr(fns[0], "__globals__", {}) if fns else {}

    def _functions(self) -> list[Callable]:
        return [f for f in (self.inputs, self.init_inputs) if callable(f)]

    def sizes(self) -> dict[str, int]:
        """{name: value} of every size that can vary: module constants first, then arguments."""
        out: dict[str, int] = {}
        for fn in self._functions():
            g = getattr(fn, "__globals__", {})
            for name in sorted(_read_names(fn)):
                if _int_constant(g.get(name)):
                    out.setdefault(name, g[name])
            with contextlib.suppress(TypeError, ValueError):
                for p in inspect.signature(fn).parameters.values():
                    if _int_constant(p.default):
                        out.setdefault(p.name, p.default)
        return out

    def batch_name(self) -> str | None:
        return next((n for n in self.sizes() if n.lower() in BATCH_NAMES), None)

    @contextlib.contextmanager
    def _changed(self, changes: Mapping[str, int]) -> Iterator[dict[str, int]]:
        """Module constants set for the block (put back after it); what is left are arguments."""
        saved, kwargs = {}, {}
        for name, value in changes.items():
            g = next((getattr(f, "__globals__", {}) for f in self._functions()
                      if name in getattr(f, "__globals__", {})), None)
            if g is not None and name in _read_names_all(self._functions()):
                saved[name] = (g, g[name])
                g[name] = value
            else:
                kwargs[name] = value
        try:
            yield kwargs
        finally:
            for name, (g, value) in saved.items():
                g[name] = value

    def draw(self, seed: int, changes: Mapping[str, int] = types.MappingProxyType({})) -> tuple[tuple, Any]:
        """(constructor arguments, call inputs) drawn under ``seed`` with ``changes`` applied."""
        with self._changed(changes) as kwargs:
            init = self._evaluate(self.init_inputs, kwargs, "get_init_inputs")
            seed_everything(seed)
            if callable(self.inputs):
                inputs = self._evaluate(self.inputs, kwargs, "get_inputs")
            else:
                inputs = self.inputs if seed == 0 else redraw(self.inputs, seed)
        return tuple(init) if isinstance(init, (list, tuple)) else (init,), inputs

    def draw_unseeded(self) -> Any:
        """Call inputs drawn from the global RNG as it stands (no seed set): what a probe that
        seeds the RNG itself draws (given tensors: drawn again as they look)."""
        if callable(self.inputs):
            return self._evaluate(self.inputs, {}, "get_inputs")
        return redraw(self.inputs, int(torch.randint(0, 2**31 - 1, ()).item()))

    @staticmethod
    def _evaluate(source: Any, kwargs: Mapping[str, int], what: str) -> Any:
        if not callable(source):
            return source
        own = {k: v for k, v in kwargs.items() if k in _parameters(source)}
        return _call_factory(source, own, what)

    def case(self, regime: Regime) -> Case:
        """The draw of ``regime``: its seed and sizes, then its signs, scale and batch."""
        init, inputs = self.draw(regime.seed, dict(regime.changes))
        inputs = _transform(inputs, regime)
        others: tuple = ()
        if regime.between:
            others = (_transform(self.draw(regime.seed + 100, dict(regime.changes))[1], regime),
                      _transform(self.draw(regime.seed + 200, dict(regime.changes))[1], regime))
        return Case(init, inputs, others)


def _read_names_all(fns: list[Callable]) -> set[str]:
    out: set[str] = set()
    for f in fns:
        out |= _read_names(f)
    return out


def _parameters(fn: Callable) -> set[str]:
    try:
        return set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return set()


def tensors_of(inputs: Any) -> list[torch.Tensor]:
    values = inputs.values() if isinstance(inputs, Mapping) else inputs
    return [v for v in values if isinstance(v, torch.Tensor)]


def map_tensors(inputs: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """``inputs`` (a sequence or a mapping) with ``fn`` applied to each tensor; one tensor given
    under two names (query is key) stays one."""
    memo: dict[int, torch.Tensor] = {}

    def one(v: Any) -> Any:
        if not isinstance(v, torch.Tensor):
            return v
        if id(v) not in memo:
            memo[id(v)] = fn(v)
        return memo[id(v)]

    if isinstance(inputs, Mapping):
        return {k: one(v) for k, v in inputs.items()}
    if not isinstance(inputs, (list, tuple)):
        raise InputError(f"get_inputs returned {type(inputs).__name__}; return a list of the call's arguments")
    return [one(v) for v in inputs]


def redraw(inputs: Any, seed: int) -> Any:
    """Given tensors drawn again under ``seed``, each as it looks: uniform in [0, 1) where it lies
    there, normal otherwise, integers in their range; bool tensors (masks) kept."""
    gen = torch.Generator().manual_seed(seed)

    def one(x: torch.Tensor) -> torch.Tensor:
        if x.is_floating_point() and x.numel():
            if float(x.min()) >= 0 and float(x.max()) <= 1:
                return torch.rand(x.shape, generator=gen, dtype=torch.float64).to(x.dtype)
            return torch.randn(x.shape, generator=gen, dtype=torch.float64).to(x.dtype)
        if x.dtype != torch.bool and not x.is_complex() and x.numel():
            lo, hi = int(x.min()), int(x.max()) + 1
            return torch.randint(lo, hi, x.shape, generator=gen, dtype=x.dtype)
        return x.clone()

    return map_tensors(inputs, one)


def _transform(inputs: Any, regime: Regime) -> Any:
    """Signs, scale and batch of a regime, on the drawn inputs (floating tensors only)."""
    gen = torch.Generator().manual_seed(1000 + regime.seed)
    first = next((t for t in tensors_of(inputs) if t.dim()), None)
    batch = first.shape[0] if first is not None else None

    def one(x: torch.Tensor) -> torch.Tensor:
        if regime.slice_batch and x.dim() and x.shape[0] == batch:
            x = x[:1].clone()
        if not x.is_floating_point():
            return x
        if regime.signed:
            x = torch.randn(x.shape, generator=gen, dtype=torch.float64).to(x.dtype)
        x = x * regime.scale if regime.scale != 1.0 else x
        return x + regime.offset if regime.offset else x

    return map_tensors(inputs, one)


def _scale(s: float) -> str:
    return f"{s:.0e}".replace("e-0", "e-") if s < 1 else f"{s:g}"


def _grown(sizes: Mapping[str, int]) -> Regime:
    """Every size times ``GROWTH[0]`` ("sizes x4"), its fallback every size times ``GROWTH[1]``
    ("sizes x2": ``judge`` tries it where sizes x4 is over ``GROWN_BUDGET`` or the reference
    cannot take it)."""
    def times(factor: int, fallback: Regime | None = None) -> Regime:
        return replace(GIVEN, name=f"sizes x{factor}", kind=RegimeKind.SIZE, growth=factor, fallback=fallback,
                       changes=tuple((n, v * factor) for n, v in sizes.items()))

    return times(GROWTH[0], times(GROWTH[1]))


def over_budget(footprint: Sequence[tuple[int, int]], growth: int) -> str:
    """Why a grown draw is not made: ``footprint``, (elements, dims) of the given inputs and the
    reference's parameters and buffers, every dim times ``growth`` (a bound on what the draw
    would hold, counted before it is drawn), over ``GROWN_BUDGET`` elements; "" within it."""
    n = sum(numel * growth ** dims for numel, dims in footprint)
    if n <= GROWN_BUDGET:
        return ""
    return (f"the inputs and the reference's parameters, every dim x{growth}, would hold up to {n:,} "
            f"elements, over the budget of {GROWN_BUDGET:,}")


def odd(n: int) -> int:
    """A smaller odd size: about half of ``n``."""
    m = max(1, n // 2)
    return m if m % 2 else m + 1


def regimes(source: InputSource, *, modes: bool = True, half: bool = False) -> tuple[list[Regime],
                                                                                     list[tuple[str, str]]]:
    """Every regime for ``source``, in the order a failure is reported, and those not tried with
    the reason (no module constant to vary; ``half``: a half dtype is judged, where x + 1000
    keeps little of x)."""
    out = [GIVEN, *[replace(GIVEN, name=f"seed {s}", kind=RegimeKind.SEED, seed=s) for s in SEEDS],
           replace(GIVEN, name="signed", kind=RegimeKind.SIGNED, signed=True),
           replace(GIVEN, name="weights re-drawn", kind=RegimeKind.WEIGHTS, redraw_weights=True),
           *[replace(GIVEN, name=f"scale x{_scale(s)}", kind=RegimeKind.SCALE, scale=s, signed=True) for s in SCALES]]
    skipped: list[tuple[str, str]] = []
    for o in OFFSETS:
        if half and o > OFFSETS[0]:
            skipped.append((f"offset +{o:g}", "a half dtype is judged: its ulp at 1000 (0.5 in float16, 4 in "
                                              "bfloat16) keeps little of the inputs' spread"))
        else:
            out.append(replace(GIVEN, name=f"offset +{o:g}", kind=RegimeKind.OFFSET, offset=o))
    sizes = source.sizes()
    if sizes:
        out.append(replace(GIVEN, name="sizes halved", kind=RegimeKind.SIZE,
                           changes=tuple((n, max(1, v // 2)) for n, v in sizes.items())))
        out.append(replace(GIVEN, name="sizes grown", kind=RegimeKind.SIZE,  # a buffer sized for the given ones
                           changes=tuple((n, v + max(1, v // 2)) for n, v in sizes.items())))
        for name, value in list(sizes.items())[:MAX_SIZE_REGIMES]:
            less = max(1, value // 2)
            even = replace(GIVEN, name=f"size {name}={less}", kind=RegimeKind.SIZE, changes=((name, less),))
            out.append(replace(even, name=f"size {name}={odd(value)}", changes=((name, odd(value)),),
                               fallback=even if less != odd(value) else None))
        out.append(_grown(sizes))
    else:
        skipped.append(("sizes", "no module constant or argument sets a size"))
    batch = source.batch_name()
    out.append(replace(GIVEN, name="batch 1", kind=RegimeKind.BATCH1, changes=((batch, 1),) if batch else (),
                       slice_batch=batch is None))
    out += [replace(GIVEN, name="non-contiguous", kind=RegimeKind.STRIDED, layout=Layout.STRIDED),
            replace(GIVEN, name="views into one buffer", kind=RegimeKind.VIEWS, layout=Layout.VIEWS),
            replace(GIVEN, name="calls between", kind=RegimeKind.BETWEEN, between=True, grad=False)]
    if modes:
        out.append(replace(GIVEN, name="other mode", kind=RegimeKind.MODE, flip_mode=True))
    out.append(replace(GIVEN, name="no grad", kind=RegimeKind.NO_GRAD, grad=False))
    return out, skipped
