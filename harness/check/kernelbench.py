"""KernelBench's format, natively: a problem file (``Model``, ``get_inputs()``,
``get_init_inputs()``, module-level sizes) and candidate files (``ModelNew``, taking the same
constructor arguments), each imported on its own, judged by ``harness.check.reference.judge``
(the regimes beyond the given draw included: the sizes are the problem's module constants).

A candidate that does not import (a syntax error, a kernel that does not compile) is its row:
``compiled`` false, the one-line error; the run goes on. Each candidate is judged against the
problem's file imported afresh (a module of its own, not the one an earlier candidate saw), and
what it can change is snapshotted before its file is imported: torch's functions (one it
replaces is a hack, "hack: replaced_function: ...", every side is judged on torch's own, and
the replacement is undone before the next file) and the reference's own code, the modules it
imports and the judge's functions (``harness.base.patches``: a change is a hack, "hack:
reference_patched: ...", put back at once and after the judgement). A problem is judged
against itself on its given inputs when it loads: a reference that fails later, beside a
candidate, is that candidate's row, never the end of the run. A candidate whose parameters pair
with the reference's neither by name nor by shape says where each lives in a ``PARAM_MAP`` of
its file (``candidate_param_map``), as ``judge``'s ``param_map``. Folders: ``PROBLEM.py`` with ``FOLDER/`` (every
``.py`` in it a candidate), or a folder of problems, each ``NAME.py`` with its candidates in
the sibling folder ``NAME/``."""

from __future__ import annotations

import importlib.util
import math
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterable, Mapping, get_args

import torch

from harness.base.boundary import UserCodeError, describe, user_code
from harness.base.errors import InputError
from harness.base.files import no_bytecode
from harness.base.hacks import HackFinding, TorchSnapshot, put_back, snapshot_torch
from harness.base.patches import ReferenceSnapshot, patched_since, problem_modules, snapshot_reference
from harness.check import reference_runs as R
from harness.check.reference import Gradients, judge
from harness.check.reference_inputs import InputSource
from harness.check.reference_result import Judgement
from harness.check.reference_weights import ParamMapLike, link
from harness.porting.entries import MapEntry

# KernelBench's fast_p: the fraction of all candidates that are correct and faster than p times
# the reference (speedup > p); fast_0 is the fraction correct.
FAST_P = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)
PROBLEM_PREFIX = "harness_kernelbench_problem_"  # how a problem file's module is named in sys.modules


@dataclass
class Problem:
    """A KernelBench problem file, imported."""

    name: str
    path: str
    module: ModuleType

    @property
    def model(self) -> type:
        return self.module.Model

    def source(self) -> InputSource:
        return InputSource(self.module.get_inputs, self.module.get_init_inputs)

    def fresh(self) -> Problem:
        """The problem's file imported again: a new module, whatever an earlier candidate did to
        this one (what it prints goes unprinted: it did at the first import)."""
        return Problem(self.name, self.path, _import(Path(self.path), "problem", quiet=True))


def _import(path: Path, label: str, watch_torch: bool = True, quiet: bool = False) -> ModuleType:
    """``path`` imported as a module of its own (not left in ``sys.modules``' way of any other
    file: two candidates of the same name never see each other). ``UserCodeError`` where it fails."""
    resolved = path.resolve()
    name = f"harness_kernelbench_{label}_{abs(hash(str(resolved)))}"
    spec = importlib.util.spec_from_file_location(name, resolved)
    if spec is None or spec.loader is None:
        raise InputError(f"'{path}' is not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and torch.compile look a class's module up there
    try:
        with user_code("import", files=(str(resolved),), timeout=0, watch_torch=watch_torch) as printed, \
                no_bytecode():
            spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    if printed.text.strip() and not quiet:  # what it printed at import goes to stderr: stdout is the table's
        sys.stderr.write(printed.text if printed.text.endswith("\n") else printed.text + "\n")
    return module


def load_problem(path: str | Path) -> Problem:
    """A problem file, or ``InputError`` in one line (a problem is the oracle: it must load)."""
    p = Path(path)
    if not p.is_file() or p.suffix != ".py":
        raise InputError(f"problem '{path}' is not a .py file")
    try:
        module = _import(p, "problem")
    except UserCodeError as exc:
        raise InputError(f"problem '{path}' does not import: {describe(exc)}") from None
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if not hasattr(module, n)]
    if missing:
        raise InputError(f"problem '{path}' has no {', '.join(missing)} (KernelBench's format: class Model, "
                         "get_inputs(), get_init_inputs())")
    problem = Problem(p.stem, str(path), module)
    try:  # the reference against itself on the given inputs: it must draw, build and run
        judge(problem.model, problem.model, problem.source(), only=("given",), hacks=False, gradients=Gradients.NONE)
    except InputError as exc:
        raise InputError(f"problem '{path}': {exc}") from None
    return problem


