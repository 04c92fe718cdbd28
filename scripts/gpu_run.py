"""A whole GPU run in one command, for a GPU machine lent for minutes: an operator's script,
not a command of the harness (``bash scripts/gpu-run.sh`` runs it; ``--help`` lists its options).

Steps, each its own process with its own timeout (an overrun is killed and logged; the
steps after it still run), each step's output in ``<out>/<device dir>/gpu-run-<step>.txt``
and one log ``<out>/<device dir>/gpu-run.log`` with each step's start, seconds, exit
status and timeout:

1. install: ``pip install --no-deps --no-build-isolation -e .`` (nothing else is installed);
2. side by side: the CUDA test cases (``pytest tests -k cuda``, xdist workers sized to the
   cores) and ``check --device cuda``: correctness, which shares the GPU harmlessly;
3. the quick report, alone on the GPU (its timings must not share it);
4. the full profile, alone, with the time left (``report --full --skip-check``: the check
   of step 2 covers the config matrix), resumable by the same command in a later window.

The budget (``--budget``, 480 s: one H100/H200 window of 8 minutes) is split by deadlines,
as fractions of it, from the first GPU run (an H200: the test cases beside the check took
106 s, the quick report 270 s, the full profile's groups 8-27 s each): install by 10%, the
tests and the check by 50% (1.8 times what they took), the quick report by 85% (its 270 s
fit when the steps before it end in 130 s), the full profile by 100%. A report is given
``--time-budget`` to its deadline, so it starts no group it cannot finish and still writes
its report; the step's timeout is the backstop. ``--device cpu`` rehearses the same steps on
the CPU (narrowed with ``--tests``, ``-k``, ``--family`` and ``--sweep-args``), and
``--dry-run`` prints the plan without running it.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's harness, installed or not

from harness.base.dtypes import resolve_device  # noqa: E402
from harness.base.errors import HarnessError  # noqa: E402
from harness.base.files import atomic_write  # noqa: E402
from harness.bench.sweep import device_dir  # noqa: E402
from harness.families.catalog import get_family  # noqa: E402

# Deadlines of the steps as fractions of the budget (see the module docstring).
DEADLINES = {"install": 0.10, "tests": 0.50, "check": 0.50, "quick": 0.85, "full": 1.0}
# A step with less time than this left before its deadline is not started (it could not
# finish anything): it is logged as skipped.
MIN_STEP_S = 10.0
# Seconds a report keeps between its --time-budget and its step's timeout (exit, flush).
EXIT_SLACK_S = 5.0
LOG_MAGIC = "# gpu-run log"
OUTPUT_MAGIC = "# gpu-run step"


def xdist_workers(cores: int) -> int:
    """pytest-xdist workers beside the check: 3/8 of the cores (6 of 16: what the first GPU
    run used beside the check), at least 1; the check gets the rest."""
    return max(1, cores * 3 // 8)


@dataclass
class Step:
    name: str
    argv: list[str]
    output: Path
    env: dict[str, str] = field(default_factory=dict)
    deadline: float = 0.0  # seconds from the run's start
    started: float | None = None  # seconds from the run's start
    seconds: float | None = None
    rc: int | None = None
    timeout: float | None = None
    timed_out: bool = False
    skipped: str = ""

    def line(self) -> str:
        if self.skipped:
            return f"{self.name:8} skipped: {self.skipped}"
        status = "TIMEOUT (killed)" if self.timed_out else f"rc={self.rc}"
        return (f"{self.name:8} start {self.started:6.1f} s  {self.seconds:6.1f} s  {status:16}  "
                f"timeout {self.timeout:.0f} s  {shlex.join(self.argv)}  -> {self.output.name}")


def refuse_foreign(path: Path, magic: str) -> None:
    """A file this command would replace must be one it wrote (its first line says so)."""
    if not path.exists():
        return
    try:
        with path.open(errors="replace") as fh:
            first = fh.readline()
    except OSError as exc:
        raise HarnessError(f"cannot read '{path}': {exc.strerror}") from None
    if not first.startswith(magic):
        raise HarnessError(f"'{path}' was not written by gpu-run; it is left as it is: give another --out")


def run_side_by_side(steps: list[Step], t0: float, budget: float) -> None:
    """Start ``steps`` together; each runs until it exits or its deadline (its timeout),
    when its process group is killed. A step with under ``MIN_STEP_S`` left is skipped."""
    running = []
    try:
        for step in steps:
            if step.skipped:
                continue
            now = time.monotonic() - t0
            step.timeout = step.deadline * budget - now
            if step.timeout < MIN_STEP_S:
                step.skipped = f"{step.timeout:.0f} s left before its deadline ({step.deadline:.0%} of {budget:g} s)"
                continue
            refuse_foreign(step.output, OUTPUT_MAGIC)
            step.output.parent.mkdir(parents=True, exist_ok=True)
            # written beside its output, renamed onto it when the step ends: a Ctrl-C or a second
            # run never leaves an earlier run's finished output cut short
            out = _partial(step.output).open("w")
            out.write(f"{OUTPUT_MAGIC} {step.name}: {shlex.join(step.argv)}\n")
            out.flush()
            step.started = now
            proc = subprocess.Popen(step.argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **step.env},
                                    start_new_session=True)  # its own process group: a timeout ends all of it
            running.append((step, proc, out))
        for step, proc, out in running:
            _wait(step, proc, out, t0)
    finally:  # a Ctrl-C: the steps still running end, their unfinished outputs go, finished ones stay
        for step, proc, out in running:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            out.close()
            _partial(step.output).unlink(missing_ok=True)


def _wait(step: Step, proc: subprocess.Popen, out, t0: float) -> None:
    """Wait for one step until its deadline; its output replaces the earlier run's only if it
    ran to its end (a step killed at its timeout, beside a finished output, is kept as
    ``NAME.timed-out``)."""
    left = t0 + step.started + step.timeout - time.monotonic()
    try:
        step.rc = proc.wait(timeout=max(left, 0.0))
    except subprocess.TimeoutExpired:
        step.timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        step.rc = proc.wait()
    step.seconds = time.monotonic() - t0 - step.started
    out.write(f"\n{OUTPUT_MAGIC} {step.name}: " +
              (f"killed at its timeout of {step.timeout:.0f} s" if step.timed_out else f"exit {step.rc}") + "\n")
    out.close()
    kept = step.timed_out and step.output.exists()
    target = step.output.with_name(step.output.name + ".timed-out") if kept else step.output
    os.replace(_partial(step.output), target)


def _partial(output: Path) -> Path:
    return output.with_name(f".{output.name}.partial-{os.getpid()}")


def plan_steps(args, device: str, folder: Path) -> list[list[Step]]:
    """The phases of the run: steps of one phase run side by side, phases one after another."""
    py = sys.executable
    cores = os.cpu_count() or 1
    workers = xdist_workers(cores)
    families = [a for f in args.family or [] for a in ("--family", f)]
    sweep = shlex.split(args.sweep_args or "")

    def step(name, argv, env=None):
        return Step(name, argv, folder / f"gpu-run-{name}.txt", env or {}, DEADLINES[name])

    install = step("install", [py, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "-e", "."])
    install.skipped = "--no-install" if args.no_install else ""
    phases: list[list[Step]] = [[install]]
    threads = str(max(1, cores // 2))  # the check's half of the cores; the test workers share the other
    phases.append([
        step("tests", [py, "-m", "pytest", *args.tests, "-k", args.k, "-q", "-rfE", "--durations=10",
                       "-p", "no:cacheprovider", *(["-n", str(workers), "--dist", "loadscope"] if workers > 1
                                                   else ["-n", "0"])],
             {"OMP_NUM_THREADS": str(max(1, cores // 2 // workers))}),
        step("check", [py, "-m", "harness", "check", "--device", device, *families], {"OMP_NUM_THREADS": threads}),
    ])
    for profile in ("quick", "full"):
        argv = [py, "-m", "harness", "report", "--device", device, f"--{profile}", "--out", str(args.out),
                "--no-progress", *families, *sweep]
        if profile == "full":
            argv.append("--skip-check")
        phases.append([step(profile, argv)])
    return phases


def cmd_gpu_run(args) -> int:
    t0 = time.monotonic()
    for family in args.family or []:
        get_family(family)  # a misspelt family is one line here, not an error in every step
    device = resolve_device(args.device)
    if device.startswith("cuda"):
        import torch

        name = torch.cuda.get_device_name(0)
    else:
        name = None
    folder = Path(args.out) / device_dir(device, name)
    phases = plan_steps(args, device, folder)
    if args.dry_run:
        print(f"gpu-run plan: device {device} ({name or 'cpu'}), budget {args.budget:g} s, output {folder}/")
        for phase in phases:
            for s in phase:
                if s.skipped:
                    print(f"  {s.name:8} skipped: {s.skipped}")
                    continue
                timed = f"{s.deadline * args.budget:.0f} s" + (" (with --time-budget to it)"
                                                               if s.name in ("quick", "full") else "")
                print(f"  {s.name:8} until {timed}{' beside the next' if len(phase) > 1 and s is phase[0] else ''}: "
                      f"{shlex.join(s.argv)}")
        return 0
    log = folder / "gpu-run.log"
    refuse_foreign(log, LOG_MAGIC)
    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise HarnessError(f"--out '{args.out}' is a file, not a folder; it is left as it is: give a folder")
    folder.mkdir(parents=True, exist_ok=True)
    header = [f"{LOG_MAGIC}: {_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M:%S} UTC, device {device}"
              f" ({name or 'cpu'}), {os.cpu_count()} cores, budget {args.budget:g} s"]
    done: list[Step] = []
    for phase in phases:
        for s in phase:
            if s.name in ("quick", "full"):  # the report starts no group it cannot finish in time
                budget = s.deadline * args.budget - (time.monotonic() - t0) - EXIT_SLACK_S
                s.argv += ["--time-budget", f"{max(budget, 1.0):.0f}"]
        run_side_by_side(phase, t0, args.budget)
        done += phase
        _write_log(log, header, done, t0)
        for s in phase:
            print(s.line(), flush=True)
    failed = [s for s in done if s.timed_out or (s.rc != 0 and not (s.name == "install" and args.no_install))]
    print(f"wrote {log}; {len(done) - len(failed)} of {len(done)} steps exited 0 in {time.monotonic() - t0:.0f} s")
    return 1 if failed else 0


def _write_log(log: Path, header: list[str], steps: list[Step], t0: float) -> None:
    lines = [*header, *(s.line() for s in steps), f"total {time.monotonic() - t0:.1f} s"]
    atomic_write(log, "\n".join(lines) + "\n")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="scripts/gpu-run.sh",
                                description="a whole GPU run in one command: install, CUDA tests beside the check, "
                                            "quick report, full profile in the time left; one log")
    p.add_argument("--device", default="cuda", help="cuda (default), or cpu to rehearse the run")
    p.add_argument("--budget", type=float, default=480.0, metavar="S",
                   help="seconds for the whole run (default %(default)g: an 8-minute GPU window)")
    p.add_argument("--out", default="reports", help="parent folder of <device dir>/ (default reports)")
    p.add_argument("--no-install", action="store_true", help="skip `pip install --no-deps -e .`")
    p.add_argument("--tests", nargs="+", default=["tests"], metavar="PATH", help="what pytest collects (default tests)")
    p.add_argument("-k", default="cuda", help="pytest's -k expression (default cuda: the CUDA test cases)")
    p.add_argument("--family", action="append", metavar="F", help="only this family, in the check and the reports")
    p.add_argument("--sweep-args", metavar="ARGS",
                   help="more options for both reports, e.g. \"--seq 8 --batch 1 --min-time 0.002\"")
    p.add_argument("--dry-run", action="store_true", help="print the steps, their commands and deadlines; run none")
    return p


def main(argv: list[str] | None = None) -> int:
    """Exit 0 when every step exited 0, 1 when one failed or timed out, 2 for a usage mistake
    (one line), 130 on Ctrl-C."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # a usage mistake (its line printed) or --help
        return exc.code if isinstance(exc.code, int) else 2
    try:
        return cmd_gpu_run(args)
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
