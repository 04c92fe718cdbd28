"""The first divergences ``check`` prints under its contradictions and declared differences."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Mapping

import torch

from harness.base.config import Config
from harness.base.devices import device_type
from harness.base.errors import ConfigError, HarnessError, UnknownName
from harness.base.masks import one_key_at_most
from harness.base.verdicts import Verdict
from harness.check.reach import is_reach_config
from harness.check.results import PairResult, SpecResult
from harness.check.runs import RunCache
from harness.check.spec import STATE_KEPT
from harness.check.verdict import PATH_FINDING
from harness.families.catalog import get_family
from harness.registry import get_variant, reference_of, variants_of
from harness.trace.kernel_explain import hidden_by_one_key, mistake_fits, mistake_line, stateful_cases
from harness.trace.pairs import diff_command, explain_variant, first_divergence

MAX_EXPLAINED = 8  # a trace costs seconds: the first contradictions only (each variant's mistake is named)


class Mistakes:
    """Each failing variant's named mistake (``kernel_explain``: the single convention or
    trait value that makes its own float64 run meet the oracle), probed once per check and
    read by the failures' explanation and the path findings alike."""

    def __init__(self, report, configs):
        self.report, self.configs, self._fits = report, configs, {}

    def _probe(self, family: str, variant: str):
        if (family, variant) not in self._fits:
            self._fits[family, variant] = mistake_fits(family, variant, self.report, self.configs)
        return self._fits[family, variant]

    def explains(self, family: str, variant: str) -> bool:
        """Whether a named convention or trait value fits every failing case of the variant."""
        fits = self._probe(family, variant)
        return bool(fits and fits[1])

    def line(self, family: str, variant: str) -> str:
        """The one line naming the mistake, or saying that no single reading fits ('' where
        nothing is probed)."""
        fits = self._probe(family, variant)
        said = "" if fits is None else mistake_line(fits[1], fits[0])
        stateful = stateful_cases(self.report, variant, family)
        if stateful:
            state = f"{STATE_KEPT} on {', '.join(stateful)}"
            said = f"{state}; elsewhere it {said}" if said else state
        return said


def mistake_lines(report, mistakes: Mistakes) -> list[str]:
    """Each failing variant's named mistake, one line each (all of them; a variant that
    raised has none: its error row says why)."""
    lines = []
    failing = dict.fromkeys((s.family, s.variant) for s in report.specs if not s.ok and s.verdict != Verdict.ERROR)
    for family, variant in failing:  # every failing variant: a probe costs about a second
        mistake = mistakes.line(family, variant)
        if mistake:
            lines.append(f"  {family}/{variant}: {mistake}")
    return lines


