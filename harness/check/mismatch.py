"""One tensor-comparison core: a tensor against a reference under (rtol, atol), as one
``Mismatch`` result with one message, in the format ``torch.testing.assert_close`` uses.

Every comparison in the harness that measures "how far, where, and how many outside the
bound" goes through ``mismatch``: the pair verdicts (``check.tensors``), the float64 and
lower-dtype spec gaps (``check.precision``), the patched runs of ``trace.attribution``,
the pair gaps of ``trace.differences`` and, through ``compare_tensors``, the map search.
What each caller decides from the result (its verdict, its thresholds) stays with it.

NaN: elements NaN in both are skipped; elements NaN in one and not the other are counted in
``nan_mismatch`` and left out of the differences. Infinities: equal infinities count as
close with ``equal_inf=True`` (``torch.isclose``, as ``assert_close``); with ``equal_inf=False``
the bound is the plain ``|a - e| <= atol + rtol * |e|``, which an infinity never meets."""

from __future__ import annotations

import math
from functools import cached_property

import torch


class Mismatch:
    """``actual`` against ``expected`` under ``|a - e| <= atol + rtol * |e|``.

    The greatest absolute difference and the NaN count are measured at once; the rest (how
    many elements mismatch, the relative difference, where) when first asked for, so a caller
    that needs only ``max_abs`` (a noise floor) pays only for that."""

    def __init__(self, shape: tuple[int, ...], expected_shape: tuple[int, ...], rtol: float, atol: float, *,
                 equal_inf: bool = True, nan_mismatch: int = 0, both: torch.Tensor | None = None,
                 a: torch.Tensor | None = None, e: torch.Tensor | None = None, diff: torch.Tensor | None = None,
                 nan_differs: torch.Tensor | None = None, fixed: dict | None = None):
        self.shape, self.expected_shape, self.rtol, self.atol = shape, expected_shape, rtol, atol
        self.equal_inf, self.nan_mismatch = equal_inf, nan_mismatch
        self._elements = (both, a, e, diff, nan_differs)
        self.total = int(diff.numel()) if diff is not None else 0
        self.max_abs = float(diff.max()) if diff is not None and diff.numel() else 0.0
        for k, v in (fixed or {}).items():  # shape mismatches and exact (non-float) compares
            setattr(self, k, v)

    def _element(self, i: int) -> torch.Tensor:
        """The ``i``-th of (both, a, e, diff, nan_differs): only a comparison of float tensors of
        one shape has them."""
        t = self._elements[i]
        if t is None:
            raise ValueError(f"Mismatch has no elements (a comparison of shapes {self.shape} vs "
                             f"{self.expected_shape}, or exact)")
        return t

    @property
    def _both(self) -> torch.Tensor:
        return self._element(0)

    @property
    def _a(self) -> torch.Tensor:
        return self._element(1)

    @property
    def _e(self) -> torch.Tensor:
        return self._element(2)

    @property
    def _diff(self) -> torch.Tensor:
        return self._element(3)

    @property
    def _nan_differs(self) -> torch.Tensor:
        return self._element(4)

    @cached_property
    def _scale(self) -> torch.Tensor:
        return self._e.abs()

    @cached_property
    def _rel(self) -> torch.Tensor:
        return self._diff / self._scale.clamp_min(torch.finfo(torch.float64).tiny)

    @cached_property
    def _close(self) -> torch.Tensor:
        """Per element where neither is NaN (flat): within the bound."""
        if self.equal_inf:
            common = torch.promote_types(self._a.dtype, self._e.dtype)
            return torch.isclose(self._a.to(common), self._e.to(common), rtol=self.rtol, atol=self.atol)
        return self._diff <= self.atol + self.rtol * self._scale

    @cached_property
    def mismatched(self) -> int:
        """Elements outside the bound (NaN pattern apart)."""
        if not self.total:
            return 0
        return int((~self._close).sum())

    @cached_property
    def mask(self) -> torch.Tensor:
        """Per element of the full tensor: True where it mismatches, a NaN in one and not
        the other included (for callers that count mismatches by region, such as the rows of
        a trace). Only for a comparison of float tensors of one shape."""
        self._needs_elements("mask")
        bad = self._nan_differs.clone()
        bad[self._both] = ~self._close
        return bad

    @cached_property
    def worst_index(self) -> tuple[int, ...]:
        """Where the greatest difference is, a NaN in one and not the other counting as an
        infinite one and a pair of equal infinities or NaNs as none; the first element when
        nothing differs, () for an empty tensor."""
        self._needs_elements("worst_index")
        if not self._both.numel():
            return ()
        score = torch.zeros(self._both.shape, dtype=self._diff.dtype, device=self._diff.device)
        score[self._both] = torch.nan_to_num(self._diff, nan=0.0)
        score[self._nan_differs] = math.inf
        flat = int(score.flatten().argmax())
        return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), self._both.shape))

    def _needs_elements(self, what: str) -> None:
        if self._elements[0] is None:
            raise ValueError(f"Mismatch.{what} needs a comparison of float tensors of one shape "
                             f"(this one is of shapes {self.shape} vs {self.expected_shape}, or exact)")

    @cached_property
    def max_expected(self) -> float:
        """Greatest ``|e|`` where neither is NaN (the scale of the reference), 0.0 when none."""
        return float(self._scale.max()) if self.total else 0.0

    @cached_property
    def max_rel(self) -> float:
        """Greatest ``|a - e| / |e|`` (``|e|`` clamped at float64's tiny), 0.0 when none."""
        return float(self._rel.max()) if self.total else 0.0

    @cached_property
    def excess(self) -> float:
        """Greatest ``|a - e| - rtol * |e|``: the smallest atol that passes (0.0 when none)."""
        return float((self._diff - self.rtol * self._scale).max()) if self.total else 0.0

    @cached_property
    def max_abs_index(self) -> tuple[int, ...] | None:
        return _at(self._both, self._diff) if self.total else None

    @cached_property
    def max_rel_index(self) -> tuple[int, ...] | None:
        return _at(self._both, self._rel) if self.total else None

    @property
    def same_shape(self) -> bool:
        return self.shape == self.expected_shape

    @property
    def ok(self) -> bool:
        """Same shape, same NaN pattern, every element within the bound."""
        return self.same_shape and self.nan_mismatch == 0 and self.mismatched == 0

    @property
    def share(self) -> float:
        return self.mismatched / self.total if self.total else 0.0

    @property
    def message(self) -> str:
        """One line, ``assert_close``'s wording: how many, how far, where, what was allowed."""
        if not self.same_shape:
            return f"shapes {self.shape} vs {self.expected_shape}"
        parts = [f"Mismatched elements: {self.mismatched} / {self.total} ({self.share:.1%})"]
        if self.nan_mismatch:
            parts.append(f"NaN in one and not the other: {self.nan_mismatch} element(s)")
        if self.total:
            parts.append(f"greatest absolute difference: {self.max_abs:.6g} at index {self.max_abs_index} "
                         f"(up to {self.atol:.6g} allowed)")
            parts.append(f"greatest relative difference: {self.max_rel:.6g} at index {self.max_rel_index} "
                         f"(up to {self.rtol:.6g} allowed)")
        return "; ".join(parts)

    def __repr__(self) -> str:
        return f"Mismatch({self.message})"


