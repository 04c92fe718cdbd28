"""Map search, the candidates: load a class, guess how to build and call it, and every
assignment of its weights to the family's canonical parameters."""

from __future__ import annotations

import ast
import builtins
import importlib
import importlib.util
import inspect
import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from harness.base.config import Config
from harness.base.errors import (
    ConfigError,
    HarnessError,
    UnknownName,
    VariantFileError,
)
from harness.base.masks import masked, per_head
from harness.families.base import Family
from harness.porting.entries import Chunk, Param, Transposed, Zero, entry_code
from harness.registry import scratch

MAX_CANDIDATES = 20000

# name -> (code of the adapter's call, whether it passes the mask)
CALL_FORMS: dict[str, tuple[str, bool]] = {
    "qkv_mask": ('m(i["query"], i["key"], i["value"], i["mask"])', True),
    "qkv_masked": ('m(i["query"], i["key"], i["value"], ~i["mask"])', True),
    "qkv_attn_mask": ('m(i["query"], i["key"], i["value"], attn_mask=per_head(masked(i["mask"]), {heads}), '
                      'need_weights=False)', True),
    "qkv": ('m(i["query"], i["key"], i["value"])', False),
    "self": ('m(i["query"])', False),
}
CALL_NOTES = {
    "qkv_mask": "mask (B, T, S) bool, True = may attend",
    "qkv_masked": "mask (B, T, S) bool, True = masked",
    "qkv_attn_mask": "attn_mask (B*H, T, S) bool, True = not allowed (nn.MultiheadAttention)",
    "qkv": "no mask: compared only on cases whose mask hides nothing",
    "self": "self-attention, no mask: compared only on cases with query = key = value and nothing masked",
}
WIDTH_NAMES = ("d_model", "hidden_size", "hidden_dim", "embed_dim", "n_embd", "dim", "model_dim",
               "width", "num_hiddens", "d", "emb_dim", "embedding_dim")
HEAD_NAMES = ("heads", "num_heads", "n_head", "nhead", "n_heads", "head_num", "nums_head",
              "num_attention_heads", "h", "head_size")
FF_NAMES = ("d_ff", "dim_feedforward", "filter_size", "ffn_dim", "hidden_features", "intermediate_size")
HEAD_ATTRS = ("num_heads", "heads", "n_head", "nhead", "n_heads", "head_num", "nums_head", "head_size")


@dataclass
class Proposal:
    found: bool
    text: str
    code: str = ""
    tried: int = 0
    call_form: str = ""
    param_map: dict = field(default_factory=dict)
    traits: dict = field(default_factory=dict)
    closest: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"found": self.found, "text": self.text, "code": self.code, "tried": self.tried,
                "call_form": self.call_form, "traits": self.traits, "closest": self.closest,
                "param_map": {k: entry_code(v) for k, v in self.param_map.items()}}


# -- loading the class ----------------------------------------------------------------------------

def load_class(target: str) -> tuple[type, str, str]:
    """``FILE.py:CLASS`` or ``package.module:CLASS`` -> (class, import line, source).
    A file is imported with its registrations undone (it may register variants itself)."""
    cls, import_line, source = load_object(target)
    where, _, name = target.rpartition(":")
    if not isinstance(cls, type) or not issubclass(cls, torch.nn.Module):
        raise UnknownName(f"'{name}' in '{where}' is not an nn.Module class")
    return cls, import_line, source


def load_object(target: str, what: str = "CLASS") -> tuple[object, str, str]:
    """``FILE.py:NAME`` or ``package.module:NAME`` -> (the object, import line, source);
    for a file the import line is empty (the file's own module is a hashed name)."""
    where, sep, name = target.rpartition(":")
    if not sep or not where or not name:
        raise UnknownName(f"bad target '{target}': expected FILE.py:{what} or module.path:{what}")
    if where.endswith(".py") or Path(where).is_file():
        path = Path(where)
        if not path.is_file():
            raise VariantFileError(f"file '{where}' does not exist")
        spec = importlib.util.spec_from_file_location(f"harness_map_{abs(hash(str(path.resolve())))}", path)
        if spec is None or spec.loader is None:
            raise VariantFileError(f"'{where}' is not a Python file")
        module = importlib.util.module_from_spec(spec)
        with scratch():
            try:
                spec.loader.exec_module(module)
            except HarnessError as exc:
                raise VariantFileError(f"'{where}' failed to import: {exc}") from None
            except Exception as exc:  # the user's code: one line
                raise VariantFileError(f"'{where}' failed to import: {type(exc).__name__}: {exc}") from None
        import_line, source = "", str(where)
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as exc:
            raise VariantFileError(f"cannot import '{where}': {exc}") from None
        import_line, source = f"from {where} import {name}", f"{where}.{name}"
    return getattr(module, name, None), import_line, source