def load_candidate(path: str | Path, snap: TorchSnapshot | None = None) -> tuple[type | None, str]:
    """(``ModelNew``, "") or (None, the one line why not). ``snap``: torch's functions taken
    before (``snapshot_torch``): what the import replaces is left for the caller to find
    (``replaced_since``); without it the import is refused."""
    try:
        module = _import(Path(path), "candidate", watch_torch=snap is None)
    except UserCodeError as exc:
        if snap is not None:
            put_back(snap)
        return None, f"does not import: {exc.problem}"
    model = getattr(module, "ModelNew", None)
    if model is None:
        return None, "defines no ModelNew"
    return model, ""


def candidate_param_map(model: type) -> ParamMapLike | None:
    """The ``PARAM_MAP`` of the candidate's file: {reference parameter: entry into ModelNew}
    (``Param``, ``Chunk``, ``Transposed``, ...), or a function of the constructor's arguments
    returning it, where the names and shapes do not pair the weights; None where the file has
    none. ``InputError`` (one line) where it is not such a map."""
    given = getattr(sys.modules.get(model.__module__), "PARAM_MAP", None)
    if given is None or callable(given):
        return given
    entries = get_args(MapEntry)
    if not isinstance(given, Mapping) or not all(isinstance(k, str) and isinstance(v, entries)
                                                 for k, v in given.items()):
        raise InputError("PARAM_MAP must be a dict of the reference's parameter names to entries into ModelNew "
                         "(Param, Chunk, Transposed, ... from harness)")
    return dict(given)


@dataclass
class Row:
    """One candidate, in KernelBench's columns, with the regimes its verdict saw."""

    problem: str
    candidate: str
    compiled: bool
    correct: bool
    failing_check: str = ""
    runtime_ms: float | None = None
    ref_runtime_ms: float | None = None
    speedup: float | None = None
    speedup_low: float | None = None   # the speedup's interval (``harness.bench.timing.INTERVAL_LEVEL``)
    speedup_high: float | None = None
    peak_flag: str = ""  # the beyond-peak flag's line: the speedup is not reported
    peak_note: str = ""  # "too short to bound": the speedup is reported, the peak could not check it
    threads: int | None = None  # the intra-op thread count the pair was timed at
    load_before: float | None = None  # the 1-minute load average before and after the timing
    load_after: float | None = None
    disturbed: str = ""  # the load that disturbed the timing ("" when it did not)
    timed: bool = False
    regimes: list[str] = field(default_factory=list)
    failing_regimes: list[str] = field(default_factory=list)
    weights: str = ""
    semantics: str = ""
    hacks: list[HackFinding] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {**asdict(self), "hacks": [h.to_json() for h in self.hacks]}


def _isolated(problem: Problem, hacks: bool) -> tuple[Problem, ReferenceSnapshot | None, TorchSnapshot | None]:
    """The problem imported afresh, and (with ``hacks``) what the candidate's import may change,
    snapshotted: the reference's code (every problem loaded) and torch's functions."""
    fresh = problem.fresh()
    if not hacks:
        return fresh, None, None
    return fresh, snapshot_reference(problem_modules(PROBLEM_PREFIX)), snapshot_torch()


def _first_of_each(found: list[HackFinding]) -> list[HackFinding]:
    return list({f.kind: f for f in reversed(found)}.values())[::-1]


def judge_candidate(problem: Problem, path: str | Path, *, gradients: Gradients | str = Gradients.AUTO,
                    device: str = "cpu", only: Iterable[str] | None = None,
                    hacks: bool = True) -> tuple[Row, Judgement | None]:
    """One candidate file against its problem (imported afresh for it): its row, and the
    judgement behind it; ``hacks``: the reward-hack defences run (``judge``'s, and the
    reference's code watched: ``harness.base.patches``)."""
    name = Path(path).name
    try:
        fresh, ref_snap, snap = _isolated(problem, hacks)
    except UserCodeError as exc:
        return Row(problem.name, name, False, False, f"its problem's file does not import again: {describe(exc)}"), None
    model, error = load_candidate(path, snap)
    patched = patched_since(ref_snap) if ref_snap is not None else []  # put back before the judgement
    if model is None:
        return Row(problem.name, name, False, False, error, hacks=_first_of_each(patched)), None
    j = None
    try:
        param_map, failure = candidate_param_map(model), ""
    except InputError as exc:  # a malformed PARAM_MAP: the candidate's row
        param_map, failure = None, str(exc)
    try:
        if not failure:
            j = judge(fresh.model, model, fresh.source(), param_map=param_map, gradients=gradients, device=device,
                      only=only, hacks=hacks, torch_snapshot=snap)
    except InputError as exc:  # the problem passed on its own when it loaded: this candidate broke it
        failure = f"the reference fails beside this candidate (it ran before the candidate's import): {exc}"
    except Exception as exc:  # anything else the candidate's code does is its row
        failure = describe(exc)
    finally:
        if snap is not None:
            put_back(snap)  # the next candidate's file is imported on torch's own functions
        if ref_snap is not None:
            patched += patched_since(ref_snap)
    if j is None:
        found = _first_of_each(patched)
        return Row(problem.name, name, True, False, found[0].line if found else failure, hacks=found), None
    if patched:
        j.hacks = _first_of_each(patched + j.hacks)
    return Row(problem.name, name, True, j.ok, j.failure, regimes=list(j.regimes), failing_regimes=list(j.failing),
               weights=j.weights, semantics=j.semantics, hacks=list(j.hacks)), j


