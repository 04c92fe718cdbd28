"""The shape of ``harness/``, measured before and after a restructuring.

    python benchmarks/house_stats.py            # a Markdown table
    python benchmarks/house_stats.py --json     # the figures as JSON
    python benchmarks/house_stats.py --under check   # sizes of one sub-package's files only

From the source alone (``ast``; nothing is imported): files and lines; the import graph
between harness modules (every ``import``/``from`` that names a harness module, at module
level or inside a function; not those under ``if TYPE_CHECKING:``, which run only in a type
checker), its circles (strongly connected components of more than one
module) and its levels (the longest chain of imports, in modules, a circle counted as
one); imports inside functions;
the largest files, functions and classes by lines; the largest parameter lists (every
parameter but ``self``/``cls``, ``*args`` and ``**kwargs`` one each). import-linter's layers are its own
figure: ``lint-imports`` (run by the default suite) checks them.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "harness"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(name: str, modules: set[str]) -> str | None:
    """The harness module an import names (``harness.bench.sweep`` of ``harness.bench.sweep.run_sweep``)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(tree: ast.Module, own: str, is_package: bool, modules: set[str]) -> tuple[set[str], int, int]:
    """(harness modules imported, imports inside functions, those of them naming a harness module)."""
    found, nested, nested_any = set(), 0, 0
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    inside = {id(x) for f in functions for x in ast.walk(f) if isinstance(x, (ast.Import, ast.ImportFrom))}
    # `if TYPE_CHECKING:` imports are read by a type checker only: no arrow at run time
    typing_only = {id(x) for n in ast.walk(tree) if isinstance(n, ast.If) and _is_type_checking(n.test)
                   for x in ast.walk(n) if isinstance(x, (ast.Import, ast.ImportFrom))}
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = own if is_package else own.rpartition(".")[0]
                for _ in range(node.level - 1):
                    anchor = anchor.rpartition(".")[0]
                base = f"{anchor}.{base}" if base else anchor
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        nested_any += id(node) in inside
        targets = {_resolve(n, modules) for n in names if n == PACKAGE or n.startswith(PACKAGE + ".")}
        targets.discard(None)
        targets.discard(own)
        if targets and id(node) in inside:
            nested += 1
        found |= targets
    return found, nested, nested_any


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


def levels(graph: dict[str, set[str]], found: list[list[str]]) -> int:
    """Modules on the longest import chain, a circle counted as one level."""
    into = {m: comp[0] for comp in found for m in comp}
    dag = {}
    for v, ws in graph.items():
        dag.setdefault(into.get(v, v), set()).update(into.get(w, w) for w in ws)
    for v in dag:
        dag[v].discard(v)
    depth: dict[str, int] = {}

    def d(v: str) -> int:
        if v not in depth:
            depth[v] = 1 + max((d(w) for w in dag.get(v, ())), default=0)
        return depth[v]

    return max((d(v) for v in dag), default=0)


def parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """A def's parameters, ``self``/``cls`` apart, ``*args`` and ``**kwargs`` one each."""
    a = node.args
    named = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    return len(named) - (named[:1] in (["self"], ["cls"])) + (a.vararg is not None) + (a.kwarg is not None)


def measure(under: str = "") -> dict:
    every = sorted((ROOT / PACKAGE).rglob("*.py"))
    modules = {module_name(p) for p in every}
    files = [p for p in every if not under or p.is_relative_to(ROOT / PACKAGE / under)]
    graph, lines, functions, classes, nested, nested_any = {}, {}, [], [], 0, 0
    params = []
    for path in every:
        text = path.read_text()
        tree = ast.parse(text)
        name = module_name(path)
        graph[name], n, n_any = imports_of(tree, name, path.name == "__init__.py", modules)
        if path not in files:
            continue
        lines[str(path.relative_to(ROOT))] = len(text.splitlines())
        nested, nested_any = nested + n, nested_any + n_any
        for node in ast.walk(tree):
            size = (node.end_lineno or node.lineno) - node.lineno + 1 if hasattr(node, "lineno") else 0
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                functions.append((size, f"{name}.{node.name}"))
                params.append((parameters(node), f"{name}.{node.name}"))
            elif isinstance(node, ast.ClassDef):
                classes.append((size, f"{name}.{node.name}"))
    found = circles(graph)
    return {
        "files": len(files), "lines": sum(lines.values()), "modules": len(modules),
        "import_arrows": sum(len(v) for v in graph.values()), "circles": found,
        "levels": levels(graph, found), "imports_inside_functions": nested_any,
        "harness_imports_inside_functions": nested,
        "files_over_400": sorted(f for f, n in lines.items() if n > 400),
        "largest_files": sorted(((n, f) for f, n in lines.items()), reverse=True)[:5],
        "largest_functions": sorted(functions, reverse=True)[:5],
        "largest_classes": sorted(classes, reverse=True)[:3],
        "largest_parameter_lists": sorted(params, reverse=True)[:5],
        "layers": layers(),
    }


def layers() -> list[str]:
    """The layers of import-linter's "layers" contract in pyproject.toml, top first ([] when none)."""
    import tomllib

    path = ROOT / "pyproject.toml"
    if not path.is_file():
        return []
    contracts = tomllib.loads(path.read_text()).get("tool", {}).get("importlinter", {}).get("contracts", [])
    return next((c["layers"] for c in contracts if c.get("type") == "layers"), [])


def table(s: dict) -> str:
    def top(items):
        return ", ".join(f"{name.removeprefix('harness.')} {n}" for n, name in items)

    rows = [("files", s["files"]), ("lines", f"{s['lines']:,}"), ("import arrows between modules", s["import_arrows"]),
            ("import circles", len(s["circles"])), ("import levels (longest chain, modules)", s["levels"]),
            ("import-linter layers", len(s["layers"]) or "-"),
            ("imports inside functions (of them naming a harness module)",
             f"{s['imports_inside_functions']} ({s['harness_imports_inside_functions']})"),
            ("files over 400 lines", len(s["files_over_400"])),
            ("largest files (lines)", top(s["largest_files"])),
            ("largest functions (lines)", top(s["largest_functions"])),
            ("largest classes (lines)", top(s["largest_classes"])),
            ("largest parameter lists (parameters)", top(s["largest_parameter_lists"]))]
    return "\n".join(["| figure | now |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="the figures as JSON")
    parser.add_argument("--under", default="", metavar="SUBPACKAGE",
                        help="the sizes of the files under harness/SUBPACKAGE only (e.g. check)")
    args = parser.parse_args(argv)
    s = measure(args.under)
    print(json.dumps(s, indent=1) if args.json else table(s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
