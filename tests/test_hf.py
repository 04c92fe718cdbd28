"""Real Hugging Face modules (transformers, the ``.[hf]`` extra): ``map`` finds them with
no flag but ``--family``, the examples pack (examples/hf_pack.py, map's output) checks
clean, and HF's LlamaAttention with RoPE and GQA is equivalent to the project's LLaMA-style
reference and to SDPA with ``enable_gqa``. Skipped, with the reason, without transformers."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="transformers is not installed: pip install -e '.[hf]'")

from harness.base.config import Config  # noqa: E402
from harness.check.api import check_all  # noqa: E402
from harness.cli.main import main  # noqa: E402
from harness.families.catalog import FAMILIES, get_family  # noqa: E402
from harness.porting.entries import entry_code  # noqa: E402
from harness.registry import get_variant, load_file, register, scratch  # noqa: E402
from harness.trace.mapsearch import propose_map  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PACK = ROOT / "examples" / "hf_pack.py"
GQA = get_family("attention").extra_configs["gqa"]
DEFAULT = Config()

# class, family, the pack's id, config: the table (LlamaDecoderLayer: no block family yet)
TABLE = [
    ("transformers.models.llama.modeling_llama:LlamaAttention", "attention", "hf_llama", DEFAULT),
    ("transformers.models.llama.modeling_llama:LlamaAttention", "attention", "hf_llama", GQA),
    ("transformers.models.llama.modeling_llama:LlamaMLP", "gated_ffn", "hf_llama_mlp", DEFAULT),
    ("transformers.models.llama.modeling_llama:LlamaRMSNorm", "norm", "hf_llama_rmsnorm", DEFAULT),
    ("transformers.models.mistral.modeling_mistral:MistralAttention", "attention", "hf_mistral", DEFAULT),
    ("transformers.models.qwen2.modeling_qwen2:Qwen2Attention", "attention", "hf_qwen2", GQA),
    ("transformers.models.gpt_neox.modeling_gpt_neox:GPTNeoXAttention", "attention", "hf_gpt_neox",
     Config(d_model=64)),
    ("transformers.models.gpt2.modeling_gpt2:GPT2Attention", "attention", "hf_gpt2", DEFAULT),
    ("transformers.models.bert.modeling_bert:BertSelfAttention", "attention", "hf_bert", DEFAULT),
    ("transformers.models.gemma.modeling_gemma:GemmaRMSNorm", "norm", "hf_gemma_rmsnorm", DEFAULT),
    # a LLaMA block family (llama_block) when there is one: not in the pack
    ("transformers.models.llama.modeling_llama:LlamaDecoderLayer", "llama_block", None, DEFAULT),
]


def _pack_entry(family: str, vid: str, cfg: Config):
    variant = get_variant(family, vid)
    return {k: entry_code(e) for k, e in variant.map_for(cfg).items()}, variant


def _agrees_with_pack(proposal, family: str, vid: str, cfg: Config) -> None:
    assert proposal.found, proposal.text
    pmap, variant = _pack_entry(family, vid, cfg)
    assert proposal.as_dict()["param_map"] == pmap
    semantic = get_family(family).traits
    mine = {k: v for k, v in proposal.traits.items() if k in semantic or k in ("internal_dtype", "cases")}
    theirs = {k: variant.traits[k] for k in mine}
    assert mine == theirs


@pytest.mark.parametrize("row", [TABLE[1], TABLE[9]], ids=["LlamaAttention-gqa", "GemmaRMSNorm"])
def test_map_finds_the_pack_registration(row):
    """map with no flag but --family (and kv_heads=2 for GQA) prints what the pack registers."""
    target, family, vid, cfg = row
    with scratch():
        load_file(PACK)
        proposal = propose_map(target, family, cfg=cfg)
        _agrees_with_pack(proposal, family, vid, cfg)
    assert "library_config(" in proposal.code or family == "norm"
    if family == "attention":  # a row with no key as the module gives it in float32, not float64's NaN
        assert proposal.traits["fully_masked_row"] == "mean of V" and "fully_masked" in proposal.traits["cases"]


def test_map_finds_phi3s_fused_qkv_with_fewer_kv_heads():
    """Phi-3's qkv_proj (96, 48) at kv_heads=2 stacks q, k and v as 48 + 24 + 24 rows: map
    proposes Chunk(..., sizes=...) read from cfg, and the registration it prints checks clean."""
    with scratch():
        proposal = propose_map("transformers.models.phi3.modeling_phi3:Phi3Attention", "attention", cfg=GQA)
    assert proposal.found and "0 contradict" in proposal.text, proposal.text
    sizes = "sizes=(cfg.heads * cfg.d_k, cfg.n_kv_heads * cfg.d_k, cfg.n_kv_heads * cfg.d_k)"
    for index, name in enumerate("qkv"):
        assert f'"{name}.weight": Chunk("qkv_proj.weight", {index}, {sizes}),' in proposal.code, proposal.code
    assert "param_map=lambda cfg: {" in proposal.code and "equal blocks only" not in proposal.text


@pytest.mark.slow
@pytest.mark.parametrize("row", TABLE, ids=[f"{r[0].rsplit(':', 1)[1]}-{r[3].n_kv_heads}kv" for r in TABLE])
def test_map_table(row, tmp_path):
    """Every class of the table: map finds the pack's map and traits, and the printed
    registration checks clean (float64, the config map ran on)."""
    target, family, vid, cfg = row
    if family not in FAMILIES:
        pytest.skip(f"no '{family}' family here to map {target} into")
    with scratch():
        load_file(PACK)
        proposal = propose_map(target, family, cfg=cfg)
        if vid is None:
            assert proposal.found, proposal.text
            assert "left_pad" in proposal.traits.get("cases", ("left_pad",)), proposal.text
        else:
            _agrees_with_pack(proposal, family, vid, cfg)
    mine = tmp_path / "mapped.py"
    mine.write_text(proposal.code + "\n")
    sets = [f"--set={k}={v}" for k, v in (("d_model", cfg.d_model), ("kv_heads", cfg.n_kv_heads))]
    with scratch():
        assert main(["check", "--variants", str(mine), "--family", family, "--dtype", "float64", *sets]) == 0


@pytest.fixture(scope="module")
def pack_report():
    """The pack's variants on the default and GQA configs, float32, with an SDPA
    (enable_gqa) LLaMA beside them: the project's own LlamaAttention with RoPE, SDPA inside."""
    import variants.llama as ours

    with scratch():
        added = load_file(PACK)
        sdpa = register(id="sdpa_gqa_rope", family="attention", source="torch",
                        build=lambda cfg: ours.LlamaAttention(cfg, gqa="sdpa"), call=ours.call,
                        param_map=ours.attention_map(),
                        traits={**ours.LLAMA, "scale": "inside SDPA", "fill": "sdpa"})
        keys = [v.key for v in added] + [sdpa.key, "attention/llama"]
        return check_all(["attention", "norm", "gated_ffn"], {"default": DEFAULT, "gqa": GQA}, "cpu",
                         ["float32"], variants=keys, extras=False)


