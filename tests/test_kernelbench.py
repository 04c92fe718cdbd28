"""KernelBench's format, natively (``python -m harness kernelbench``): the corpus under
``tests/kernelbench/`` (problems in the project's domain, correct rewrites and subtle bugs),
every correct candidate passes and every bad one is caught with the regime its ``CAUGHT``
names first in its failing line, or, for a planted reward hack (``bad_hack_KIND.py``), with
"hack: KIND"; the command's table, JSON, CSV, fast_p and exit statuses."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
import torch

from harness.base.hacks import HackFinding, HackKind
from harness.check.kernelbench import Row, discover, fast_p, judge_candidate, load_problem
from harness.cli.main import main

CORPUS = Path(__file__).resolve().parent / "kernelbench"
PROBLEMS = sorted(p.stem for p in CORPUS.glob("*.py"))
SOFTMAX = torch.softmax
CAUGHT = re.compile(r'^CAUGHT = "(.+)"$', re.M)


def test_the_corpus_covers_the_projects_domain():
    assert {"softmax", "log_softmax", "gelu", "rmsnorm", "layernorm", "sdpa", "causal", "min_gpt",
            "relu_attention", "mha"} <= set(PROBLEMS)
    pairs = discover(CORPUS)
    files = [f for _, cs in pairs for f in cs]
    assert len(pairs) == len(PROBLEMS) and len(files) >= 30
    assert sum(f.name.startswith("ok_") for f in files) >= 12
    for f in files:
        assert f.name.startswith(("ok_", "bad_")), f
        assert bool(CAUGHT.search(f.read_text())) == f.name.startswith("bad_"), f"{f}: CAUGHT for bad_ files only"


@pytest.mark.parametrize("name", PROBLEMS)
def test_every_correct_candidate_passes_and_every_bad_one_is_caught_naming_the_regime(name):
    problem = load_problem(CORPUS / f"{name}.py")
    for path in sorted((CORPUS / name).glob("*.py")):
        row, j = judge_candidate(problem, path)
        assert row.compiled, row.failing_check
        if path.name.startswith("ok_"):
            assert row.correct, f"{name}/{path.name}: {row.failing_check}"
            assert j is not None and len(j.regimes) >= 15
        else:
            caught = CAUGHT.search(path.read_text()).group(1)
            assert not row.correct, f"{name}/{path.name} passed every regime"
            assert "\n" not in row.failing_check
            if caught.startswith("hack: "):  # a planted reward hack: named by its kind, first
                assert row.failing_check.startswith(f"{caught}: the candidate"), f"{name}/{path.name}: " \
                                                                                  f"{row.failing_check}"
                assert row.hacks[0].kind == HackKind(caught[6:]) and row.failing_check.startswith(row.hacks[0].line)
                continue
            assert row.failing_check.startswith(f"wrong at {caught} ("), f"{name}/{path.name}: {row.failing_check}"
            assert not row.hacks, f"{name}/{path.name}: {row.failing_check}"


def test_every_hack_kind_that_can_happen_on_the_cpu_is_planted_in_the_corpus():
    planted = {f.stem[len("bad_hack_"):] for f in CORPUS.glob("*/bad_hack_*.py")}
    assert planted == {k.value for k in HackKind} - {HackKind.SIDE_STREAM.value}  # CUDA streams need a GPU


def test_without_the_hack_defences_a_seed_keyed_and_a_subclass_candidate_pass_and_with_them_they_are_named():
    problem = load_problem(CORPUS / "softmax.py")
    for kind in (HackKind.KEYED_TO_SEED, HackKind.NOT_PLAIN_TENSOR):
        path = CORPUS / "softmax" / f"bad_hack_{kind.value}.py"
        row, j = judge_candidate(problem, path, hacks=False)
        assert row.correct and not row.hacks and j is not None and not j.hacks, row.failing_check
        row, j = judge_candidate(problem, path)
        assert not row.correct and [h.kind for h in row.hacks] == [kind] and j is not None and j.hacks == row.hacks
        assert j.as_dict()["hacks"][0]["kind"] == kind.value and row.as_dict()["hacks"][0]["line"] == row.failing_check


def test_a_torch_function_replaced_at_import_is_put_back_before_the_next_candidate():
    problem = load_problem(CORPUS / "softmax.py")
    row, _ = judge_candidate(problem, CORPUS / "softmax" / "bad_hack_replaced_function.py")
    assert row.compiled and row.failing_check.startswith(
        "hack: replaced_function: the candidate replaced torch.softmax by fast_softmax (bad_hack_replaced_function.py:")
    assert torch.softmax is SOFTMAX  # torch's own again
    row, _ = judge_candidate(problem, CORPUS / "softmax" / "ok_max_subtracted.py")
    assert row.correct, row.failing_check
    row, _ = judge_candidate(problem, CORPUS / "softmax" / "bad_hack_replaced_function.py", hacks=False)
    assert not row.compiled and row.failing_check.startswith("does not import: it replaced torch.softmax")


def test_a_candidate_that_rewrites_its_reference_is_named_and_the_next_candidate_sees_the_problems_own():
    problem = load_problem(CORPUS / "softmax.py")
    patcher = CORPUS / "softmax" / "bad_hack_reference_patched.py"
    row, _ = judge_candidate(problem, patcher, hacks=False)
    assert row.correct, row.failing_check  # without the defences the rewritten reference agrees with it
    row, _ = judge_candidate(problem, CORPUS / "softmax" / "ok_max_subtracted.py", hacks=False)
    assert row.correct, row.failing_check  # its problem was imported afresh: the rewrite did not carry over
    row, j = judge_candidate(problem, patcher)
    assert not row.correct and j is not None and [h.kind for h in row.hacks][:1] == [HackKind.REFERENCE_PATCHED]
    assert row.failing_check.startswith("hack: reference_patched: the candidate rewrote the code of "
                                        "softmax.Model.forward with _warm (bad_hack_reference_patched.py:")
    import sys
    [now] = [m for n, m in sys.modules.items() if n.startswith("harness_kernelbench_problem_")
             and m.__file__ == str((CORPUS / "softmax.py").resolve())]
    assert now.Model.forward.__code__.co_name == "forward"  # put back
    row, _ = judge_candidate(problem, CORPUS / "softmax" / "ok_logsumexp.py")
    assert row.correct and not row.hacks, row.failing_check


def test_the_calls_between_regime_alone_names_an_output_buffer_reused(monkeypatch):
    from harness.check import reference_hacks

    monkeypatch.setattr(reference_hacks, "probes", lambda *a, **k: [])  # the regime's own finding, no probe's
    problem = load_problem(CORPUS / "softmax.py")
    row, _ = judge_candidate(problem, CORPUS / "softmax" / "bad_hack_output_reused.py", only=["calls between"])
    assert [h.kind for h in row.hacks] == [HackKind.OUTPUT_REUSED] and row.regimes == ["calls between"]
    row, _ = judge_candidate(problem, CORPUS / "softmax" / "ok_logsumexp.py", only=["calls between"])
    assert row.correct and not row.hacks, row.failing_check


PATCH_ALL = """import math
import sys
from pathlib import Path
import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]