def explain_failures(report, configs, limit: int = MAX_EXPLAINED, mistakes: Mistakes | None = None, *,
                     named: bool = True) -> str:
    """Each failing variant's named mistake (``mistake_lines``; not with ``named=False``);
    then for each of the first ``limit`` (variant, case) whose spec fails: the first
    divergence against a peer that declares the same traits, or the worst tensor when it has
    no peer."""
    mistakes = mistakes or Mistakes(report, configs)
    seen: set = set()
    lines = mistake_lines(report, mistakes) if named else []
    traced = list(dict.fromkeys((s.family, s.variant, s.case) for s in report.specs
                                if not s.ok and s.verdict != Verdict.ERROR))
    for s in report.specs:
        key = (s.family, s.variant, s.case)
        if s.ok or key in seen or s.verdict == Verdict.ERROR:
            continue
        seen.add(key)
        if len(seen) > limit:
            loads = diff_command(s.family, s.variant, s.variant, "C", None, "D").partition(" --dtype D")[2]
            lines.append(f"  ... traced above: the first {limit} of {len(traced)} failing (variant, case); "
                         f"python -m harness diff {s.family} A B --case C --dtype D --set KEY=VALUE"
                         f"{loads} traces any pair on any config")
            break
        head = f"  {s.family}/{s.variant} on {s.case} ({s.config}, {s.dtype}): worst tensor {s.worst}"
        cfg = _config(report, configs, s.family, s.config)
        if s.depends_on_earlier_calls:  # a fresh build's trace on this case alone would agree
            said = next(x for x in s.note.split("; ") if x.startswith(STATE_KEPT))
            lines.append(f"  {s.family}/{s.variant} on {s.case} ({s.config}, {s.dtype}): {said}\n    reproduce: "
                         + diff_command(s.family, _peer(s.family), s.variant, s.case, cfg, s.dtype))
            continue
        if s.verdict != Verdict.DIFFERENT:  # less precise: same function, more rounding; nothing to trace
            lines.append(head + f" ({s.verdict}, {s.ratio:.3g}x the baseline's error)")
            continue
        failing = {f.variant for f in report.specs if f.family == s.family and f.case == s.case
                   and f.config == s.config and not f.ok}  # no peer to trace against
        try:
            d = explain_variant(s.family, s.variant, s.case, cfg, s.dtype if s.dtype != "bool" else "float32",
                                avoid=failing)
        except HarnessError as exc:  # a trace this variant cannot take: one line, the check goes on
            lines.append(head + f"\n    (not traced: {exc})")
            continue
        if d is None:
            ref = reference_of(s.family)
            lines.append(head + ("" if ref is None else "\n    against the reference: " + diff_command(
                s.family, ref.id, s.variant, s.case, cfg, s.dtype if s.dtype != "bool" else "float32")))
            continue
        lines.append(head + "\n" + "\n".join("    " + x for x in d.text.splitlines()))
        lines.append("    reproduce: " + diff_command(s.family, d.data.a, d.data.b, s.case, cfg, d.data.dtype))
    pairs = [p for p in report.failures if isinstance(p, PairResult) and p.verdict != Verdict.ERROR]
    for p in pairs[:limit]:  # a pair that contradicts its declaration while both specs hold
        cfg = _config(report, configs, p.family, p.config)
        lines.append(f"  {p.family}: {p.a} ~ {p.b} on {p.case} ({p.config}, {p.dtype}) is {p.verdict}, declared "
                     f"{p.expected}\n    reproduce: " + diff_command(p.family, p.a, p.b, p.case, cfg, p.dtype))
    return "\n".join(lines)


def _peer(family: str) -> str:
    """The variant a stateful one's ``diff`` runs beside: the family reference (any variant
    serves: ``diff`` says which side keeps state)."""
    ref = reference_of(family) or next(iter(variants_of(family)))
    return ref.id


def explain_differences(report, configs) -> str:
    """One first divergence per declared difference (reason and case), on its first pair
    and config that shows it and that ``diff`` can run (a pair holding a parameter in two
    shapes cannot share one set of weights: the next pair with that difference is traced,
    and a difference no pair can trace says why)."""
    lines, done, untraced = [], set(), {}
    for p in report.pairs:
        key = (p.family, p.reason, p.case)
        if p.verdict != Verdict.DIFFERENT or key in done or p.dtype == "bool":
            continue
        cfg = _config(report, configs, p.family, p.config)
        try:
            d = first_divergence(p.family, p.a, p.b, p.case, cfg, p.dtype, p.device, hints=False)
        except ConfigError as exc:
            untraced.setdefault(key, f"  {p.family}: {p.a} ~ {p.b} on {p.case} ({p.config}, {p.dtype}; "
                                     f"{p.reason})\n    not traced: {exc}")
            continue
        done.add(key)
        lines.append(f"  {p.family}: {p.a} ~ {p.b} on {p.case} ({p.config}, {p.dtype}; {p.reason})\n"
                     + "\n".join("    " + x for x in d.text.splitlines())
                     + "\n    reproduce: " + diff_command(p.family, p.a, p.b, p.case, cfg, p.dtype))
    lines += [line for key, line in untraced.items() if key not in done]
    return "\n".join(lines) or "(none)"


def _config(report, configs, family: str, name: str):
    """The config named ``name``: asked for, the family's own, or one added to reach a declaration."""
    return (configs.get(name) or get_family(family).configs_of(configs).get(name)
            or getattr(report, "added_configs", {}).get(name))


