"""benchmarks/mutation_score.py on a tiny sample: its mutants leave the registrations alone,
an obviously wrong mutant of a variant is killed by that family's check, and the run
reports its counts (a few seconds; the whole run and its score are in docs/verdicts.md)."""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "mutation_score.py"


def _script():
    spec = importlib.util.spec_from_file_location("mutation_score", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_mutants_never_touch_registrations_maps_or_traits():
    ms = _script()
    for path in sorted((ROOT / "variants").glob("*.py")):
        tree = ast.parse(path.read_text())
        glue = {n.lineno for node in tree.body if not isinstance(node, (ast.ClassDef, ast.FunctionDef))
                for n in ast.walk(node) if hasattr(n, "lineno")}
        mutants = ms.enumerate_mutants(path)
        assert not [m.key for m in mutants if m.line in glue], path.name
        keys = [m.key for m in mutants]
        assert len(keys) == len(set(keys)), f"{path.name}: two mutants share a key"
    scopes = {m.scope for m in ms.enumerate_mutants(ROOT / "variants" / "llama.py")}
    assert "RMSNorm" in scopes and "call" not in scopes and "attention_map" not in scopes  # adapters, maps


def test_every_variant_of_the_pack_is_placed_in_its_file():
    """A mutant is run by the variants whose file it is in first; a variant whose file is not
    found is left out of the run (its family's mutants all unrun), e.g. a kernel whose build
    the registry wraps twice (the guard around register_kernel's closure)."""
    from harness.registry import REGISTRY, load_packs

    ms = _script()
    load_packs()
    ours = {k: v for k, v in REGISTRY.items() if v.origin == "variants"}
    files = {k: ms._file_of(v) for k, v in ours.items()}
    assert not [k for k, f in files.items() if not f], files
    assert files["attention_kernel/eager"] == "kernels.py" and files["norm/llama_rmsnorm"] == "llama.py"
    assert all((ROOT / "variants" / f).is_file() for f in files.values())


def test_equivalents_file_is_read():
    ms = _script()
    listed = ms.load_equivalents()
    assert all("::" in key and why for key, why in listed.items())


def test_a_tiny_run_kills_an_obviously_wrong_mutant_and_reports_counts(tmp_path):
    out = tmp_path / "mutants.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--family", "norm", "--file", "llama.py",
                           "--match", r"RMSNorm\.forward::binop", "--sample", "3", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(out.read_text())
    mutants = data["mutants"]
    assert len(mutants) == 3 and all(m["family"] == "norm" for m in mutants)
    # an operator swapped inside RMSNorm's formula (* -> /, + -> -) is a different function
    assert all(m["status"] == "killed" and m["by"].startswith("norm/") for m in mutants), mutants
    total = data["table"][-1]
    assert (total["family"], total["mutants"], total["killed"], total["survived"]) == ("all", 3, 3, 0)
    assert "| norm | 3 | 3 | 0 | 0 | 0 | 100.0% |" in proc.stdout
