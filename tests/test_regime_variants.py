"""Wrong variants that hide outside one input regime: every wrong variant of
tests/regime_variants.py is caught by the default check (a contradiction naming it), every
control stays equivalent.

Where the harness misses a class the test is ``xfail(strict=True)`` naming the mechanism
that would catch it: once that mechanism lands the test passes, strict xfail turns that
into a failure, and the mark must be removed. ``benchmarks/regime_caught.py`` prints
the same evidence as a table.

One check run per family (the default config matrix, float64 + float32, as ``python -m
harness check --family F``), shared by the module; the model families also run the decode
checks (greedy pairs, the k/v cache), and the half-precision classes a bfloat16 check.
Unmarked, and passing today: each wrong variant is shown wrong outside the harness's regime
(``EXHIBITS`` in the variants file), so an xfail here is a real miss, not a dud variant.
Last, tests/regime_defects.py: variants that break the harness itself, one CLI
check each in a subprocess (the flex one poisons flex_attention in its process).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from harness.base.config import CONFIG_MATRIX
from harness.check.api import check_all
from harness.registry import load_file, scratch

FILE = Path(__file__).with_name("regime_variants.py")
MODEL_FAMILIES = ("encoder_decoder", "decoder_only_model")
HALF = {"rg_half_zero_after_softmax", "rg_norm_finfo_eps"}

# id -> the mechanism that would catch it, for the ones missed
MISSED: dict[str, str] = {}  # every class is caught now (regimes, dropout by statistics, greedy, parameters)
# control -> the mechanism that stops today's false alarm
FLAGGED_CONTROLS: dict[str, str] = {}  # none: tolerances, rand_like and internal_dtype are understood
# inputs changed in place: named as a changed input, not caught by accident (gradcheck re-using its inputs)
ACCIDENTAL = {"rg_pad_flipped_inplace", "rg_target_filled_inplace"}


def _module():
    return next(m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == str(FILE))


class Runs:
    """Lazy, shared per family: the default check, decode for models, bfloat16 for HALF."""

    def __init__(self, added):
        self.family = {v.id: v.family for v in added}
        self.keys = {v.id: v.key for v in added}
        self._check, self._half, self._decode = {}, {}, {}

    def _members(self, family):
        return [k for vid, k in self.keys.items() if self.family[vid] == family]

    def check(self, family):
        if family not in self._check:
            self._check[family] = check_all([family], CONFIG_MATRIX, "cpu", ["float32"],
                                            variants=self._members(family))
        return self._check[family]

    def half(self, family):
        if family not in self._half:
            keys = [self.keys[v] for v in HALF if self.family[v] == family]
            self._half[family] = check_all([family], CONFIG_MATRIX, "cpu", ["bfloat16"], variants=keys, extras=False)
        return self._half[family]

    def decode(self, family):
        from harness.base.config import Config
        from harness.systems import decoding as ss

        if family not in self._decode:
            self._decode[family] = (ss.compare_greedy(family, Config()), ss.check_cache(family, Config()))
        return self._decode[family]

    def contradictions(self, vid):
        family = self.family[vid]
        found = [f for f in self.check(family).failures if f.variant == vid]
        if vid in HALF:
            found += [f for f in self.half(family).failures if f.variant == vid]
        if family in MODEL_FAMILIES:
            greedy, cache = self.decode(family)
            found += [r for r in greedy if vid in (r.a, r.b) and not r.ok]
            found += [r for r in cache if r.variant == vid and not r.ok]
        return found


@pytest.fixture(scope="module")
def runs():
    with scratch():
        added = load_file(FILE)
        yield Runs(added)


def _mark(vid, table):
    if vid in table:
        return pytest.param(vid, marks=pytest.mark.xfail(strict=True, reason=f"{table[vid]} not built yet"))
    return vid


with scratch():  # the ids and exhibits, from the file itself (collection time, no check run)
    load_file(FILE)
    MODULE = _module()
    WRONG, CONTROLS = dict(MODULE.REGIME_WRONG), dict(MODULE.REGIME_CONTROLS)


def test_every_id_is_listed_once():
    assert set(MISSED) | ACCIDENTAL <= set(WRONG) and not set(MISSED) & ACCIDENTAL
    assert set(FLAGGED_CONTROLS) <= set(CONTROLS) and not set(WRONG) & set(CONTROLS)


@pytest.mark.parametrize("vid", [_mark(v, MISSED) for v in WRONG])
def test_wrong_variant_is_caught(runs, vid):
    assert runs.contradictions(vid), f"{vid} ({WRONG[vid]}) escaped the default check"


@pytest.mark.parametrize("vid", [_mark(v, FLAGGED_CONTROLS) for v in CONTROLS])
def test_control_stays_equivalent(runs, vid):
    found = runs.contradictions(vid)
    assert not found, f"{vid} ({CONTROLS[vid]}) contradicted: {found[:3]}"


@pytest.mark.parametrize("vid", sorted(ACCIDENTAL))
def test_an_input_changed_in_place_is_named(runs, vid):
    """Inputs are read-only: the contradiction says which input the variant changed
    (not only because gradcheck happens to re-use its inputs)."""
    notes = " ".join(str(getattr(f, "note", "")) for f in runs.contradictions(vid))
    assert "input" in notes and "changed" in notes, notes


# -- the evidence is real: each wrong variant is wrong in its regime, each control right there -------

def _exhibit(vid):
    return MODULE.run_exhibit(vid)


def is_wrong(measured: float, baseline: float) -> bool:
    """Far from the right computation: not finite, or over 5x the right sibling's own
    distance (0 where that is exact) and over 1e-6."""
    return not math.isfinite(measured) or measured > max(5 * baseline, 1e-6)


@pytest.mark.parametrize("vid", list(WRONG))
def test_wrong_variant_is_wrong_in_its_regime(vid):
    """Not a dud: outside the harness's regime the mistake shows (these pass today)."""
    regime, measured, baseline = _exhibit(vid)
    assert is_wrong(measured, baseline), f"{vid}: {regime}: {measured} (right sibling: {baseline})"