def path_findings(report, configs, mistakes: Mistakes | None = None) -> str:
    """Behaviour that depends on the path taken, per case: the declared findings
    (``traits['path_findings']``: reported, not contradictions), and each (variant, case)
    whose spec fails on some configs of the matrix but holds on others (another kernel for
    that shape), with the declaration that would make it a finding if it is meant. That
    advice is for a path difference only: never where the variant raised on that case (its
    error row says why), nor where a named mistake fits its failures (the mistake is said)."""
    mistakes = mistakes or Mistakes(report, configs)
    lines, by_case = [], {}
    for s in report.specs:
        if s.finding is not None:
            lines.append(f"  {s.family}/{s.variant} on {s.case} ({s.config}, {s.dtype}): {s.verdict}, "
                         f"{PATH_FINDING}: {s.finding}")
        if not is_reach_config(s.config):  # a case added to reach a declaration: not another path
            by_case.setdefault((s.family, s.variant, s.case), []).append(s)
    for (family, variant, case), specs in by_case.items():
        bad = sorted({s.config for s in specs if not s.ok})
        good = sorted({s.config for s in specs if s.ok} - set(bad))
        if (not (bad and good) or any(s.verdict == Verdict.ERROR for s in specs)
                or any(s.depends_on_earlier_calls for s in specs)):  # state kept: checked on one config only
            continue
        if mistakes.explains(family, variant):
            continue
        every = get_family(family).configs_of(configs) | dict(configs)
        if _hidden_where_it_holds(family, variant, case, [every.get(c) for c in good], every.get(bad[0])):
            continue  # it holds only where the case cannot show it: the same mistake, not another path
        shapes = "; ".join(f"{c}: {every[c].describe()}" for c in bad if c in every)
        key = case if len(bad) > 1 else f"{case}@{bad[0]}"
        lines.append(f"  {family}/{variant} on {case}: fails on config {', '.join(bad)} only ({shapes}), "
                     f"holds on {', '.join(good)}: behaviour that depends on the path taken; if it is "
                     f"meant, declare it: traits={{'path_findings': {{'{key}': {_declaration(specs)}}}}}")
    return "\n".join(lines)


def _hidden_where_it_holds(family: str, variant: str, case: str, good: list, bad) -> bool:
    """Whether the configs where ``case`` holds leave every query one key at most (the edge
    config's T = 1 self-attention) and the variant, given one key per query on a config
    where it fails, holds there too: its scores are wrong on every path, and only that
    shape hides it (no path finding). A variant that still fails there takes another path."""
    if bad is None or not good or any(cfg is None for cfg in good):
        return False
    fam = get_family(family)
    for cfg in good:
        mask = RunCache(cfg, record=False).inputs(fam, case).get("mask")
        if not (isinstance(mask, torch.Tensor) and one_key_at_most(mask)):
            return False
    try:
        return hidden_by_one_key(get_variant(family, variant), bad, case)
    except UnknownName:  # a report read after its variant left the registry
        return False


def _declaration(specs) -> str:
    """What to declare for the failing specs of one (variant, case): a reason, or a
    ``PathFinding`` bound to the device and dtypes where they fail, when they hold elsewhere
    (off the CPU: the CPU has not seen it; in some dtypes only)."""
    failing = [s for s in specs if not s.ok]
    dtypes = sorted({s.dtype for s in failing})
    devices = sorted({device_type(s.device) for s in failing} - {"cpu"})
    some = set(dtypes) < {s.dtype for s in specs}
    if not devices and not some:
        return "'why'"
    return ("PathFinding('why'" + (f", devices={tuple(devices)!r}" if devices else "")
            + (f", dtypes={tuple(dtypes)!r}" if some else "") + ")")


def variant_mistake(variant, results: list, configs: Mapping[str, Config]) -> str:
    """The one line ``check`` prints naming ``variant``'s mistake from its own ``results``
    (the convention or trait value that makes its float64 run fit: ``Mistakes``), or '' for a
    module's computation mistake (the first failing check says more than 'none fits')."""
    mistakes = Mistakes(SimpleNamespace(specs=[r for r in results if isinstance(r, SpecResult)]), configs)
    if variant.family != "attention_kernel" and not mistakes.explains(variant.family, variant.id):
        return ""
    return mistakes.line(variant.family, variant.id)
