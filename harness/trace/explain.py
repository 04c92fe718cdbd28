"""The first divergences ``check`` prints under its contradictions and declared differences."""

from __future__ import annotations

from harness.base.devices import device_type
from harness.base.errors import HarnessError
from harness.base.verdicts import Verdict
from harness.check.spec import PATH_FINDING
from harness.families.catalog import get_family
from harness.trace.kernel_explain import explain_mistake
from harness.trace.pairs import explain_variant, first_divergence

MAX_EXPLAINED = 8  # a trace costs seconds: the first contradictions only


def explain_failures(report, configs, limit: int = MAX_EXPLAINED) -> str:
    """For each (variant, case) whose spec fails: the first divergence against a peer that
    declares the same traits, or the worst tensor when it has no peer."""
    lines, seen, named = [], set(), set()
    for s in report.specs:
        key = (s.family, s.variant, s.case)
        if s.ok or key in seen or s.verdict == Verdict.ERROR:
            continue
        seen.add(key)
        if len(seen) > limit:
            lines.append(f"  ... and more: python -m harness diff {s.family} A B --case C traces any pair")
            break
        if (s.family, s.variant) not in named:  # an attention kernel: its mistake named in one line
            named.add((s.family, s.variant))
            mistake = explain_mistake(s.family, s.variant, report, configs)
            if mistake:
                lines.append(f"  {s.family}/{s.variant}: {mistake}")
        head = f"  {s.family}/{s.variant} on {s.case} ({s.config}, {s.dtype}): worst tensor {s.worst}"
        if s.verdict != Verdict.DIFFERENT:  # less precise: same function, more rounding; nothing to trace
            lines.append(head + f" ({s.verdict}, {s.ratio:.3g}x the baseline's error)")
            continue
        cfg = configs.get(s.config) or get_family(s.family).configs_of(configs).get(s.config)
        try:
            d = explain_variant(s.family, s.variant, s.case, cfg, s.dtype if s.dtype != "bool" else "float32")
        except HarnessError as exc:  # a trace this variant cannot take: one line, the check goes on
            lines.append(head + f"\n    (not traced: {exc})")
            continue
        lines.append(head + ("" if d is None else "\n" + "\n".join("    " + x for x in d.text.splitlines())))
    return "\n".join(lines)


def explain_differences(report, configs) -> str:
    """One first divergence per declared difference (reason and case), on its first pair
    and config that shows it."""
    lines, seen = [], set()
    for p in report.pairs:
        key = (p.family, p.reason, p.case)
        if p.verdict != Verdict.DIFFERENT or key in seen or p.dtype == "bool":
            continue
        seen.add(key)
        cfg = configs.get(p.config) or get_family(p.family).configs_of(configs).get(p.config)
        d = first_divergence(p.family, p.a, p.b, p.case, cfg, p.dtype, p.device, hints=False)
        lines.append(f"  {p.family}: {p.a} ~ {p.b} on {p.case} ({p.config}, {p.dtype}; {p.reason})\n"
                     + "\n".join("    " + x for x in d.text.splitlines()))
    return "\n".join(lines) or "(none)"


def path_findings(report, configs) -> str:
    """Behaviour that depends on the path taken, per case: the declared findings
    (``traits['path_findings']``: reported, not contradictions), and each (variant, case)
    whose spec fails on some configs of the matrix but holds on others (another kernel for
    that shape), with the declaration that would make it a finding if it is meant."""
    lines, by_case = [], {}
    for s in report.specs:
        if s.note.startswith(PATH_FINDING):
            lines.append(f"  {s.family}/{s.variant} on {s.case} ({s.config}, {s.dtype}): {s.verdict}, "
                         f"{s.note.split(';')[0]}")
        by_case.setdefault((s.family, s.variant, s.case), []).append(s)
    for (family, variant, case), specs in by_case.items():
        bad = sorted({s.config for s in specs if not s.ok})
        good = sorted({s.config for s in specs if s.ok} - set(bad))
        if bad and good:
            shapes = "; ".join(f"{c}: {configs[c].describe()}" for c in bad if c in configs)
            key = case if len(bad) > 1 else f"{case}@{bad[0]}"
            lines.append(f"  {family}/{variant} on {case}: fails on config {', '.join(bad)} only ({shapes}), "
                         f"holds on {', '.join(good)}: behaviour that depends on the path taken; if it is "
                         f"meant, declare it: traits={{'path_findings': {{'{key}': {_declaration(specs)}}}}}")
    return "\n".join(lines)


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