@dataclass(frozen=True)
class TimingPair:
    """What a timing compares: the reference and the candidate, each called on ``inputs`` (the
    problem's given draw, in its dtype, on the device) under no_grad, the reference's weights
    in the candidate; ``watch``: the reference's code as it was before the candidate's import
    (``patched`` compares it again)."""

    reference: Callable[..., Any]
    candidate: Callable[..., Any]
    inputs: tuple
    watch: ReferenceSnapshot | None = None
    found: tuple[HackFinding, ...] = ()  # the changes the candidate's import made (put back)

    def make_inputs(self) -> tuple:
        return self.inputs

    def patched(self) -> list[HackFinding]:
        """What the candidate changed in the reference's code, at its import or while it was
        timed (each put back): a reference made slower is a speedup made up."""
        return _first_of_each([*self.found, *(patched_since(self.watch) if self.watch is not None else [])])


def timing_pair(problem: Problem, path: str | Path, device: str = "cpu") -> TimingPair:
    """The reference (of the problem imported afresh) and the candidate of ``path`` on the
    problem's given inputs; ``InputError`` in one line where the candidate does not import."""
    fresh, watch, _ = _isolated(problem, True)
    model, error = load_candidate(path)
    found = tuple(patched_since(watch)) if watch is not None else ()
    if model is None:
        raise InputError(error)
    init, inputs = fresh.source().draw(0)
    dtype = next((t.dtype for t in inputs if isinstance(t, torch.Tensor) and t.is_floating_point()), torch.float32)
    ref = R.build(fresh.model, init, dtype, 0, "reference", device)
    cand = R.build(model, init, dtype, 0, "candidate", device)
    link(ref.module, cand.module, candidate_param_map(model), init).load(ref.module, cand.module)
    prepared, _ = R.prepare(inputs, dtype, device, False)

    def call(side: R.Built) -> Callable[..., Any]:
        def run(*args: Any) -> Any:
            with torch.no_grad():
                return side.fn(*args)
        return run

    return TimingPair(call(ref), call(cand), tuple(prepared), watch, found)


def discover(problem: str | Path, candidates: str | Path | None = None) -> list[tuple[Path, list[Path]]]:
    """[(problem file, its candidate files)]: ``PROBLEM.py CANDIDATE.py``, ``PROBLEM.py FOLDER/``,
    or ``FOLDER/`` of problems ``NAME.py``, each with its candidates in ``NAME/``."""
    p = Path(problem)
    if candidates is not None:
        c = Path(candidates)
        if c.is_dir():
            files = sorted(f for f in c.glob("*.py") if f.is_file())
            if not files:
                raise InputError(f"candidate folder '{candidates}' holds no .py file")
            return [(p, files)]
        if not c.is_file():
            raise InputError(f"candidate '{candidates}' does not exist")
        return [(p, [c])]
    if not p.is_dir():
        raise InputError(f"'{problem}' is a problem file: give its candidate (a .py file or a folder of them) "
                         "after it")
    pairs = [(f, sorted(g for g in (f.parent / f.stem).glob("*.py") if g.is_file()))
             for f in sorted(p.glob("*.py")) if (f.parent / f.stem).is_dir()]
    pairs = [(f, cs) for f, cs in pairs if cs]
    if not pairs:
        raise InputError(f"folder '{problem}' holds no problem NAME.py with a sibling folder NAME/ of candidates")
    return pairs


def fast_p(rows: list[Row], ps: Iterable[float] = FAST_P) -> dict[str, float | None]:
    """KernelBench's fast_p over every row: correct and speedup > p, over all candidates;
    fast_0 is the fraction correct (no timing needed), the others None where a correct row was
    not timed. A row flagged beyond the peak has no speedup, and a row with a hack finding is
    not correct whatever its other columns say: neither is ever fast."""
    n = len(rows)
    good = [r for r in rows if r.correct and not r.hacks]
    out: dict[str, float | None] = {}
    for p in ps:
        key = f"fast_{p:g}"
        if p == 0:
            out[key] = len(good) / n if n else None
        elif any(not r.timed for r in good):
            out[key] = None
        else:
            out[key] = sum(1 for r in good if r.speedup is not None and r.speedup > p
                           and math.isfinite(r.speedup)) / n if n else None
    return out
