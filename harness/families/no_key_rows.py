"""What a query row without keys becomes, declared per cause and per dtype.

A dead-row trait (``fully_masked_row``, ``fully_masked_grad``, ``mask_style``,
``mask_method``) takes one value (the same for every row without keys, in every dtype), or:

- ``ByCause(mask=..., window=..., causal=..., other=...)``: the value by what emptied the
  row. A row's cause is the first of ``causal``, ``window``, ``mask`` that, applied in that
  order, leaves it no key: ``causal`` the causal diagonal alone (a bottom-right diagonal with
  more queries than keys), ``window`` the window on its diagonal (a window beyond the last
  key), ``mask`` the call's mask (padding, an arbitrary mask) where the diagonal and window
  leave keys. A kernel that applies its causal mask and window by the range of keys it visits
  (zeros where it visits none) and the mask by a -inf fill (NaN) declares
  ``ByCause(mask="NaN", window="zeros", causal="zeros")``.
- ``ByDtype(float64=..., float32=..., bfloat16=..., float16=..., other=...)``: the value by the
  dtype the variant runs in. Hugging Face's eager attention adds the mask its model builds,
  ``finfo(dtype).min``, and takes the softmax in float32: float64's minimum is -inf there (NaN
  forward, NaN into dQ and dK), float32's a finite bias (the mean of V):
  ``ByDtype(float64="NaN", other="mean of V")`` with ``mask_style: "additive"``.

Either may hold the other (``ByCause(mask=ByDtype(...), window="zeros")``). Every cause the
family's cases can produce (``Family.no_key_causes``) and every dtype must have a value (named,
or ``other``); every combination must be a declaration the family accepts on its own. Both
are checked at ``register``: what fails is one line.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable, Mapping

from harness.base.errors import SpecError

CAUSES = ("causal", "window", "mask")          # the order a row's cause is read in
DTYPES = ("float64", "float32", "bfloat16", "float16")
NO_KEY_TRAITS = ("fully_masked_row", "fully_masked_grad", "mask_style", "mask_method")


@dataclass(frozen=True, kw_only=True, repr=False)
class _Varying:
    other: Any = None

    def value(self, key: str) -> Any:
        named = getattr(self, key)
        return self.other if named is None else named

    def named(self) -> dict[str, Any]:
        """The values given, ``other`` last."""
        names = [f.name for f in fields(self) if f.name != "other"] + ["other"]
        return {n: getattr(self, n) for n in names if getattr(self, n) is not None}

    def __repr__(self) -> str:  # the declaration as written: map prints it, tables and JSON show it
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.named().items())})"

    __str__ = __repr__


@dataclass(frozen=True, kw_only=True, repr=False)
class ByCause(_Varying):
    """A dead-row trait's value by what emptied the row (see the module docstring)."""

    mask: Any = None
    window: Any = None
    causal: Any = None


@dataclass(frozen=True, kw_only=True, repr=False)
class ByDtype(_Varying):
    """A dead-row trait's value by the dtype the variant runs in."""

    float64: Any = None
    float32: Any = None
    bfloat16: Any = None
    float16: Any = None


def varies(traits: Mapping[str, Any]) -> bool:
    return any(isinstance(v, _Varying) for v in traits.values())


def at_dtype(value: Any, dtype: str) -> Any:
    """``value`` with every ``ByDtype`` resolved to ``dtype``'s value (a ``ByCause`` kept, its
    values resolved)."""
    if isinstance(value, ByDtype):
        return at_dtype(value.value(dtype), dtype)
    if isinstance(value, ByCause):
        return ByCause(**{k: at_dtype(v, dtype) for k, v in value.named().items()})
    return value


def traits_at_dtype(traits: Mapping[str, Any], dtype: Any) -> dict[str, Any]:
    """``traits`` as the oracle reads them for a run in ``dtype`` (a name or a torch dtype)."""
    name = str(dtype).replace("torch.", "")
    return {k: at_dtype(v, name) for k, v in traits.items()} if varies(traits) else dict(traits)


def at_cause(value: Any, cause: str) -> Any:
    return at_cause(value.value(cause), cause) if isinstance(value, ByCause) else value


def traits_at_cause(traits: Mapping[str, Any], cause: str) -> dict[str, Any]:
    return {k: at_cause(v, cause) for k, v in traits.items()}


def named_dtypes(traits: Mapping[str, Any]) -> tuple[str, ...]:
    """The dtypes some ``ByDtype`` of ``traits`` names (float64 first), or float64 alone."""
    named = {"float64"}
    stack = [v for v in traits.values() if isinstance(v, _Varying)]
    while stack:
        v = stack.pop()
        if isinstance(v, ByDtype):
            named |= set(DTYPES) if v.other is not None else set(v.named())
        stack += [x for x in v.named().values() if isinstance(x, _Varying)]
    return tuple(d for d in DTYPES if d in named)


