"""The first failure a user meets gives the right advice: a config field reads as documented;
a user's exception names its file and line; "declare it as a path finding" only for a path
difference, never for an exception or a mistake the probes name; a trait the registration
left out is named with the value that fits; the diff command printed under a failure carries
the config it failed on; pytest --variants prints check's one-line diagnosis; bench and report
take --set and --dtype."""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from harness.base.config import CONFIG_MATRIX, Config
from harness.base.errors import exception_line
from harness.bench.cases import plan
from harness.check.api import check_all
from harness.cli.common import VARIANTS_ENV
from harness.cli.main import main
from harness.families.catalog import FAMILIES, get_family
from harness.registry import load_file, load_packs, scratch
from harness.trace.explain import Mistakes, explain_failures, path_findings

GQA = get_family("attention").extra_configs["gqa"]

# Each None default of Config and the value its documentation gives (a field added with a None
# default must say here what it reads as).
DOCUMENTED = {"kv_heads": lambda cfg: cfg.heads, "window": lambda cfg: None, "head_dim": lambda cfg: None}


def test_every_config_field_reads_its_documented_value():
    nones = {f.name for f in dataclasses.fields(Config) if f.default is None}
    assert nones == set(DOCUMENTED)
    every = {**CONFIG_MATRIX, **{n: c for f in FAMILIES.values() for n, c in f.extra_configs.items()}}
    for name, cfg in every.items():
        for field, documented in DOCUMENTED.items():
            if field == "kv_heads" and name in ("gqa", "mqa"):  # the attention family's K/V-head configs
                continue
            assert getattr(cfg, field) == documented(cfg), (name, field)
    assert isinstance(Config(heads=8, d_model=64).kv_heads * Config().d_k, int)  # a user's arithmetic works
    assert Config().replace(heads=8).kv_heads == 8 and Config.parse(["heads=2"]).kv_heads == 2  # follows heads
    assert GQA.replace(heads=8).kv_heads == 2 and Config.parse(["kv_heads=none", "heads=2"]).kv_heads == 2


def test_set_items_rebuild_every_config():
    for cfg in [*CONFIG_MATRIX.values(), GQA, Config(window=(3, 0), softcap=2.5, padding="left")]:
        assert Config.parse(cfg.set_items()) == cfg and Config.parse(cfg.set_items()).kv_heads == cfg.kv_heads


MINE = '''
import math
import torch
from torch import nn
from harness import Param, Zero, register


def rotate(x, positions, base, interleaved):
    d = x.shape[-1]
    angle = positions.to(x.dtype)[:, None, :, None] / base ** (torch.arange(0, d, 2, dtype=x.dtype) / d)
    cos, sin = angle.cos(), angle.sin()
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2)
    half = d // 2
    return x * torch.cat([cos, cos], -1) + torch.cat([-x[..., half:], x[..., :half]], -1) * torch.cat([sin, sin], -1)


class Mine(nn.Module):
    """A LLaMA-style attention (RoPE, GQA) read from the config as a user writes it."""

    def __init__(self, cfg, kind="ok"):
        super().__init__()
        self.h, self.kv, self.d, self.base, self.kind = cfg.heads, cfg.kv_heads, cfg.d_k, cfg.rope_base, kind
        self.q = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.k = nn.Linear(cfg.d_model, cfg.kv_heads * cfg.d_k, bias=False)
        self.v = nn.Linear(cfg.d_model, cfg.kv_heads * cfg.d_k, bias=False)
        self.o = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def forward(self, query, key, value, mask, positions, key_positions):
        B, T, _ = query.shape
        if self.kind == "crash" and T > 1:
            raise ValueError("one query at a time")  # CRASH LINE
        q = self.q(query).view(B, T, self.h, self.d).transpose(1, 2)
        k = self.k(key).view(B, -1, self.kv, self.d).transpose(1, 2)
        v = self.v(value).view(B, -1, self.kv, self.d).transpose(1, 2)
        il = self.kind == "interleaved"
        q, k = rotate(q, positions, self.base, il), rotate(k, key_positions, self.base, il)
        g = self.h // self.kv
        if self.kind == "tiled":
            k, v = k.repeat(1, g, 1, 1), v.repeat(1, g, 1, 1)
        else:
            k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
        s = q @ k.transpose(-2, -1) / math.sqrt(self.d)
        keep = mask[:, None]
        dead = ~keep.any(-1, keepdim=True)  # a row without keys: zeros
        y = s.masked_fill(~keep, float("-inf")).masked_fill(dead, 0.0).softmax(-1).masked_fill(dead, 0.0) @ v
        y = self.o(y.transpose(1, 2).reshape(B, T, -1))
        return y * 1.001 if self.kind == "path" and T > 1 else y


MAP = {**{f"{c}.weight": Param(f"{c}.weight") for c in "qkvo"}, **{f"{c}.bias": Zero() for c in "qkvo"}}
TRAITS = {"sublayer": "attention", "rope": "half-split", "gqa_grouping": "consecutive",
          "fully_masked_row": "zeros", "cases": ("self_kv",)}
for kind in ("crash", "interleaved", "path", "tiled", "norope"):
    traits = {k: v for k, v in TRAITS.items() if not (kind == "norope" and k == "rope")}
    register(id=f"mine_{kind}", family="attention", source="mine", build=lambda cfg, kind=kind: Mine(cfg, kind),
             call=lambda m, i: m(i["query"], i["key"], i["value"], i["mask"], i["positions"], i["key_positions"]),
             param_map=MAP, traits=traits)
'''
KINDS = ("crash", "interleaved", "path", "tiled", "norope")
CONFIGS = {"default": CONFIG_MATRIX["default"], "edge": CONFIG_MATRIX["edge"], "gqa": GQA}


