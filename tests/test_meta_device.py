"""Device placement, checked on a CPU-only machine: every registered variant is built, called
on each case of its family and run backward on the ``meta`` device (shapes and dtypes, no
arithmetic: milliseconds per call). A tensor a variant or a harness helper makes on the CPU
meets the inputs' device there and fails, naming the variant, as it fails on CUDA.

Why ``meta``: it is a second device every torch build has, its kernels check their tensors'
devices as CUDA's do ("Tensor on device cpu is not on the expected device meta!"), and it
costs no arithmetic. One gap it has and CUDA has not: a CPU kernel handed a meta index
(``cpu_tensor.scatter_(1, index_on_device, v)``) runs without complaint; ``CpuFromMeta``
closes it by refusing any op that takes a meta tensor and returns a CPU one.

What cannot run on meta is declared, never skipped in silence: a variant bound to other
devices (``DeviceSet``) is skipped with that reason, and one whose call reads tensor values
(``.item()``, ``nonzero``, a branch on a tensor) declares ``traits['data_dependent']``; the
test then holds it to that (it must stop on meta at such a read, and on nothing else).
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from harness import register, register_kernel, smoothed_target
from harness.base.config import CONFIG_MATRIX
from harness.check.runs import applicable, cast_inputs
from harness.registry import REGISTRY, Variant, load_packs, scratch

META = "meta"
# What a read of tensor values raises on meta (``.item()``, ``bool(t)``, ``nonzero``, ``torch.equal``).
DATA_DEPENDENT = re.compile(r"cannot be called on meta tensors|nonzero|data-dependent|_local_scalar_dense"
                            r"|aten::equal|is_nonzero")
MOVES = ("_to_copy", "copy_", "_local_scalar_dense", "lift_fresh", "detach")


class CpuFromMeta(TorchDispatchMode):
    """Refuses an op that takes a meta tensor and returns a CPU tensor: a CPU tensor the call
    made, written through with the device's tensors (on CUDA that op raises)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket.__name__ not in MOVES:
            inputs = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
            if any(t.device.type == META for t in inputs):
                made = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor) and t.device.type != META]
                if made:
                    raise RuntimeError(f"{func} takes {META} tensors and returns a {made[0].device} tensor "
                                       f"of shape {tuple(made[0].shape)}: a tensor made on the CPU")
        return out


def meta_run(variant: Variant) -> tuple[str | None, dict[str, str]]:
    """Build on meta and run every case of the variant's family on its first config
    (forward, and backward where the family differentiates): (why it was not run, or None;
    {case: the error}). The module is built as ``registry.build`` builds it, then moved."""
    family = variant.family_spec
    configs = family.configs_of(CONFIG_MATRIX)
    reasons = [variant.refuses(cfg, META) for cfg in configs.values()]
    cfg = next((c for c, why in zip(configs.values(), reasons) if not why), None)
    if cfg is None:
        return "; ".join(dict.fromkeys(r for r in reasons if r)) or "no config", {}
    errors, modules = {}, {}
    # float32, or the first dtype a kernel that runs only in its own dtypes declares (half_tiled)
    dtype = getattr(torch, variant.dtypes[0]) if variant.dtype_reason("float32") else torch.float32
    for case in (c.name for c in family.cases if applicable(variant, c.name)):
        case_cfg = family.case_config(case, cfg)
        try:
            if case_cfg not in modules:  # one build per shape
                module = variant.build(case_cfg)
                if isinstance(module, torch.nn.Module):
                    module = module.to(device=META, dtype=dtype).eval()
                modules[case_cfg] = module
            module = modules[case_cfg]
            inputs = cast_inputs(family.inputs(case, case_cfg), dtype, META, family.grad_inputs)
            with CpuFromMeta():
                out = variant.call(module, inputs)
                if family.differentiable and out.requires_grad:
                    out.sum().backward()
            if any(isinstance(t, torch.Tensor) for t in inputs.values()) and out.device.type != META:
                raise RuntimeError(f"the output is on {out.device}, the inputs on {META}")
        except Exception as exc:  # each case's failure, reported with the variant's name
            errors[case] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
    return None, errors


def _params():
    load_packs()
    return [pytest.param(key, id=key) for key in REGISTRY]