def _fwd(self, x):
    return torch.softmax(x * 0.5, dim=-1)


for _m in list(sys.modules.values()):
    if Path(getattr(_m, "__file__", None) or "/").resolve().parent == ROOT and hasattr(_m, "Model"):
        _m.Model.forward = _fwd  # every problem of the folder
math.sqrt = lambda v: v ** 0.5  # and a function of the standard library


class ModelNew(nn.Module):
    forward = _fwd
"""


def test_a_folder_run_goes_on_past_a_candidate_that_patches_every_reference_and_no_other_row_changes(tmp_path,
                                                                                                     capsys):
    import math
    sqrt = math.sqrt
    for name, cands in (("softmax", ("ok_logsumexp.py",)), ("rmsnorm", ("ok_rsqrt.py",))):
        (tmp_path / f"{name}.py").write_text((CORPUS / f"{name}.py").read_text())
        (tmp_path / name).mkdir()
        for c in cands:
            (tmp_path / name / c).write_text((CORPUS / name / c).read_text())
    (tmp_path / "softmax" / "a_patch_all.py").write_text(PATCH_ALL)
    out = tmp_path / "rows.json"
    assert main(["kernelbench", str(tmp_path), "--only", "given", "--json", str(out)]) == 1
    assert math.sqrt is sqrt
    rows = {r["candidate"]: r for r in json.loads(out.read_text())["rows"]}
    patcher = rows["a_patch_all.py"]
    assert patcher["correct"] is False and [h["kind"] for h in patcher["hacks"]] == ["reference_patched"]
    assert re.match(r"hack: reference_patched: the candidate replaced (rmsnorm|softmax)\.Model\.forward by _fwd "
                    r"\(a_patch_all\.py:10\): the reference would run it", patcher["failing_check"]), patcher
    assert rows["ok_logsumexp.py"]["correct"] and rows["ok_rsqrt.py"]["correct"], capsys.readouterr().out
    assert list(rows) == ["ok_rsqrt.py", "a_patch_all.py", "ok_logsumexp.py"]  # every row, the JSON written


def test_a_candidate_that_breaks_its_reference_is_its_row_and_a_broken_problem_a_usage_error(tmp_path, capsys):
    (tmp_path / "p.py").write_text("import torch\nCONFIG = {'dim': 1}\n\nclass Model(torch.nn.Module):\n"
                                   "    def forward(self, x):\n        return torch.softmax(x, dim=CONFIG['dim'])\n\n"
                                   "def get_inputs():\n    return [torch.randn(3, 5)]\n\n"
                                   "def get_init_inputs():\n    return []\n")
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "a_breaks.py").write_text(
        "import sys\nimport torch\nfor m in list(sys.modules.values()):\n"
        "    if isinstance(getattr(m, 'CONFIG', None), dict):\n        m.CONFIG['dim'] = 7  # in place\n"
        "class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return torch.softmax(x, dim=1)\n")
    (tmp_path / "p" / "ok.py").write_text("import torch\nclass ModelNew(torch.nn.Module):\n"
                                          "    def forward(self, x):\n        return (x.log_softmax(1)).exp()\n")
    out = tmp_path / "rows.json"
    assert main(["kernelbench", str(tmp_path / "p.py"), str(tmp_path / "p"), "--only", "given",
                 "--json", str(out)]) == 1
    rows = {r["candidate"]: r for r in json.loads(out.read_text())["rows"]}
    assert rows["a_breaks.py"]["failing_check"].startswith(
        "the reference fails beside this candidate (it ran before the candidate's import): the reference raises "
        "on the given inputs: IndexError"), rows["a_breaks.py"]["failing_check"]
    assert rows["ok.py"]["correct"]  # its problem imported afresh: CONFIG as the file defines it
    (tmp_path / "p.py").write_text((tmp_path / "p.py").read_text().replace("CONFIG['dim']", "CONFIG['dim'] + 4"))
    capsys.readouterr()
    assert main(["kernelbench", str(tmp_path / "p.py"), str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert "the reference raises on the given inputs: IndexError" in err and len(err.strip().splitlines()) == 1


def test_a_problem_that_does_not_import_again_is_each_candidates_row(monkeypatch, tmp_path):
    monkeypatch.delenv("ONCE_ONLY_PROBLEM", raising=False)
    text = (CORPUS / "softmax.py").read_text()
    (tmp_path / "p.py").write_text("import os\nif os.environ.get('ONCE_ONLY_PROBLEM'):\n"
                                   "    raise RuntimeError('again')\nos.environ['ONCE_ONLY_PROBLEM'] = '1'\n" + text)
    problem = load_problem(tmp_path / "p.py")
    row, j = judge_candidate(problem, CORPUS / "softmax" / "ok_logsumexp.py")
    assert j is None and not row.compiled and row.failing_check.startswith(
        "its problem's file does not import again: import: RuntimeError: again (at "), row.failing_check


def test_one_problem_and_a_folder_of_candidates_with_json_and_csv(tmp_path, capsys):
    folder = tmp_path / "cands"
    folder.mkdir()
    for f in ("ok_logsumexp.py", "bad_no_max.py"):
        (folder / f).write_text((CORPUS / "softmax" / f).read_text())
    (folder / "a_broken.py").write_text("import torch\nclass ModelNew(torch.nn.Module:\n    pass\n")
    out, rows_csv = tmp_path / "rows.json", tmp_path / "rows.csv"
    code = main(["kernelbench", str(CORPUS / "softmax.py"), str(folder), "--json", str(out), "--csv", str(rows_csv)])
    assert code == 1
    text = capsys.readouterr().out
    assert "a_broken.py" in text and "does not import: SyntaxError" in text
    assert "3 candidate(s): fast_0 0.33" in text
    data = json.loads(out.read_text())
    rows = {r["candidate"]: r for r in data["rows"]}
    assert rows["a_broken.py"]["compiled"] is False and rows["a_broken.py"]["correct"] is False
    assert rows["ok_logsumexp.py"]["correct"] is True  # the run went on after the broken one
    assert rows["bad_no_max.py"]["failing_check"].startswith("wrong at scale x100 (float32): output")
    assert "scale x100" in rows["ok_logsumexp.py"]["regimes"]
    assert data["fast_p"]["fast_0"] == pytest.approx(1 / 3)
    assert data["verdicts"]["softmax/ok_logsumexp.py"]["ok"] is True
    assert rows["ok_logsumexp.py"]["hacks"] == [] and data["verdicts"]["softmax/ok_logsumexp.py"]["hacks"] == []
    with open(rows_csv, newline="") as fh:
        table = list(csv.DictReader(fh))
    assert list(table[0])[:8] == ["problem", "candidate", "compiled", "correct", "failing_check", "runtime_ms",
                                  "ref_runtime_ms", "speedup"]
    assert {r["candidate"]: r["correct"] for r in table}["ok_logsumexp.py"] == "True"


def test_one_correct_candidate_exits_0(capsys):
    assert main(["kernelbench", str(CORPUS / "gelu.py"), str(CORPUS / "gelu" / "ok_erf.py"),
                 "--only", "given", "--only", "signed"]) == 0
    assert "ok_erf.py" in capsys.readouterr().out


def test_a_problem_without_its_functions_or_candidate_is_a_usage_error(tmp_path, capsys):
    bad = tmp_path / "p.py"
    bad.write_text("import torch\nclass Model(torch.nn.Module):\n    pass\n")
    assert main(["kernelbench", str(bad), str(CORPUS / "gelu" / "ok_erf.py")]) == 2
    assert "has no get_inputs, get_init_inputs" in capsys.readouterr().err
    assert main(["kernelbench", str(CORPUS / "gelu.py")]) == 2
    assert "give its candidate" in capsys.readouterr().err
    assert main(["kernelbench", str(tmp_path)]) == 2
    assert "holds no problem NAME.py with a sibling folder NAME/" in capsys.readouterr().err


def test_a_csv_the_harness_did_not_write_is_left_as_it_is(tmp_path, capsys):
    mine = tmp_path / "notes.csv"
    mine.write_text("my,own,data\n")
    assert main(["kernelbench", str(CORPUS / "gelu.py"), str(CORPUS / "gelu" / "ok_erf.py"), "--only", "given",
                 "--csv", str(mine)]) == 2
    assert "was not written by this harness" in capsys.readouterr().err
    assert mine.read_text() == "my,own,data\n"


def test_fast_p_is_correct_and_faster_than_p_over_every_candidate():
    rows = [Row("p", "a", True, True, speedup=1.6, timed=True), Row("p", "b", True, True, speedup=0.9, timed=True),
            Row("p", "c", True, False, speedup=3.0), Row("p", "d", False, False)]
    fast = fast_p(rows, (0.0, 1.0, 1.5, 2.0))
    assert fast == {"fast_0": 0.5, "fast_1": 0.25, "fast_1.5": 0.25, "fast_2": 0.0}
    untimed = fast_p([Row("p", "a", True, True)], (0.0, 1.0))
    assert untimed == {"fast_0": 1.0, "fast_1": None}
    flagged = Row("p", "e", True, True, peak_flag="candidate at 900% of this machine's measured peak", timed=True)
    assert fast_p([*rows, flagged], (1.0,)) == {"fast_1": 0.2}  # timed, never fast
    cached = Row("p", "f", True, True, speedup=40.0, timed=True,
                 hacks=[HackFinding(HackKind.CACHED_BY_IDENTITY, "the candidate returned its earlier answer")])
    assert fast_p([*rows, cached], (0.0, 1.0)) == {"fast_0": 0.4, "fast_1": 0.2}  # a hack is never correct, nor fast


def test_time_gives_each_correct_row_kernelbenchs_columns_and_the_interval(tmp_path, capsys):
    out = tmp_path / "rows.json"
    assert main(["kernelbench", str(CORPUS / "gelu.py"), str(CORPUS / "gelu"), "--only", "given", "--time",
                 "--json", str(out)]) == 1
    text = capsys.readouterr().out
    assert "90% interval" in text.splitlines()[0] and "(fast_p above 0 needs --time)" not in text
    rows = {r["candidate"]: r for r in json.loads(out.read_text())["rows"]}
    for name, r in rows.items():
        if not r["correct"]:
            assert not r["timed"] and r["speedup"] is None and r["runtime_ms"] is None, name
            continue
        assert r["timed"] and r["runtime_ms"] > 0 and r["ref_runtime_ms"] > 0 and not r["peak_flag"], name
        assert r["speedup_low"] <= r["speedup"] <= r["speedup_high"], name
        assert r["speedup"] == pytest.approx(r["ref_runtime_ms"] / r["runtime_ms"], rel=0.5)


def test_a_row_beyond_the_peak_shows_the_flag_and_no_speedup(monkeypatch, tmp_path, capsys):
    """A planted impossible peak (1 byte/s): every timed candidate is beyond it, flagged, not fast."""
    import harness.cli.kernelbench as cli
    from harness.bench.pair import MachinePeak, time_pair

    slow = MachinePeak(device="cpu", dtype="float32", flops_per_s=1.0, bytes_per_s=1.0, matmul_size=1024,
                       copy_bytes=1 << 20)
    monkeypatch.setattr(cli, "time_pair", lambda *a, **k: time_pair(*a, **k, rounds=3, min_time=1e-3, peak=slow))
    out = tmp_path / "rows.json"
    assert main(["kernelbench", str(CORPUS / "gelu.py"), str(CORPUS / "gelu" / "ok_erf.py"), "--only", "given",
                 "--time", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    row = json.loads(out.read_text())["rows"][0]
    assert row["timed"] and row["speedup"] is None and row["speedup_low"] is None and row["runtime_ms"] > 0
    assert "of this machine's measured peak" in row["peak_flag"] and "beyond peak" in text
    assert f"gelu/ok_erf.py: {row['peak_flag']}" in text.splitlines()
    assert "1 candidate(s): fast_0 1.00, fast_0.5 0.00" in text


SLOWS_ITS_REFERENCE = """import os
import sys
import time
from pathlib import Path

