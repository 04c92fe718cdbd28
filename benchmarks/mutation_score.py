"""A mutation score for ``variants/``: how many small mistakes planted in the variants'
code the harness's own check catches.

    python benchmarks/mutation_score.py                       # every file, 40 mutants per file
    python benchmarks/mutation_score.py --file annotated_preln.py --sample 10
    python benchmarks/mutation_score.py --family norm --sample 0 --json mutants.json   # all
    python benchmarks/mutation_score.py --list --file llama.py                         # no run

What is mutated: the classes in ``variants/*.py`` and the module-level functions that
compute (attention functions, masks, schedules, kernels), never the registrations, traits,
parameter maps nor the adapters a registration passes as ``call=``/``param_map=``/
``supports=``. Operators (each one mutant per site): an arithmetic, bitwise, comparison or
boolean operator swapped (``+``/``-``, ``*``/``/``, ``&``/``|``, ``<``/``<=``, ``and``/
``or``...), a unary ``-``, ``not`` or ``~`` dropped, a constant changed (an int n -> n + 1:
also every axis, dim and index; a float x -> 2x; ``True``/``False`` swapped), a slice
bound dropped, an in-place method made out-of-place (``masked_fill_`` -> ``masked_fill``),
a call dropped (a call statement -> ``pass``; ``f(x, ...)`` -> ``x``; ``x.m()`` -> ``x``).

How a mutant is judged: each variant's "fast check" is ``python -m harness check --family F
--variant ID`` (float64 semantics and float32 precision over the default config matrix,
every case, gradcheck, dropout, the inference path, read-only inputs, call sequences).
First, in this process, every selected variant's check runs once on the unmutated code
under a line tracer: which lines of ``variants/`` each one executes. A mutant is checked by
the variants that execute its statement (the variants registered in its own file first,
then by family, smallest component first), stopping at the first that fails; if none
fails, by each one's bfloat16/float16 check on the default config (the default pytest
suite's per-variant half-precision test). It is *killed* (a contradiction or an error),
*survived* (every check passes), *timed out* (the child ran past ``--timeout`` or past
10 s + 20x its variants' unmutated cost, whichever is less), or *equivalent* (it survived
and ``benchmarks/equivalent_mutants.md`` lists it with why). A mutant that no selected
check executes is counted apart (*not run*) and not sampled. The mutant's family is the
first family in that order: ``LayerNorm`` in 004 counts for ``norm``.

Each mutant runs in a fork of this process (the harness and torch are imported, and warmed
by the coverage run, once; a fresh ``python -m harness`` costs seconds of imports here), which
patches the mutated class or function in place (each method's ``__code__``; so every
reference to it, subclasses and registrations included, sees the mutant) and is killed on
its timeout. One torch thread. Deterministic: the mutants are enumerated in source order
and ``--sample N`` takes the N per file whose keys hash first (sha256 of seed and key: a
change to one class leaves the other draws as they were).

Why not mutmut or cosmic-ray (both on PyPI): both drive a test *command* per mutant over
whole modules. mutmut 3 runs pytest only and mutates every function of a module, the
registrations and adapters included; cosmic-ray runs one command per session for every
module given, with no per-file sample. Neither knows which family's check covers a class,
and both pay a fresh interpreter (torch and the harness imported again, seconds on this
machine) for every mutant. A small ``ast`` mutator does the per-variant, per-family driver
with a fork per mutant instead.
"""

from __future__ import annotations
import __future__

import argparse
import ast
import copy
import hashlib
import json
import os
import pickle
import re
import select
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = ROOT / "variants"
EQUIVALENT = Path(__file__).resolve().parent / "equivalent_mutants.md"
# smallest component first: a mutant counts for the first family whose check runs it
FAMILY_ORDER = ("masks", "norm", "positional_encoding", "embedding", "attention_kernel", "attention", "ffn",
                "gated_ffn", "encoder_layer", "decoder_layer", "decoder_only_block", "loss", "lr_schedule",
                "encoder_decoder", "decoder_only_model")
