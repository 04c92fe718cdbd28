"""Every declaration exercised (harness.families.reach, harness.check.reach): a declared trait
whose effect no case reaches is caught on a case added to reach it, or reported as not
exercised (check's summary line, its JSON, the pytest plugin's warning), never passed in
silence; a correct declaration the added case reaches stays clean with nothing reported; and
each rule, next to its definition, says reached exactly where the effect shows."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness.base.config import CONFIG_MATRIX
from harness.check.api import check_all
from harness.check.reach import is_reach_config
from harness.cli.main import main
from harness.families import reach
from harness.families.conventions.core import Context
from harness.families.conventions.softcap import bent_from
from harness.families.conventions.softcap import reached as softcap_reached
from harness.families.kernel_oracle import window_reach
from harness.families.rope_scaling import RopeScaling
from harness.registry import load_file, scratch

FILE = Path(__file__).with_name("wrong_unexercised.py")


@pytest.fixture(scope="module")
def checked():
    """The file's variants on the default config, float64 (the semantics)."""
    with scratch():
        added = load_file(FILE)
        return check_all(["attention"], {"default": CONFIG_MATRIX["default"]}, "cpu", ["float64"],
                         variants=[v.key for v in added], extras=False)


def _failing(report, vid):
    return {(s.config, s.case) for s in report.specs if s.variant == vid and not s.ok}


def _unexercised(report, vid):
    return {n.trait: n for n in report.not_exercised if n.variant == vid}


def test_a_window_too_wide_for_any_case_is_reported_not_passed(checked):
    """Window 8192, deleted from the module: every case holds (no case has 8193 keys), and the
    declaration is said not exercised, with why; a case of 8256 keys is above the limit."""
    assert not _failing(checked, "window8192_deleted")
    said = _unexercised(checked, "window8192_deleted")
    assert set(said) == {"window"} and said["window"].value == "(8191, 0)"
    assert "no case has more than 12 keys" in said["window"].why
    assert f"8256 keys, above the limit of {reach.MAX_KEYS}" in said["window"].why


@pytest.mark.parametrize("vid, keys", [("window4096_deleted", 4160), ("window16_deleted", 80)])
def test_a_window_within_the_limit_gets_a_case_that_catches_its_deletion(checked, vid, keys):
    """Windows of 4096 (Mistral's) and 16 deleted: the matrix's cases have at most 12 keys; the
    case added to reach each (the window and 64 keys more, B = 1, H = 2) fails, and nothing is
    left unexercised."""
    failing = _failing(checked, vid)
    assert failing and all(is_reach_config(config) for config, _ in failing)
    assert not _unexercised(checked, vid)
    added = next(s for s in checked.specs if s.variant == vid and is_reach_config(s.config))
    cfg = checked.added_configs[added.config]
    assert added.case == "window" and (cfg.batch, cfg.heads, cfg.tgt_len + cfg.src_len) == (1, 2, keys)


def test_the_correct_window_checks_clean_with_nothing_reported(checked):
    """The control: the same window applied; it holds on the added case, which reached it."""
    assert not _failing(checked, "window16")
    assert not _unexercised(checked, "window16")
    added = [s for s in checked.specs if s.variant == "window16" and is_reach_config(s.config)]
    assert added and all(s.ok for s in added)
    assert any(n.trait == "window" and n.reached for s in added for n in s.reaches)


def test_a_soft_cap_deleted_is_caught_on_inputs_scaled_to_reach_it(checked):
    failing = _failing(checked, "softcap_1e6_deleted")
    assert failing and all(is_reach_config(config) for config, _ in failing)
    assert not _unexercised(checked, "softcap_1e6_deleted")


def test_other_traits_declared_and_unreached_are_reported(checked):
    """A cap of 1e20 (no scale the config allows bends a score) and a dynamic NTK scaling
    from 100000 positions (no case gets there, and no case is added for it)."""
    cap = _unexercised(checked, "softcap_1e20")["softcap"]
    assert "inputs scaled past 10000" in cap.why and cap.value == "1e+20"
    ntk = _unexercised(checked, "dynamic_ntk_deleted")["rope_scaling"]
    assert ntk.value == "dynamic(factor=2, max_positions=100000)"
    assert "acts only from a length of 100001" in ntk.why
    assert not _failing(checked, "softcap_1e20") and not _failing(checked, "dynamic_ntk_deleted")


