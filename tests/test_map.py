"""``harness map``: the parameter map found by search, verified by ``check``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.base.config import Config
from harness.cli.main import main
from harness.porting.entries import entry_code
from harness.registry import REGISTRY, get_variant, load_file, scratch
from harness.trace.map_candidates import load_class
from harness.trace.map_verify import verify_registration
from harness.trace.mapsearch import propose_map

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
CFG = Config()

NO_SCALE = '''
import torch
from torch import nn


class NoScaleAttention(nn.Module):
    """Fused QKV, but the scores are never divided by sqrt(d_k): no map can fix that."""

    def __init__(self, d_model, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask):
        B, T, D = query.shape
        split = lambda x: x.view(B, -1, self.heads, D // self.heads).transpose(1, 2)
        w, b = self.qkv.weight.chunk(3), self.qkv.bias.chunk(3)
        q, k, v = (split(x @ w_.T + b_) for x, w_, b_ in zip((query, key, value), w, b))
        scores = (q @ k.transpose(-1, -2)).masked_fill(~mask[:, None], float("-inf"))
        return self.out((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, D))
'''


def _known_map(path: Path | None, vid: str) -> dict[str, str]:
    key = f"attention/{vid}"
    if key not in REGISTRY and path is not None:
        load_file(path)
    return {k: entry_code(e) for k, e in get_variant("attention", vid).map_for(CFG).items()}


def _without_register(path: Path) -> str:
    """The file's class definitions, its own register(...) call left out."""
    return path.read_text().split("\nregister(")[0]


def test_map_recovers_three_maps_and_check_agrees(tmp_path, capsys):
    targets = [
        (f"{EXAMPLES / 'my_attention.py'}:EinsumAttention", EXAMPLES / "my_attention.py", "my_einsum"),
        (f"{EXAMPLES / 'conv1d_attention.py'}:Conv1DAttention", EXAMPLES / "conv1d_attention.py", "conv1d_gpt2"),
        ("torch.nn:MultiheadAttention", None, "torch_mha"),
    ]
    files, proposals = [], {}
    with scratch():
        for target, path, known in targets:
            proposal = proposals[known] = propose_map(target, "attention", cfg=CFG)
            assert proposal.found, proposal.text
            assert proposal.as_dict()["param_map"] == _known_map(path, known)
            assert proposal.tried <= 200  # bounded search
            mine = tmp_path / f"mapped_{known}.py"
            head = _without_register(path) if path is not None else ""
            mine.write_text(head + "\n\n" + proposal.code + "\n")
            files.append(mine)
        mha = proposals["torch_mha"]
        assert mha.call_form == "qkv_attn_mask" and mha.traits["fully_masked_row"] == "zeros"
    with scratch() as registry:
        # check the mapped variants with the family's reference only (the default suite's
        # time budget; tests/test_equivalence.py checks the project's own pairs)
        keep = {"attention/torch_mha"}
        for key in [k for k in registry if k.startswith("attention/") and k not in keep]:
            del registry[key]
        args = ["check", "--family", "attention", "--dtype", "float64", "--set", f"seed={CFG.seed}"]  # one config
        for f in files:
            args += ["--variants", str(f)]
        assert main(args) == 0, "the mapped variants contradict their proposed traits"
    printed = capsys.readouterr().out
    assert all(i in printed for i in ("einsumattention", "conv1dattention", "multiheadattention"))


def test_map_says_why_none_fits_and_names_the_closest(tmp_path, capsys):
    path = tmp_path / "no_scale.py"
    path.write_text(NO_SCALE)
    out = tmp_path / "map.json"
    with scratch():
        assert main(["map", f"{path}:NoScaleAttention", "--family", "attention", "--call", "qkv_mask",
                     "--json", str(out)]) == 1
    printed = capsys.readouterr().out
    assert "no candidate map" in printed and "candidates tried" in printed and "closest" in printed
    assert "stacks" not in printed  # three equal blocks: Chunk holds them
    proposal = json.loads(out.read_text())
    # 24 orders x 2 orientations of `out` x 2 layouts of the fused qkv (thirds, thirds per head)
    assert not proposal["found"] and proposal["tried"] == 96
    assert proposal["closest"]["max_abs"] > 1e-3


GQA_NO_SCALE = '''
import torch
from torch import nn


class GqaNoScale(nn.Module):
    """Grouped K/V heads (repeat_interleave), but the scores are never divided by sqrt(d_k)."""

    def __init__(self, d_model, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.d = heads, kv_heads, d_model // heads
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, kv_heads * self.d)
        self.v = nn.Linear(d_model, kv_heads * self.d)
        self.o = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask):
        B, T, D = query.shape
        split = lambda x, h: x.view(B, -1, h, self.d).transpose(1, 2)
        q = split(self.q(query), self.heads)
        k, v = (split(p(x), self.kv_heads).repeat_interleave(self.heads // self.kv_heads, 1)
                for p, x in ((self.k, key), (self.v, value)))
        scores = (q @ k.transpose(-1, -2)).masked_fill(~mask[:, None], float("-inf"))
        return self.o((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, D))
'''