GLUE_KEYWORDS = {"call", "param_map", "supports", "fixed", "traits", "prepare", "step", "greedy"}
NO_DROP = {"range", "len", "int", "float", "bool", "str", "tuple", "list", "dict", "zip", "enumerate", "super",
           "isinstance", "getattr", "setattr", "hasattr", "print", "min", "max", "sum", "any", "all", "type",
           "sorted", "reversed", "iter", "next", "map", "ones", "zeros", "empty", "full", "arange", "tensor",
           "linspace", "eye", "size", "dim", "numel", "ones_like", "zeros_like", "full_like", "empty_like", "Parameter"}
MODULES = {"torch", "F", "nn", "math", "np", "functools"}
SWAP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.FloorDiv: ast.Mult,
        ast.Pow: ast.Mult, ast.MatMult: ast.Mult, ast.Mod: ast.FloorDiv, ast.BitAnd: ast.BitOr,
        ast.BitOr: ast.BitAnd, ast.BitXor: ast.BitOr, ast.LShift: ast.RShift, ast.RShift: ast.LShift}
CMP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
       ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}
AXIS_KEYWORDS = {"dim", "dims", "axis", "dim0", "dim1", "start_dim", "end_dim"}
AXIS_METHODS = {"transpose", "permute", "softmax", "log_softmax", "sum", "mean", "var", "std", "unsqueeze",
                "squeeze", "cat", "stack", "chunk", "split", "size", "flatten", "unflatten", "amax", "max",
                "min", "argmax", "cumsum", "flip", "roll", "expand", "repeat_interleave", "narrow", "view",
                "reshape", "movedim", "tril", "triu", "diagonal"}


@dataclass
class Mutant:
    file: str          # variants/<file>
    scope: str         # top-level class or function
    qualname: str      # innermost def (Class.method) or the scope
    op: str            # binop, compare, unary, boolop, const, axis, slice, inplace, call
    before: str
    after: str
    line: int
    stmt: tuple[int, int]   # the enclosing statement's lines (coverage)
    index: int         # the mutation site's position in the scope's walk
    n: int = 0         # how many same-keyed mutants precede it
    candidates: list[str] = field(default_factory=list)
    family: str = ""
    status: str = ""   # killed | survived | timed out | equivalent
    by: str = ""       # the variant whose check killed it
    why: str = ""
    seconds: float = 0.0

    @property
    def key(self) -> str:
        suffix = f" #{self.n}" if self.n else ""
        return f"{self.file}::{self.qualname}::{self.op}::{self.before} -> {self.after}{suffix}"


# --- enumerating mutants ------------------------------------------------------------------