def _at(both: torch.Tensor, values: torch.Tensor) -> tuple[int, ...] | None:
    """The index in the full tensor of the largest of ``values`` (taken over ``both``)."""
    if not values.numel():
        return None
    flat = int(both.reshape(-1).nonzero()[int(values.argmax())])
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), both.shape)) if both.dim() else ()


def mismatch(actual: torch.Tensor, expected: torch.Tensor, *, rtol: float = 0.0, atol: float = 0.0,
             equal_inf: bool = True) -> Mismatch:
    """``actual`` against ``expected`` (same device; no dtype cast: the differences are taken
    in the dtype the two promote to, as each caller did before)."""
    shape, eshape = tuple(actual.shape), tuple(expected.shape)
    if shape != eshape:
        n = max(actual.numel(), expected.numel())
        return Mismatch(shape, eshape, rtol, atol, fixed=dict(
            total=n, mismatched=n, max_abs=math.inf, max_rel=math.inf, excess=math.inf,
            max_abs_index=None, max_rel_index=None))
    if not (actual.is_floating_point() or actual.is_complex()) and not expected.is_floating_point():
        bad = (actual != expected).reshape(-1)
        n = int(bad.sum())
        where = (tuple(int(i) for i in torch.unravel_index(bad.to(torch.uint8).argmax(), actual.shape))
                 if n else None)
        big = math.inf if n else 0.0
        return Mismatch(shape, eshape, rtol, atol, fixed=dict(
            total=actual.numel(), mismatched=n, max_abs=big, max_rel=big, excess=big,
            max_abs_index=where, max_rel_index=where))
    nan_a, nan_e = actual.isnan(), expected.isnan()
    both = ~nan_a & ~nan_e
    a, e = actual[both], expected[both]
    nan_differs = nan_a != nan_e
    return Mismatch(shape, eshape, rtol, atol, equal_inf=equal_inf, nan_mismatch=int(nan_differs.sum()),
                    both=both, a=a, e=e, diff=(a - e).abs(), nan_differs=nan_differs)