def test_map_with_fewer_kv_heads_than_the_reference_takes_names_the_closest(tmp_path):
    """kv_heads=2, which the reference (torch_mha) cannot be built for: the closest candidate
    is held to the oracle of the search's own trait set (its GQA grouping included), so the
    answer is the closest map and the cases it fails, not an error about torch_mha (a module
    that fits is found under kv_heads=2: test_hf's LlamaAttention-gqa)."""
    path = tmp_path / "gqa.py"
    path.write_text(GQA_NO_SCALE)
    with scratch():
        proposal = propose_map(f"{path}:GqaNoScale", "attention", cfg=Config(kv_heads=2), call="qkv_mask",
                               init="d_model=cfg.d_model, heads=cfg.heads, kv_heads=cfg.n_kv_heads")
    assert not proposal.found
    closest = proposal.closest
    assert closest["agrees"] == [] and closest["max_abs"] > 0.5 and "self" in closest["failing"], proposal.text
    assert "closest" in proposal.text and "torch_mha cannot be built" not in proposal.text


FUSED_GQA = '''
from torch import nn


class FusedGqa(nn.Module):
    """Phi-3's layout: one qkv Linear, H * d query rows, then H_kv * d key and value rows."""

    def __init__(self, d_model, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.d = heads, kv_heads, d_model // heads
        self.qkv = nn.Linear(d_model, (heads + 2 * kv_heads) * self.d, bias=False)
        self.o = nn.Linear(d_model, d_model, bias=False)

    def forward(self, query, key, value, mask):
        B, T, D = query.shape
        sizes = [D, self.kv_heads * self.d, self.kv_heads * self.d]
        q, k, v = (self.qkv(x).split(sizes, -1)[i] for i, x in enumerate((query, key, value)))
        split = lambda x, h: x.view(B, -1, h, self.d).transpose(1, 2)
        g = self.heads // self.kv_heads
        q, k, v = split(q, self.heads), split(k, self.kv_heads), split(v, self.kv_heads)
        k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
        scores = (q @ k.transpose(-1, -2) / self.d ** 0.5).masked_fill(~mask[:, None], float("-inf"))
        return self.o((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, D))
'''


def test_map_finds_a_fused_qkv_of_unequal_blocks_in_the_order_the_module_stacks_them(tmp_path):
    """A fused QKV weight whose blocks differ in size (q's H * d rows, k's and v's H_kv * d):
    map proposes Chunk(..., sizes=...) with the sizes read from cfg, and its registration
    checks clean. Stacked q, v, k instead, the search finds v in the middle block, and the
    registration in the q, k, v order (k and v swapped for this module) does not check clean:
    the order of two blocks of the same size is decided by the oracle, not by the sizes."""
    sizes = "sizes=(cfg.heads * cfg.d_k, cfg.n_kv_heads * cfg.d_k, cfg.n_kv_heads * cfg.d_k)"
    cfg = Config(kv_heads=2)
    init = "d_model=cfg.d_model, heads=cfg.heads, kv_heads=cfg.n_kv_heads"
    for name, order in (("FusedGqa", (0, 1, 2)), ("FusedGqaVK", (0, 2, 1))):
        path = tmp_path / f"{name.lower()}.py"
        path.write_text(FUSED_GQA if order == (0, 1, 2) else FUSED_GQA.replace("class FusedGqa", "class FusedGqaVK")
                        .replace("q, k, v = (self.qkv", "q, v, k = (self.qkv").replace("(query, key, value))",
                                                                                 "(query, value, key))"))
        with scratch():
            proposal = propose_map(f"{path}:{name}", "attention", cfg=cfg, call="qkv_mask", init=init)
        assert proposal.found and "0 contradict" in proposal.text, proposal.text
        for canonical, index in zip(("q", "k", "v"), order):
            assert f'"{canonical}.weight": Chunk("qkv.weight", {index}, {sizes}),' in proposal.code, proposal.code
        if order != (0, 1, 2):
            swapped = proposal.code
            for weight, was, now in (("k", 2, 1), ("v", 1, 2)):
                entry = f'"{weight}.weight": Chunk("qkv.weight", '
                swapped = swapped.replace(f"{entry}{was}", f"{entry}{now}")
            assert swapped != proposal.code
            cls = load_class(f"{path}:{name}")[0]
            clean, line = verify_registration(swapped, "attention", name.lower(), cfg, scope={name: cls},
                                              dtypes=("float64",), extras=False)
            assert not clean and "contradiction" in line, line