def test_pack_checks_clean(pack_report):
    bad = [(s.variant, s.config, s.case, s.dtype, s.verdict) for s in pack_report.specs
           if s.variant.startswith("hf_") and not s.ok]
    assert not bad
    ran = {s.variant for s in pack_report.specs if s.variant.startswith("hf_")}
    assert ran == {"hf_llama", "hf_mistral", "hf_qwen2", "hf_qwen3", "hf_olmo2", "hf_gpt2", "hf_bert",
                   "hf_llama_rmsnorm", "hf_gemma_rmsnorm", "hf_llama_mlp"}
    # GPT-NeoX's odd rotary dims at d_k = 12: skipped with the reason, never a verdict
    assert not any(s.variant == "hf_gpt_neox" for s in pack_report.specs)
    assert any(v == "hf_gpt_neox" and "odd" in why for _, v, _, why in pack_report.skipped)


def test_gpt_neox_as_map_registers_it_on_the_default_configs():
    """HF GPTNeoXAttention as map registers it (the pack's hf_gpt_neox, found at d_model = 64) on
    every config of the default matrix: the family refuses the configs where d_k * 0.25 is odd
    (d_k = 12: default, heads8, edge) and the GQA one (no grouping declared), each with its
    reason; the one-head config (d_k = 16, four rotary dims) is checked and clean on every case it
    takes: no false "different" anywhere."""
    from harness.base.config import CONFIG_MATRIX

    with scratch():
        load_file(PACK)
        report = check_all(["attention"], {**CONFIG_MATRIX, "gqa": GQA}, "cpu", ["float64"],
                           variants=["attention/hf_gpt_neox"], extras=False)
    specs = [s for s in report.specs if s.variant == "hf_gpt_neox"]
    skipped = {c: why for _, v, c, why in report.skipped if v == "hf_gpt_neox"}
    assert {s.config for s in specs} == {"one_head"} and len(specs) == 9  # its 7 cases, self@large and window@wide
    # float32 rotary tables inside: "less precise" in float64 by declaration, never "different"
    assert all(s.ok and s.verdict in ("equivalent", "less precise") for s in specs), \
        [(s.case, s.verdict, s.note) for s in specs if not s.ok]
    assert {c for c, why in skipped.items() if "rotates 3 dim(s)" in why} == {"default", "heads8", "edge"}
    assert "no gqa_grouping" in skipped["gqa"]