def test_check_counts_it_in_its_summary_and_json(tmp_path, capsys):
    out = tmp_path / "check.json"
    with scratch():
        code = main(["check", "--family", "attention", "--dtype", "float32", "--variants", str(FILE),
                     "--variant", "window8192_deleted", "--json", str(out)])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert code == 0
    assert last.endswith("; 0 contradict; 1 declaration not exercised: attention/window8192_deleted window "
                         "(8191, 0) (no case has more than 15 keys; the window keeps 8192 around a query; a case "
                         f"reaching it would have 8256 keys, above the limit of {reach.MAX_KEYS})"), last
    said = json.loads(out.read_text())["not_exercised"]
    assert [(n["variant"], n["trait"], n["value"]) for n in said] == [("window8192_deleted", "window", "(8191, 0)")]


def test_the_pytest_plugin_warns_and_says_it(tmp_path):
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--variants={FILE}",
                          "-k", "window8192_deleted and cpu-semantics"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "UnexercisedDeclaration: attention/window8192_deleted: declaration not exercised: window (8191, 0)" \
        in run.stdout, run.stdout
    assert "attention/window8192_deleted [cpu]: not exercised: window (8191, 0) (no case has more than" \
        in run.stdout, run.stdout


def test_a_kernels_built_in_cap_unreached_is_reported():
    with scratch():
        load_file(FILE)
        report = check_all(["attention_kernel"], {"default": CONFIG_MATRIX["default"]}, "cpu", ["float64"],
                           variants=["attention_kernel/kernel_softcap_1e20_deleted"], extras=False)
    assert not report.failures
    assert [(n.trait, n.value) for n in report.not_exercised] == [("softcap", "1e+20")]
    assert "inputs scaled past 10000" in report.not_exercised[0].why


def test_alibi_as_called_by_a_kernel_that_takes_no_slopes_is_reported():
    with scratch():
        load_file(FILE)
        report = check_all(["attention_kernel"], {"default": CONFIG_MATRIX["default"]}, "cpu", ["float64"],
                           variants=["attention_kernel/kernel_alibi_called_untaken"], extras=False)
    assert not report.failures
    assert [(n.trait, n.value) for n in report.not_exercised] == [("alibi", "as called")]
    assert "no case passed alibi_slopes" in report.not_exercised[0].why


# -- the rules, on hand-made calls ---------------------------------------------------------------

def test_window_reached_only_where_it_removes_a_key_the_mask_allows():
    causal = torch.ones(6, 6, dtype=torch.bool).tril()[None]
    pad = torch.ones(1, 6, dtype=torch.bool)
    assert window_reach(causal, pad, False, (4, 0), "none").reached          # query 5 loses key 0
    assert not window_reach(causal, pad, False, (5, 0), "none").reached      # keeps all it may see
    near = causal & ~torch.ones(6, 6, dtype=torch.bool).tril(-2)[None]       # the mask keeps i-1 .. i already
    assert not window_reach(near, pad, False, (1, 0), "none").reached
    assert not window_reach(causal, pad, False, None, "none").reached


def test_softcap_reached_where_it_bends_the_softmax_or_its_slope():
    s = torch.tensor([[[[3.0, 1.0, -2.0]]]], dtype=torch.float64)
    ctx = Context({})
    assert softcap_reached(50.0, s, ctx).reached
    assert not softcap_reached(1e12, s, ctx).reached
    assert softcap_reached(0.0, s, ctx) is None                             # no cap: nothing declared
    cap = 1e6
    x = bent_from(cap)                                                      # the bend passes the tolerance there
    assert reach.bends(x * 1.01, cap * math.tanh(x * 1.01 / cap)) and not reach.bends(
        x * 0.99, cap * math.tanh(x * 0.99 / cap))


def test_rope_scaling_reached_past_where_it_acts():
    dynamic = RopeScaling("dynamic", factor=2.0, max_positions=100)
    assert not dynamic.reached(10000.0, 8, torch.arange(100)).reached
    assert dynamic.reached(10000.0, 8, torch.arange(101)).reached
    linear = RopeScaling("linear", factor=2.0)
    assert linear.reached(10000.0, 8, torch.arange(5)).reached
    assert not linear.reached(10000.0, 8, torch.zeros(3, dtype=torch.long)).reached   # position 0 turns nothing
