"""Devices: a variant bound to some device types declares them (``DeviceSet``) and every
command skips it elsewhere with the declared reason (the CPU flash kernel on CUDA, the
CUDA-only backends on the CPU); and device placement is checked on the CPU, on the ``meta``
device (tests/test_meta_device.py)."""

from __future__ import annotations

import re

import pytest

from harness import DeviceSet, RegistryError, register, register_kernel
from harness.base.config import CONFIG_MATRIX
from harness.check.api import check_all
from harness.registry import get_variant, load_packs, scratch

CPU_WHY = "a CPU kernel"


def test_the_cpu_flash_kernel_is_refused_on_cuda_and_the_cuda_backends_on_the_cpu_each_with_its_reason():
    load_packs()
    cfg = CONFIG_MATRIX["default"]
    flash_cpu = get_variant("attention_kernel", "sdpa_flash_cpu")
    assert flash_cpu.refuses(cfg, "cpu") is None
    why = flash_cpu.refuses(cfg, "cuda:0")
    assert why.startswith("runs on cpu only, not cuda: ") and "sdpa_flash" in why
    for vid in ("sdpa_flash", "sdpa_efficient", "sdpa_cudnn"):
        assert get_variant("attention_kernel", vid).refuses(cfg, "cpu").startswith("runs on cuda only, not cpu: ")


def test_check_on_another_device_skips_a_bound_variant_with_its_reason_and_runs_nothing():
    """A CPU-only kernel checked on a device it does not run on (``meta`` here, CUDA on a GPU
    machine): a skip per config with the declared reason, no spec row, no error row."""
    from variants.kernels import eager

    load_packs()
    with scratch():
        register_kernel(id="cpu_bound", fn=eager, source="test", traits={"causal": "top_left"},
                        devices=DeviceSet(("cpu",), CPU_WHY))
        report = check_all(["attention_kernel"], {"default": CONFIG_MATRIX["default"]}, "meta", ["float32"],
                           extras=False, variants=["attention_kernel/cpu_bound"])
    assert [s for s in report.specs if s.variant == "cpu_bound"] == []
    assert report.skipped == [("attention_kernel", "cpu_bound", "default", f"runs on cpu only, not meta: {CPU_WHY}")]


@pytest.mark.parametrize("devices,message", [
    (("cpu",), "devices=('cpu',) must be a harness.DeviceSet(types, why)"),
    (DeviceSet, None),
])
def test_a_bad_devices_declaration_is_refused(devices, message):
    with scratch(), pytest.raises(RegistryError, match=re.escape(message or "must be a non-empty tuple")):
        devices = devices(("gpu",), "why") if devices is DeviceSet else devices
        register(id="bad", family="masks", source="test", build=lambda cfg: None,
                 call=lambda m, i: i["tokens"] != 0, devices=devices)


def test_a_device_set_needs_its_reason():
    with pytest.raises(RegistryError, match="needs its reason"):
        DeviceSet(("cuda",), "")
