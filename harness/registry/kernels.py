"""Register a plain attention function as a variant of the ``attention_kernel`` family, its
layout and mask form given as data::

    register_kernel(id="my_sdpa", source="mine.py", layout="BHSD", mask="bool",
                    fn=lambda q, k, v, mask: F.scaled_dot_product_attention(
                        q, k, v, attn_mask=mask, enable_gqa=True),
                    traits={"fully_masked_row": "zeros", "fully_masked_grad": "none"})

``fn(q, k, v[, mask], **options)`` receives q (B, H, T, d), k and v (B, H_kv, S, d) in its
``layout`` (``BHSD``, or ``BSHD``: (B, L, H, d), flash-attention's), returns the output in the
same layout; with ``layout="varlen"`` it is called as flash-attention's
``flash_attn_varlen_func``: ``fn(q (B*T, H, d), k (total_k, H_kv, d), v, cu_seqlens_q,
cu_seqlens_k, max_seqlen_q, max_seqlen_k, **options)``, rows packed one after another with
their cumulative lengths (int32), right key padding dropped (the cases ``lengths`` takes),
returning (B*T, H, d). It gets by name only the options its signature lists (or all, with
``**kwargs``):

- ``causal`` (bool), ``window`` ((left, right) or None), and each convention's kernel
  option (``harness.families.conventions``' ``kernel_option``): ``softcap`` (float, 0:
  none), ``alibi_slopes`` ((H,) slopes, or None: no ALiBi): the call's; a function without
  one of them is not run on the cases that need it, nor on a config that sets it
  (``supports`` says so);
- ``dropout_p``: the config's dropout in training, 0 in eval;
- ``block``: the config's block size (a blocked kernel).

With ``layout="qkvpacked"`` (flash-attention's ``flash_attn_qkvpacked_func``) it is called
as ``fn(qkv (B, S, 3, H, d)[, mask], **options)``: q, k and v stacked on one axis, which
only self-attention can fill (T = S, as many K/V heads as query heads: the cases
``SELF_CASES``, and no config with ``kv_heads`` below ``heads``); with ``layout="kvpacked"``
(``flash_attn_kvpacked_func``) as ``fn(q (B, T, H, d), kv (B, S, 2, H_kv, d)[, mask],
**options)``, every case. Both return (B, T, H, d).

``mask``: ``bool`` (B, 1, T, S) True = may attend; ``additive`` (B, 1, T, S) float, 0 or
-inf; ``additive_min``: 0 or the dtype's finfo.min (HF's float masks); ``lengths`` (B,) int64
key lengths (right padding only: cases with another mask are not run); ``none`` or
``is_causal`` (no mask argument: only the cases where every key may be attended). An
additive form gives the ``mask_method`` trait unless the traits declare one: ``additive``
``additive_bias``, ``additive_min`` ``additive_finfo_min`` (and with it what a row without
keys gives, ``fully_masked_row`` and ``fully_masked_grad`` by mask method). The result
is an ordinary ``register(...)`` entry: the module is a small
``KernelModule`` holding the function, with no parameters. A function bound to some device
types declares them, ``devices=DeviceSet(("cuda",), why)``: elsewhere it is skipped with
that reason.

``dtypes``: the dtypes the function runs in (``("float16", "bfloat16")`` for a kernel that
exists only in half precision: its semantics are then decided in each of them, by
``harness.check.own_dtype``'s rule, instead of in float64).
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Mapping

import torch
from torch import nn

from harness.base.devices import DeviceSet
from harness.base.errors import RegistryError
from harness.families import conventions
from harness.families.kernel import ATTENTION_KERNEL, CASE_MASKS, CASE_NEEDS, SELF_CASES
from harness.registry import Variant, register

LAYOUTS = ("BHSD", "BSHD", "varlen", "qkvpacked", "kvpacked")
PACKED = ("qkvpacked", "kvpacked")  # (B, L, n, H, d) stacks, heads second to last as BSHD
MASK_FORMS = ("bool", "additive", "additive_min", "lengths", "none", "is_causal")
CONVENTION_OPTIONS = conventions.kernel_options()   # softcap, alibi_slopes
OPTIONS = ("causal", "window", *(o.name for o in CONVENTION_OPTIONS), "dropout_p", "block")
# The mask method a mask form implies when the traits do not declare one (the kernel adds the
# bias it is given); a bool mask keeps the family's default, bool_fill_-inf.
FORM_METHOD = {"additive": "additive_bias", "additive_min": "additive_finfo_min"}
# The case masks each mask form can express.
FORM_CASES = {
    "bool": ("none", "right", "arbitrary"), "additive": ("none", "right", "arbitrary"),
    "additive_min": ("none", "right", "arbitrary"),
    "lengths": ("none", "right"), "none": ("none",), "is_causal": ("none",),
}


def accepted_options(fn: Callable) -> tuple[str, ...]:
    """The options ``fn``'s signature takes by name (every one with ``**kwargs``)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin without a signature: pass nothing
        return ()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return OPTIONS
    return tuple(o for o in OPTIONS if o in params)