@pytest.fixture(scope="module")
def mine(tmp_path_factory):
    """The user's file, loaded, and one check of its variants on the default, edge (T = 1)
    and GQA configs (self_kv only: about 3 s)."""
    path = tmp_path_factory.mktemp("user") / "mine.py"
    path.write_text(MINE)
    load_packs()
    with scratch():
        load_file(path)
        report = check_all(["attention"], CONFIGS, "cpu", ["float32"], extras=False,
                           variants=[f"attention/mine_{k}" for k in KINDS])
        yield path, report


def test_a_users_exception_names_its_file_and_line(mine):
    path, report = mine
    line = MINE.splitlines().index(next(x for x in MINE.splitlines() if "CRASH LINE" in x)) + 1
    errors = {s.note for s in report.specs if s.variant == "mine_crash" and s.verdict == "error"}
    assert errors == {f"ValueError: one query at a time (at {path}:{line}, in forward)"}
    try:  # raised in the harness, called from here: this file's line is named, never the harness's
        Config(heads=0)
    except ValueError as exc:
        said = exception_line(exc)
        assert said.startswith("ConfigError: heads=0 must be a positive integer (at ") and "config.py" not in said
        assert f"{Path(__file__).name}:" in said
        assert said.endswith(", in test_a_users_exception_names_its_file_and_line)")


def test_path_finding_advice_only_for_a_path_difference(mine):
    _, report = mine
    failing = {s.variant for s in report.specs if not s.ok}
    assert failing == {f"mine_{k}" for k in KINDS}
    text = path_findings(report, CONFIGS, Mistakes(report, CONFIGS))
    advised = set(re.findall(r"attention/(mine_\w+) on self_kv: fails on config", text))
    # the exception is an error row; the RoPE, GQA and left-out-trait mistakes are named: only the
    # variant that takes another path for T > 1 gets the declaration to make
    assert advised == {"mine_path"}, text
    assert "traits={'path_findings': {'self_kv': 'why'}}" in text


def test_a_left_out_trait_is_named_with_the_value_that_fits(mine):
    _, report = mine
    mistakes = Mistakes(report, CONFIGS)
    assert mistakes.line("attention", "mine_norope").startswith(
        "reads as rope='half-split' (rope left out of the traits, read as 'none') on every failing case")
    assert "interleaved vs half-split RoPE" in mistakes.line("attention", "mine_interleaved")
    assert mistakes.line("attention", "mine_path").startswith(  # no trait value fits a computation that differs
        "no single convention read another way explains it on self_kv")


def test_the_printed_diff_command_reproduces_the_difference(mine, capsys):
    path, report = mine
    tiled = dataclasses.replace(report, specs=[s for s in report.specs if s.variant == "mine_tiled"])
    assert {s.config for s in tiled.specs if not s.ok} == {"gqa"}  # only the GQA config shows it
    text = explain_failures(tiled, CONFIGS, limit=1)
    command = next(x for x in text.splitlines() if "reproduce:" in x).split("reproduce: ")[1]
    assert "--set kv_heads=2" in command and "--case self_kv" in command
    argv = shlex.split(command)[3:] + ["--variants", str(path)]
    assert main(argv) == 0
    assert "verdict: different" in capsys.readouterr().out
    sets = [i for i, a in enumerate(argv) if a == "--set"]
    without = [a for i, a in enumerate(argv) if i not in sets and i - 1 not in sets]
    assert main(without) == 0
    assert "verdict: different" not in capsys.readouterr().out  # the hint without its config finds nothing


NORMS = '''
import torch
from torch import nn
from harness import Param, Zero, register


class GemmaNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * (1 + self.weight)


MAP = {"weight": Param("weight"), "bias": Zero()}
register(id="my_gemma", family="norm", source="mine", build=lambda cfg: GemmaNorm(cfg.d_model),
         call=lambda m, i: m(i["x"]), param_map=MAP, traits={"norm_formula": "rms", "eps": 1e-6})
'''


def test_pytest_variants_prints_the_diagnosis_check_prints(tmp_path, capsys):
    mine = tmp_path / "mine.py"
    mine.write_text(NORMS)
    with scratch():
        assert main(["check", "--family", "norm", "--dtype", "float64", "--variants", str(mine),
                     "--variant", "my_gemma"]) == 1
    said = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("  norm/my_gemma: reads as"))
    env = {k: v for k, v in os.environ.items() if k != VARIANTS_ENV}
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--variants", "mine.py",
                          "-k", "cpu-semantics"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr
    head = next(x for x in run.stdout.splitlines() if x.startswith("norm/my_gemma contradicts"))
    assert head.endswith(said.split("norm/my_gemma: ")[1]), (head, said)


def test_bench_and_report_take_set_and_dtype(capsys):
    cases = plan("quick", "cpu", ["attention"], ["llama"], sets=["kv_heads=2", "d_model=64"], dtypes=["bfloat16"])
    mine = [c for c in cases if c.variant == "llama"]
    assert mine and all(c.dtype == "bfloat16" and c.d_model == 64 for c in mine)
    assert all(c.config().kv_heads == 2 and c.key.endswith("|kv_heads=2") for c in mine)
    for command in ("bench", "report"):
        assert main([command, "--family", "attention", "--set", "kv_heads=3", "--out" if command == "report"
                     else "--log", "/nonexistent/x"]) == 2
        assert "error: kv_heads=3 must be a positive integer dividing heads=" in capsys.readouterr().err
        assert main([command, "--family", "attention", "--dtype", "bool"]) == 2
        assert "a benchmark runs in a floating dtype" in capsys.readouterr().err
