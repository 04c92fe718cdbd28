"""The pytest plugin of the harness (entry point ``pytest11``, active wherever the
package is installed).

    pytest --variants mine.py            # from any directory; repeatable
    HARNESS_VARIANTS=mine.py pytest      # the same (os.pathsep-separated list)

Each file is loaded before collection (with every installed variant pack) and collected
as tests of its own: one per (variant, device, aspect), named ``family/id[device-aspect]``
(``pytest -k my_einsum``; ``-k gradcheck``, ``-k dropout``, ``-k precision``,
``-k semantics`` select one aspect, as they do for the project's own variants), checking
the variant against the spec its declared traits define (``harness.check.api.check_one_variant``,
run once per variant and device and shared by its aspects: float64 semantics and the
precision dtypes over the config matrix, gradcheck, dropout) on every case that applies to
it. A file
that cannot be loaded is a usage error (exit 4), with one line naming the problem.

The configs are ``check``'s: the default matrix, or what ``--set KEY=VALUE`` (repeatable)
makes of it, with the same meaning and the same refusals; a repository pins its own in its
pytest ini (``pyproject.toml``'s ``[tool.pytest.ini_options]``)::

    attention_harness_variants = ["my_mqa.py"]    # loaded as --variants, relative to the ini
    attention_harness_set = ["kv_heads=1"]        # a --set on the command line replaces its key

An ``attention-harness`` section after pytest's summary says once what each variant was not
checked on ("checked on 1 of 5 configs; not buildable: ...") and, per failure, one line: the
mistake ``check`` names and the ``check`` command that reproduces it; each declaration not exercised.
Without ``--variants`` the plugin does nothing (and imports nothing: pytest runs of
other projects do not pay for torch).
"""

from __future__ import annotations

import fnmatch
import os
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

# harness.cli.parsers.VARIANTS_ENV, spelled out so that a pytest run without variants imports
# neither the harness nor torch (tests/test_cli.py checks the two agree).
VARIANTS_ENV = "HARNESS_VARIANTS"
CUDA_SKIP = "no CUDA device: the CUDA checks run on a GPU machine"
# The devices each variant is checked on; their precision dtypes: harness.base.dtypes (read
# when a test runs, so that collecting no variant file imports neither the harness nor torch).
DEVICES = ("cpu", "cuda")
# One test per aspect (HF's tester-mixin habit, as tests/test_equivalence.py): -k selects one.
ASPECTS = ("semantics", "precision", "gradcheck", "dropout")

_FILES = pytest.StashKey[frozenset]()
# the run's config matrix (``harness.base.config.config_matrix`` of its --set items) and the items
_MATRIX = pytest.StashKey[tuple]()
# the ini options (pytest.ini, tox.ini, setup.cfg, pyproject.toml's [tool.pytest.ini_options])
SET_INI, VARIANTS_INI = "attention_harness_set", "attention_harness_variants"
# the user_properties names the summary's lines travel under (from every xdist worker): what a
# variant was not checked on, one line per failure, each declaration no case reached
COVERAGE, FAILURE, NOT_EXERCISED = ("attention_harness_coverage", "attention_harness_failure",
                                   "attention_harness_unreached")


def pytest_addoption(parser):
    group = parser.getgroup("attention-harness")
    group.addoption(
        "--variants", action="append", default=[], metavar="FILE",
        help=f"load the variants this file registers and test each against the spec of its "
             f"declared traits (repeatable; or ${VARIANTS_ENV}, {os.pathsep}-separated)",
    )
    group.addoption(
        "--set", action="append", default=[], dest="harness_set", metavar="KEY=VALUE",
        help="a config override for the variants' checks, read as `python -m harness check --set` "
             f"(repeatable); added to the ini's {SET_INI}, whose item for the same key it replaces",
    )
    parser.addini(SET_INI, type="linelist", default=[],
                  help="--set KEY=VALUE items every run of variant files uses (one a line)")
    parser.addini(VARIANTS_INI, type="paths", default=[],
                  help="variant files every run loads, as --variants (relative to the ini file)")


