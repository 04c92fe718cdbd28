"""Every command README.md and the manual (docs/*.md) show is run here, as written: the
commands are read from their fenced ``bash`` blocks (and ``console`` blocks: lines starting
with ``$ ``), so the documentation and the tool cannot drift apart.

- Each runs in a copy of the repository (nothing here is written to), with this Python
  environment first on PATH, and must exit 0, or the status its trailing comment names
  (``# exit 1``). Commands of one README block, or of one page of the manual, run in order
  in one copy; the blocks that measure a ``harness report`` of the project's variants share
  one copy, README first, then the manual's pages by name, so a later ``report`` finds the
  log an earlier one measured, as a user's second run would (a report of a user's
  ``--variants`` file measures in a copy of its own). Each copy's commands are one test class (``TestCopy_<copy>``), so
  pytest-xdist's ``--dist loadscope`` keeps a copy on one worker and runs independent
  copies side by side. (Not ``--dist loadgroup``: with pytest 9.2 its ``xdist_group`` marks
  are silently ignored, github.com/pytest-dev/pytest-xdist/issues/1386.)
- A ``text`` block right after ``<!-- expect -->`` is output the command before it must
  print: each of its lines, but ``...``, appears in the command's output (runs of spaces
  count as one; a line may stop short of the printed one's end).
- Fast commands run in the default suite; every other command is marked ``slow`` and
  runs with ``pytest -m slow``, which the README's test command runs after the default
  suite. A command with ``--full`` (the full sweep, hours) must start and write rows to
  its JSONL log within FULL_LIMIT_S seconds; once a row is written (polled every second)
  it is stopped with Ctrl-C (SIGINT), which it must survive without a traceback.
- Setup commands (``python3 -m venv``, activate, ``pip install``): the install must pin
  ``torch==2.13.0`` and install the project editable (``-e``), with the ``test`` extra
  when a pytest command is shown; the part after the setup runs in this environment. The
  test command's pytest runs are not re-run inside themselves: ``.ci/run`` must run exactly
  that command, and each of its pytest invocations must collect tests (``--collect-only``).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]  # README first, then the manual's pages
NESTED_ENV = "HARNESS_README_COMMAND"  # set for the commands' own processes
FULL_LIMIT_S = 300
POLL_S = 1.0
COMMAND_TIMEOUT_S = 1800
FAST = re.compile(r"^python -m harness list\b")  # seconds each; everything else is slow
# The documented timing defaults (harness.bench.cases.TIMING_ENV) the commands run with: the
# fewest rounds the statistics allow, each as short as one call of most cases. Every bench
# and report command goes through its whole sweep; only the timed repeats are fewer.
SMOKE_TIMING = {"HARNESS_MIN_TIME": "0.005", "HARNESS_ROUNDS": "3"}
SETUP = re.compile(r"^(python3? -m venv \S+|\. \S+/bin/activate|source \S+/bin/activate|pip install .+)$")

if os.environ.get(NESTED_ENV):  # a README command running pytest must not run the README again
    pytestmark = pytest.mark.skip(reason="inside a README command's own pytest run")


@dataclass(frozen=True)
class Command:
    text: str           # as shown, without its trailing comment
    line: int           # 1-based line in its file
    block: int          # index of its fenced block in its file
    marker: str | None  # the <!-- name --> the block sits in (main-command, test-command)
    source: str = "README.md"  # the file, relative to the repository
    status: int = 0     # the exit status it must end with (a trailing ``# exit N``)
    expect: tuple[str, ...] = ()  # lines its output must contain (an <!-- expect --> block after it)

    @property
    def id(self) -> str:
        where = "" if self.source == "README.md" else Path(self.source).stem + ":"
        return f"{where}L{self.line}:" + re.sub(r"[^\w./=-]+", "_", split_setup(self.text)[1])[:70].strip("_")

    @property
    def order(self) -> tuple[int, int]:
        """Its place in the documentation: the file (README first), then the line."""
        return SOURCES.index(self.source) if self.source in SOURCES else len(SOURCES), self.line


def strip_comment(line: str) -> str:
    return split_comment(line)[0]


def split_comment(line: str) -> tuple[str, str]:
    """(the command, its trailing ``# comment``), the comment outside quotes."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1:].strip()
    return line.rstrip(), ""


def _command(text: str, number: int, block: int, marker: str | None, source: str) -> Command:
    command, comment = split_comment(text)
    status = re.match(r"exit (\d+)\b", comment)
    return Command(command, number, block, marker, source, int(status.group(1)) if status else 0)


def readme_commands(text: str, source: str = "README.md") -> list[Command]:
    commands, marker, lang, block, expecting, expected = [], None, None, -1, False, None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if lang is None:
            if line == "<!-- expect -->":
                expecting = True
            elif m := re.fullmatch(r"<!-- (/?)([\w-]+) -->", line):
                marker = None if m.group(1) else m.group(2)
            elif line.startswith("```"):
                lang, block = line[3:].strip(), block + 1
                expected = [] if expecting and commands else None
                expecting = False
            continue
        if line.startswith("```"):
            if expected is not None:  # the lines the command before this block must print
                commands[-1] = replace(commands[-1], expect=tuple(expected))
            lang, expected = None, None
            continue
        if expected is not None:
            if raw.strip() and raw.strip() != "...":
                expected.append(raw.rstrip())
        elif lang == "console" and line.startswith("$ "):
            commands.append(_command(line[2:], number, block, marker, source))
        elif lang in ("bash", "sh", "shell") and line and not line.startswith("#"):
            commands.append(_command(line, number, block, marker, source))
    return commands


def printed(expected: str, output: str) -> bool:
    """Whether ``output`` holds the line ``expected`` (runs of spaces as one)."""
    squeeze = lambda text: re.sub(r"[ \t]+", " ", text.strip())  # noqa: E731
    return any(squeeze(expected) in squeeze(line) for line in output.splitlines())


def split_setup(command: str) -> tuple[list[str], str]:
    """(setup steps, the rest) of ``venv && activate && pip install ... && rest``."""
    parts = [p.strip() for p in command.split(" && ")]
    n = 0
    while n < len(parts) and SETUP.match(parts[n]):
        n += 1
    return parts[:n], " && ".join(parts[n:])


SOURCES = [str(p.relative_to(ROOT)) for p in DOCS]
README_COMMANDS = readme_commands(README.read_text())
COMMANDS = README_COMMANDS + [c for p in DOCS[1:] for c in readme_commands(p.read_text(), str(p.relative_to(ROOT)))]
TEST_COMMAND = next((c for c in README_COMMANDS if c.marker == "test-command"), None)
RUNNABLE = [c for c in COMMANDS if c is not TEST_COMMAND]


def _env() -> dict[str, str]:
    # A user's terminal has none of what this pytest session set: xdist's PYTEST_XDIST_WORKER
    # makes pytest-benchmark disable itself (and refuse --benchmark-only) in the command's pytest.
    env = {k: v for k, v in os.environ.items()
           if k not in ("HARNESS_VARIANTS", "PYTEST_ADDOPTS", "PYTEST_CURRENT_TEST")
           and not k.startswith("PYTEST_XDIST_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env[NESTED_ENV] = "1"
    env.update(SMOKE_TIMING)
    if os.environ.get("HARNESS_SUITE_CHECK_CACHE"):  # the run's shared check cache (tests/conftest.py)
        env["HARNESS_CHECK_CACHE"] = os.environ["HARNESS_SUITE_CHECK_CACHE"]
    return env


class Workdir:
    """A copy of the repository; remembers which commands already ran in it."""

    def __init__(self, path: Path):
        self.path = path
        self.done: dict[tuple[int, int], subprocess.CompletedProcess] = {}

    def run(self, command: Command) -> subprocess.CompletedProcess:
        if command.order not in self.done:
            _, rest = split_setup(command.text)
            if "--full" in rest:
                self.done[command.order] = self._run_limited(rest)
            else:
                self.done[command.order] = subprocess.run(
                    ["bash", "-c", rest], cwd=self.path, env=_env(), capture_output=True,
                    text=True, timeout=COMMAND_TIMEOUT_S)
        return self.done[command.order]

    def _logs(self) -> dict[Path, int]:
        return {p: p.stat().st_mtime_ns for p in (self.path / "reports").rglob("*.jsonl")}

    def _run_limited(self, rest: str) -> subprocess.CompletedProcess:
        """Run until it has written rows to a log (at most FULL_LIMIT_S), then Ctrl-C."""
        before = self._logs()
        proc = subprocess.Popen(["bash", "-c", f"exec {rest}"], cwd=self.path, env=_env(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=_as_in_a_terminal)
        start = time.monotonic()
        while proc.poll() is None and time.monotonic() - start < FULL_LIMIT_S:
            if self._written(before):
                break
            time.sleep(POLL_S)
        if proc.poll() is not None:  # it ended by itself (an error, or a sweep that short)
            out, err = proc.communicate()
            return subprocess.CompletedProcess(rest, proc.returncode, out, err)
        waited = time.monotonic() - start
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            return subprocess.CompletedProcess(rest, -9, out, err + "\n(did not stop on Ctrl-C)")
        written = self._written(before)
        ok = bool(written) and "Traceback" not in err and proc.returncode in (0, 130)
        note = (f"\n(stopped with Ctrl-C after {waited:.0f} s, exit {proc.returncode}; "
                f"logs written: {[str(p) for p in written]})")
        return subprocess.CompletedProcess(rest, 0 if ok else 1, out, err + note)

    def _written(self, before: dict[Path, int]) -> list[Path]:
        """Logs changed since ``before`` that hold at least one measured row."""
        return [p for p, t in self._logs().items()
                if before.get(p) != t and '"kind": "case"' in p.read_text()]


def _as_in_a_terminal() -> None:
    """Ctrl-C as a user's terminal delivers it: SIGINT at its default disposition. A test
    run started in the background (``cmd &`` in a non-interactive shell, as CI may start
    it) ignores SIGINT, every child inherits that, and the command could not be stopped."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _tracked_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, text=True)
    return listed.stdout.splitlines() if listed.returncode == 0 else []


def _copy_repository(copy: Path) -> None:
    files = _tracked_files()
    if files:
        for name in files:
            src = ROOT / name
            if src.is_file():
                (copy / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, copy / name)
    else:  # not a git checkout: everything but environments and caches
        shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(
            ".git", ".venv", "*.egg-info", "__pycache__", ".pytest_cache", ".benchmarks"))


def copy_group(command: Command) -> str:
    """The copy a command runs in: one per README block, one per page of the manual (a page's
    later commands read what its earlier ones wrote), but every block that measures a report
    of the project's variants (``harness report`` without ``--from`` or ``--variants``) shares
    one (a user's second ``report`` finds the first one's log). A report of a user's file
    measures other code (its log would not be the project's): a copy of its own."""
    block = [c for c in RUNNABLE if (c.source, c.block) == (command.source, command.block)]
    reports = [rest for c in block if re.match(r"^python -m harness report\b(?!.*--from)",
                                               rest := split_setup(c.text)[1])]
    if reports and not any("--variants" in r for r in reports):
        return "report"
    if command.source == "README.md" or reports:
        return ("" if command.source == "README.md" else Path(command.source).stem + "-") + f"block{command.block}"
    return Path(command.source).stem  # a page of the manual: its commands in order, in one copy


@pytest.fixture(scope="session")
def workdirs(tmp_path_factory):
    made: dict[str, Workdir] = {}

    def get(group: str) -> Workdir:
        if group not in made:
            copy = tmp_path_factory.mktemp(f"readme-{group}") / "repo"
            _copy_repository(copy)
            made[group] = Workdir(copy)
        return made[group]

    return get


@pytest.fixture(scope="session")
def workdir(workdirs) -> Workdir:
    return workdirs("collect")


def _shown(result: subprocess.CompletedProcess) -> str:
    return f"exit {result.returncode}\n--- stdout\n{result.stdout[-4000:]}\n--- stderr\n{result.stderr[-4000:]}"


def _params(group: str):
    for c in RUNNABLE:
        if copy_group(c) != group:
            continue
        _, rest = split_setup(c.text)
        yield pytest.param(c, marks=[] if FAST.match(rest) else [pytest.mark.slow], id=c.id)


def test_the_readme_shows_commands():
    shown = {c.text for c in README_COMMANDS}
    assert TEST_COMMAND is not None and any(c.marker == "main-command" for c in README_COMMANDS)
    assert any(t.startswith("python -m harness check") for t in shown)
    assert any(FAST.match(split_setup(c.text)[1]) for c in RUNNABLE)  # the default suite runs some
    assert any(c.source.startswith("docs/") for c in RUNNABLE)  # and the manual's


def test_the_readme_is_a_front_door():
    """At most 200 lines, and every page or file it links to exists."""
    text = README.read_text()
    assert len(text.splitlines()) <= 200, f"README.md has {len(text.splitlines())} lines"
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    assert links, "the README links to no page of the manual"
    missing = [link for link in links if "://" not in link and not (ROOT / link).exists()]
    assert not missing, f"README.md links to missing files: {missing}"


def test_the_install_brings_pytest_where_a_pytest_command_is_shown():
    """The main command installs the project; a shown pytest command needs the ``test``
    extra there, or pytest is missing (or another one runs)."""
    [main] = [c for c in README_COMMANDS if c.marker == "main-command"]
    install = next(s for s in split_setup(main.text)[0] if s.startswith("pip install"))
    runs_pytest = [c.text for c in RUNNABLE if re.search(r"(^|&& |\s)(python -m )?pytest\b", split_setup(c.text)[1])]
    assert runs_pytest, "no pytest command shown: this test would say nothing"
    extras = re.search(r"-e \"?\.\[([\w,]+)\]", install)
    assert extras and "test" in extras.group(1).split(","), (
        f"pytest is run by {runs_pytest[0]!r} but the main command installs {install!r}")


def test_commands_statuses_and_expected_output_are_read():
    text = ("```bash\npython -m harness check  # exit 1\n```\n\n<!-- expect -->\n```text\n"
            "== Contradictions\n...\n  a   b\n```\n```bash\npython -m harness list\n```\n")
    first, second = readme_commands(text, "docs/x.md")
    assert (first.text, first.status, first.expect) == ("python -m harness check", 1, ("== Contradictions", "  a   b"))
    assert (second.status, second.expect, second.source) == (0, (), "docs/x.md")
    assert printed("  a   b", "x\n a b c\n") and not printed("a c", "a b c")


def _command_test(group: str):
    @pytest.mark.parametrize("command", list(_params(group)))
    def test_readme_command(self, command: Command, workdirs):
        workdir = workdirs(group)
        for earlier in RUNNABLE:  # what its copy ran before it, in the documentation's order
            if copy_group(earlier) == group and earlier.order < command.order:
                result = workdir.run(earlier)
                assert result.returncode == earlier.status, (
                    f"an earlier command of its copy failed: {earlier.text} ({earlier.source})\n" + _shown(result))
        result = workdir.run(command)
        assert result.returncode == command.status, f"{command.text} ({command.source})\n" + _shown(result)
        assert "Traceback" not in result.stderr, _shown(result)
        missing = [line for line in command.expect if not printed(line, result.stdout + result.stderr)]
        assert not missing, (f"{command.source} shows output {command.text} does not print:\n"
                             + "\n".join(missing) + "\n" + _shown(result))

    return test_readme_command


# One class per copy of the repository: ``--dist loadscope`` runs a class on one worker.
for _group in dict.fromkeys(copy_group(c) for c in RUNNABLE):
    _name = "TestCopy_" + re.sub(r"\W", "_", _group)
    globals()[_name] = type(_name, (), {
        "__doc__": f"The README commands that run in the '{_group}' copy of the repository, in order.",
        "test_readme_command": _command_test(_group)})


@pytest.mark.parametrize("marker", ["main-command", "test-command"])
def test_setup_pins_torch_and_installs_the_project_editable(marker):
    [command] = [c for c in COMMANDS if c.marker == marker]
    setup, rest = split_setup(command.text)
    installs = [s for s in setup if s.startswith("pip install")]
    assert installs, f"{marker} installs nothing: {command.text}"
    words = installs[0].split()
    assert "torch==2.13.0" in words, "the install must pin torch==2.13.0 (the CPU wheel on disk)"
    assert "-e" in words, "the project must be installed editable (-e)"
    assert rest, f"{marker} runs nothing after its setup"


def test_ci_runs_exactly_the_readme_test_command():
    printed = subprocess.run([str(ROOT / ".ci" / "run"), "--print"], capture_output=True, text=True)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.strip() == TEST_COMMAND.text


@pytest.mark.parametrize("status", [0, 1, 5])
def test_ci_passes_on_the_commands_exit_status(tmp_path, status):
    """A failing pytest (1), or one that collected nothing (5), fails CI; 0 passes."""
    (tmp_path / ".ci").mkdir()
    shutil.copy2(ROOT / ".ci" / "run", tmp_path / ".ci" / "run")
    (tmp_path / "README.md").write_text(
        "<!-- test-command -->\n```bash\n"
        f"python3 -c 'raise SystemExit({status})' pytest && echo after\n"
        "```\n<!-- /test-command -->\n")
    run = subprocess.run([str(tmp_path / ".ci" / "run")], capture_output=True, text=True)
    assert run.returncode == status, run.stdout + run.stderr
    assert ("after" in run.stdout.splitlines()) == (status == 0)  # the chain stops at a failure


@pytest.mark.slow
def test_the_test_commands_pytest_runs_collect_tests(workdir: Workdir):
    """The test command's pytest invocations, collected (running them here would run this
    test inside itself); .ci/run runs them for real. Collected in one process (``-n 0``):
    xdist's workers would each collect the same tests again."""
    _, rest = split_setup(TEST_COMMAND.text)
    for part in rest.split(" && "):
        assert re.match(r"^python -m pytest\b", part), f"not a pytest run: {part}"
        run = subprocess.run(["bash", "-c", f"{part} -n 0 --collect-only -q"], cwd=workdir.path,
                             env={**_env(), NESTED_ENV: ""}, capture_output=True, text=True,
                             timeout=COMMAND_TIMEOUT_S)
        assert run.returncode == 0, _shown(run)
        assert re.search(r"\d+ tests? collected", run.stdout), _shown(run)


def test_commands_run_without_this_sessions_pytest_variables(monkeypatch):
    """Under xdist, PYTEST_XDIST_WORKER reached the README's own pytest and pytest-benchmark
    refused ``--benchmark-only`` there: a README command must see a user's environment."""
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    env = _env()
    assert not [k for k in env if k.startswith("PYTEST_XDIST_") or k == "PYTEST_CURRENT_TEST"]
    assert env[NESTED_ENV] == "1"
