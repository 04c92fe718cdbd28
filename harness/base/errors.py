"""Errors a user can cause. Each one names the thing that is wrong.

The CLI turns any ``HarnessError`` into one line on stderr and exit code 2; it never
shows a traceback for them. Anything else raised while a variant runs is that variant's
finding, and anything else raised while the check itself judges a spec (its oracle, its
baseline, the comparison) is that spec's error row, named as the harness's failure: in
both cases the run goes on. Outside those, an exception other than these is a bug in the
harness and propagates.
"""

from __future__ import annotations


class HarnessError(ValueError):
    """Base class of every user-facing error of the harness."""


class UnknownName(HarnessError):
    """An unknown family, variant, case, dtype or device was asked for."""


class ConfigError(HarnessError):
    """A configuration that cannot work (d_model not divisible by heads, ...)."""


class PortingError(HarnessError):
    """Weights that cannot move between two parameter layouts."""


class InputError(HarnessError):
    """Inputs that a family cannot take (mismatched shapes, NaN, wrong dtype)."""


class VariantFileError(HarnessError):
    """A user's variant file that cannot be loaded or registers nothing valid."""


class RegistryError(HarnessError):
    """A malformed or duplicate registry entry."""


class ResultsFileError(HarnessError):
    """A results file (``--compare``, ``report --from``) that cannot be read."""


class SpecError(HarnessError):
    """A declared trait that no oracle can build (a value outside the family's vocabulary)."""