@pytest.mark.parametrize("vid", list(CONTROLS))
def test_control_is_right_in_its_regime(vid):
    regime, measured, bound = _exhibit(vid)
    assert measured <= bound, f"{vid}: {regime}: {measured} > {bound}"


# -- defects: variants that break the harness itself, one check each ------------------------------------

DEFECTS_FILE = Path(__file__).with_name("regime_defects.py")


def _check_cli(family, vid, tmp_path):
    import json
    import subprocess

    out = tmp_path / f"{vid}.json"
    proc = subprocess.run([sys.executable, "-m", "harness", "check", "--family", family, "--variants",
                           str(DEFECTS_FILE), "--variant", vid, "--json", str(out)],
                          capture_output=True, text=True, cwd=Path(__file__).parent.parent)
    report = json.loads(out.read_text()) if out.exists() else None
    rows = [] if report is None else [r for k in ("specs", "gradchecks", "dropouts") for r in report[k]
                                      if r["variant"] == vid and not r["ok"]]
    return proc, report, rows


def test_a_port_failure_is_the_variants_error_row(tmp_path):
    proc, report, rows = _check_cli("attention", "df_kv_other_shape", tmp_path)
    assert report is not None, proc.stdout[-300:] + proc.stderr[-300:]
    assert rows and proc.returncode == 1


def test_a_masks_contradiction_writes_its_json(tmp_path):
    proc, report, rows = _check_cli("masks", "df_mask_polarity", tmp_path)
    assert report is not None, proc.stderr[-300:]
    assert rows and proc.returncode == 1


def test_the_recorder_leaves_flex_attention_working(tmp_path):
    proc, report, rows = _check_cli("attention", "df_flex_attention", tmp_path)
    assert report is not None
    assert not [r for r in rows if "HigherOrderOperator" in str(r)], [str(r)[:200] for r in rows][:2]


def test_a_check_that_raises_is_that_specs_error_row(monkeypatch):
    """An exception outside the variant's own run (here its float32 baseline, the oracle
    computed in float32, as the upcast norms' did in bfloat16) is that spec's error row,
    named as the harness's failure; the other variants are judged and the run goes on."""
    import torch

    from harness.check import runs
    from harness.registry import get_variant

    real = runs.oracle_run

    def failing(family, traits, cfg, inputs, weights, *, dtype, compute=torch.float64, **through):
        if compute != torch.float64 and traits.get("upcast", "none") != "none":
            raise RuntimeError("expected m1 and m2 to have the same dtype")
        return real(family, traits, cfg, inputs, weights, dtype=dtype, compute=compute, **through)

    monkeypatch.setattr(runs, "oracle_run", failing)
    report = check_all(["norm"], {"default": CONFIG_MATRIX["default"]}, "cpu", ["float32"], extras=False)
    failed = [s for s in report.specs if not s.ok]
    assert failed and all(s.verdict == "error" and "the check itself failed" in s.note for s in failed)
    assert {get_variant("norm", s.variant).traits.get("upcast", "none") for s in failed} != {"none"}
    assert [s for s in report.specs if s.ok and s.dtype == "float32"]  # the others are judged
    assert failed[0] in report.failures
