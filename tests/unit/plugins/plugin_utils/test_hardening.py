"""The units' sandbox: the real engine states its device access; every other unit keeps PrivateDevices."""

from __future__ import annotations

import pytest
from unitlib import one_host

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan import _hardening
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.texts._host_files import directives_text

NVIDIA_AND_RDMA = ["char-nvidia rw", "char-nvidia-frontend rw", "char-nvidia-uvm rw", "char-nvidia-caps rw",
                   "char-infiniband_verbs rw", "/dev/infiniband/rdma_cm rw"]


def values(entries: list[dict], directive: str) -> list:
    return [e["value"] for e in entries if e["directive"] == directive]


def test_the_real_engine_closes_the_device_policy_and_lists_each_device_with_its_reason():
    engine = build_plan(one_host(vllm_omni_engine_backend="engine"))["hardening"]["engine"]
    assert values(engine, "PrivateDevices") == ["no"]
    assert values(engine, "ProtectClock") == ["yes"]  # kept: its implied char-rtc entry is why the policy is stated
    assert values(engine, "DevicePolicy") == ["closed"]
    assert values(engine, "DeviceAllow") == NVIDIA_AND_RDMA
    assert all(e["why"] for e in engine if e["directive"] in ("DevicePolicy", "DeviceAllow"))
    # After the base set and before ReadWritePaths, in the model's order.
    names = [e["directive"] for e in engine]
    assert names.index("UMask") < names.index("DevicePolicy") < names.index("DeviceAllow") < names.index("ReadWritePaths")
    text = directives_text(engine)
    for value in NVIDIA_AND_RDMA:
        assert f"\nDeviceAllow={value}\n" in text
    assert "\nDevicePolicy=closed\n" in text


@pytest.mark.parametrize("unit", ["router", "mooncake_master", "firewall"])
def test_units_other_than_the_engine_keep_private_devices_and_no_allow_list(unit):
    for backend in ("engine", "simulator"):
        entries = build_plan(one_host(vllm_omni_engine_backend=backend))["hardening"][unit]
        assert values(entries, "PrivateDevices") == ["yes"]
        assert not values(entries, "DeviceAllow") and not values(entries, "DevicePolicy")


def test_the_simulator_engine_keeps_private_devices():
    engine = build_plan(one_host(vllm_omni_engine_backend="simulator"))["hardening"]["engine"]
    assert values(engine, "PrivateDevices") == ["yes"]
    assert not values(engine, "DeviceAllow") and not values(engine, "DevicePolicy")


def test_each_base_directive_appears_once_and_added_ones_as_given():
    entries = _hardening.directives(["/var/lib/x"], _hardening.ENGINE_RELAXED, _hardening.ENGINE_DEVICES)
    names = [e["directive"] for e in entries]
    assert names.count("SystemCallFilter") == 1  # two BASE lines, one relaxed entry
    assert names.count("DeviceAllow") == len(NVIDIA_AND_RDMA)
    assert names[-1] == "ReadWritePaths"


def test_an_added_directive_may_not_shadow_a_base_one():
    with pytest.raises(ValueError, match="PrivateDevices"):
        _hardening.directives([], None, (("PrivateDevices", "no", "twice"),))
