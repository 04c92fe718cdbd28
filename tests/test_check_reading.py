"""What ``check`` prints reads as it should for a newcomer: the config legend names every
config a cell has a symbol for (the attention family's own ``gqa`` included) and the count
says as many; a failure's ``reproduce:`` command loads the user's file it needs and runs as
printed; a plain bug that only a degenerate shape hides (T = 1: one key per query, where no
scale can show) is not listed as a path finding, and its mistake line reads it, or says
that no single reading fits."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from harness.base.config import CONFIG_MATRIX
from harness.check.api import check_all
from harness.check.settings import CheckSettings
from harness.cli.main import main
from harness.families.catalog import get_family
from harness.registry import load_file, load_packs, scratch
from harness.report.check_text import check_text, summary_line
from harness.trace.explain import Mistakes, path_findings

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "my_attention.py"
NO_SCALE = '''
import torch
from torch import nn
from harness import Param, register


class NoScale(nn.Module):
    """Multi-head attention whose scores miss the 1/sqrt(d_k) scale."""

    def __init__(self, d_model, heads):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, query, key, value, mask):
        B, T, D = query.shape
        q, k, v = (lin(x).view(B, x.shape[1], self.heads, -1).transpose(1, 2)
                   for lin, x in ((self.q, query), (self.k, key), (self.v, value)))
        scores = (q @ k.transpose(-1, -2)).masked_fill(~mask[:, None], float("-inf"))
        return self.o((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, D))


register(id="my_noscale", family="attention", source="mine.py", summary="no 1/sqrt(d) on the scores",
         build=lambda cfg: NoScale(cfg.d_model, cfg.heads),
         call=lambda m, i: m(i["query"], i["key"], i["value"], i["mask"]),
         param_map={f"{n}.{p}": Param(f"{n}.{p}") for n in "qkvo" for p in ("weight", "bias")},
         traits={"sublayer": "attention", "fully_masked_row": "NaN"})
'''


@pytest.fixture(scope="module")
def no_scale(tmp_path_factory):
    """The missing-scale variant checked in float64 on the default and edge configs (with
    the attention family's gqa config: the whole matrix's names)."""
    path = tmp_path_factory.mktemp("mine") / "mine.py"
    path.write_text(NO_SCALE)
    load_packs()
    configs = {n: CONFIG_MATRIX[n] for n in ("default", "edge")}
    with scratch():
        load_file(path)
        report = check_all(["attention"], configs, "cpu", ["float64"], extras=False,
                           variants=["attention/my_noscale"])
        mistakes = Mistakes(report, configs)
        yield report, configs, mistakes.line("attention", "my_noscale"), path_findings(report, configs, mistakes)


def test_the_legend_and_the_count_name_every_config_a_cell_has_a_symbol_for():
    load_packs()
    configs = dict(CONFIG_MATRIX)
    report = check_all(["attention"], configs, "cpu", ["float64"], extras=False, variants=["attention/torch_sdpa"])
    text = check_text(report, configs, CheckSettings(factor=3.0, pairs="all"), families=["attention"],
                      matrix_note=True, explained_differences=None, explained_failures="")
    legend = text.split("in this order):\n", 1)[1].split("\n\n", 1)[0].splitlines()
    names = [line.split()[0] for line in legend]
    assert names == list(get_family("attention").configs_of(configs)) and "gqa" in names
    row = next(line for line in text.splitlines() if line.startswith("torch_sdpa "))
    cells = row.split()[1:-1]  # the variant, then one cell per case, then the worst ratio
    assert cells and all(len(cell) == len(names) for cell in cells)
    assert f"1 variants x {len(names)} config(s)" in summary_line(report, configs, ["attention"])
    assert "meta_llama does not apply" in text  # every variant's limits and class, --variant not given
    only = CheckSettings(factor=3.0, pairs="all", variants=frozenset({"attention/torch_sdpa"}))
    scoped = check_text(report, configs, only, families=["attention"], matrix_note=True,
                        explained_differences=None, explained_failures="")
    classes = scoped.split("equivalence classes (equal semantic traits)\n", 1)[1].split("\n\n", 1)[0]
    assert "does not apply" not in scoped and "meta_llama" not in classes
    [mine] = classes.splitlines()[2:]  # torch_sdpa's class only, with its peers
    assert "torch_sdpa" in mine and "torch_mha" in mine


def test_a_report_of_named_variants_checks_them_and_their_references(tmp_path, monkeypatch):
    """``report --variant my_einsum`` checks my_einsum, the family's reference (the precision
    baseline) and my_einsum's nearest reference (its summary verdict), not every variant."""
    import harness.cli.report as report

    asked = []

    class Stop(Exception):
        pass

    def check_all_seen(*args, variants=None, **kwargs):
        from harness.registry import get_variant
        from harness.registry.nearest import nearest_reference

        asked.append(variants)
        asked.append(nearest_reference(get_variant("attention", "my_einsum"), "cpu").candidate.key)
        raise Stop

    monkeypatch.setattr(report, "check_all", check_all_seen)
    with scratch(), pytest.raises(Stop):
        main(["report", "--family", "attention", "--variants", str(EXAMPLE), "--variant", "my_einsum",
              "--out", str(tmp_path)])
    from harness.registry import reference_of

    variants, nearest = asked
    assert nearest == "attention/fused_explicit"  # declared traits, not names, pick it
    assert variants == ["attention/my_einsum", reference_of("attention").key, nearest]


def test_the_printed_reproduce_command_loads_the_users_file_and_runs(tmp_path, monkeypatch, capsys):
    (tmp_path / "mine.py").write_text(NO_SCALE)
    monkeypatch.chdir(tmp_path)
    with scratch():
        assert main(["check", "--family", "attention", "--variants", "mine.py", "--variant", "my_noscale",
                     "--dtype", "float64", "--set", "batch=2"]) == 1
        out = capsys.readouterr().out
    hint = re.search(r"reproduce: (python -m harness diff .*)", out).group(1)
    assert hint.endswith(" --variants mine.py") and "--set batch=2" in hint
    with scratch():  # a fresh registry: the command must load the file itself
        assert main(shlex.split(hint)[3:]) == 0
    assert "my_noscale" in capsys.readouterr().out


def test_a_bug_hidden_only_by_a_one_key_shape_is_no_path_finding(no_scale):
    report, _, _, found = no_scale
    holds = {(s.case, s.config) for s in report.specs if s.ok}
    assert ("self", "edge") in holds and ("self", "default") not in holds  # T = 1: one key, no scale shows
    assert "my_noscale" not in found


def test_the_missing_scale_reads_as_a_score_scale_of_one_or_says_no_reading_fits(no_scale):
    _, _, line, _ = no_scale
    if "score_scale" in get_family("attention").traits:
        assert line.startswith("reads as score_scale=1 (") and "on every failing case" in line
    else:
        assert line.startswith("no single convention read another way explains it on self")


def test_explain_names_a_difference_diff_cannot_trace_and_the_check_goes_on(capsys):
    """qwen3 and olmo2_qk_norm hold their QK-norm gains in two shapes, so no one set of
    weights runs both: --explain says so on that difference's line, and check still exits 0."""
    with scratch():
        load_packs()
        code = main(["check", "--family", "attention", "--variant", "qwen3", "--variant", "olmo2_qk_norm",
                     "--explain", "--dtype", "float64"])
    out = capsys.readouterr().out
    assert code == 0
    assert re.search(r"qwen3 ~ olmo2_qk_norm on \w+ .*\n    not traced: .*different shapes", out)
