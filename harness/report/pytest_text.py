"""What the pytest plugin (``harness.pytest_plugin``) says of a user's variant beyond pass
and fail, once per run in its terminal summary: the configs and cases it was not checked on
(``coverage_line``), and for each failure its cause with the ``check`` command that
reproduces it (``check_command``)."""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence

from harness.check.results import DropoutResult, GradcheckResult, SpecResult
from harness.registry import Variant, variants_file

# how a run chooses its configs, named where some were not buildable
CHOOSE_CONFIGS = "choose configs with --set KEY=VALUE (or attention_harness_set in the pytest ini)"


def check_command(variant: Variant, sets: Sequence[str], device: str = "cpu") -> str:
    """The ``check`` command that checks ``variant`` as the plugin did: its file as it was
    given, the run's ``--set`` items (the command line's and the ini's), its device."""
    words = ["python", "-m", "harness", "check", "--family", variant.family]
    file = variants_file(variant) or (variant.origin if variant.origin.endswith(".py") else None)
    if file:
        words += ["--variants", file]
    words += ["--variant", variant.id]
    for item in sets:
        words += ["--set", item]
    if device != "cpu":
        words += ["--device", device]
    return shlex.join(words)


def _grouped(pairs: Iterable[tuple[str, str]]) -> str:
    """(config, why) pairs as 'a, b (why); c (other why)': each reason once."""
    by_why: dict[str, list[str]] = {}
    for config, why in pairs:
        by_why.setdefault(why, []).append(config)
    return "; ".join(f"{', '.join(dict.fromkeys(configs))} ({why})" for why, configs in by_why.items())


def coverage_line(variant: Variant, device: str, configs: Sequence[str],
                  skipped: Iterable[tuple[str, str, str, str]]) -> str | None:
    """One line saying what ``variant`` was not checked on out of ``configs``, from a check
    report's ``skipped`` rows (family, variant, config, why; a case's why reads 'case NAME:
    why'): None when it was checked on every config and case, or refuses the device itself (a
    CUDA-only kernel on CPU: pytest's own skip says so)."""
    if variant.devices is not None and variant.devices.refuses(device):
        return None
    key = variant.key
    refused: dict[str, str] = {}
    cases: list[tuple[str, str]] = []
    for _family, _variant, config, why in skipped:
        if why.startswith("case "):
            name, _, reason = why[len("case "):].partition(": ")
            cases.append((f"case {name} on {config}", reason))
        else:
            refused.setdefault(config, why)
    if not refused and not cases:
        return None
    checked = [c for c in configs if c not in refused]
    line = f"{key} ({device}): checked on {len(checked)} of {len(configs)} configs"
    if refused:
        line += (f" ({', '.join(checked)})" if checked else "") + "; not buildable: " + _grouped(refused.items())
    if cases:
        line += "; not run: " + _grouped(_by_case(cases))
    return line + (f"; {CHOOSE_CONFIGS}" if refused else "")


def _by_case(cases: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """'case X on a', 'case X on b' (same why) -> 'case X on a, b'."""
    merged: dict[tuple[str, str], list[str]] = {}
    for where, why in cases:
        case, _, config = where.partition(" on ")
        merged.setdefault((case, why), []).append(config)
    return [(f"{case} on {', '.join(configs)}", why) for (case, why), configs in merged.items()]


def aspect_results(results: list, aspect: str, semantic: tuple[str, ...] = ("float64",)) -> list:
    """The results of one aspect: semantics (the spec checks in ``semantic``, the dtypes the
    variant's semantics are decided in, and the exact ones), precision (the spec checks in the
    device's lower dtypes), gradcheck, dropout."""
    if aspect == "gradcheck":
        return [r for r in results if isinstance(r, GradcheckResult)]
    if aspect == "dropout":
        return [r for r in results if isinstance(r, DropoutResult)]
    specs = [r for r in results if isinstance(r, SpecResult)]
    exact = [r for r in specs if r.dtype in (*semantic, "bool")]
    return exact if aspect == "semantics" else [r for r in specs if r not in exact]


def first_cause(wrong: list) -> str:
    """The cause a failure's first line shows: the first error's own message (an exception,
    an output of the wrong shape or type) before any numeric difference."""
    errors = [r for r in wrong if getattr(r, "verdict", "") == "error" and getattr(r, "note", "")]
    first = errors[0] if errors else wrong[0]
    worst = getattr(first, "worst", "")
    verdict = str(getattr(first, "verdict", "") or "failed")
    text = str(getattr(first, "note", "") or (verdict + (f" in {worst}" if worst else "")))
    return text.split("; ")[0][:200]
