"""A generator of misbehaving variants: every stage at which the harness calls a user's code,
crossed with every way such a call can go wrong. ``variants_file(faults)`` writes one variants
file (the norm family, on ``nn.LayerNorm``: cheap) registering one variant per (stage, fault);
``EXPECTED[(stage, fault)]`` is what its row must say (None: the call goes wrong only in what
it prints, so the variant must still be judged correct and the printing kept off stdout).
``import_file(fault)`` writes a file whose import goes wrong. Used by tests/test_boundary.py."""

from __future__ import annotations

from pathlib import Path

STAGES = ("build", "call", "param_map", "supports", "backward")
# what every stage can do wrong by raising or printing
CONTROL = ("raise", "print", "hang", "interrupt", "exit", "os_exit", "skip", "keyerror", "global_dtype")
# what a stage can answer wrongly
ANSWERS = {
    "build": ("not_module",),
    "call": ("tuple", "meta", "shape", "mutate", "view", "float32", "integer", "boolean"),
    "param_map": ("not_mapping",),
    "supports": ("not_reason",),
    "backward": (),
}

MESSAGE = {
    "raise": "RuntimeError: generated fault",
    "keyerror": "KeyError: 'generated key'",
    "global_dtype": "default dtype to float64",
    "hang": "ran past",
    "interrupt": "raised KeyboardInterrupt itself",
    "exit": "called sys.exit(3)",
    "os_exit": "called os._exit(5)",
    "patch_torch": "it replaced torch.nn.functional.softmax by my_softmax",
    "skip": "Skipped: generated skip",
    "not_module": "not a torch.nn.Module",
    "tuple": "returned tuple, not a tensor",
    "meta": "meta device",
    "shape": "output shape",
    "mutate": "changed in place",
    "view": "a view of its input",
    "float32": "output returned in float32",
    "integer": "returned a int64 tensor where the family's output is floating",
    "boolean": "returned a bool tensor where the family's output is floating",
    "not_mapping": "not a dict",
    "not_reason": "supports returned int",
}
STAGE_NAME = {"build": "build", "call": "call", "param_map": "param map", "supports": "supports",
              "backward": "backward"}


def cases() -> list[tuple[str, str]]:
    return [(s, f) for s in STAGES for f in CONTROL + ANSWERS[s]]


def vid(stage: str, fault: str) -> str:
    return f"gen_{stage}_{fault}"


def expected(stage: str, fault: str) -> tuple[str, ...] | None:
    """The words the variant's row must hold (None: it must pass, its printing kept aside)."""
    if fault == "print":
        return None
    words = (MESSAGE[fault],)
    if fault in CONTROL and fault not in ("hang", "global_dtype"):
        words += ("gen_faults.py:",) if fault not in ("exit",) else ()
    return words


HEADER = '''
import os
import sys
import time

import torch
from torch import nn

from harness import Param, register

LN = {"norm_formula": "layernorm", "eps": 1e-5, "std": "biased, eps inside sqrt"}
MAP = {"weight": Param("weight"), "bias": Param("bias")}


def fault(kind):
    if kind == "raise":
        raise RuntimeError("generated fault")
    if kind == "keyerror":
        raise KeyError("generated key")
    if kind == "print":
        print("noise from the variant")
        print("noise on stderr", file=sys.stderr)
    if kind == "hang":
        while True:
            time.sleep(0.01)
    if kind == "interrupt":
        raise KeyboardInterrupt
    if kind == "exit":
        sys.exit(3)
    if kind == "os_exit":
        os._exit(5)
    if kind == "patch_torch":
        def my_softmax(x, dim=None, **kwargs):
            return torch.exp(x) / torch.exp(x).sum(dim, keepdim=True)

        torch.nn.functional.softmax = my_softmax
    if kind == "skip":
        import pytest
        pytest.skip("generated skip")
    if kind == "global_dtype":
        torch.set_default_dtype(torch.float64)


class Faulty(torch.autograd.Function):
    """Identity forward; the fault in the backward."""

    @staticmethod
    def forward(ctx, x, kind):
        ctx.kind = kind
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        fault(ctx.kind)
        return g, None


class BackwardFault(nn.LayerNorm):
    def __init__(self, d, kind):
        super().__init__(d)
        self.kind = kind

    def forward(self, x):
        return Faulty.apply(super().forward(x), self.kind)


def ln(cfg):
    return nn.LayerNorm(cfg.d_model)


def call(m, i):
    return m(i["x"])


def build_with(kind):
    def build(cfg):
        if kind == "not_module":
            return object()
        fault(kind)
        return nn.LayerNorm(cfg.d_model)
    return build


def call_with(kind):
    def call(m, i):
        x = i["x"]
        if kind == "tuple":
            return m(x), None
        if kind == "meta":
            return m(x).to("meta")
        if kind == "shape":
            return m(x)[..., :-1]
        if kind == "mutate":
            x.mul_(2)
            return m(x)
        if kind == "view":
            m(x)
            return x[..., :]
        if kind == "float32":
            return m(x).float()
        if kind == "integer":
            return m(x).long()
        if kind == "boolean":
            return m(x) > 0
        fault(kind)
        return m(x)
    return call


def map_with(kind):
    def param_map(cfg):
        if kind == "not_mapping":
            return ["weight", "bias"]
        fault(kind)
        return MAP
    return param_map


def supports_with(kind):
    def supports(cfg):
        if kind == "not_reason":
            return 5
        fault(kind)
        return None
    return supports
'''


def variants_file(path: Path, faults: list[tuple[str, str]] | None = None) -> Path:
    lines = [HEADER]
    for stage, kind in faults or cases():
        fields = {"build": "ln", "call": "call", "param_map": "MAP"}
        extra = ""
        if stage == "build":
            fields["build"] = f"build_with({kind!r})"
        elif stage == "call":
            fields["call"] = f"call_with({kind!r})"
        elif stage == "param_map":
            fields["param_map"] = f"map_with({kind!r})"
        elif stage == "supports":
            extra = f", supports=supports_with({kind!r})"
        elif stage == "backward":
            fields["build"] = f"lambda cfg: BackwardFault(cfg.d_model, {kind!r})"
        lines.append(f"register(id={vid(stage, kind)!r}, family='norm', source='generated', build={fields['build']}, "
                     f"call={fields['call']}, param_map={fields['param_map']}, traits=LN{extra})")
    path.write_text("\n".join(lines) + "\n")
    return path


IMPORT_FAULTS = ("raise", "print", "interrupt", "exit", "os_exit", "patch_torch", "skip", "keyerror", "global_dtype")


def import_file(path: Path, kind: str) -> Path:
    """A variants file whose import goes wrong in ``kind`` way (after registering one variant)."""
    path.write_text(HEADER + f"\nregister(id='gen_import_{kind}', family='norm', source='generated', build=ln, "
                    f"call=call, param_map=MAP, traits=LN)\nfault({kind!r})\n")
    return path