@pytest.mark.parametrize("other", ["llama", "sdpa_gqa_rope"])
def test_hf_llama_equivalent_to_ours_and_sdpa_gqa(pack_report, other):
    """HF LlamaAttention (RoPE half-split, GQA on the gqa config) against the project's
    LLaMA-style reference and against SDPA with enable_gqa: equivalent on every shared case."""
    pairs = [p for p in pack_report.pairs if {p.a, p.b} == {"hf_llama", other}]
    assert {p.config for p in pairs} == {"default", "gqa"}
    assert {p.case for p in pairs} >= {"causal", "random_mask", "window"}
    same = [p for p in pairs if p.case != "fully_masked"]  # there: the mean of V against zeros, declared
    assert all(p.verdict.agrees or p.verdict == "less precise" for p in same), \
        [(p.config, p.case, p.dtype, p.verdict) for p in same]
    assert all(p.ok for p in pairs)


def test_float32_rotary_tables_are_less_precise_on_large_logits_and_a_coarser_table_is_caught():
    """HF Llama (float32 rotary tables, ``internal_dtype: float32``) on ``self@large`` in
    float64: beyond float32's elementwise bound, within the rounding of the definition
    computed in float32, so "less precise" as declared; the same module with its tables
    rounded to bfloat16 (declaring float32 all the same) is "different" there."""
    from harness import additive_mask, rotary_tables

    def coarse_call(m, i):
        cos, sin = rotary_tables(m, i["query"], i["positions"])
        tables = (cos.bfloat16().to(cos.dtype), sin.bfloat16().to(sin.dtype))
        return m(i["query"], position_embeddings=tables, attention_mask=additive_mask(i["mask"], i["query"].dtype))[0]

    with scratch():
        load_file(PACK)
        llama = get_variant("attention", "hf_llama")
        assert "self" in llama.traits["cases"]
        register(id="hf_llama_bf16_tables", family="attention", source="test", build=llama.build,
                 call=coarse_call, param_map=llama.param_map, traits={**llama.traits, "cases": ("self",)})
        report = check_all(["attention"], {"default": DEFAULT}, "cpu", ["float32"], extras=False,
                           variants=["attention/hf_llama", "attention/hf_llama_bf16_tables"])
    spec = {(s.variant, s.case, s.dtype): s for s in report.specs}
    honest = spec[("hf_llama", "self@large", "float64")]
    assert honest.ok and honest.verdict == "less precise", honest.note
    assert "computed in float32" in honest.note
    coarse = spec[("hf_llama_bf16_tables", "self@large", "float64")]
    assert not coarse.ok and coarse.verdict == "different", coarse.note