def _glue_names(tree: ast.Module) -> set[str]:
    """Module-level functions a registration passes as an adapter (call=, param_map=...)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id.startswith("register"):
            for kw in node.keywords:
                if kw.arg in GLUE_KEYWORDS:
                    names |= {n.id for n in ast.walk(kw.value) if isinstance(n, ast.Name)}
    return names


def _scopes(tree: ast.Module) -> list[ast.AST]:
    """The classes and the computing module-level functions of a variants file."""
    glue = _glue_names(tree)
    out = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            out.append(node)
        elif isinstance(node, ast.FunctionDef) and node.name not in glue and "map" not in node.name:
            out.append(node)
    return out


def _is_docstring(node: ast.AST, parents: dict) -> bool:
    p = parents.get(node)
    return isinstance(p, ast.Expr) and isinstance(node, ast.Constant) and isinstance(node.value, str)


def _func_name(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _is_method(call: ast.Call) -> bool:
    """A method of a value (``x.std(-1)``), not a module's function (``torch.sqrt(x)``) nor
    a submodule (``self.norm(x)``)."""
    f = call.func
    if not isinstance(f, ast.Attribute):
        return False
    root = f.value
    while isinstance(root, ast.Attribute):
        root = root.value
    return not (isinstance(root, ast.Name) and (root.id in MODULES or root.id == "self") and root is not f.value
                or isinstance(f.value, ast.Name) and f.value.id in MODULES | {"self"})


def _sites(scope: ast.AST):
    """(node, op, replacement-maker) for every mutation site of ``scope``, in walk order.
    A maker takes the (copied) node and returns the node to put in its place."""
    parents = {c: p for p in ast.walk(scope) for c in ast.iter_child_nodes(p)}
    skip = set()
    for node in ast.walk(scope):  # decorators, annotations, docstrings: not behaviour
        for sub in getattr(node, "decorator_list", []):
            skip |= set(ast.walk(sub))
        for attr in ("returns", "annotation"):
            if getattr(node, attr, None) is not None:
                skip |= set(ast.walk(getattr(node, attr)))
    for node in ast.walk(scope):
        if node in skip or _is_docstring(node, parents):
            continue
        parent = parents.get(node)
        if isinstance(node, ast.BinOp) and type(node.op) in SWAP:
            yield node, "binop", lambda n: ast.BinOp(n.left, SWAP[type(n.op)](), n.right)
        elif isinstance(node, ast.AugAssign) and type(node.op) in SWAP:
            yield node, "binop", lambda n: ast.AugAssign(n.target, SWAP[type(n.op)](), n.value)
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in CMP:
            yield node, "compare", lambda n: ast.Compare(n.left, [CMP[type(n.ops[0])]()], n.comparators)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Not, ast.Invert)):
            yield node, "unary", lambda n: n.operand
        elif isinstance(node, ast.BoolOp):
            yield node, "boolop", lambda n: ast.BoolOp(ast.Or() if isinstance(n.op, ast.And) else ast.And(), n.values)
        elif isinstance(node, ast.Constant) and type(node.value) in (int, float, bool):
            if isinstance(node.value, bool):
                yield node, "const", lambda n: ast.Constant(not n.value)
                continue
            axis = ((isinstance(parent, ast.keyword) and parent.arg in AXIS_KEYWORDS)
                    or (isinstance(parent, ast.Call) and _func_name(parent) in AXIS_METHODS)
                    or isinstance(parent, ast.Subscript))
            if isinstance(parent, ast.UnaryOp) and isinstance(parents.get(parent), ast.keyword):
                axis = axis or parents[parent].arg in AXIS_KEYWORDS
            if isinstance(parent, ast.UnaryOp) and isinstance(parents.get(parent), ast.Call):
                axis = axis or _func_name(parents[parent]) in AXIS_METHODS
            if isinstance(node.value, int):
                yield node, "axis" if axis else "const", lambda n: ast.Constant(n.value + 1)
            else:
                yield node, "const", lambda n: ast.Constant(n.value * 2 if n.value else 1.0)
        elif isinstance(node, ast.Slice):
            for bound in ("lower", "upper", "step"):
                value = getattr(node, bound)
                if value is not None and not (isinstance(value, ast.Constant) and value.value == (0, None, 1)[
                        ("lower", "upper", "step").index(bound)]):  # x[0:n] -> x[:n] is the same slice
                    yield node, "slice", lambda n, b=bound: ast.Slice(**{k: (None if k == b else getattr(n, k))
                                                                         for k in ("lower", "upper", "step")})
        elif isinstance(node, ast.Call):
            name = _func_name(node)
            if isinstance(node.func, ast.Attribute) and re.fullmatch(r"[a-z0-9_]*[a-z0-9]_", name):
                yield node, "inplace", lambda n: ast.Call(ast.Attribute(n.func.value, n.func.attr[:-1], ast.Load()),
                                                          n.args, n.keywords)
            if isinstance(parent, ast.Expr):
                if name != "__init__":  # dropping super().__init__() only breaks the build
                    yield node, "call", None  # the statement becomes ``pass``
            elif name and name not in NO_DROP and not name[0].isupper():
                if _is_method(node):  # x.softmax(-1), x.masked_fill(m, v) -> x
                    yield node, "call", lambda n: n.func.value
                elif len(node.args) == 1 and not isinstance(node.args[0], ast.Starred):
                    yield node, "call", lambda n: n.args[0]  # F.relu(x), self.norm(x) -> x


def _statement(node: ast.AST, parents: dict) -> ast.AST:
    while node in parents and not isinstance(node, ast.stmt):
        node = parents[node]
    return node


def _apply(scope: ast.AST, index: int) -> tuple[ast.AST, str, str]:
    """A copy of ``scope`` with its ``index``-th site mutated; (copy, before, after)."""
    mutated = copy.deepcopy(scope)
    node, _op, make = list(_sites(mutated))[index]
    parents = {c: p for p in ast.walk(mutated) for c in ast.iter_child_nodes(p)}
    before = ast.unparse(node)
    if make is None:  # a dropped call statement
        new, target = ast.Pass(), parents[node]
        node = target
    else:
        new, target = make(copy.deepcopy(node)), node
    ast.copy_location(new, target)
    parent = parents[target]
    for name, value in ast.iter_fields(parent):
        if value is target:
            setattr(parent, name, new)
        elif isinstance(value, list) and any(v is target for v in value):
            setattr(parent, name, [new if v is target else v for v in value])
    ast.fix_missing_locations(mutated)
    return mutated, before, "pass" if make is None else ast.unparse(new)


def enumerate_mutants(path: Path) -> list[Mutant]:
    """Every mutant of one variants file, in source order."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out: list[Mutant] = []
    seen: dict[str, int] = {}
    for scope in _scopes(tree):
        parents = {c: p for p in ast.walk(scope) for c in ast.iter_child_nodes(p)}
        for index, (node, op, make) in enumerate(_sites(scope)):
            before = ast.unparse(node)
            after = "pass" if make is None else ast.unparse(make(copy.deepcopy(node)))
            stmt = _statement(node, parents)
            inner = [scope.name]
            p = node
            while p in parents:  # the innermost def holding the site
                p = parents[p]
                if isinstance(p, (ast.FunctionDef, ast.ClassDef)) and p is not scope:
                    inner.insert(1, p.name)
            m = Mutant(path.name, scope.name, ".".join(dict.fromkeys(inner)), op, before, after,
                       node.lineno, (stmt.lineno, stmt.end_lineno), index)
            base = m.key
            m.n = seen.get(base, 0)
            seen[base] = m.n + 1
            out.append(m)
    return out