def worker_gpu(env: dict[str, str], device_count: int) -> str | None:
    """The one GPU a pytest-xdist worker keeps, as a ``CUDA_VISIBLE_DEVICES`` value: worker
    ``gwN`` takes the N-th (modulo) of the GPUs the run was given (an outer
    ``CUDA_VISIBLE_DEVICES`` is honoured: ``4,5`` with two workers gives gw0 GPU 4 and gw1
    GPU 5). None outside xdist, with fewer than two GPUs, or when ``HARNESS_NO_GPU_PINNING``
    is set."""
    worker = env.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw") or not worker[2:].isdigit() or env.get("HARNESS_NO_GPU_PINNING"):
        return None
    outer = env.get("CUDA_VISIBLE_DEVICES")
    visible = [d.strip() for d in outer.split(",") if d.strip()] if outer else [str(i) for i in range(device_count)]
    if len(visible) < 2:
        return None
    return visible[int(worker[2:]) % len(visible)]


def worker_threads(env: dict[str, str], cpus: int) -> str | None:
    """The CPU threads a pytest-xdist worker's torch uses, as an ``OMP_NUM_THREADS`` value:
    the run's CPUs shared between its workers (2 CPUs, 2 workers: 1 each), so that N workers
    do not each start a pool of every CPU's threads and spin against each other (on this
    project's 2-core machines that cost the default suite a third of its CPU time). None
    outside xdist, when the user set ``OMP_NUM_THREADS`` or ``HARNESS_NO_THREAD_SHARING``."""
    worker, count = env.get("PYTEST_XDIST_WORKER", ""), env.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not worker or not count.isdigit() or env.get("OMP_NUM_THREADS") or env.get("HARNESS_NO_THREAD_SHARING"):
        return None
    return str(max(1, cpus // max(1, int(count))))


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _gpu_count() -> int:
    """GPUs the driver lists, without initialising CUDA in this process (nvidia-smi)."""
    import shutil
    import subprocess

    if not shutil.which("nvidia-smi"):
        return 0
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(line.startswith("GPU ") for line in listed.stdout.splitlines())


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    """On a host with several GPUs, each xdist worker sees only its own (set before any
    conftest imports torch, so CUDA starts on that GPU alone); in a run of variant files,
    each worker's torch takes its share of the CPUs (``share_cpus``)."""
    _refuse_rootdir_from_variants(early_config)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        gpu = worker_gpu(dict(os.environ), _gpu_count() if not os.environ.get("CUDA_VISIBLE_DEVICES") else 0)
        if gpu is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = gpu
        if getattr(early_config.known_args_namespace, "variants", None) or os.environ.get(VARIANTS_ENV):
            share_cpus()  # only a run of variants: other projects' xdist runs keep their threads


def share_cpus() -> None:
    """In a pytest-xdist worker, give torch (and the processes a test starts) the worker's
    share of the CPUs (``worker_threads``); elsewhere nothing. This project's own suite
    calls it from its conftest."""
    threads = worker_threads(dict(os.environ), _cpus())
    if threads is not None:
        os.environ["OMP_NUM_THREADS"] = threads
        if "torch" in sys.modules:  # already imported: size its pool now (it reads the variable once)
            sys.modules["torch"].set_num_threads(int(threads))


def _refuse_rootdir_from_variants(config) -> None:
    """``pytest --variants /elsewhere/mine.py`` (two words): pytest picks its rootdir and
    settings file from every word that names an existing path before any plugin has defined
    ``--variants``, so the file's folder would replace this folder's settings (addopts,
    testpaths, markers) and pytest would collect everything under the current folder.
    Refused in one line naming the cure, instead of running another suite than asked."""
    ns = config.known_args_namespace
    given = [v for v in getattr(ns, "variants", None) or [] if v in config.invocation_params.args]
    if not given:
        return
    try:
        from _pytest.config.findpaths import determine_setup

        rootpath, inipath, *_ = determine_setup(
            inifile=ns.inifilename, override_ini=ns.override_ini, args=list(ns.file_or_dir),
            rootdir_cmd_arg=ns.rootdir or None, invocation_dir=config.invocation_params.dir)
    except (ImportError, TypeError):  # another pytest's internals: nothing to compare with
        return
    if inipath != config.inipath or rootpath != config.rootpath:
        settings = f"'{inipath}'" if inipath else f"rootdir '{rootpath}'"
        raise pytest.UsageError(
            f"--variants {given[0]}: pytest took its rootdir from this path (a separate word, read before "
            f"the plugin defining --variants loads) and would ignore {settings} with its addopts and "
            f"testpaths; write --variants={given[0]} (one word) or {VARIANTS_ENV}={given[0]}")


def variant_files(config) -> list[str]:
    files = list(config.getoption("variants") or [])
    files += [p for p in os.environ.get(VARIANTS_ENV, "").split(os.pathsep) if p]
    return files + [str(p) for p in config.getini(VARIANTS_INI) if str(p) not in files]


def set_items(pinned: list[str], given: list[str]) -> list[str]:
    """The run's --set items: the ini's, each replaced by a command-line item of the same key,
    then the command line's (a key given twice there is refused by ``Config.parse``)."""
    keys = {item.partition("=")[0].strip() for item in given}
    return [item for item in pinned if item.partition("=")[0].strip() not in keys] + list(given)


def _matrix(config) -> tuple[dict, tuple[str, ...]]:
    """The configs the variants are checked on: ``check``'s own (``config_matrix``) for the
    run's --set items; a bad item is pytest's one-line usage error, worded as ``check``'s."""
    from harness.base.config import config_matrix
    from harness.base.errors import HarnessError

    pinned = [str(item) for item in config.getini(SET_INI)]
    items = set_items(pinned, list(config.getoption("harness_set") or []))
    try:
        if pinned:
            try:
                config_matrix(pinned)
            except HarnessError as exc:
                raise HarnessError(f"{SET_INI} in {config.inipath}: {exc}") from None
        return config_matrix(items), tuple(items)
    except HarnessError as exc:
        raise pytest.UsageError(str(exc)) from None


def pytest_configure(config):
    config.stash[_FILES] = frozenset()
    _LINES.clear()
    files = variant_files(config)
    if not files:
        given = config.getoption("harness_set")
        if given:
            raise pytest.UsageError(f"--set {given[0]} applies to the variants of a variant file: give "
                                    f"--variants FILE (or {VARIANTS_INI} in the ini)")
        return
    config.stash[_MATRIX] = _matrix(config)
    from harness.base.errors import HarnessError
    from harness.registry import load_all

    base = config.invocation_params.dir
    paths = [Path(f) if Path(f).is_absolute() else base / f for f in files]
    from harness.check.declared import oracle_refusal

    try:
        for variant in load_all(files):  # a declaration the oracle refuses: refused at load, as the CLI does
            refusal = oracle_refusal(variant)
            if refusal:
                raise HarnessError(f"variant '{variant.key}' ({variant.origin}) declares traits its family's "
                                   f"oracle refuses ({refusal}); declare what the code does")
    except HarnessError as exc:
        raise pytest.UsageError(str(exc)) from None
    resolved = frozenset(p.resolve() for p in paths)
    config.stash[_FILES] = resolved
    # Collect each file beside whatever else was asked for (pytest drops overlaps), unless a
    # node id in it was asked for (then only that test runs)
    named = {(base / a.split("::")[0]).resolve() for a in config.args}
    config.args.extend(str(p) for p in sorted(resolved) if p not in named)


def _is_variant_file(path: Path, config) -> bool:
    return path.resolve() in config.stash.get(_FILES, frozenset())


def pytest_collect_file(file_path: Path, parent):
    """A variant file found while walking a folder (pytest's Python collector skips it:
    its name is not a test file's)."""
    if not _is_variant_file(file_path, parent.config):
        return None
    python_names = parent.config.getini("python_files")
    if parent.session.isinitpath(file_path) or any(fnmatch.fnmatch(file_path.name, p) for p in python_names):
        return None  # pytest's Python collector asks pytest_pycollect_makemodule below
    return VariantFile.from_parent(parent, path=file_path, nodeid=_file_nodeid(file_path, parent.config))


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makemodule(module_path: Path, parent):
    """A variant file named on the command line (as --variants adds it) or named like a
    test file: collected as its variants' tests, never imported a second time as a module."""
    if _is_variant_file(module_path, parent.config):
        return VariantFile.from_parent(parent, path=module_path, nodeid=_file_nodeid(module_path, parent.config))
    return None


def _file_nodeid(path: Path, config) -> str | None:
    """The node id of a variant file: pytest's own (its path from the rootdir) inside the
    rootdir; outside it, where pytest would give the file named on the command line an empty
    id (``::attention/mine[cpu-semantics]``, the same for two files), its absolute path."""
    try:
        path.resolve().relative_to(config.rootpath)
    except ValueError:
        return path.resolve().as_posix()
    return None


class VariantFile(pytest.File):
    """A user's variant file: one test per (variant it registers, device, aspect)."""

    def collect(self):
        import torch

        from harness.registry import REGISTRY

        origin = str(self.path.resolve())
        for variant in [v for v in REGISTRY.values() if v.origin == origin]:
            for device in DEVICES:
                for aspect in ASPECTS:
                    item = VariantItem.from_parent(self, name=f"{variant.family}/{variant.id}[{device}-{aspect}]",
                                                   key=variant.key, device=device, aspect=aspect)
                    if device == "cuda" and not torch.cuda.is_available():
                        item.add_marker(pytest.mark.skip(reason=CUDA_SKIP))
                    yield item


class VariantMismatch(Exception):
    """A variant's verdicts contradict what its traits declare."""


class VariantItem(pytest.Item):
    def __init__(self, *, key: str, device: str, aspect: str, **kwargs):
        super().__init__(**kwargs)
        self.key, self.device, self.aspect = key, device, aspect

    def runtest(self):
        from types import SimpleNamespace

        from harness.check.reach import UnexercisedDeclaration
        from harness.check.verdict import SEMANTICS_DIFFER
        from harness.registry import REGISTRY
        from harness.report.pytest_text import aspect_results, check_command, coverage_line, first_cause
        from harness.report.tables import failures_table
        from harness.trace.explain import variant_mistake

        variant = REGISTRY[self.key]
        configs, sets = self.config.stash[_MATRIX]
        checked = _check_one(variant, self.device, configs)
        line = coverage_line(variant, self.device, checked.configs, checked.skipped)
        if line:
            self.user_properties.append((COVERAGE, line))
        if not checked.results:
            _nothing_checked(variant, self.device, configs)
        for line in checked.not_exercised if self.aspect == "semantics" else ():
            self.user_properties.append((NOT_EXERCISED, f"{self.key} [{self.device}]: not exercised: {line}"))
            self.warn(UnexercisedDeclaration(f"{self.key}: declaration not exercised: {line}"))
        results = aspect_results(checked.results, self.aspect, variant.semantic_dtypes())
        if not results:  # e.g. no dropout site declared, or no gradcheck for this family
            pytest.skip(f"no {self.aspect} check applies to {self.key} on {self.device}")
        wrong = [r for r in results if not r.ok]
        if not wrong:
            return
        by_kind = SimpleNamespace(specs=[], gradchecks=[], dropouts=[])
        getattr(by_kind, {"gradcheck": "gradchecks", "dropout": "dropouts"}.get(self.aspect, "specs")).extend(wrong)
        cause, table = first_cause(wrong), "\n" + failures_table(by_kind)
        if self.aspect == "semantics" and not any(getattr(r, "verdict", "") == "error" for r in wrong):
            cause = variant_mistake(variant, checked.results, configs) or cause
        if self.aspect == "precision" and all(getattr(r, "note", "").startswith(SEMANTICS_DIFFER) for r in wrong):
            cause, table = f"{SEMANTICS_DIFFER} (the table: [{self.device}-semantics])", ""  # said once, there
        head = f"{self.key} contradicts its declaration ({self.aspect}: {len(wrong)} of {len(results)} checks): {cause}"
        again = f"reproduce: {check_command(variant, sets, self.device)}"
        self.user_properties.append((FAILURE, f"{self.key} [{self.device}-{self.aspect}]: {cause}; {again}"))
        raise VariantMismatch(f"{head}\n{again}{table}")

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, VariantMismatch):
            return str(excinfo.value)
        from harness.base.errors import HarnessError

        if isinstance(excinfo.value, HarnessError):  # the user's mistake: one line, not a traceback
            return f"{self.key}: {excinfo.value}"
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, 0, f"{self.key} [{self.device}-{self.aspect}]"


# (variant key, device) -> its check: run once, its aspects share it.
_CHECKED: dict[tuple[str, str], Checked] = {}


class Checked(NamedTuple):
    """One variant's check on one device: every result (each has ``.ok``), the family's configs
    it was asked for, the report's ``skipped`` rows (what it refused, and why), what it left unreached."""

    results: list
    configs: tuple[str, ...]
    skipped: list
    not_exercised: list


def _check_one(variant, device: str, configs: dict) -> Checked:
    """The one place that decides a user's variant: its spec over the run's configs (the
    lead's ``check_variant``), run once per (variant, device) in a session and shared by its
    aspects."""
    from harness.base.dtypes import default_dtypes
    from harness.check.api import check_variant

    if (variant.key, device) not in _CHECKED:
        report = check_variant(variant, configs, dtypes=default_dtypes(device), device=device)
        asked, unused = tuple(variant.family_spec.configs_of(configs)), [str(n) for n in report.not_exercised]
        _CHECKED[variant.key, device] = Checked([*report.specs, *report.gradchecks, *report.dropouts], asked,
                                                [s for s in report.skipped if f"{s[0]}/{s[1]}" == variant.key], unused)
    return _CHECKED[variant.key, device]


def _nothing_checked(variant, device: str, configs: dict) -> None:
    """A variant with no result: skipped with the reasons when it is built for no config
    here (a CUDA-only kernel on CPU), else failed."""
    reasons = [variant.refuses(cfg, device) for cfg in variant.family_spec.configs_of(configs).values()]
    if reasons and all(reasons):
        pytest.skip("; ".join(dict.fromkeys(reasons)))
    pytest.fail(f"{variant.key} was checked on no config and case (check traits['cases'] "
                "and supports)", pytrace=False)


# (kind, line) -> None: the summary's lines, each once, in the order they came
_LINES: dict[tuple[str, str], None] = {}


def pytest_runtest_logreport(report):
    """Gather the lines the tests said (in the controller, from every xdist worker)."""
    for name, line in getattr(report, "user_properties", ()):
        if name in (COVERAGE, FAILURE, NOT_EXERCISED):
            _LINES.setdefault((name, line), None)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Once, after pytest's own summary: what each variant was not checked on, each declaration
    no case reached, then one line per failure with its cause and the command that reproduces it."""
    if not _LINES:
        return
    terminalreporter.section("attention-harness", sep="=")
    for kind in (COVERAGE, NOT_EXERCISED, FAILURE):
        for name, line in _LINES:
            if name == kind:
                terminalreporter.write_line(line)