@pytest.mark.slow
def test_gemma2_attention_with_its_own_head_width_and_score_scale():
    """HF Gemma2Attention with head_dim = 16 at D = 48, H = 4 (not D / H) and
    query_pre_attn_scalar = 24 (scores times 24 ** -0.5, not 1 / sqrt(16)), logit softcap 50:
    declared, it agrees with the attention oracle; declared with the default scale, caught."""
    from transformers.models.gemma2.configuration_gemma2 import Gemma2Config
    from transformers.models.gemma2.modeling_gemma2 import Gemma2Attention

    from harness import Param, Zero, additive_mask, library_config, rotary_tables
    from harness.check.spec import SpecChecker

    def call(m, i):
        return m(i["query"], position_embeddings=rotary_tables(m, i["query"], i["positions"]),
                 attention_mask=additive_mask(i["mask"], i["query"].dtype))[0]

    pmap = {f"{c}.{k}": Param(f"{c}_proj.{k}") if k == "weight" else Zero() for c in "qkvo" for k in ("weight", "bias")}
    cfg = Config(head_dim=16)
    assert cfg.d_k == 16 != cfg.d_model // cfg.heads
    with scratch():
        made = {scale: register(
            id=f"gemma2_{i}", family="attention", source="transformers", call=call, param_map=pmap,
            build=lambda c: Gemma2Attention(config=library_config(Gemma2Config, c, query_pre_attn_scalar=24,
                                                                   layer_types=["full_attention"]), layer_idx=0),
            traits={"sublayer": "attention", "rope": "half-split", "gqa_grouping": "consecutive",
                    "fully_masked_row": "NaN", "internal_dtype": "float32", "softcap": 50.0, "score_scale": scale,
                    "cases": ("random_mask",)}) for i, scale in enumerate((24 ** -0.5, "1/sqrt(d)"))}
        checker = SpecChecker({"hd16": cfg})
        right = checker.check(made[24 ** -0.5], "hd16", "random_mask", "float64")
        wrong = checker.check(made["1/sqrt(d)"], "hd16", "random_mask", "float64")
    assert right.ok, right.note
    assert not wrong.ok and wrong.verdict == "different"


@pytest.mark.slow
def test_map_shows_why_no_call_form_ran_and_finds_gemma2s_scale():
    """Qwen3's and OLMo2's q/k norm gains are the
    family's QK-norm gains, found with their eps (their norms' own) and as the pack registers
    them, OLMo2's at GQA (its k gain (H_kv d_k,)); Gemma 2's scale (query_pre_attn_scalar) and
    logit soft-cap are read from the module, and the registration it prints checks clean."""
    with scratch():
        load_file(PACK)
        for target, vid, cfg in (("qwen3.modeling_qwen3:Qwen3Attention", "hf_qwen3", DEFAULT),
                                 ("olmo2.modeling_olmo2:Olmo2Attention", "hf_olmo2", GQA)):
            qk = propose_map(f"transformers.models.{target}", "attention", cfg=cfg)
            _agrees_with_pack(qk, "attention", vid, cfg)
            assert qk.traits["qk_norm"] == get_variant("attention", vid).traits["qk_norm"]
            assert "0 contradict" in qk.text, qk.text
    cfg = Config(head_dim=16)
    gemma = propose_map("transformers.models.gemma2.modeling_gemma2:Gemma2Attention", "attention", cfg=cfg)
    assert gemma.found, gemma.text
    assert gemma.traits["score_scale"] == 256 ** -0.5 and gemma.traits["softcap"] == 50.0
    assert "0 contradict" in gemma.text


# (module under transformers.models, its config class): the classes map takes from a config
ROPE_CLASSES = [("llama", "LlamaConfig"), ("qwen2", "Qwen2Config"), ("mistral", "MistralConfig"),
                ("cohere", "CohereConfig"), ("phi3", "Phi3Config"), ("gemma", "GemmaConfig"),
                ("gemma2", "Gemma2Config"), ("gemma3", "Gemma3TextConfig"), ("gpt_neox", "GPTNeoXConfig")]


