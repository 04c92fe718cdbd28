"""The terminal report of ``check``: a function of the check's results (and of the first
divergences the command traced for it); it computes nothing."""

from __future__ import annotations

from typing import Mapping

from harness.base.config import Config
from harness.check import own_dtype
from harness.check.results import CheckReport
from harness.check.settings import CheckSettings, PairMode
from harness.families.catalog import get_family
from harness.registry import variants_of
from harness.report.tables import (
    LEGEND,
    classes_table,
    compiled_table,
    differences_table,
    paths_table,
    spec_matrix,
    verdict_matrix,
)

OWN_DTYPE = ("semantics of kernels that run only in their own dtypes: error against the float64 oracle "
             "(inputs rounded to {dtype}) at most " + f"{own_dtype.FACTOR:g}" + "x the {dtype} reference's + atol")


def family_text(report: CheckReport, family: str, configs: Mapping[str, Config], settings: CheckSettings, *,
                matrix_note: bool, shown: list[str] | None = None) -> list[str]:
    """One family: its call, cases, what was skipped, the spec matrices per dtype, the
    equivalence classes and the pair matrices. Its configs are named when its cells hold
    another list than the legend's (``shown``); the variants shown are those ``settings``
    checks."""
    fam = get_family(family)
    lines = [f"\n== {family}: {fam.call}"]
    own = list(fam.configs_of(configs))
    if fam.matrix is not None and matrix_note:
        lines.append(f"   configs: {', '.join(own)} ({fam.matrix_note})")
    elif shown is not None and own != shown:
        lines.append(f"   configs: {', '.join(own)} (one symbol each, in this order)")
    lines += [f"   case {case.name}: {case.note}" for case in fam.cases]
    lines += [f"   {vid} skips config {config}: {why}" for fam_name, vid, config, why in report.skipped
              if fam_name == family]
    checked = [v for v in variants_of(family) if settings.wants(v.key)]
    for v in checked:
        limited = v.traits.get("cases")
        if limited is not None:
            left_out = [c.name for c in fam.cases if (c.base or c.name) not in limited  # a regime case: its base's
                        and fam.declared_for(c.name, v.traits)]          # not a convention's case it does not declare
            if left_out:
                lines.append(f"   {v.id} does not apply to {', '.join(left_out)} (declared traits['cases']"
                             + (f": {v.traits['note']}" if v.traits.get("note") else "") + ")")
    own = {v.id for v in variants_of(family) if v.own_dtype_semantics}
    for dtype in fam.dtypes or report.dtypes:
        what = ("semantics: each variant against the float64 oracle of its declared traits"
                if dtype == "float64" else
                "precision: error against the oracle, as a multiple of the baseline's "
                f"(at most {settings.factor:g}x)")
        mine = {s.variant for s in report.specs if s.family == family and s.dtype == dtype}
        if mine and mine <= own:
            what = OWN_DTYPE.format(dtype=dtype)
        elif mine & own:
            what += f"; {', '.join(sorted(mine & own))}: " + OWN_DTYPE.format(dtype=dtype)
        lines += [f"\n-- {dtype} on {settings.device}: {what}",
                  spec_matrix(report.specs, family, dtype, fam.configs_of(configs))]
    lines += ["\n-- equivalence classes (equal semantic traits)", classes_table(family, _classmates(family, checked))]
    made = "measured" if settings.pairs is PairMode.ALL else "derived from the classes"
    for dtype in fam.dtypes or report.dtypes:
        lines += [f"\n-- pairs in {dtype} ({made})",
                  verdict_matrix(report.pairs, family, dtype)]
    return lines


def _classmates(family: str, checked: list) -> list:
    """The variants of the classes the checked ones fall in: each checked variant with the
    variants declaring its semantic traits (all of them when every variant was checked)."""
    fam = get_family(family)
    mine = {tuple(sorted(fam.semantic_traits(v.traits).items(), key=lambda kv: kv[0])) for v in checked}
    return [v for v in variants_of(family)
            if tuple(sorted(fam.semantic_traits(v.traits).items(), key=lambda kv: kv[0])) in mine]


def check_text(report: CheckReport, configs: Mapping[str, Config], settings: CheckSettings, *,
               families: list[str], matrix_note: bool, explained_differences: str | None,
               explained_failures: str) -> str:
    """Everything ``check`` prints between its verdict (``failures_text.verdict_lines``: the
    contradictions, folded) and its summary line, for the check ``settings`` asked for: the
    variants it names (``settings.variants``; all when None) are those whose case limits and
    classes are shown."""
    shown = shown_configs(configs, families)
    lines = [LEGEND, "\nconfigs (one symbol per config in each spec cell, in this order):"]
    lines += [f"  {name:9s} {cfg.describe()}" for name, cfg in shown.items()]
    for family in families:
        lines += family_text(report, family, configs, settings, matrix_note=matrix_note, shown=list(shown))
    lines += ["\n== Differences (declared, with their effect)", differences_table(report.pairs),
              "\n== Kernel paths: autograd vs torch.no_grad() (eval mode)", paths_table(report.paths)]
    if settings.compile_backend:
        lines += [f"\n== torch.compile (backend {settings.compile_backend}) against eager, first config",
                  compiled_table(report.compiled)]
    if explained_differences is not None:
        lines += ["\n== Where each declared difference first shows (harness.trace)", explained_differences]
    if explained_failures:
        lines += ["\n== Where the contradictions first diverge from a variant declaring the same traits "
                  "(harness.trace)", explained_failures]
    return "\n".join(lines)


def shown_configs(configs: Mapping[str, Config], families: list[str]) -> dict[str, Config]:
    """Every config a spec cell of these families has a symbol for, in the cells' order: the
    configs asked for, narrowed and extended by each family (the attention family's ``gqa``)."""
    out: dict[str, Config] = {}
    for family in families:
        out.update(get_family(family).configs_of(configs))
    return out


def summary_line(report: CheckReport, configs: Mapping[str, Config], families: list[str] | None = None) -> str:
    """The last line; ``families`` (those checked) count each family's own configs too."""
    configs = shown_configs(configs, families) if families else configs
    n_var = checked_variants(report)
    grads = sum(g.ok for g in report.gradchecks)
    drops = sum(d.ok for d in report.dropouts)
    return (f"\n{n_var} variants x {len(configs)} config(s): {len(report.specs)} spec checks, "
            f"{len(report.pairs)} pairs, gradcheck {grads}/{len(report.gradchecks)}, "
            f"dropout {drops}/{len(report.dropouts)}"
            + (f", k/v cache {sum(c.ok for c in report.caches)}/{len(report.caches)}" if report.caches else "")
            + f"; {len(report.failures)} contradict" + not_exercised_text(report))


def not_exercised_text(report: CheckReport) -> str:
    """'; 1 declaration not exercised: attention/w window (4095, 0) (no case has more than 15
    keys; ...)', or '' when every declaration was reached (``harness.check.reach``)."""
    n = len(report.not_exercised)
    if not n:
        return ""
    return (f"; {n} declaration{'s' if n > 1 else ''} not exercised: "
            + "; ".join(f"{x.family}/{x.variant} {x}" for x in report.not_exercised))


def checked_variants(report: CheckReport) -> int:
    """How many variants ``report`` holds a spec of."""
    return len({(s.family, s.variant) for s in report.specs})
