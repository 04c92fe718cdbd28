"""Map search, the candidates: load a class, guess how to build and call it, and every
assignment of its weights to the family's canonical parameters."""

from __future__ import annotations

import ast
import builtins
import difflib
import importlib
import importlib.util
import inspect
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import torch

from harness.base.boundary import UserCodeError, describe, user_code
from harness.base.config import Config
from harness.base.errors import (
    ConfigError,
    HarnessError,
    UnknownName,
    VariantFileError,
    not_python_source,
)
from harness.base.files import no_bytecode
from harness.base.library import config_class_for, library_config, rotary_tables
from harness.base.masks import additive_mask, masked, per_head
from harness.families.base import Family
from harness.porting.entries import entry_code
from harness.registry import scratch

MAX_CANDIDATES = 20000

# name -> (code of the adapter's call, whether it passes the mask)
CALL_FORMS: dict[str, tuple[str, bool]] = {
    "qkv_mask": ('m(i["query"], i["key"], i["value"], i["mask"])', True),
    "qkv_masked": ('m(i["query"], i["key"], i["value"], ~i["mask"])', True),
    "qkv_attn_mask": ('m(i["query"], i["key"], i["value"], attn_mask=per_head(masked(i["mask"]), {heads}), '
                      'need_weights=False)', True),
    # a library's self-attention module: hidden states, the additive mask, and the rotary
    # tables its model computes and passes in (Hugging Face's LlamaAttention and kin). The
    # mask is the one its model builds in the dtype the module is meant for (float32): its
    # behaviour on a row with no key is inferred there, not from a float64 side effect.
    "hidden_mask": ('m(i["query"], attention_mask=additive_mask(i["mask"], i["query"].dtype, torch.float32))', True),
    "hidden_rope_mask": ('m(i["query"], position_embeddings=rotary_tables(m, i["query"], i["positions"]), '
                         'attention_mask=additive_mask(i["mask"], i["query"].dtype, torch.float32))', True),
    # a library's decoder layer (HF's LlamaDecoderLayer): hidden states, additive mask, rotary tables
    "x_rope_mask": ('m(i["x"], attention_mask=additive_mask(i["mask"], i["x"].dtype, torch.float32), '
                    'position_embeddings=rotary_tables(m, i["x"], i["positions"]))', True),
    "qkv": ('m(i["query"], i["key"], i["value"])', False),
    "self": ('m(i["query"])', False),
    "x": ('m(i["x"])', False),
}
# forms that read only the query: compared on self-attention cases (query = key = value,
# and for RoPE the same positions), never on cross ones
SELF_ONLY = frozenset({"self", "hidden_mask", "hidden_rope_mask"})
CALL_NOTES = {
    "qkv_mask": "mask (B, T, S) bool, True = may attend",
    "qkv_masked": "mask (B, T, S) bool, True = masked",
    "qkv_attn_mask": "attn_mask (B*H, T, S) bool, True = not allowed (nn.MultiheadAttention)",
    "hidden_mask": "self-attention on hidden states, additive mask (B, 1, T, S): compared on self-attention cases",
    "hidden_rope_mask": "self-attention on hidden states with the module's own rotary tables at the call's "
                        "positions and an additive mask (B, 1, T, S): compared on self-attention cases",
    "x_rope_mask": "a decoder layer on hidden states x with the module's own rotary tables at the call's "
                   "positions and an additive mask (B, 1, T, T)",
    "qkv": "no mask: compared only on cases whose mask hides nothing",
    "self": "self-attention, no mask: compared only on cases with query = key = value and nothing masked",
    "x": "one input x (norms, feed-forwards)",
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
    cls, import_line, source = load_object(target, "CLASS", is_module_class, "nn.Module class")
    assert isinstance(cls, type)
    return cls, import_line, source


def is_module_class(obj: object) -> bool:
    return isinstance(obj, type) and issubclass(obj, torch.nn.Module)


LISTED = 12  # names a missing-name message lists


def _missing(module: ModuleType, where: str, name: str, fits: Callable[[object], bool], kind: str) -> str:
    """One line for a NAME the file lacks, or that is not a ``kind``: what it is, and the
    ``kind``s the file defines (those it imports from elsewhere when it defines none)."""
    own = [n for n, v in vars(module).items()
           if fits(v) and getattr(v, "__module__", None) == module.__name__ and not n.startswith("_")]
    held = own or [n for n, v in vars(module).items() if fits(v) and not n.startswith("_")]
    close = difflib.get_close_matches(name, held, n=1)
    shown = ", ".join(held[:LISTED]) + (f", ... ({len(held) - LISTED} more)" if len(held) > LISTED else "")
    listed = (f"{f'did you mean {close[0]}? ' if close else ''}its {kind}{'es' if kind.endswith('s') else 's'}: "
              f"{shown}" if held else f"it has no {kind}")
    if not hasattr(module, name):
        return f"'{name}' is not found in '{where}'; {listed}"
    found = getattr(module, name)
    what = f"the class {found.__name__}" if isinstance(found, type) else f"a {type(found).__name__}"
    article = "an" if kind[0] in "aeiou" or kind.startswith("nn.") else "a"
    return f"'{name}' in '{where}' is not {article} {kind} (it is {what}); {listed}"


def load_object(target: str, what: str = "CLASS", fits: Callable[[object], bool] = is_module_class,
                kind: str = "nn.Module class") -> tuple[object, str, str]:
    """``FILE.py:NAME`` or ``package.module:NAME`` -> (the object, import line, source);
    for a file the import line is empty (the file's own module is a hashed name). A NAME
    the file lacks, or whose object ``fits`` refuses, is one line listing the file's
    ``kind``s."""
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
        with scratch() as registry:
            # the file may have been loaded as a variants file already: its registrations are
            # set aside while it runs again here, and come back with the rest on the way out
            for key in [k for k, v in registry.items() if v.origin == str(path.resolve())]:
                del registry[key]
            try:
                with user_code("import", files=(str(path),), timeout=0), no_bytecode():
                    spec.loader.exec_module(module)
            except HarnessError as exc:
                raise VariantFileError(f"'{where}' failed to import: {exc}") from None
            except UserCodeError as exc:  # the user's code (pytest.importorskip, sys.exit included): one line
                source = None if exc.original is None else not_python_source(exc.original)
                if source is not None:
                    raise VariantFileError(f"'{where}' is not valid Python source: {source}") from None
                raise VariantFileError(f"'{where}' failed to import: {exc.problem}") from None
        import_line, source = "", str(where)
    else:
        try:
            with user_code("import", timeout=0):
                module = importlib.import_module(where)
        except UserCodeError as exc:
            raise VariantFileError(f"cannot import '{where}': {exc.problem}") from None
        import_line, source = f"from {where} import {name}", f"{where}.{name}"
    if not fits(getattr(module, name, None)):
        raise UnknownName(_missing(module, where, name, fits, kind))
    return getattr(module, name), import_line, source


def guess_init(cls: type) -> str:
    """Constructor keywords guessed from the signature: widths, heads, feed-forward size,
    dropout 0, ``batch_first=True``; a library config object (``config``) filled from the
    harness config by ``library_config``, and ``layer_idx=0``."""
    try:
        sig = inspect.signature(cls.__init__)
    except (TypeError, ValueError):
        return ""
    parts = []
    for pname, p in list(sig.parameters.items())[1:]:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        required = p.default is inspect.Parameter.empty
        config_cls = config_class_for(cls, p.annotation) if pname == "config" else None
        if config_cls is not None:
            parts.append(f"config=library_config({config_cls.__name__}, cfg)")
        elif pname in WIDTH_NAMES:
            parts.append(f"{pname}=cfg.d_model")
        elif pname in HEAD_NAMES:
            parts.append(f"{pname}=cfg.heads")
        elif pname in FF_NAMES:
            parts.append(f"{pname}=cfg.d_ff")
        elif pname == "batch_first":
            parts.append("batch_first=True")
        elif pname == "layer_idx":
            parts.append("layer_idx=0")
        elif "dropout" in pname and required:
            parts.append(f"{pname}=0.0")
        elif required:
            raise ConfigError(f"cannot guess {cls.__name__}(...)'s argument '{pname}': pass "
                              f"--init '{pname}=...' (cfg.d_model, cfg.heads, cfg.d_ff are at hand)")
    return ", ".join(parts)


def init_scope(cls: type) -> dict[str, Any]:
    """Names an --init expression may use besides ``cfg`` and ``torch``: ``library_config``
    and the library config class of ``cls`` (by its own name)."""
    scope: dict[str, Any] = {"library_config": library_config}
    config_cls = config_class_for(cls)
    if config_cls is not None:
        scope[config_cls.__name__] = config_cls
    return scope


def init_imports(cls: type, init: str) -> list[str]:
    """The import lines a printed registration needs for its ``build`` (the config class)."""
    return [f"from {v.__module__} import {k}" for k, v in init_scope(cls).items()
            if isinstance(v, type) and re.search(rf"\b{k}\b", init)]


def _builder(cls: type, init: str) -> Callable[[Config], torch.nn.Module]:
    try:
        compiled = compile(f"dict({init})", "--init", "eval")
    except SyntaxError as exc:
        raise ConfigError(f"bad --init '{init}': {exc.msg}") from None
    scope = {**init_scope(cls), "torch": torch}

    def build(cfg: Config):
        try:
            kwargs = eval(compiled, {**scope, "cfg": cfg})  # noqa: S307  (the user's own CLI text)
        except HarnessError:
            raise
        except Exception as exc:
            raise ConfigError(f"bad --init '{init}': {describe(exc)}") from None
        try:
            with user_code("build"):
                return cls(**kwargs)
        except UserCodeError as exc:
            raise ConfigError(f"{cls.__name__}({init}) failed: {exc.problem}") from None
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
        for name in ("query", "key", "value", "mask", "positions", "key_positions", "x"):
            code = _replace_name(code, name, f'i["{name}"]')
        uses_mask = "mask" in form
    try:
        compiled = compile(code, "--call", "eval")
    except SyntaxError as exc:
        raise ConfigError(f"bad --call '{form}': {exc.msg}") from None
    scope = {"per_head": per_head, "masked": masked, "torch": torch, "additive_mask": additive_mask,
             "rotary_tables": rotary_tables}
    unknown = sorted({n.id for n in ast.walk(ast.parse(code, mode="eval")) if isinstance(n, ast.Name)}
                     - {"m", "i", *scope, *dir(builtins)})
    if unknown:  # a typo in a form's name, or a name the expression cannot see: said now, not as "no form ran"
        raise ConfigError(f"--call '{form}' names {', '.join(unknown)}: neither a call form "
                          f"({', '.join(CALL_FORMS)}) nor an expression of m, query, key, value, mask")

    def call(m, i):
        return _first(eval(compiled, {**scope, "m": m, "i": i}))  # noqa: S307
    return call, code, uses_mask


def _replace_name(code: str, name: str, new: str) -> str:
    """``name`` as a value, not as a keyword (``mask=mask`` keeps its keyword)."""
    return re.sub(rf"(?<![\w\"'.]){name}(?![\w\"'])(?!\s*=(?!=))", new, code)


# -- the search ------------------------------------------------------------------------------------------

def _case_ok(family: Family, case: str, cfg: Config, uses_mask: bool, self_only: bool) -> bool:
    inputs = family.inputs(case, cfg)
    mask = inputs.get("mask")
    if not uses_mask and isinstance(mask, torch.Tensor) and not bool(mask.all()):
        return False
    if self_only and not (inputs.get("query") is inputs.get("key") is inputs.get("value")):
        return False
    positions, key_positions = inputs.get("positions"), inputs.get("key_positions")
    if self_only and positions is not None and key_positions is not None and not torch.equal(positions, key_positions):
        return False
    return True