import torch
from torch import nn

PROBLEM = Path(__file__).resolve().parent.with_suffix(".py")


def _slow(self, x):
    time.sleep(0.002)
    return torch.softmax(x, dim=1)


if os.environ.get("SLOWS_ITS_REFERENCE"):  # its second import: the one the timing makes
    for _m in list(sys.modules.values()):
        if getattr(_m, "__file__", None) and Path(_m.__file__).resolve() == PROBLEM:
            _m.Model.forward = _slow
os.environ["SLOWS_ITS_REFERENCE"] = "1"


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)
"""


def test_a_candidate_that_slows_its_reference_for_the_timing_is_a_hack_and_never_fast(monkeypatch, tmp_path):
    import harness.cli.kernelbench as cli
    from harness.bench.pair import time_pair

    monkeypatch.delenv("SLOWS_ITS_REFERENCE", raising=False)
    monkeypatch.setattr(cli, "time_pair", lambda *a, **k: time_pair(*a, **k, rounds=3, min_time=1e-3))
    (tmp_path / "softmax.py").write_text((CORPUS / "softmax.py").read_text())
    (tmp_path / "softmax").mkdir()
    (tmp_path / "softmax" / "a_slows.py").write_text(SLOWS_ITS_REFERENCE)
    (tmp_path / "softmax" / "ok_logsumexp.py").write_text((CORPUS / "softmax" / "ok_logsumexp.py").read_text())
    out = tmp_path / "rows.json"
    assert main(["kernelbench", str(tmp_path / "softmax.py"), str(tmp_path / "softmax"), "--only", "given",
                 "--time", "--json", str(out)]) == 1
    data = json.loads(out.read_text())
    rows = {r["candidate"]: r for r in data["rows"]}
    assert rows["a_slows.py"]["failing_check"].startswith(
        "hack: reference_patched: the candidate replaced softmax.Model.forward by _slow (a_slows.py:12)")
    assert rows["a_slows.py"]["correct"] is False and rows["ok_logsumexp.py"]["correct"] is True
    assert rows["ok_logsumexp.py"]["timed"] and data["fast_p"]["fast_0"] == 0.5


@pytest.mark.parametrize("load, disturbed", [(0.2, False), (None, False), (1e3, True)])
def test_a_row_timed_under_a_load_above_the_cores_is_marked_disturbed(monkeypatch, tmp_path, capsys, load,
                                                                      disturbed):
    """The load average injected into the pair's timing: above the cores the speedup is marked
    (d) with a line saying to time again; quiet, or unknown, it is not. The JSON and CSV carry
    the thread count, the readings and the disturbance."""
    import harness.cli.kernelbench as cli
    from harness.bench.pair import time_pair

    monkeypatch.setattr(cli, "time_pair", lambda *a, **k: time_pair(*a, **k, rounds=3, min_time=1e-3,
                                                                      load=lambda: load))
    out, table = tmp_path / "rows.json", tmp_path / "rows.csv"
    assert main(["kernelbench", str(CORPUS / "gelu.py"), str(CORPUS / "gelu" / "ok_erf.py"), "--only", "given",
                 "--time", "--threads", "2", "--json", str(out), "--csv", str(table)]) == 0
    lines = capsys.readouterr().out.splitlines()
    row = json.loads(out.read_text())["rows"][0]
    [written] = list(csv.DictReader(table.open()))
    assert row["threads"] == 2 and row["load_before"] == row["load_after"] == load
    assert written["threads"] == "2" and written["disturbed"] == row["disturbed"]
    shown = "unknown" if load is None else f"{load:.2f}-{load:.2f}"
    assert f"timed at 2 intra-op thread(s); 1-minute load average {shown} (before and after each pair)" in lines
    assert bool(row["disturbed"]) is disturbed and ("(d)" in lines[2]) is disturbed
    quiet_again = [x for x in lines if x.endswith("time again on a quiet machine")]
    assert quiet_again == ([f"gelu/ok_erf.py: (d) disturbed: timed at {row['disturbed']}: time again on a quiet "
                            "machine"] if disturbed else [])
    if disturbed:
        assert row["disturbed"].startswith("load average 1000.0 on ") and row["speedup"] is not None


def test_pairs_are_timed_at_one_thread_by_default_and_threads_needs_time(tmp_path, capsys):
    out = tmp_path / "rows.json"
    before = torch.get_num_threads()
    assert main(["kernelbench", str(CORPUS / "gelu.py"), str(CORPUS / "gelu" / "ok_erf.py"), "--only", "given",
                 "--time", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["rows"][0]["threads"] == 1 and torch.get_num_threads() == before
    assert "timed at 1 intra-op thread(s)" in capsys.readouterr().out
    for given, says in ((["--time", "--threads", "0"], "--threads 0 must be at least 1"),
                        (["--threads", "2"], "--threads 2 is the thread count --time times pairs at: add --time"),
                        (["--time", "--threads", "two"], "argument --threads: invalid int value: 'two'")):
        assert main(["kernelbench", str(CORPUS / "gelu.py"), str(CORPUS / "gelu" / "ok_erf.py"), *given]) == 2
        err = capsys.readouterr().err
        assert says in err and len(err.strip().splitlines()) == 1, err


def test_the_benchmarking_docs_commands_time_a_candidate(capsys):
    """Every command of the section: at the default thread count (1 on CPU), then at ``--threads``."""
    text = (CORPUS.parents[1] / "docs" / "benchmarking.md").read_text()
    section = text.split("## A candidate against its reference", 1)[1].split("\n## ", 1)[0]
    commands = [block.split("\n", 1)[0] for block in section.split("```bash\npython -m harness ")[1:]]
    assert len(commands) == 2 and all("--time" in c.split() for c in commands)
    for command, threads in zip(commands, (1, 2)):
        assert ("--threads" in command.split()) is (threads != 1)
        assert main(command.split()) == 0
        out = capsys.readouterr().out
        assert "90% interval" in out and "1 candidate(s): fast_0 1.00, fast_0.5 " in out
        assert f"timed at {threads} intra-op thread(s); 1-minute load average " in out


def test_the_hacks_docs_command_names_the_stale_buffer(capsys):
    text = (CORPUS.parents[1] / "docs" / "hacks.md").read_text()
    command = text.split("```console\n$ python -m harness ", 1)[1].split("\n", 1)[0].split("  # exit 1")[0]
    assert main(command.split()) == 1
    out = capsys.readouterr().out
    assert "bad_hack_stale_memory.py" in out and "hack: stale_memory: the candidate never wrote" in out


def test_a_transposed_weight_is_refused_with_the_map_that_fits_and_a_param_map_that_is_not_one_is_one_line(tmp_path):
    """Weights are never paired by a guess: a renamed weight held transposed is one line saying
    the map that fits (given as PARAM_MAP, it passes); a PARAM_MAP of other values is one line;
    a static map whose chunk sizes fit the given sizes only names the first regime it fails."""
    problem = load_problem(CORPUS / "gated.py")
    head = "import torch\nfrom torch import nn\nfrom harness import Chunk, Param, Transposed\n"
    body = ("class ModelNew(nn.Module):\n    def __init__(self, d_model, d_ff):\n        super().__init__()\n"
            "        self.a = nn.Linear(d_model, d_ff, bias=False)\n"
            "        self.gate_t = nn.Parameter(torch.empty(d_model, d_ff))\n"
            "    def forward(self, x):\n        return self.a(x) * torch.sigmoid(x @ self.gate_t)\n")
    files = {"transposed.py": head + body,
             "mapped.py": head + "PARAM_MAP = {'b.weight': Transposed(Param('gate_t'))}\n" + body,
             "not_a_map.py": head + "PARAM_MAP = {'b.weight': 'gate_t'}\n" + body,
             "static.py": head + "PARAM_MAP = {'a.weight': Chunk('w', 0, sizes=(12, 12)), "
                                 "'b.weight': Chunk('w', 1, sizes=(12, 12))}\n"
                                 "class ModelNew(nn.Module):\n    def __init__(self, d_model, d_ff):\n"
                                 "        super().__init__()\n"
                                 "        self.w = nn.Parameter(torch.empty(2 * d_ff, d_model))\n"
                                 "    def forward(self, x):\n        a, b = (x @ self.w.t()).chunk(2, -1)\n"
                                 "        return a * b.sigmoid()\n"}
    rows = {}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        rows[name] = judge_candidate(problem, tmp_path / name, only=["given", "sizes halved"])[0]
    assert rows["transposed.py"].failing_check == (
        "weights: the parameters pair neither by name nor by shape: the reference's 'b.weight' (12, 8) has no "
        "partner of that shape; the candidate's 'gate_t' (8, 12) has no partner of that shape; the transpose "
        "fits: give param_map={'b.weight': Transposed(Param(\"gate_t\"))}")
    assert rows["mapped.py"].correct, rows["mapped.py"].failing_check
    assert rows["not_a_map.py"].compiled and rows["not_a_map.py"].failing_check.startswith(
        "PARAM_MAP must be a dict of the reference's parameter names to entries")
    assert rows["static.py"].failing_check.startswith(
        "wrong at sizes halved: weights: cannot split size 12 into chunks of sizes [12, 12]"), rows["static.py"]