@pytest.mark.parametrize("key", _params())
def test_variant_keeps_its_tensors_on_the_inputs_device(key):
    variant = REGISTRY[key]
    not_run, errors = meta_run(variant)
    if not_run:
        pytest.skip(f"{key} does not run on {META}: {not_run}")
    declared = variant.traits.get("data_dependent")
    if declared:
        assert errors, (f"{key} declares data_dependent ({declared!r}) but runs on {META}: "
                        "remove the declaration, and the device check covers it")
        others = {case: e for case, e in errors.items() if not DATA_DEPENDENT.search(e)}
        assert not others, f"{key} fails on {META} for another reason than its declared value read:\n" + "\n".join(
            f"  {case}: {e}" for case, e in others.items())
        return
    assert not errors, (f"{key} fails on the {META} device (a tensor made on the CPU, or a value read "
                        "without traits['data_dependent']):\n"
                        + "\n".join(f"  {case}: {e}" for case, e in errors.items()))


# -- planted: the device mistakes the first GPU run found, each caught with the variant's name ----------

def cpu_mask(m, i):
    """masks/decoder_only's old adapter: the causal mask built on the CPU."""
    t = i["tokens"].shape[1]
    return torch.ones(t, t).tril() != 0


def cpu_target_loss(m, i):
    """loss/torch_ce_soft's old failure: the smoothed target written on the CPU with the
    device's indices, then moved (on meta alone this runs; ``CpuFromMeta`` refuses it)."""
    target, vocab = i["target"], i["logits"].size(-1)
    dist = torch.full((target.size(0), vocab), 0.1 / (vocab - 2), dtype=torch.float64)
    dist.scatter_(1, target[:, None], 0.9)
    dist = dist.to(i["logits"].device, i["logits"].dtype)
    return F.cross_entropy(i["logits"], dist, reduction="sum")


def cpu_bias_kernel(q, k, v, mask, causal=False):
    """An attention kernel adding a bias made on the CPU."""
    from variants.kernels import eager

    return eager(q, k, v, mask, causal) + torch.zeros(q.shape[-1])


def test_a_tensor_made_on_the_cpu_fails_with_the_variants_name():
    load_packs()
    with scratch():
        planted = [
            register(id="cpu_mask", family="masks", source="test", build=lambda cfg: None, call=cpu_mask,
                     traits={"cases": ("causal",), "mask_convention": "1 = keep", "causal_mask": "tril"}),
            register(id="cpu_target", family="loss", source="test", build=lambda cfg: None, call=cpu_target_loss,
                     traits={"smoothing_spread": "s/(V-2) off target; pad column and pad rows zeroed",
                             "loss_form": "cross-entropy"}),
            register_kernel(id="cpu_bias", fn=cpu_bias_kernel, source="test", traits={"causal": "top_left"}),
        ]
        for variant in planted:
            with pytest.raises(AssertionError, match=re.escape(f"{variant.key} fails on the meta device")):
                test_variant_keeps_its_tensors_on_the_inputs_device(variant.key)
        _, errors = meta_run(planted[1])
        assert all("returns a cpu tensor" in e for e in errors.values())   # the scatter_ into a CPU tensor


def test_the_fixed_helper_keeps_the_target_on_the_device():
    """smoothed_target (loss/torch_ce_soft and the loss oracle) builds on its target's device."""
    target = torch.tensor([1, 2, 0], device=META)
    assert smoothed_target(target, 5, 0, 0.1, "s/(V-2) off target; pad column and pad rows zeroed").device.type == META


def test_a_stale_data_dependent_declaration_fails():
    load_packs()
    with scratch():
        register(id="claims", family="masks", source="test", build=lambda cfg: None,
                 call=lambda m, i: torch.ones(i["tokens"].shape[1], i["tokens"].shape[1],
                                              device=i["tokens"].device).tril() != 0,
                 traits={"cases": ("causal",), "mask_convention": "1 = keep", "causal_mask": "tril",
                         "data_dependent": "none really"})
        with pytest.raises(AssertionError, match="declares data_dependent .* but runs on meta"):
            test_variant_keeps_its_tensors_on_the_inputs_device("masks/claims")
