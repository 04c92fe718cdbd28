"""The config matrix: sizes that tell roles apart, overrides, and configs too big to check."""

from __future__ import annotations

import pytest

from harness.base.config import CONFIG_MATRIX, Config, config_matrix
from harness.cli.main import main


def test_the_default_config_gives_every_role_a_different_size():
    cfg = Config()
    sizes = [cfg.batch, cfg.tgt_len, cfg.src_len, cfg.d_model, cfg.heads, cfg.d_k, cfg.d_ff]
    assert len(set(sizes)) == len(sizes)


def test_the_matrix_has_eight_heads_one_head_and_an_edge():
    assert CONFIG_MATRIX["heads8"].heads == 8 and CONFIG_MATRIX["one_head"].heads == 1
    assert CONFIG_MATRIX["edge"].batch == 1 and CONFIG_MATRIX["edge"].tgt_len == 1


def test_set_replaces_the_matrix_by_one_config():
    assert list(config_matrix(["d_model=32", "heads=2"])) == ["custom"]
    assert config_matrix(None).keys() == CONFIG_MATRIX.keys()


def test_a_config_too_big_to_check_is_refused_with_the_estimate(capsys):
    assert main(["check", "--family", "norm", "--set", "batch=100000", "--set", "tgt_len=100000"]) == 2
    err = capsys.readouterr().err
    assert "needs about" in err and "GiB to check" in err and "this machine has" in err
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("name", list(CONFIG_MATRIX))
def test_every_config_of_the_matrix_fits(name):
    assert CONFIG_MATRIX[name].estimate_bytes() < 2**30


# Config fields a family reads that no default config needs to move, and why.
NOT_SEMANTIC = {"seed": "draws the inputs and weights; a variant has nothing to hard-code against it",
                "scale": "the inputs' magnitude (a regime: self@large, check --explore), not a setting of the variant"}
# Fields a family reads that the default matrix does not move yet: a variant hard-coding their
# default passes there (check with --set FIELD=...). Listed so that a new field cannot join silently.
NOT_YET_MOVED = {
    "head_dim": "d_k other than D / H: most variants split heads as D / H and would need a declared supports()",
}


def _fields_each_family_reads() -> dict[str, set[str]]:
    """The Config fields each family reads to draw its cases' inputs, its canonical weights
    and its reference's oracle output, recorded on a Config that notes each field read from
    outside config.py (a property, d_k or n_kv_heads, counts as the fields it reads)."""
    import dataclasses
    import sys

    import torch

    from harness.check.runs import RunCache
    from harness.families.catalog import FAMILIES
    from harness.registry import load_all, reference_of

    fields = {f.name for f in dataclasses.fields(Config)}
    props = {"d_k": {"d_model", "heads", "head_dim"}, "n_kv_heads": {"heads", "kv_heads"}}
    read: set[str] = set()
    own = ("harness/base/config.py", "dataclasses.py")

    @dataclasses.dataclass(frozen=True)
    class Recording(Config):
        def __getattribute__(self, name):
            if (name in fields or name in props) and not sys._getframe(1).f_code.co_filename.endswith(own):
                read.update(props.get(name, {name}))
            return object.__getattribute__(self, name)

    load_all()
    out = {}
    for family in FAMILIES.values():
        read.clear()
        ref, cfg = reference_of(family.name), Recording()
        weights = RunCache(cfg, record=False).weights(family, frozenset(), ref.traits)
        for case in family.cases:
            with torch.no_grad():
                family.oracle(family.semantic_traits(ref.traits), family.case_config(case.name, cfg), weights,
                              family.inputs(case.name, cfg), torch.float64)
        out[family.name] = set(read)
    return out


def test_every_config_field_a_family_reads_leaves_its_default_somewhere_the_family_runs():
    """A variant that hard-codes a field's default (RoPE's base 10000, V = 11) instead of
    reading the config passes every config that keeps the default: each field a family reads
    takes another value in a config it runs by default (the matrix narrowed to the family,
    its extra configs) or in one of its regime cases. The fields are those the family is
    seen to read, not a list written here."""
    default, moved = Config(), {}
    reads = _fields_each_family_reads()
    assert {"rope_base", "vocab", "d_model"} <= set().union(*reads.values())  # the recording sees reads
    from harness.families.catalog import FAMILIES
    for name, fields in reads.items():
        family = FAMILIES[name]
        configs = list(family.configs_of(CONFIG_MATRIX).values())
        configs += [family.case_config(c.name, CONFIG_MATRIX["default"]) for c in family.cases if c.changes]
        moved[name] = {f for f in fields if any(getattr(c, f) != getattr(default, f) for c in configs)}
    unmoved = {(n, f) for n, fields in reads.items() for f in fields - moved[n]
               if f not in NOT_SEMANTIC and f not in NOT_YET_MOVED}
    assert not unmoved, f"fields read but left at their default on every config the family runs: {sorted(unmoved)}"
    assert all("rope_base" in moved[n] for n in reads if "rope_base" in reads[n])


def test_a_variant_hard_coding_a_default_is_caught_on_the_default_matrix_and_its_control_is_not():
    """RoPE's base fixed at 10000, an embedding table fixed at V = 11, a window fixed at
    (3, 0) and a kernel's cap fixed at 2.0 agree wherever the config keeps those defaults and
    are caught exactly where it moves them (heads8, window@wide, softcap@cap5); the same
    modules reading the config agree everywhere (tests/wrong_config_defaults.py)."""
    import sys
    from pathlib import Path

    from harness.check.api import check_all
    from harness.registry import load_file, scratch

    path = Path(__file__).with_name("wrong_config_defaults.py")
    with scratch():
        added = load_file(path)
        module = next(m for m in sys.modules.values() if getattr(m, "__file__", None) == str(path))
        configs = {n: CONFIG_MATRIX[n] for n in ("default", "heads8")}  # defaults kept, and moved
        report = check_all(["attention", "embedding", "attention_kernel"], configs, "cpu", ["float64"],
                           variants=[v.key for v in added], extras=False)
    failing = {v.id: {(s.config, s.case) for s in report.specs if s.variant == v.id and not s.ok} for v in added}
    ran = {s.variant for s in report.specs}
    for vid in module.WRONG:
        where = {config if module.SHOWS_ON[vid] in CONFIG_MATRIX else case for config, case in failing[vid]}
        assert where == {module.SHOWS_ON[vid]}, (vid, failing[vid])
    for vid in module.CONTROLS:
        assert vid in ran and not failing[vid], (vid, failing[vid])
