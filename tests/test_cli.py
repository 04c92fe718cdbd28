"""The CLI and the ways variants arrive: listing, checking, JSON output, user variant
files (by any path), installed variant packs, and the pytest plugin.

The project's own tests run on ``packs_only()``: a user's ``--variants`` file (given to
this very pytest run) can fail only the tests about its own variants."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness import registry
from harness.cli.common import VARIANTS_ENV
from harness.cli.main import main
from harness.registry import REGISTRY, load_file, packs_only, scratch

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "my_attention.py"


@pytest.fixture
def own():
    """The installed packs' variants only, restored afterwards."""
    with packs_only() as reg:
        yield reg


def _specs_of(check_json: Path, vid: str) -> list[dict]:
    """The spec results of one variant in ``check --json`` output."""
    return [r for r in json.loads(check_json.read_text())["specs"] if r["variant"] == vid]


def test_list_prints_and_writes_json(tmp_path, capsys, own):
    out = tmp_path / "variants.json"
    assert main(["list", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "torch_mha" in printed and "000_4f2b0681cf261e4d.txt" in printed
    # a seed file named in the table is explained: where the write-ups come from
    assert "source (variants): NNN_<hash>.txt" in printed and "../shared/seeds/" in printed
    rows = json.loads(out.read_text())["variants"]
    assert {"id", "family", "source", "traits"} <= set(rows[0])
    ids = {(r["family"], r["id"]) for r in rows}
    assert ("attention", "annotated") in ids and ("norm", "annotated_preln") in ids
    assert all(r["source"] == "torch" or r["source"] for r in rows)


def test_list_one_family_shows_each_variants_traits(capsys, own):
    assert main(["list", "--family", "norm"]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = lines.index(next(line for line in lines if line.startswith("* torch_layernorm")))
    assert "norm_formula=layernorm" in lines[at + 1] and "eps=" in lines[at + 1]  # its semantic traits


def test_list_params_names_each_familys_canonical_parameters_and_those_a_trait_brings(capsys, own):
    from harness.base.config import CONFIG_MATRIX
    from harness.families.catalog import get_family
    assert main(["list", "--params", "--family", "llama_model", "--family", "norm", "--family", "attention"]) == 0
    out = capsys.readouterr().out
    for family in ("llama_model", "norm", "attention"):  # every canonical name, with the shape it is drawn in
        for name, shape in get_family(family).canonical_shapes(CONFIG_MATRIX["default"]).items():
            assert f"  {name}  {tuple(shape)}" in out
    assert "brought by a declared trait" in out and "q_norm.weight" in out  # QK-norm's gains (qwen3)
    assert "source (" not in out  # the listing alone


@pytest.mark.parametrize("argv", [["list"], ["list", "--family", "attention"], ["list", "--params"], ["--help"]])
def test_list_and_help_fit_an_80_column_terminal(argv, capsys, monkeypatch, own):
    monkeypatch.setenv("COLUMNS", "80")
    try:
        main(argv)
    except SystemExit:  # --help exits 0 after printing
        pass
    out = capsys.readouterr().out
    assert out and max(len(line) for line in out.splitlines()) <= 80


def test_check_one_family_json(tmp_path, capsys, own):
    out = tmp_path / "check.json"
    assert main(["check", "--family", "norm", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert set(data["configs"]) == {"default", "heads8", "one_head", "edge"}
    spec_keys = {"family", "variant", "config", "case", "dtype", "verdict", "expected", "ok", "err",
                 "ref_err", "ratio", "worst", "tensors"}
    assert spec_keys <= set(data["specs"][0])
    assert {s["dtype"] for s in data["specs"]} == {"float64", "float32"}
    rows = data["pairs"]
    keys = {"family", "a", "b", "config", "dtype", "device", "verdict", "expected", "max_abs", "grad_max_abs", "ok"}
    assert keys <= set(rows[0])
    custom = [r for r in rows if {r["a"], r["b"]} == {"annotated_preln", "torch_layernorm"}]
    assert custom and all(r["verdict"] == "different" and r["max_abs"] > 1e-3 for r in custom)
    assert "norm_formula" in custom[0]["reason"]
    assert data["gradchecks"] and all(g["ok"] for g in data["gradchecks"]) and data["contradictions"] == 0


def test_user_variant_file_joins_list_and_check(tmp_path, capsys, own):
    out = tmp_path / "check.json"
    assert main(["list", "--family", "attention", "--variants", str(EXAMPLE)]) == 0
    assert "my_einsum" in capsys.readouterr().out
    code = main(["check", "--family", "attention", "--variant", "my_einsum", "--set", "batch=2",
                 "--variants", str(EXAMPLE), "--json", str(out)])  # about my_einsum only
    mine = _specs_of(out, "my_einsum")
    assert mine and all(r["ok"] for r in mine), [r for r in mine if not r["ok"]]
    assert code == 0


def test_a_file_by_relative_and_absolute_path_is_one_file(monkeypatch, own):
    monkeypatch.chdir(ROOT)
    first = load_file("examples/my_attention.py")
    again = load_file(str(EXAMPLE))
    via_dots = load_file("examples/../examples/my_attention.py")
    assert [v.key for v in first] == [v.key for v in again] == [v.key for v in via_dots] == ["attention/my_einsum"]
    assert [k for k in REGISTRY if k.endswith("/my_einsum")] == ["attention/my_einsum"]


def _fake_pack(site: Path, name: str) -> None:
    """A pip-installed variant pack, as pip would leave it: a package and its dist-info
    declaring the entry point (nothing is installed: the folder goes on sys.path)."""
    (site / name).mkdir(parents=True)
    (site / name / "__init__.py").write_text(
        "from torch import nn\n"
        "from harness import Param, register\n"
        "SOURCES = 'a test pack, made in tmp_path'\n"
        f"register(id='{name}_ln', family='norm', source='torch', summary='nn.LayerNorm again',\n"
        "    build=lambda cfg: nn.LayerNorm(cfg.d_model), call=lambda m, i: m(i['x']),\n"
        "    param_map={'weight': Param('weight'), 'bias': Param('bias')},\n"
        "    traits={'norm_formula': 'layernorm', 'eps': 1e-5})\n"
    )
    info = site / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{registry.PACK_GROUP}]\n{name} = {name}\n")


def test_an_installed_pack_joins_list_and_check_with_no_flag(tmp_path, monkeypatch, capsys, own):
    name = "fake_pack_for_tests"
    _fake_pack(tmp_path, name)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_loaded_packs", dict(registry._loaded_packs))
    monkeypatch.setattr(registry, "PACK_NOTES", dict(registry.PACK_NOTES))
    assert {ep.name for ep in registry.pack_entry_points()} >= {"variants", name}
    try:
        assert main(["list", "--family", "norm"]) == 0
        printed = capsys.readouterr().out
        assert f"{name}_ln" in printed and f"source ({name}): a test pack" in printed
        assert REGISTRY[f"norm/{name}_ln"].origin == name and not registry.from_user_file(REGISTRY[f"norm/{name}_ln"])
        out = tmp_path / "check.json"
        main(["check", "--family", "norm", "--dtype", "float32", "--set", "batch=2", "--json", str(out)])
        mine = _specs_of(out, f"{name}_ln")
        assert mine and all(r["ok"] for r in mine), [r for r in mine if not r["ok"]]
    finally:
        sys.modules.pop(name, None)


def test_the_project_is_itself_a_pack():
    eps = {ep.name: ep.value for ep in registry.pack_entry_points()}
    assert eps.get("variants") == "variants"
    assert "import_module(\"variants\")" not in (ROOT / "harness" / "registry" / "__init__.py").read_text()


def test_plugin_and_cli_read_the_same_environment_variable():
    from harness import pytest_plugin

    assert pytest_plugin.VARIANTS_ENV == VARIANTS_ENV


def _pytest(args: list[str], cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**{k: v for k, v in os.environ.items() if k != VARIANTS_ENV}, **(env or {})}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_pytest_variants_from_an_empty_directory_outside_the_repository(tmp_path):
    """``pytest --variants mine.py`` anywhere: the plugin collects mine.py's variants as
    tests of their own, and a wrong one fails only its own tests."""
    mine = tmp_path / "mine.py"
    mine.write_text(EXAMPLE.read_text())
    wrong = tmp_path / "elsewhere" / "swapped.py"
    wrong.parent.mkdir()
    wrong.write_text(EXAMPLE.read_text().replace('id="my_einsum"', 'id="my_swapped"').replace(
        '"v.weight": Chunk("w_qkv", 2, 3)', '"v.weight": Chunk("w_qkv", 1, 3)').replace(
        '"k.weight": Chunk("w_qkv", 1, 3)', '"k.weight": Chunk("w_qkv", 2, 3)'))
    run = _pytest(["-q", "-rA", "--variants", "mine.py"], tmp_path, env={VARIANTS_ENV: str(wrong)})
    out = run.stdout
    for aspect in ("semantics", "precision", "gradcheck", "dropout"):
        assert f"PASSED mine.py::attention/my_einsum[cpu-{aspect}]" in out, out
    # K and V swapped: the float64 semantics and the precision fail; its own gradcheck and dropout hold
    assert "FAILED elsewhere/swapped.py::attention/my_swapped[cpu-semantics]" in out, out
    assert "FAILED elsewhere/swapped.py::attention/my_swapped[cpu-precision]" in out, out
    assert "PASSED elsewhere/swapped.py::attention/my_swapped[cpu-gradcheck]" in out, out
    assert "attention/my_swapped contradicts its declaration (semantics:" in out, out
    assert "2 failed, 6 passed, 8 skipped" in out, out
    assert run.returncode == 1


def test_pytest_variants_k_selects_one_aspect(tmp_path):
    """As for the project's own variants (tests/test_equivalence.py): ``-k precision`` runs
    only the precision test of each of the user's variants, on each device (the test above
    shows every aspect's id)."""
    aspect = "precision"
    (tmp_path / "mine.py").write_text(EXAMPLE.read_text())
    run = _pytest(["--collect-only", "-q", "--variants", "mine.py", "-k", aspect], tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    ids = [line for line in run.stdout.splitlines() if "::" in line]
    assert ids == [f"mine.py::attention/my_einsum[{d}-{aspect}]" for d in ("cpu", "cuda")], run.stdout


def test_check_exits_1_on_a_contradiction(capsys, own):
    wrong = ROOT / "tests" / "wrong_variants.py"
    with scratch():
        assert main(["check", "--family", "norm", "--dtype", "float32", "--variants", str(wrong)]) == 1
    assert "contradict" in capsys.readouterr().out


def test_unsupported_config_skips_variants_with_a_reason(capsys, own):
    assert main(["check", "--family", "decoder_only_block", "--dtype", "float32",
                 "--set", "d_ff=128"]) == 0
    out = capsys.readouterr().out
    assert "simple_decoder_layer skips config custom: the FFN is fixed at 4*d_model=192" in out


def test_a_variant_file_named_on_the_command_line_or_like_a_test_is_imported_once(tmp_path):
    """pytest imports a file named as an argument (or test_*.py) as a test module: the plugin
    collects it as its variants' tests instead, so it never registers twice."""
    (tmp_path / "test_mine.py").write_text(EXAMPLE.read_text())
    run = _pytest(["--collect-only", "-q", "--variants", "test_mine.py", "test_mine.py"], tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "test_mine.py::attention/my_einsum[cpu-semantics]" in run.stdout and "8 tests collected" in run.stdout


def test_help_opens_with_every_command_by_the_question_it_answers(capsys):
    from harness.cli.main import build_parser

    assert main(["--help"]) == 0  # main returns every status, --help's included
    top = capsys.readouterr().out.split("\noptions:")[0]
    commands = build_parser()._subparsers._group_actions[0].choices
    assert len(commands) >= 11 and all(f"\n  {name} " in top for name in commands), top
    assert "``" not in top and "same function?" in top and "faster?" in top


def test_pytest_ids_of_variant_files_outside_the_rootdir_name_their_files(tmp_path):
    """Files outside pytest's rootdir (two named mine.py) keep their paths in the node ids:
    unique, and a test named by its id runs alone (its file is not added whole)."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "pytest.ini").write_text("[pytest]\n")
    files = []
    for folder, vid in (("x", "my_einsum"), ("y", "my_einsum_too")):
        (tmp_path / folder).mkdir()
        files.append(tmp_path / folder / "mine.py")
        files[-1].write_text(EXAMPLE.read_text().replace('id="my_einsum"', f'id="{vid}"'))
    alone = f"{files[0].as_posix()}::attention/my_einsum[cpu-dropout]"
    run = _pytest(["--collect-only", "-q", f"--rootdir={project}", *(f"--variants={f}" for f in files), alone],
                  project)
    ids = [line for line in run.stdout.splitlines() if "::" in line]
    assert ids[0] == alone and len(ids) == 9, run.stdout + run.stderr
    assert ids[1:] == [f"{files[1].as_posix()}::attention/my_einsum_too[{device}-{aspect}]"
                       for device in ("cpu", "cuda") for aspect in ("semantics", "precision", "gradcheck", "dropout")]