# --- patching a mutant into the imported module ---------------------------------------------

def _function(obj):
    for attr in ("__func__", "fget", "__wrapped__"):
        if hasattr(obj, attr):
            return _function(getattr(obj, attr))
    return obj if hasattr(obj, "__code__") else None


def _patch_function(old, new) -> None:
    old, new = _function(old), _function(new)
    old.__code__ = new.__code__
    old.__defaults__, old.__kwdefaults__ = new.__defaults__, new.__kwdefaults__


def patch(module, m: Mutant, tree_scope: ast.AST) -> None:
    """Replace ``m.scope`` of ``module`` by its mutant, in place."""
    mutated, _before, _after = _apply(tree_scope, m.index)
    code = compile(ast.Module(body=[mutated], type_ignores=[]), module.__file__, "exec",
                   flags=__future__.annotations.compiler_flag, dont_inherit=True)
    namespace = dict(vars(module))
    exec(code, namespace)  # noqa: S102  (the variants' own source, one node changed)
    old, new = getattr(module, m.scope), namespace[m.scope]
    if isinstance(old, type):
        for name, value in vars(new).items():
            if name in ("__dict__", "__weakref__", "__doc__", "__module__", "__qualname__"):
                continue
            if _function(value) is not None and _function(vars(old).get(name)) is not None:
                _patch_function(vars(old)[name], value)
            elif _function(value) is None:
                setattr(old, name, value)
    else:
        _patch_function(old, new)


# --- running checks in forks ---------------------------------------------------------------

def _check(key: str, half: bool = False):
    """The fast check of one variant (``half``: its bfloat16/float16 check on the default
    config, as pytest's per-variant half-precision test runs it): its failures (the first's
    text) and seconds."""
    from harness.base.config import CONFIG_MATRIX
    from harness.check.api import check_all
    from harness.registry import REGISTRY

    t0 = time.perf_counter()
    if half:
        report = check_all([REGISTRY[key].family], {"default": CONFIG_MATRIX["default"]}, "cpu",
                           ["bfloat16", "float16"], extras=False, variants=[key])
    else:
        report = check_all([REGISTRY[key].family], CONFIG_MATRIX, "cpu", ["float32"], variants=[key])
    failures = report.failures
    first = failures[0] if failures else None
    fields = ("variant", "case", "config", "dtype", "verdict", "note")
    text = "" if first is None else " ".join(str(getattr(first, a, "")) for a in fields)
    return len(failures), text.strip()[:200], time.perf_counter() - t0