def guess_init(cls: type) -> str:
    """Constructor keywords guessed from the signature: widths, heads, feed-forward size,
    dropout 0, ``batch_first=True``."""
    try:
        sig = inspect.signature(cls.__init__)
    except (TypeError, ValueError):
        return ""
    parts = []
    for pname, p in list(sig.parameters.items())[1:]:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        required = p.default is inspect.Parameter.empty
        if pname in WIDTH_NAMES:
            parts.append(f"{pname}=cfg.d_model")
        elif pname in HEAD_NAMES:
            parts.append(f"{pname}=cfg.heads")
        elif pname in FF_NAMES:
            parts.append(f"{pname}=cfg.d_ff")
        elif pname == "batch_first":
            parts.append("batch_first=True")
        elif "dropout" in pname and required:
            parts.append(f"{pname}=0.0")
        elif required:
            raise ConfigError(f"cannot guess {cls.__name__}(...)'s argument '{pname}': pass "
                              f"--init '{pname}=...' (cfg.d_model, cfg.heads, cfg.d_ff are at hand)")
    return ", ".join(parts)


def _builder(cls: type, init: str) -> Callable[[Config], torch.nn.Module]:
    try:
        compiled = compile(f"dict({init})", "--init", "eval")
    except SyntaxError as exc:
        raise ConfigError(f"bad --init '{init}': {exc.msg}") from None

    def build(cfg: Config):
        try:
            kwargs = eval(compiled, {"cfg": cfg, "torch": torch})  # noqa: S307  (the user's own CLI text)
        except Exception as exc:
            raise ConfigError(f"bad --init '{init}': {type(exc).__name__}: {exc}") from None
        try:
            return cls(**kwargs)
        except Exception as exc:
            raise ConfigError(f"{cls.__name__}({init}) failed: {type(exc).__name__}: {exc}") from None
    return build


# -- call forms ---------------------------------------------------------------------------------------

def _heads_attr(module: torch.nn.Module, cfg: Config) -> str | None:
    for name in HEAD_ATTRS:
        if getattr(module, name, None) == cfg.heads:
            return f"m.{name}"
    return None


def _first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def make_call(form: str, module: torch.nn.Module, cfg: Config) -> tuple[Callable, str, bool] | None:
    """(adapter, its code, passes the mask) for a named form or an expression."""
    if form in CALL_FORMS:
        code, uses_mask = CALL_FORMS[form]
        if "{heads}" in code:
            heads = _heads_attr(module, cfg)
            if heads is None:
                return None
            code = code.format(heads=heads)
    else:  # an expression of m, query, key, value, mask
        code = form
        for name in ("query", "key", "value", "mask"):
            code = _replace_name(code, name, f'i["{name}"]')
        uses_mask = "mask" in form
    try:
        compiled = compile(code, "--call", "eval")
    except SyntaxError as exc:
        raise ConfigError(f"bad --call '{form}': {exc.msg}") from None
    scope = {"per_head": per_head, "masked": masked, "torch": torch}
    unknown = sorted({n.id for n in ast.walk(ast.parse(code, mode="eval")) if isinstance(n, ast.Name)}
                     - {"m", "i", *scope, *dir(builtins)})
    if unknown:  # a typo in a form's name, or a name the expression cannot see: said now, not as "no form ran"
        raise ConfigError(f"--call '{form}' names {', '.join(unknown)}: neither a call form "
                          f"({', '.join(CALL_FORMS)}) nor an expression of m, query, key, value, mask")

    def call(m, i):
        return _first(eval(compiled, {**scope, "m": m, "i": i}))  # noqa: S307
    return call, code, uses_mask


def _replace_name(code: str, name: str, new: str) -> str:
    return re.sub(rf"(?<![\w\"'.]){name}(?![\w\"'])", new, code)