@pytest.mark.parametrize("home,config", ROPE_CLASSES, ids=[r[0] for r in ROPE_CLASSES])
def test_library_config_carries_the_rope_base(home, config):
    """The class's own rotary embedding, built from library_config, turns pair i by
    base^(-2i/r) at the harness config's base, not at the class's default (Cohere's 500000,
    the others' 10000); Gemma 3's tables of both layer types; a caller's keyword still wins."""
    import importlib

    import torch

    from harness import library_config

    modeling = importlib.import_module(f"transformers.models.{home}.modeling_{home}")
    config_cls = getattr(importlib.import_module(f"transformers.models.{home}.configuration_{home}"), config)
    rotary = [v for k, v in vars(modeling).items()
              if k.endswith("RotaryEmbedding") and v.__module__ == modeling.__name__]
    for base in (12345.0, 500000.0):
        made = rotary[0](library_config(config_cls, Config(d_model=64, rope_base=base)))  # d_k 16: NeoX turns 4
        tables = {n: b for n, b in made.named_buffers() if n.endswith("inv_freq") and "original" not in n}
        assert tables and all(torch.allclose(b.double(), base ** (-torch.arange(0, 2 * b.numel(), 2).double()
                                                                   / (2 * b.numel())), rtol=1e-6)
                              for b in tables.values()), (base, tables)
    kept = library_config(config_cls, Config(rope_base=12345.0), rope_parameters={"rope_type": "default",
                                                                                  "rope_theta": 777.0})
    assert "777.0" in repr(kept.rope_parameters) and "12345" not in repr(kept.rope_parameters)


def test_an_hf_module_follows_rope_base_and_one_that_pins_its_base_is_caught():
    """HF's LlamaAttention (the pack's hf_llama) under rope_base = 500000 agrees with the oracle
    at that base; the same module with its base pinned at 10000 is different."""
    from transformers.models.llama.configuration_llama import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaAttention

    from harness import library_config
    from harness.check.spec import SpecChecker

    pinned = {"rope_type": "default", "rope_theta": 10000.0}
    with scratch():
        load_file(PACK)
        llama = get_variant("attention", "hf_llama")
        register(id="hf_llama_base_10000", family="attention", source="test", call=llama.call,
                 param_map=llama.param_map, traits=llama.traits,
                 build=lambda c: LlamaAttention(library_config(LlamaConfig, c, rope_parameters=pinned), layer_idx=0))
        checker = SpecChecker({"base": Config(rope_base=500000.0)})
        right = checker.check(llama, "base", "causal", "float64")
        wrong = checker.check(get_variant("attention", "hf_llama_base_10000"), "base", "causal", "float64")
    assert right.ok, right.note
    assert not wrong.ok and wrong.verdict == "different", wrong.note


@pytest.mark.parametrize("home,config,attention", [("qwen2", "Qwen2Config", "Qwen2Attention"),
                                                   ("gemma2", "Gemma2Config", "Gemma2Attention"),
                                                   ("gemma3", "Gemma3TextConfig", "Gemma3Attention")])
def test_library_config_makes_the_layer_sliding_exactly_when_the_window_is_set(home, config, attention):
    """Qwen2 slides only from layer max_window_layers (28) on, Gemma 2 and 3 slide on layer 0
    by default: built by library_config, the module's own sliding window is the config's
    window (w = left + 1), and none without one."""
    import importlib

    from harness import library_config

    modeling = importlib.import_module(f"transformers.models.{home}.modeling_{home}")
    config_cls = getattr(importlib.import_module(f"transformers.models.{home}.configuration_{home}"), config)
    for window, want in (((2, 0), 3), (None, None)):
        module = getattr(modeling, attention)(library_config(config_cls, Config(window=window)), layer_idx=0)
        assert module.sliding_window == want, (window, module.sliding_window)