def _in_fork(work, timeout: float):
    """``work()`` in a forked child; its pickled result, or None on timeout."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(read)
        try:
            result = ("ok", work())
        except BaseException as exc:  # noqa: BLE001  (a mutant may raise anything)
            result = ("error", f"{type(exc).__name__}: {str(exc)[:200]}")
        with os.fdopen(write, "wb") as f:
            pickle.dump(result, f)
        os._exit(0)
    os.close(write)
    chunks, deadline = [], time.monotonic() + timeout
    with os.fdopen(read, "rb") as f:
        while True:
            left = deadline - time.monotonic()
            ready = select.select([f], [], [], max(left, 0))[0] if left > 0 else []
            if not ready:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return None
            chunk = os.read(f.fileno(), 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    os.waitpid(pid, 0)
    return pickle.loads(b"".join(chunks)) if chunks else ("error", "the child died")


def coverage(keys: list[str]) -> dict:
    """Per variant: the lines of variants/ its check executes, its failures and seconds. Run
    here, not in a fork: it also warms this process (torch's lazy set-up, the harness's
    imports), so each mutant's fork starts warm. The check keeps no state between calls
    (each ``check_all`` makes its own run cache), so a fork sees none of these runs."""
    out = {}
    for key in keys:
        lines: dict[str, set[int]] = {}

        def local(frame, event, arg, _lines=lines):
            if event == "line":
                _lines.setdefault(Path(frame.f_code.co_filename).name, set()).add(frame.f_lineno)
            return local

        def trace(frame, event, arg):
            return local if frame.f_code.co_filename.startswith(str(VARIANTS)) else None

        sys.settrace(trace)
        try:
            failures, text, seconds = _check(key)
        finally:
            sys.settrace(None)
        out[key] = {"lines": lines, "failures": failures, "text": text, "seconds": seconds}
    return out


def run_mutant(m: Mutant, scope: ast.AST, costs: dict, timeout: float) -> None:
    import importlib

    from harness.families.catalog import get_family
    from harness.registry import REGISTRY as registry

    module = importlib.import_module(f"variants.{m.file[:-3]}")

    def work():
        try:
            patch(module, m, scope)
        except Exception as exc:  # the driver's own failure, never a kill
            return "unpatched", f"{type(exc).__name__}: {exc}"
        for key in m.candidates:
            failures, text, _s = _check(key)
            if failures:
                return key, text
        for key in m.candidates:  # the survivors: pytest's half-precision test of each variant
            if get_family(registry[key].family).matrix is None:
                failures, text, _s = _check(key, half=True)
                if failures:
                    return f"{key} (bfloat16/float16)", text
        return None

    limit = min(timeout, 10 + 20 * sum(costs[k] for k in m.candidates))
    t0 = time.perf_counter()
    result = _in_fork(work, limit)
    m.seconds = round(time.perf_counter() - t0, 2)
    if result is None:
        m.status, m.why = "timed out", f"past {limit:.0f} s"
    elif result[0] == "error":
        m.status, m.by, m.why = "killed", m.candidates[0], result[1]
    elif result[1] is None:
        m.status = "survived"
    elif result[1][0] == "unpatched":
        raise SystemExit(f"could not patch {m.key}: {result[1][1]}")
    else:
        m.status, (m.by, m.why) = "killed", result[1]


# --- selection, equivalents, report ---------------------------------------------------------

def load_equivalents(path: Path = EQUIVALENT) -> dict[str, str]:
    """key -> why, from the table rows of ``path`` (| `key` | why |)."""
    if not path.is_file():
        return {}
    out = {}
    for line in path.read_text().splitlines():
        match = re.match(r"\|\s*`(.+?)`\s*\|\s*(.+?)\s*\|\s*$", line)
        if match:
            out[match.group(1)] = match.group(2)
    return out


def _file_of(variant) -> str:
    """The variants/ file that registered ``variant``: where its build or call is written,
    looked for through the wrappers around them (the registry's guard, ``__wrapped__``; a
    ``functools.partial``, ``.func``; the function a ``register_kernel`` build closes over),
    nearest first."""
    queue, seen = [(variant.build, 0), (variant.call, 0)], set()
    while queue:
        fn, depth = queue.pop(0)
        if id(fn) in seen or not callable(fn):
            continue
        seen.add(id(fn))
        code = getattr(fn, "__code__", None)
        if code is not None and code.co_filename.startswith(str(VARIANTS)):
            return Path(code.co_filename).name
        if depth < 4:
            inner = [getattr(fn, "__wrapped__", None), getattr(fn, "func", None)]
            inner += [c.cell_contents for c in getattr(fn, "__closure__", None) or () if _filled(c)]
            queue += [(f, depth + 1) for f in inner if f is not None]
    return ""


def _filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:  # a cell not yet assigned
        return False
    return True


def plan(args, registry) -> tuple[list[Mutant], dict, dict]:
    """(the mutants to run, the coverage of each variant, counts per file)."""
    selected = [k for k, v in registry.items() if not args.family or v.family in args.family]
    keys = [k for k in selected if _file_of(registry[k])]
    unplaced = [k for k in selected if registry[k].origin == "variants" and k not in keys]
    keys.sort(key=lambda k: (FAMILY_ORDER.index(registry[k].family) if registry[k].family in FAMILY_ORDER else 99, k))
    files = [VARIANTS / f for f in (args.file or sorted(p.name for p in VARIANTS.glob("*.py")))]
    for f in files:
        if not f.is_file():
            raise SystemExit(f"no variants file {f.name}; known: {sorted(p.name for p in VARIANTS.glob('*.py'))}")
    cov = coverage(keys)
    broken = [k for k in keys if cov[k]["failures"]]
    keys = [k for k in keys if k not in broken]  # a variant that fails unmutated kills nothing
    mutants, counts = [], {}
    for path in files:
        every = enumerate_mutants(path)
        covered = []
        for m in every:
            if args.match and not re.search(args.match, m.key):
                continue
            lines = set(range(m.stmt[0], m.stmt[1] + 1))
            runs = [k for k in keys if lines & cov[k]["lines"].get(m.file, set())]
            if not runs:
                continue
            own = [k for k in runs if _file_of(registry[k]) == m.file]
            m.candidates = own + [k for k in runs if k not in own]
            m.family = registry[m.candidates[0]].family
            covered.append(m)
        if args.rerun:
            covered = [m for m in covered if m.key in args.rerun]
        chosen = covered if not args.sample or args.sample >= len(covered) else sorted(
            sorted(covered, key=lambda m: _draw(args.seed, m.key))[:args.sample], key=lambda m: m.index)
        counts[path.name] = {"mutants": len(every), "run by a check": len(covered), "sampled": len(chosen)}
        mutants += chosen
    return mutants, cov, {"files": counts, "broken": broken, "unplaced": unplaced}


def _draw(seed: int, key: str) -> str:
    """A mutant's place in the seeded draw: a hash of its key, so editing one class leaves
    the other files' (and most of its own file's) draws as they were."""
    return hashlib.sha256(f"{seed}:{key}".encode()).hexdigest()


def table(mutants: list[Mutant]) -> list[dict]:
    rows: dict[str, dict] = {}
    for m in mutants:
        r = rows.setdefault(m.family, {"family": m.family, "mutants": 0, "killed": 0, "timed out": 0,
                                       "survived": 0, "equivalent": 0})
        r["mutants"] += 1
        r[m.status] += 1
    total = {"family": "all", **{k: sum(r[k] for r in rows.values()) for k in ("mutants", "killed", "timed out",
                                                                             "survived", "equivalent")}}
    out = [rows[f] for f in sorted(rows, key=lambda f: FAMILY_ORDER.index(f) if f in FAMILY_ORDER else 99)] + [total]
    for r in out:
        judged = r["mutants"] - r["equivalent"]
        r["score"] = f"{100 * (r['killed'] + r['timed out']) / judged:.1f}%" if judged else "-"
    return out


def render(rows: list[dict]) -> str:
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", action="append", help="only these families' checks (repeatable)")
    parser.add_argument("--file", action="append", help="only these variants/ files, e.g. llama.py (repeatable)")
    parser.add_argument("--sample", type=int, default=40, help="mutants drawn per file (0: all); default 40")
    parser.add_argument("--match", help="only mutants whose key matches this regular expression")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per mutant at most")
    parser.add_argument("--rerun", type=Path,
                        help="only the mutants that survived, timed out or were equivalent in this earlier --json")
    parser.add_argument("--equivalents", type=Path, default=EQUIVALENT)
    parser.add_argument("--list", action="store_true", help="list the sampled mutants, run none")
    parser.add_argument("--json", type=Path, help="write every mutant and the table here")
    args = parser.parse_args(argv)
    if args.sample < 0:
        parser.error(f"--sample {args.sample} must be >= 0")
    if args.rerun:
        try:
            earlier = json.loads(args.rerun.read_text())["mutants"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            parser.error(f"--rerun {args.rerun}: not a --json of this script ({exc})")
        args.rerun = {m["key"] for m in earlier if m["status"] in ("survived", "timed out", "equivalent")}

    sys.path.insert(0, str(ROOT))
    import torch

    torch.set_num_threads(1)  # forks never meet a started thread pool
    from harness.registry import REGISTRY, load_packs

    load_packs()
    t0 = time.perf_counter()
    mutants, cov, counts = plan(args, REGISTRY)
    print(f"coverage of {len(cov)} variants' checks: {time.perf_counter() - t0:.1f} s", flush=True)
    for name, c in counts["files"].items():
        print(f"  {name}: {c['mutants']} mutants, {c['run by a check']} run by a check, {c['sampled']} sampled")
    if counts["broken"]:
        print(f"  fail unmutated (not used): {counts['broken']}")
    if counts["unplaced"]:
        print(f"  registered by variants/ but no file of it found (not used): {counts['unplaced']}")
    if args.list:
        for m in mutants:
            print(f"{m.family:20s} {m.file}:{m.line} {m.key}")
        return 0
    equivalents = load_equivalents(args.equivalents)
    scopes = {}
    for i, m in enumerate(mutants):
        if m.file not in scopes:
            tree = ast.parse((VARIANTS / m.file).read_text())
            scopes[m.file] = {s.name: s for s in _scopes(tree)}
        run_mutant(m, scopes[m.file][m.scope], {k: v["seconds"] for k, v in cov.items()}, args.timeout)
        if m.status == "survived" and m.key in equivalents:
            m.status, m.why = "equivalent", equivalents[m.key]
        elif m.key in equivalents:
            print(f"listed as equivalent in {args.equivalents.name}, but {m.status}: {m.key}")
        print(f"[{i + 1}/{len(mutants)}] {m.status:10s} {m.seconds:6.1f}s {m.file}:{m.line} {m.key}"
              + (f"  (by {m.by})" if m.by else ""), flush=True)
    rows = table(mutants) if mutants else []
    elapsed = time.perf_counter() - t0
    cpu = sum(os.times()[:4])  # this process and its forks, user + system
    print(f"\n{len(mutants)} mutants in {elapsed:.0f} s, {cpu:.0f} s of CPU (load average {os.getloadavg()[0]:.1f}); "
          f"sample {args.sample} per file, seed {args.seed}")
    if rows:
        print(render(rows))
    survivors = [m for m in mutants if m.status == "survived"]
    for m in survivors:
        print(f"SURVIVED {m.file}:{m.line} `{m.key}` (run by {', '.join(m.candidates)})")
    if args.json:
        args.json.write_text(json.dumps({"table": rows, "counts": counts, "seconds": elapsed, "cpu_seconds": cpu,
                                         "mutants": [asdict(m) | {"key": m.key} for m in mutants]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
