"""Reliability by construction: the one boundary around a user's code, the one way out for
what the harness writes, option meanings settled once, files across versions, outputs of
several files replaced whole. The misbehaving variants come from a generator
(tests/boundary_faults.py: every stage the harness calls a user's code at, crossed with every
way a call goes wrong), not from a list of cases."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import boundary_faults as faults
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.base import output
from harness.base.boundary import UserCodeError, guarded
from harness.base.errors import HarnessError
from harness.base.files import file_set
from harness.cli.common import VARIANTS_ENV
from harness.cli.main import build_parser, main
from harness.cli.validate import validate_args
from harness.registry import scratch
from harness.report.tables import LEGEND

ROOT = Path(__file__).resolve().parents[1]
NORM = ["--family", "norm", "--dtype", "float64", "--set", "d_model=8"]
CONTROLS = ("torch_layernorm", "annotated_preln")  # correct variants judged beside the generated ones
STATUSES = {0, 1, 2, 74, 130, 141}               # docs/errors-and-exit-codes.md


@pytest.fixture(autouse=True)
def _no_env_variants(monkeypatch):
    monkeypatch.delenv(VARIANTS_ENV, raising=False)


def _run(argv, capsys) -> tuple[int, str, str]:
    with scratch():
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err, err[-3000:]
    assert code in STATUSES, (argv, code)
    return code, out, err


# -- the boundary, crossed with every stage and every fault ------------------------------------------


def test_every_generated_fault_is_its_variants_error_row_and_the_others_hold(tmp_path, capsys):
    """Every (stage, fault) but a hang (tested below, it waits for the timeout) through `check`:
    one error row naming the stage and the fault (and the user's file and line where it
    raised); a fault that only prints is judged correct, its printing kept off stdout; the
    correct variants beside them are judged as ever; the run ends with exit 1, no traceback."""
    crossed = [(s, f) for s, f in faults.cases() if f != "hang"]
    path = faults.variants_file(tmp_path / "gen_faults.py", crossed)
    report = tmp_path / "check.json"
    argv = ["check", *NORM, "--variants", str(path), "--json", str(report)]
    argv += [x for v in (*CONTROLS, *(faults.vid(s, f) for s, f in crossed)) for x in ("--variant", v)]
    code, out, err = _run(argv, capsys)
    assert code == 1
    assert "noise" not in out
    specs = json.loads(report.read_text())["specs"]
    wrong = []
    for stage, fault in crossed:
        mine = [s for s in specs if s["variant"] == faults.vid(stage, fault)]
        words = faults.expected(stage, fault)
        if not mine:
            wrong.append(f"{stage}/{fault}: no row")
        elif words is None:
            if not all(s["ok"] for s in mine):
                wrong.append(f"{stage}/{fault}: a variant that only prints is not judged correct: {mine[0]['note']}")
        elif any(s["ok"] for s in mine) or not all(all(w in s["note"] for w in words) for s in mine):
            wrong.append(f"{stage}/{fault}: {[s['note'][:200] for s in mine]} lacks {words}")
        elif fault not in faults.ANSWERS[stage] and stage != "call" \
                and not any(faults.STAGE_NAME[stage] in s["note"] for s in mine):
            wrong.append(f"{stage}/{fault}: the stage is not named: {mine[0]['note'][:200]}")
    controls = [s for s in specs if s["variant"] in CONTROLS]
    assert controls and all(s["ok"] for s in controls), [s["note"] for s in controls if not s["ok"]]
    assert not wrong, "\n".join(wrong)
    print(f"generator: {len(crossed)} variants through check")  # the count, for the record


def test_a_hang_is_stopped_at_the_timeout_once_and_a_keyboard_interrupt_from_code_is_not_ctrl_c(monkeypatch):
    monkeypatch.setenv("HARNESS_CALL_TIMEOUT", "0.3")

    def hang():
        while True:
            time.sleep(0.01)

    call = guarded("call", hang)
    started = time.perf_counter()
    with pytest.raises(UserCodeError, match="ran past 0.3 s"):
        call()
    with pytest.raises(UserCodeError, match="an earlier call; not called again"):
        call()  # not waited for a second time
    assert time.perf_counter() - started < 5

    def interrupt():
        raise KeyboardInterrupt

    with pytest.raises(UserCodeError, match="raised KeyboardInterrupt itself"):
        guarded("call", interrupt)()


def test_a_program_alarm_set_after_the_guard_is_left_alone_and_the_guard_comes_back_after_it(monkeypatch):
    monkeypatch.setenv("HARNESS_CALL_TIMEOUT", "0.3")

    def hang():
        while True:
            time.sleep(0.01)

    with pytest.raises(UserCodeError, match="ran past 0.3 s"):
        guarded("call", hang)()  # the guard's handler installed

    def own(signum, frame):
        raise AssertionError("the program's own alarm rang")

    signal.signal(signal.SIGALRM, own)  # the program replaces it with its own
    try:
        assert guarded("call", lambda: 7)() == 7
        assert signal.getsignal(signal.SIGALRM) is own  # not taken over
    finally:
        signal.signal(signal.SIGALRM, signal.SIG_DFL)  # the program gives it back: the guard stops hangs again
    with pytest.raises(UserCodeError, match="ran past 0.3 s"):
        guarded("call", hang)()


SOFTMAX = torch.nn.functional.softmax


@pytest.mark.parametrize("fault", faults.IMPORT_FAULTS)
def test_a_file_whose_import_goes_wrong_is_one_line(fault, tmp_path, capsys):
    path = faults.import_file(tmp_path / f"gen_import_{fault}.py", fault)
    code, out, err = _run(["list", "--family", "norm", "--variants", str(path)], capsys)
    if fault == "print":  # printing at import is harmless: kept off stdout, shown on stderr
        assert code == 0 and "noise" not in out and "noise from the variant" in err
        return
    if fault == "global_dtype":  # torch's default dtype changed at import: undone, and said
        assert code == 0 and "default dtype to float64" in err and torch.get_default_dtype() == torch.float32
        return
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert {"exit": "SystemExit(3)"}.get(fault, faults.MESSAGE[fault]) in err and path.name in err
    assert torch.nn.functional.softmax is SOFTMAX  # a replaced torch function is put back


def test_os_exit_in_a_forked_child_exits_and_in_a_thread_ends_the_process_with_a_line(tmp_path):
    """Behind the boundary ``os._exit`` raises only in the process and thread that entered it:
    a forked child (multiprocessing's) exits as asked; a thread of the user's ends the
    process, after one line naming where (it cannot be stopped from there)."""
    from harness.base import process_state
    from harness.base.boundary import user_code

    with user_code("import"):
        pid = os.fork()
        if pid == 0:  # the child: os._exit must end it, never return into the parent's code
            try:
                os._exit(0)
            finally:
                process_state._REAL_EXIT(3)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and os._exit is process_state._REAL_EXIT
    script = tmp_path / "threaded.py"
    script.write_text("import os, threading\nfrom harness.base.boundary import user_code\n\n"
                      "with user_code('import'):\n"
                      "    t = threading.Thread(target=lambda: os._exit(7))\n    t.start()\n    t.join()\n"
                      "print('not reached')\n")
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 7 and "not reached" not in run.stdout
    assert run.stderr.strip().splitlines() == [f"error: os._exit(7) called in a thread at {script}:5: the process ends"]


def test_a_declaration_the_oracle_refuses_is_refused_at_load(tmp_path, capsys):
    text = (ROOT / "examples" / "my_attention.py").read_text().replace('"fully_masked_row": "NaN",',
                                                                         '"fully_masked_row": "NaN", '
                                                                         '"mask_style": "additive_log",')
    path = tmp_path / "additive.py"
    path.write_text(text)
    code, _, err = _run(["list", "--variants", str(path)], capsys)
    assert code == 2 and "has no oracle" in err and "additive_log" in err and len(err.splitlines()) == 1


# -- the model families: a decoding step that fails is its rows, the command goes on ----------------

DECODE_FAULT = '''
from harness import register, register_decoding
from variants.llama import BLOCK, LlamaModel, call_model, llama_prepare, llama_step, model_map


def step(model, state, ys):
    out = llama_step(model, state, ys)
    if ys.size(1) > 3:
        [][1]
    return out


register(id="bad_cache_step", family="llama_model", source="test", build=lambda cfg: LlamaModel(cfg),
         call=call_model, param_map=model_map(), traits={**BLOCK, "tied_output": False})
register_decoding("llama_model", "bad_cache_step", prepare=llama_prepare, step=step,
                  cache="rotated k and v per layer", padding=("right", "left"))
'''


@pytest.mark.slow
def test_a_failing_cache_step_is_its_rows_in_check_and_decode(tmp_path, capsys):
    path = tmp_path / "bad_decode.py"
    path.write_text(DECODE_FAULT)
    report = tmp_path / "check.json"
    code, _, _ = _run(["check", "--family", "llama_model", "--dtype", "float64", "--variants", str(path),
                       "--variant", "bad_cache_step", "--json", str(report)], capsys)
    caches = json.loads(report.read_text())["caches"]
    assert code == 1 and [c["ok"] for c in caches] == [False]
    assert "decoding step: IndexError" in caches[0]["error"] and "bad_decode.py" in caches[0]["error"]
    out_json = tmp_path / "decode.json"
    code, out, _ = _run(["decode", "--family", "llama_model", "--variants", str(path), "--json", str(out_json)],
                        capsys)
    data = json.loads(out_json.read_text())
    assert code == 1 and "== Errors" in out
    mine = [r for rows in data.values() if isinstance(rows, list) for r in rows
            if "bad_cache_step" in (r.get("variant"), r.get("a"), r.get("b"))]
    assert mine and all(not r["ok"] for r in mine if r.get("error"))
    others = [r for r in data["cache"] if r["variant"] != "bad_cache_step"]
    assert others and all(r["ok"] for r in others)


def test_decode_takes_variant_and_refuses_an_unknown_one(capsys):
    code, _, err = _run(["decode", "--family", "llama_model", "--variant", "nope"], capsys)
    assert code == 2 and "no model 'nope'" in err


# -- the way out ---------------------------------------------------------------------------------


class _Closed(io.TextIOBase):
    def write(self, s):
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self):
        raise BrokenPipeError(32, "Broken pipe")


def test_a_closed_pipe_ends_quietly_with_its_status(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdout", _Closed())
    with scratch():
        code = main(["list", "--family", "norm"])
    assert code == output.EXIT_CLOSED_PIPE
    assert capsys.readouterr().err == ""


def test_a_full_disk_on_stdout_is_one_line(monkeypatch, capsys):
    full = open("/dev/full", "w")
    monkeypatch.setattr(sys, "stdout", full)
    with scratch():
        code = main(["list", "--family", "norm"])
    assert code == output.EXIT_OUTPUT
    err = capsys.readouterr().err
    assert err.splitlines() == ["error: cannot write to standard output: No space left on device"]


def test_a_full_disk_on_a_file_is_one_line_naming_it(tmp_path, capsys):
    code, _, err = _run(["list", "--family", "norm", "--json", "/dev/full"], capsys)
    assert code == 2 and "/dev/full" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("encoding", ["latin-1", "ascii"])
def test_symbols_degrade_to_ascii_and_the_legend_says_which(monkeypatch, encoding):
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding=encoding)
    monkeypatch.setattr(sys, "stdout", stream)
    output.install()
    print(LEGEND)
    stream.flush()
    text = raw.getvalue().decode(encoding)
    assert "= identical" in text and "~ equivalent" in text and "# different" in text and "< less precise" in text
    symbols = [line.split()[0] for line in text.replace("  ", "\n").splitlines() if line.strip()]
    assert len(set(symbols)) == len(symbols), symbols  # each ASCII symbol stands for one thing


def test_dash_is_stdout_and_the_text_goes_to_stderr(capsys):
    code, out, err = _run(["list", "--family", "norm", "--json", "-"], capsys)
    assert code == 0
    rows = json.loads(out)["variants"]
    assert {r["family"] for r in rows} == {"norm"} and "torch_layernorm" in err
    assert not Path("-").exists()


def test_tilde_is_expanded(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HOME", str(tmp_path))
    code, _, _ = _run(["list", "--family", "norm", "--json", "~/r.json"], capsys)
    assert code == 0 and (tmp_path / "r.json").is_file() and not Path("~").exists()


# -- option meanings, by Hypothesis -------------------------------------------------------------------

PATHS = st.sampled_from(["-", "~/h.json", "FOLDER", "FOLDER/", "FILE", "new/", "/proc/x.json", "/dev/null", "/sys/x",
                         "ok.json"])
FLAGS = st.lists(st.sampled_from([("--json", "P"), ("--family", "norm"), ("--family", "norm"),
                                  ("--device", "cpu"), ("--set", "d_model=8"), ("--set", "d_model=16"),
                                  ("--set", "heads=2"), ("--pairs", "all"), ("--var", "x")]), max_size=4)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(command=st.sampled_from(["check", "list", "differences", "copy-task", "report"]), flags=FLAGS, path=PATHS,
       before=st.booleans())
def test_the_parser_settles_paths_and_repeated_flags(tmp_path, command, flags, path, before):
    folder, file = tmp_path / "folder", tmp_path / "file.json"
    folder.mkdir(exist_ok=True)
    file.write_text("{}")
    value = {"FOLDER": str(folder), "FOLDER/": f"{folder}/", "FILE": str(file)}.get(path, path)
    if command in ("differences", "copy-task", "report"):
        flags = [("--out", "P")]
    argv = [x for flag, v in flags for x in (flag, value if v == "P" else v)]
    argv = [*argv, command] if before else [command, *argv]
    parser = build_parser()
    from harness.cli.arguments import subcommand_first

    err = io.StringIO()
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(sys, "stderr", err)
            args = parser.parse_args(subcommand_first(parser, argv))
    except SystemExit as exc:
        assert exc.code == 2 and len(err.getvalue().splitlines()) == 1, err.getvalue()
        return
    try:
        validate_args(args)
    except HarnessError as exc:  # refused after parsing, in one line (a --set key given twice)
        assert "\n" not in str(exc)
        return
    given_ = vars(args)
    assert given_["command"] == command
    for dest in ("json", "out"):
        p = given_.get(dest)
        if p is None or p == "-":
            continue
        assert "~" not in p and not p.startswith(("/proc", "/sys"))
        kind_is_file = dest == "json" or command == "differences"
        assert not (kind_is_file and (Path(p).is_dir() or p.endswith("/"))), p
        assert kind_is_file or not Path(p).is_file(), p
    assert "--var" not in argv  # an abbreviation is never taken for --variant
    sets = [v for f, v in flags if f == "--set"]
    keys = [s.split("=")[0] for s in sets]
    assert len(keys) == len(set(keys)) or command != "check"
    assert [f for f, _ in flags].count("--device") <= 1 and [f for f, _ in flags].count("--pairs") <= 1


def test_a_repeated_set_key_is_refused(capsys):
    code, _, err = _run(["check", *NORM, "--set", "d_model=16"], capsys)
    assert code == 2 and "--set d_model is given twice" in err


def test_version_and_options_before_the_command(capsys):
    assert _run(["--version"], capsys)[0] == 0
    code, out, _ = _run(["--family", "norm", "list"], capsys)
    assert code == 0 and "torch_layernorm" in out


# -- files across versions -------------------------------------------------------------------------


def _rows() -> list[dict]:
    return json.loads((ROOT / "reports" / "cpu" / "full" / "results.json").read_text())["rows"][:3]


def test_a_later_schema_is_refused_naming_field_and_versions(tmp_path, capsys):
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"schema": 99, "rows": _rows()}))
    code, _, err = _run(["report", "--from", str(path), "--out", str(tmp_path / "rep")], capsys)
    assert code == 2 and "schema 99" in err and "field 'schema'" in err and len(err.splitlines()) == 1


def test_a_byte_order_mark_is_tolerated_and_two_logs_in_one_file_refused(tmp_path):
    from harness.base.errors import ResultsFileError
    from harness.bench.log import LOG_MAGIC, load_rows

    header = json.dumps({"harness_log": LOG_MAGIC, "kind": "log", "schema": 2, "stamp": {}})
    log = tmp_path / "bench.jsonl"
    log.write_bytes(b"\xef\xbb\xbf" + "\n".join([header, *map(json.dumps, _rows())]).encode() + b"\n")
    assert len(load_rows(log)) == 3
    both = tmp_path / "both.jsonl"
    both.write_text(log.read_text(encoding="utf-8-sig") * 2)
    with pytest.raises(ResultsFileError, match="two logs concatenated"):
        load_rows(both)


def test_a_row_without_a_field_the_tables_need_is_refused_naming_it(tmp_path, capsys):
    rows = _rows()
    for r in rows:
        r["fam"] = r.pop("family")
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"rows": rows}))
    code, _, err = _run(["report", "--from", str(path), "--out", str(tmp_path / "rep")], capsys)
    assert code == 2 and "has no 'family'" in err


# -- whole or nothing ------------------------------------------------------------------------------


def test_an_interrupted_set_of_files_leaves_the_old_set(tmp_path):
    old = {"a.json": "old a", "a.md": "old md", "a.png": "old png"}
    for name, text in old.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(KeyboardInterrupt):
        with file_set(tmp_path) as stage:
            (stage / "a.json").write_text("new a")
            raise KeyboardInterrupt
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == old
    with file_set(tmp_path) as stage:
        for name in old:
            (stage / name).write_text("new")
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == dict.fromkeys(old, "new")


def test_ctrl_c_during_a_copy_task_rerun_keeps_the_old_three_files(tmp_path, monkeypatch, capsys):
    from harness.check.results import CopyRun
    from harness.systems import copy_task

    calls = []

    def fake(variant, decoding, cfg, steps, batch=32, **kw):
        calls.append(variant.id)
        if len(calls) == 2 and interrupt:
            raise KeyboardInterrupt
        return CopyRun(variant.id, steps, [2.0, 1.0], 0.5, 0.5, 0.1)

    monkeypatch.setattr(copy_task, "train_copy", fake)
    interrupt = False
    out = tmp_path / "models"
    assert _run(["copy-task", "--out", str(out), "--steps", "2"], capsys)[0] == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert set(before) == {"copy_task.json", "copy_task.md", "copy_task.png"}
    interrupt, calls[:] = True, []
    assert _run(["copy-task", "--out", str(out), "--steps", "3"], capsys)[0] == 130
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


# -- from outside: a few real processes ------------------------------------------------------------------


def _harness(*args, env=None, stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    full.pop(VARIANTS_ENV, None)
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT, env=full, stdout=stdout,
                          stderr=subprocess.PIPE, encoding="latin-1", timeout=300)  # every byte reads


@pytest.mark.slow
def test_from_outside_closed_pipe_full_disk_and_c_and_latin1_locales():
    reader = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.readline()"], stdin=subprocess.PIPE)
    proc = subprocess.Popen([sys.executable, "-m", "harness", "list"], cwd=ROOT, stdout=reader.stdin,
                            stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
    reader.stdin.close()
    reader.wait()
    _, err = proc.communicate(timeout=300)
    assert proc.returncode in (0, 141) and b"Traceback" not in err, err
    with open("/dev/full", "w") as full:
        done = _harness("list", stdout=full)
    assert done.returncode == 74 and done.stderr.strip().splitlines() == [
        "error: cannot write to standard output: No space left on device"]
    for env in ({"LC_ALL": "C", "PYTHONIOENCODING": "ascii"}, {"PYTHONIOENCODING": "latin-1"}):
        done = _harness("check", *NORM, "--variant", "torch_layernorm", env=env)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
        assert "~ equivalent" in done.stdout


@pytest.mark.slow
def test_the_pytest_plugin_gives_each_generated_fault_its_failure(tmp_path):
    crossed = [(s, f) for s, f in faults.cases() if f not in ("hang",) and s in ("build", "call", "param_map")]
    path = faults.variants_file(tmp_path / "gen_faults.py", crossed)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop(VARIANTS_ENV, None)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q",
                           "--variants", str(path), str(path)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    text = done.stdout + done.stderr
    assert done.returncode == 1 and "INTERNALERROR" not in text, text[-3000:]
    for stage, fault in crossed:
        if faults.expected(stage, fault) is not None:
            assert faults.vid(stage, fault) in text, (stage, fault)


@pytest.mark.slow
def test_generated_faults_through_bench_with_the_memory_probe_and_diff(tmp_path, capsys):
    """The call- and build-stage faults through `bench` (the memory probe's protocol included:
    a variant that prints must not corrupt it) and `diff`: each its error row, the control's
    rows measured as ever."""
    crossed = [(s, f) for s in ("build", "call") for f in ("raise", "print", "interrupt", "exit", "skip", "tuple",
                                                            "meta", "not_module") if f in faults.CONTROL
               or f in faults.ANSWERS[s]]
    path = faults.variants_file(tmp_path / "gen_faults.py", crossed)
    rows_json = tmp_path / "rows.json"
    argv = ["bench", "--family", "norm", "--seq", "8", "--batch", "1", "--min-time", "0.002", "--rounds", "3",
            "--no-progress", "--threads", "1", "--device", "cpu", "--variants", str(path), "--json", str(rows_json),
            "--log", str(tmp_path / "b.jsonl"), "--variant", "torch_layernorm"]
    argv += [x for s, f in crossed for x in ("--variant", faults.vid(s, f))]
    code, out, _ = _run(argv, capsys)
    assert code in (0, 1) and "noise" not in out
    rows = [r for r in json.loads(rows_json.read_text())["rows"] if r.get("kind", "case") == "case"]
    for stage, fault in crossed:
        mine = [r for r in rows if r.get("variant") == faults.vid(stage, fault)]
        assert mine, (stage, fault)
        words = faults.expected(stage, fault)
        if words is None:
            assert all(r["status"] == "ok" for r in mine), mine[0].get("error")
            assert all(r.get("rss_peak_bytes") is not None or "probe" not in str(r.get("rss_note")) for r in mine)
        else:
            assert all(r["status"] != "ok" and words[0] in (r.get("error") or "") for r in mine), (stage, fault,
                                                                                                   mine[0])
    control = [r for r in rows if r.get("variant") == "torch_layernorm"]
    assert control and all(r["status"] == "ok" for r in control)
    for stage, fault in crossed[:3]:
        code, out, err = _run(["diff", "norm", faults.vid(stage, fault), "torch_layernorm", "--dtype", "float64",
                               "--set", "d_model=8", "--variants", str(path)], capsys)
        assert code in (0, 1, 2) and len(err.strip().splitlines()) <= 1 and "noise" not in out


def test_a_map_mistake_is_named_where_the_map_is_written():
    """A chunk counted from one is refused where the map is written; a weight the module holds
    as a buffer is named as such, not as a parameter it lacks."""
    import torch
    from torch import nn

    from harness.base.errors import PortingError
    from harness.porting.entries import Chunk, Param, PerHeadChunk
    from harness.porting.portmap import PortMap

    with pytest.raises(ValueError, match=r"index 2 is outside 0..1 \(chunks are counted from 0\)"):
        Chunk("wb", 2, 2)
    with pytest.raises(ValueError, match="outside 0..2"):
        PerHeadChunk("qkv", 3, 3, heads=2)

    class Buffers(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("weight", torch.ones(4))
            self.bias = nn.Parameter(torch.zeros(4))

    with pytest.raises(PortingError, match="holds as a buffer, not a parameter"):
        PortMap("norm/mine", Buffers(), {"weight": Param("weight"), "bias": Param("bias")},
                {"weight": (4,), "bias": (4,)})


def test_a_malformed_call_timeout_is_one_line_and_a_closed_stdout_no_traceback(tmp_path, monkeypatch, capsys):
    """$HARNESS_CALL_TIMEOUT that is not a number of seconds is refused before any work (it
    was silently replaced by the default); a stdout the shell closed (`>&-`) is no traceback."""
    for bad in ("abc", "-5", "0.5s", "inf"):
        monkeypatch.setenv("HARNESS_CALL_TIMEOUT", bad)
        assert main(["list", "--family", "norm"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and f"$HARNESS_CALL_TIMEOUT={bad!r} is not a number of seconds" in err
    monkeypatch.setenv("HARNESS_CALL_TIMEOUT", "0")
    monkeypatch.setattr(sys, "stdout", None)
    assert main(["list", "--json", str(tmp_path / "list.json"), "--family", "norm"]) == 0
    assert (tmp_path / "list.json").exists()


def test_a_bool_or_integer_answer_is_named_by_check_and_different_in_diff(tmp_path, capsys):
    """A comparison or a cast at the end of forward (a bool or int64 output): check names it on
    the variant's rows; diff calls it different, with no traceback from the comparison core."""
    crossed = [("call", "boolean"), ("call", "integer")]
    path = faults.variants_file(tmp_path / "gen_faults.py", crossed)
    for stage, fault in crossed:
        code, out, err = _run(["diff", "norm", faults.vid(stage, fault), "torch_layernorm", "--dtype", "float64",
                               "--set", "d_model=8", "--variants", str(path)], capsys)
        assert code in (0, 1) and "Traceback" not in err and "verdict: different" in out, (fault, err[-500:])