class KernelModule(nn.Module):
    """A kernel function as a module without parameters: converts the canonical call
    (BHSD heads, bool mask True = may attend) into the function's layout and mask form."""

    def __init__(self, fn: Callable, *, layout: str, mask: str, options: tuple[str, ...],
                 dropout: float = 0.0, block: int = 64):
        super().__init__()
        self.fn, self.layout, self.mask_form, self.options = fn, layout, mask, options
        self.dropout, self.block = dropout, block

    def forward(self, q, k, v, mask, key_pad, causal=False, window=None, **called):
        """``called``: the conventions' options by name (``CONVENTION_OPTIONS``), each its
        ``off`` value where not given."""
        if unknown := sorted(set(called) - {o.name for o in CONVENTION_OPTIONS}):
            raise TypeError(f"KernelModule.forward got unknown option(s) {unknown}; options: {list(OPTIONS)}")
        given = {"causal": bool(causal), "window": window,
                 **{o.name: o.to_call(called.get(o.name, o.off)) for o in CONVENTION_OPTIONS},
                 "dropout_p": self.dropout if self.training else 0.0, "block": self.block}
        options = {name: given[name] for name in self.options}
        if self.layout == "varlen":
            return self._varlen(q, k, v, key_pad, options)
        to = (lambda x: x.transpose(1, 2)) if self.layout in ("BSHD", *PACKED) else (lambda x: x)  # noqa: E731
        args = [to(q), to(k), to(v)]                                   # (B, H, L, d) or (B, L, H, d)
        if self.layout == "qkvpacked":
            args = [torch.stack(args, dim=2)]                          # (B, S, 3, H, d)
        elif self.layout == "kvpacked":
            args = [args[0], torch.stack(args[1:], dim=2)]             # q (B, T, H, d), kv (B, S, 2, H_kv, d)
        if self.mask_form == "bool":
            args.append(mask[:, None])                                 # (B, 1, T, S) True = may attend
        elif self.mask_form == "additive":
            zero = torch.zeros((), dtype=q.dtype, device=q.device)
            args.append(torch.where(mask[:, None], zero, float("-inf")))  # (B, 1, T, S) 0 or -inf
        elif self.mask_form == "additive_min":
            zero = torch.zeros((), dtype=q.dtype, device=q.device)
            args.append(torch.where(mask[:, None], zero, torch.finfo(q.dtype).min))  # 0 or finfo.min (HF)
        elif self.mask_form == "lengths":
            args.append(key_pad.sum(-1))                               # (B,) key lengths
        out = self.fn(*args, **options)
        return to(out)                                                 # (B, H, T, d)

    def _varlen(self, q, k, v, key_pad, options):
        """Rows packed one after another, flash-attention's ``*_varlen_func`` form: q
        (B*T, H, d), k and v (total real keys, H_kv, d) (right padding dropped), the
        cumulative lengths (B + 1,) int32 and the longest length of each."""
        B, H, T, _ = q.shape
        lens = key_pad.sum(-1)                                         # (B,) real keys per row
        zero = torch.zeros(1, dtype=torch.int32, device=q.device)
        cu_q = torch.arange(0, (B + 1) * T, T, dtype=torch.int32, device=q.device)
        cu_k = torch.cat([zero, lens.cumsum(0).to(torch.int32)])
        packed_q = q.transpose(1, 2).reshape(B * T, H, -1)             # (B*T, H, d)
        packed_k = k.transpose(1, 2)[key_pad]                           # (total_k, H_kv, d)
        packed_v = v.transpose(1, 2)[key_pad]
        out = self.fn(packed_q, packed_k, packed_v, cu_q, cu_k, T, int(lens.max()), **options)
        return out.view(B, T, H, -1).transpose(1, 2)                   # (B, H, T, d)