def _shape_problem(name: str, value: Any, causes: tuple[str, ...], family: str,
                   inside: type | None = None) -> str | None:
    """What is wrong with one typed value's shape: a kind inside itself, a cause the family's
    cases cannot produce, a cause or dtype left without a value."""
    if not isinstance(value, _Varying):
        return None
    kind = type(value)
    if inside is kind:
        return f"trait {name}: a {kind.__name__} inside a {kind.__name__}; nest ByCause and ByDtype the other way"
    if kind is ByCause:
        foreign = [c for c in value.named() if c != "other" and c not in causes]
        if foreign:
            return (f"trait {name}: {value!r} names {', '.join(foreign)}: the {family} family's cases take "
                    f"keys from a row only by {', '.join(causes)}")
        keys = causes
    else:
        keys = DTYPES
    missing = [k for k in keys if value.value(k) is None]
    if missing:
        return f"trait {name}: {value!r} gives no value for {', '.join(missing)}: name it or give other="
    for inner in value.named().values():
        why = _shape_problem(name, inner, causes, family, kind)
        if why:
            return why
    return None


def problems(traits: Mapping[str, Any], family: Any, plain: Callable[[Mapping[str, Any]], list[str]]) -> list[str]:
    """What is wrong with ``traits`` where some dead-row trait is typed: each shape, then each
    (cause, dtype) combination read as a plain declaration by ``plain`` (the family's own
    validation) and, in a family of attention modules, as a mask style and row the oracle
    builds (``kernel_dead_rows``). The first problem only: one line. ``family``: a
    ``harness.families.base.Family``."""
    causes = family.no_key_causes
    for name, value in traits.items():
        if isinstance(value, _Varying) and name not in NO_KEY_TRAITS:
            return [f"trait {name}={value!r}: only the traits of rows without keys ({', '.join(NO_KEY_TRAITS)}) "
                    "take ByCause or ByDtype"]
        why = _shape_problem(name, value, causes, family.name)
        if why:
            return [why]
    for dtype in DTYPES:
        for cause in causes:
            resolved = traits_at_cause(traits_at_dtype(traits, dtype), cause)
            got = plain(resolved)
            if not got and "mask_style" in family.traits:
                semantic = family.semantic_traits(resolved)
                try:
                    kernel_dead_rows(semantic.get("fully_masked_row", "NaN"), semantic.get("mask_style", "fill"))
                except SpecError as exc:
                    got = [str(exc)]
            if got:
                return [f"rows lost to the {cause} in {dtype}: {got[0]}"]
    return []


# -- the attention modules' dead rows -----------------------------------------------------------

FULLY_MASKED_ROWS = ("NaN", "mean of V", "zeros")
MASK_STYLES = ("fill", "additive")
# How the module-level mask style and fully-masked-row value read in the kernel oracle's terms.
# An additive mask gives the mean of V (a finite bias: the uniform softmax's gradient reaches
# Q and K), NaN (a bias that reaches the softmax as -inf: a -inf mask, or float64's finfo.min
# in a softmax taken in float32; NaN reaches Q and K), or zeros where the kernel repairs such
# rows (SDPA given a 0 / -inf float attn_mask: zeros, no gradient to Q and K).
_KERNEL_DEAD_ROWS = {
    ("fill", "NaN"): ("bool_fill_-inf", "NaN", "none"),
    ("fill", "mean of V"): ("bool_fill_finfo_min", "mean of V", "none"),
    ("fill", "zeros"): ("bool_fill_-inf", "zeros", "none"),
    ("additive", "mean of V"): ("additive_finfo_min", "mean of V", "softmax"),
    ("additive", "NaN"): ("additive_bias", "NaN", "NaN"),
    ("additive", "zeros"): ("additive_bias", "zeros", "none"),
}


def kernel_dead_rows(fully_masked_row: Any, mask_style: Any) -> tuple[Any, Any, Any]:
    """(mask_method, fully_masked_row, fully_masked_grad) in the kernel oracle's terms: a
    ``ByCause`` of each where either trait is one (its causes without a value are causes the
    family's cases do not produce)."""
    per = {}
    for cause in CAUSES:
        style, row = at_cause(mask_style, cause), at_cause(fully_masked_row, cause)
        if style is None or row is None:
            continue
        if style not in MASK_STYLES:
            raise SpecError(f"no oracle for mask_style={style!r}; known: {list(MASK_STYLES)}")
        if (style, row) not in _KERNEL_DEAD_ROWS:
            raise SpecError(f"no oracle for fully_masked_row={row!r}; known: {list(FULLY_MASKED_ROWS)}")
        per[cause] = _KERNEL_DEAD_ROWS[(style, row)]
    if len(set(per.values())) == 1:
        return next(iter(per.values()))
    return tuple(ByCause(**{c: v[i] for c, v in per.items()}) for i in range(3))  # type: ignore[return-value]