@pytest.mark.parametrize("argv,needle", [
    (["map", "missing.py:X", "--family", "attention"], "does not exist"),
    (["map", "torch.nn:Nope", "--family", "attention"], "'Nope' is not found in 'torch.nn'; its nn.Module classes:"),
    (["map", "torch.nn:functional", "--family", "attention"], "is not an nn.Module class (it is a module)"),
    (["map", "torch.nn:MultiheadAttention", "--family", "attention", "--init", "embed_dim=("], "bad --init"),
])
def test_map_bad_input_is_one_line(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0]


def test_map_names_what_the_file_has_where_the_name_is_missing_or_not_a_module(tmp_path, capsys):
    """A name the file lacks is 'not found' with the file's own nn.Module classes (not those
    it imports), the closest first; a name of another kind says what it is."""
    mine = tmp_path / "mine.py"
    mine.write_text("import torch\nfrom torch.nn import Linear\n\n\nclass MyAttention(torch.nn.Module):\n"
                    "    pass\n\n\nclass Helper(torch.nn.Module):\n    pass\n\n\nclass Plain:\n    pass\n")
    for name, needle in [("MyAttentoin", f"'MyAttentoin' is not found in '{mine}'; did you mean MyAttention? "
                                         "its nn.Module classes: MyAttention, Helper"),
                         ("Plain", f"'Plain' in '{mine}' is not an nn.Module class (it is the class Plain); "
                                   "its nn.Module classes: MyAttention, Helper")]:
        assert main(["map", f"{mine}:{name}", "--family", "attention"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"error: {needle}"]


@pytest.mark.parametrize("content,why", [
    (b"import torch\nx = 1\n\x00\x00\xff\xfe garbage\n", "source code string cannot contain null bytes"),
    (b"x = '\xff\xfe'\n", "its bytes are not UTF-8 text"),
])
def test_a_file_that_is_not_python_source_says_so_without_a_line(tmp_path, capsys, content, why):
    """A binary or another encoding: the compiler names no line (or line 1 for the decoding):
    'is not valid Python source', for map and for a variants file, never 'at line None'."""
    bad = tmp_path / "mine.py"
    bad.write_bytes(content)
    assert main(["map", f"{bad}:X", "--family", "attention"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"'{bad}' is not valid Python source: {why}" in err[0], err
    assert main(["list", "--variants", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"variant file '{bad}' is not valid Python source: {why}" in err[0], err
    assert "None" not in err[0]


def test_the_compilers_refusals_without_a_line_read_as_not_python_source():
    """Older Pythons refuse null bytes with a ValueError, newer ones with a SyntaxError whose
    line is None; an ordinary syntax error keeps its line; a user's own ValueError is no
    refusal of the source."""
    from harness.base.errors import exception_line, not_python_source

    why = "source code string cannot contain null bytes"
    assert not_python_source(ValueError(why)) == why
    assert not_python_source(SyntaxError(why)) == why
    said = exception_line(SyntaxError(why, ("mine.py", None, None, None)))
    assert said == f"mine.py is not valid Python source: {why}"
    assert not_python_source(SyntaxError("invalid syntax", ("mine.py", 3, 1, "x = ("))) is None
    assert not_python_source(ValueError("bad value")) is None


def test_map_call_keeps_a_mask_keyword():
    """A ``mask=`` keyword in --call stays a keyword (it was rewritten into i["mask"]=..., a
    syntax error); its value is the case's mask."""
    with scratch():
        proposal = propose_map(f"{EXAMPLES / 'my_attention.py'}:EinsumAttention", "attention", cfg=CFG,
                               call="m(query, key, value, mask=mask)")
    assert proposal.found, proposal.text
    assert 'mask=i["mask"]' in proposal.code


def test_map_shows_the_exception_of_a_custom_call(capsys):
    """An exception in the user's --call is said, not swallowed."""
    with scratch():
        assert main(["map", f"{EXAMPLES / 'my_attention.py'}:EinsumAttention", "--family", "attention",
                     "--call", "m(query, key, value, mask, 5)"]) == 1
    printed = capsys.readouterr().out
    assert "--call 'm(query, key, value, mask, 5)' raised TypeError" in printed and "positional" in printed


def test_map_of_a_file_already_loaded_as_variants(capsys):
    """A file loaded with --variants earlier in the process (pytest's plugin, another command)
    is imported again by map: its own registrations do not collide with the earlier ones."""
    with scratch():
        load_file(str(EXAMPLES / "my_attention.py"))
        code = main(["map", f"{EXAMPLES / 'my_attention.py'}:EinsumAttention", "--family", "attention",
                     "--init", "d_model=48, heads=4"])
    assert code == 0, capsys.readouterr().err