def kernel_call(module: KernelModule, i: Mapping[str, Any]) -> torch.Tensor:
    return module(i["q"], i["k"], i["v"], i["mask"], i["key_pad"], i["causal"], i["window"],
                  **{o.name: i[o.name] for o in CONVENTION_OPTIONS if o.name in i})


def kernel_cases(mask: str, options: tuple[str, ...], traits: Mapping[str, Any] | None = None) -> tuple[str, ...]:
    """The family's cases a kernel with this mask form and these options can take (a regime
    case, ``self@large``, applies where its base case does), of those its ``traits`` get
    (a convention's case for its declarers: ``Family.declared_for``)."""
    return tuple(c.name for c in ATTENTION_KERNEL.cases if not c.base
                 and ATTENTION_KERNEL.declared_for(c.name, traits or {})
                 and CASE_MASKS[c.name] in FORM_CASES[mask]
                 and all(need in options for need in CASE_NEEDS.get(c.name, ())))


def register_kernel(*, id: str, fn: Callable, layout: str = "BHSD", mask: str = "bool",
                    traits: Mapping[str, Any] | None = None, source: str = "", summary: str = "",
                    reference: bool = False, supports: Callable | None = None,
                    devices: DeviceSet | None = None, dtypes: tuple[str, ...] = ()) -> Variant:
    """Register ``fn`` in the ``attention_kernel`` family (see the module docstring)."""
    if layout not in LAYOUTS:
        raise RegistryError(f"kernel '{id}': layout {layout!r} is not one of {list(LAYOUTS)}")
    if mask not in MASK_FORMS:
        raise RegistryError(f"kernel '{id}': mask {mask!r} is not one of {list(MASK_FORMS)}")
    if not callable(fn):
        raise RegistryError(f"kernel '{id}': fn {fn!r} is not callable")
    options = accepted_options(fn)
    form = "lengths" if layout == "varlen" else mask
    traits = dict(traits or {})
    if form in FORM_METHOD:
        traits.setdefault("mask_method", FORM_METHOD[form])
    cases = kernel_cases(form, options, traits)
    if layout == "qkvpacked":
        cases = tuple(c for c in cases if c in SELF_CASES)
    if "cases" in traits:
        cases = tuple(c for c in cases if c in traits["cases"])
    if not cases:
        raise RegistryError(f"kernel '{id}': no case of attention_kernel fits mask={mask!r} "
                            f"and the options {list(options)}")
    if len(cases) < len(kernel_cases("bool", OPTIONS, traits)):   # what a kernel taking every option gets
        traits["cases"] = cases

    def config_reason(cfg) -> str | None:
        missing = [name for name, on in (("window", cfg.window is not None),
                                         *((o.name, o.set_by(cfg)) for o in CONVENTION_OPTIONS))
                   if on and name not in options]
        if missing:
            return f"{'/'.join(missing)} set by the config, and the function takes no {' or '.join(missing)}"
        if layout == "qkvpacked" and cfg.n_kv_heads != cfg.heads:
            return (f"kv_heads={cfg.n_kv_heads} below heads={cfg.heads}: one packed QKV tensor holds as many "
                    f"K/V heads as query heads")
        return supports(cfg) if supports else None

    return register(
        id=id, family=ATTENTION_KERNEL.name, source=source or getattr(fn, "__module__", "") or "",
        summary=summary,
        build=lambda cfg: KernelModule(fn, layout=layout, mask=mask, options=options,
                                       dropout=cfg.dropout, block=cfg.block),
        call=kernel_call, traits=traits, reference=reference, supports=config_reason, devices=devices,
        dtypes=dtypes,
    )