# -- candidate maps -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Slot:
    """One place a canonical weight can live: a whole parameter or one chunk of it."""

    path: str
    index: int
    chunks: int
    transposed: bool

    def entry(self):
        if self.chunks == 1:
            inner = Param(self.path)
        else:
            inner = Chunk(self.path, self.index, self.chunks, dim=1 if self.transposed else 0)
        return Transposed(inner) if self.transposed else inner


def _weight_slots(params: dict[str, torch.Tensor], out: int, inp: int) -> list[list[Slot]]:
    """Per 2-D parameter, its slots for a canonical (out, inp) weight; a square
    parameter yields both orientations as alternatives (one list per orientation)."""
    groups = []
    for path, p in params.items():
        if p.dim() != 2:
            continue
        r, c = p.shape
        if (r, c) == (out, inp):
            groups.append([[Slot(path, 0, 1, False)]] + ([[Slot(path, 0, 1, True)]] if out == inp else []))
        elif c == inp and r % out == 0 and r // out > 1:
            n = r // out
            groups.append([[Slot(path, i, n, False) for i in range(n)]])
        elif r == inp and c % out == 0 and c // out > 1:
            n = c // out
            groups.append([[Slot(path, i, n, True) for i in range(n)]])
        elif (r, c) == (inp, out):
            groups.append([[Slot(path, 0, 1, True)]])
    return groups


def _stem(path: str) -> str:
    base = path.rsplit(".", 1)
    leaf = base[-1]
    for a, b in (("weight", ""), ("bias", ""), ("w_", ""), ("b_", ""), ("w", ""), ("b", "")):
        if leaf.startswith(a) or leaf.endswith(a):
            leaf = leaf.replace(a, b, 1)
            break
    return (base[0] + "." if len(base) == 2 else "") + leaf


def _bias_for(slot: Slot, biases: dict[str, torch.Tensor], out: int) -> Any:
    """The bias entry that goes with a weight slot: a 1-D parameter of the slot's module
    (or of the same stem: ``w_qkv``/``b_qkv``, ``in_proj_weight``/``in_proj_bias``)."""
    want = out * slot.chunks
    fits = [p for p, t in biases.items() if t.numel() == want]
    prefix = slot.path.rsplit(".", 1)[0] if "." in slot.path else ""
    same = [p for p in fits if (p.rsplit(".", 1)[0] if "." in p else "") == prefix and "." in p] \
        or [p for p in fits if _stem(p) == _stem(slot.path)]
    pick = same[0] if len(same) == 1 else (fits[0] if len(fits) == 1 else None)
    if pick is None:
        return Zero()
    return Param(pick) if slot.chunks == 1 else Chunk(pick, slot.index, slot.chunks)


def candidate_maps(family: Family, cfg: Config, module: torch.nn.Module):
    """Every assignment of the module's weight slots to the family's canonical (2-D)
    weights, biases following their weights; other canonical parameters (norm gains)
    by shape and name order."""
    shapes = family.canonical_shapes(cfg)
    params = dict(module.named_parameters())
    weights = [n for n, s in shapes.items() if len(s) == 2]
    if not weights:
        raise ConfigError(f"family '{family.name}' has no canonical weight matrix to search for")
    out, inp = shapes[weights[0]]
    if any(shapes[n] != (out, inp) for n in weights):
        raise ConfigError(f"map searches families whose weights share one shape; '{family.name}' does not")
    groups = _weight_slots(params, out, inp)
    biases = {p: t for p, t in params.items() if t.dim() == 1}
    for choice in itertools.product(*groups):
        slots = [s for group in choice for s in group]
        if len(slots) != len(weights):
            continue
        for perm in itertools.permutations(slots):
            pmap: dict[str, Any] = {}
            for name, slot in zip(weights, perm):
                pmap[name] = slot.entry()
                bias = name.removesuffix(".weight") + ".bias"
                if bias in shapes:
                    pmap[bias] = _bias_for(slot, biases, out)
            for name in shapes:
                pmap.setdefault(name, Zero())
            yield pmap


# -- the search ------------------------------------------------------------------------------------------

def _case_ok(family: Family, case: str, cfg: Config, uses_mask: bool, self_only: bool) -> bool:
    inputs = family.inputs(case, cfg)
    mask = inputs.get("mask")
    if not uses_mask and isinstance(mask, torch.Tensor) and not bool(mask.all()):
        return False
    if self_only and not (inputs.get("query") is inputs.get("key") is inputs.get("value")):
        return False
    return True
