"""Planning from discovered GPU facts: existence, busy GPUs, driver CUDA, topology-aware placement."""

from __future__ import annotations

import json

import pytest
from unitlib import FIXTURES, gpu_facts, in_fresh_interpreters, inventory, problems_of

from ansible_collections.vllm_omni.serve.plugins.module_utils import _gpu
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan

facts = gpu_facts


def plan_with(profile: str, apps: str = "", host_vars: dict | None = None, **settings) -> dict:
    return build_plan(inventory({"gpu-a": {"ansible_host": "10.0.0.11", "vllm_omni_gpu_facts": facts(profile, apps),
                                           **(host_vars or {})}}, settings))


def placed(plan):
    return [(p["gpus"], p["placement"]["score"]) for p in plan["hosts"]["gpu-a"]["pipelines"]]


def test_discovered_gpus_are_used_when_none_are_declared():
    plan = plan_with("h200x8-nvswitch")
    assert plan["hosts"]["gpu-a"]["gpu_source"] == "discovered"
    assert plan["hosts"]["gpu-a"]["gpus"] == list(range(8))


def test_nvswitch_host_keeps_each_pipeline_on_one_numa_node():
    assert placed(plan_with("h200x8-nvswitch")) == [([0, 1, 2], 100), ([4, 5, 6], 100)]
    explain = plan_with("h200x8-nvswitch")["hosts"]["gpu-a"]["pipelines"][0]["placement"]["explain"]
    assert explain == ["prefill GPUs [0]: a single GPU", "decode GPUs [1]: a single GPU",
                       "prefill -> decode KV path: NV18", "talker + code2wav GPU 2: NUMA node 0 (same as decode)"]


def test_pcie_host_pairs_prefill_and_decode_behind_one_bridge_per_numa_node():
    plan = plan_with("pcie-2numa-x8")
    assert placed(plan) == [([0, 1, 2], 90), ([4, 5, 6], 90)]
    assert "prefill -> decode KV path: PIX" in plan["hosts"]["gpu-a"]["pipelines"][1]["placement"]["explain"]
    assert plan["hosts"]["gpu-a"]["unused_gpus"] == [3, 7]


def test_pcie_host_tp2_keeps_tp_groups_inside_a_numa_node():
    plan = plan_with("pcie-2numa-x8", vllm_omni_tensor_parallel_size=2)
    ((gpus, score),) = placed(plan)
    assert gpus[:2] == [0, 1] and gpus[2:4] == [2, 3]  # prefill (0,1) and decode (2,3): PIX groups, PXB between
    stages = plan["hosts"]["gpu-a"]["pipelines"][0]["stages"]
    assert [s["physical_gpus"] for s in stages] == [[0, 1], [2, 3], [gpus[4]], [gpus[4]]]
    assert score < 100


def test_aggregated_on_the_real_h200x2_capture():
    plan = plan_with("h200x2", vllm_omni_version="0.30.0", vllm_omni_layout="aggregated")
    assert placed(plan) == [([0, 1], 100)]
    assert plan["hosts"]["gpu-a"]["cuda_version"] == "13.0"


def test_the_real_h200x2_capture_cannot_hold_a_pd_pipeline():
    lines = problems_of(inventory({"gpu-a": {"ansible_host": "10.0.0.11", "vllm_omni_gpu_facts": facts("h200x2")}}))
    assert any("discovery found 2 free GPUs [0, 1], but one pd pipeline needs 3" in line for line in lines)


def test_the_real_h200x2_capture_holds_a_text_pd_pipeline_over_its_nvlink():
    """The 2x H200 discovered on the device machine: prefill and decode on the two NVLink-connected GPUs."""
    plan = plan_with("h200x2", vllm_omni_audio_output=False)
    assert placed(plan) == [([0, 1], 100)]
    assert plan["hosts"]["gpu-a"]["pipelines"][0]["placement"]["explain"] == [
        "prefill GPUs [0]: a single GPU", "decode GPUs [1]: a single GPU", "prefill -> decode KV path: NV18"]


def test_shared_gpu_pipelines_take_one_gpu_each_in_topology_order():
    plan = plan_with("h200x8-nvswitch", vllm_omni_share_gpus=True)
    assert [gpus for gpus, _unused in placed(plan)] == [[g] for g in range(8)]
    explain = plan["hosts"]["gpu-a"]["pipelines"][0]["placement"]["explain"]
    assert "prefill -> decode KV path: the same GPU (Mooncake over loopback TCP)" in explain
    assert "talker + code2wav" not in " ".join(explain)


BUSY_APP = "4242, {uuid}, python3, 30000\n"


def busy_apps(profile: str, index: int) -> str:
    return BUSY_APP.format(uuid=facts(profile)["gpus"][index]["uuid"])


def test_busy_gpus_are_skipped_with_a_warning_when_undeclared():
    plan = plan_with("h200x8-nvswitch", apps=busy_apps("h200x8-nvswitch", 1))
    assert 1 not in plan["hosts"]["gpu-a"]["gpus"]
    assert plan["hosts"]["gpu-a"]["skipped_gpus"] == {"1": "1 compute process(es): python3 (pid 4242)"}
    assert any("GPU 1 skipped, busy" in w for w in plan["warnings"])


def test_declared_busy_gpus_are_refused_unless_forced():
    apps = busy_apps("h200x8-nvswitch", 1)
    lines = problems_of(inventory({"gpu-a": {"ansible_host": "10.0.0.11", "vllm_omni_gpus": [0, 1, 2],
                                             "vllm_omni_gpu_facts": facts("h200x8-nvswitch", apps)}}))
    assert any("lists busy GPUs (GPU 1: 1 compute process(es): python3 (pid 4242))" in line
               and "vllm_omni_allow_busy_gpus: true" in line for line in lines)
    plan = plan_with("h200x8-nvswitch", apps=apps, host_vars={"vllm_omni_gpus": [0, 1, 2]},
                     vllm_omni_allow_busy_gpus=True)
    assert plan["hosts"]["gpu-a"]["pipelines"][0]["gpus"] == [0, 1, 2]


def test_declared_gpus_must_exist():
    lines = problems_of(inventory({"gpu-a": {"ansible_host": "10.0.0.11", "vllm_omni_gpus": [0, 1, 9],
                                             "vllm_omni_gpu_facts": facts("h200x8-nvswitch")}}))
    assert any("lists GPU [9] that nvidia-smi does not show (it lists [0, 1, 2, 3, 4, 5, 6, 7])" in line for line in lines)


def test_driver_too_old_for_the_wheels_is_named():
    banner = (FIXTURES / "gpu" / "h200x8-nvswitch" / "nvidia-smi.txt").read_text()
    banner = banner.replace("CUDA Version: 13.0", "CUDA Version: 12.4")
    path = FIXTURES / "gpu" / "h200x8-nvswitch"
    old = _gpu.build_facts((path / "query-gpu.csv").read_text(), "", banner, (path / "topo-m.txt").read_text(), 1024)
    lines = problems_of(inventory({"gpu-a": {"ansible_host": "10.0.0.11", "vllm_omni_gpu_facts": old}}))
    assert any("supports CUDA 12.4, but vLLM-Omni 0.26.0's wheels need CUDA 13" in line for line in lines)


@pytest.mark.parametrize("profile", ["h200x8-nvswitch", "pcie-2numa-x8"])
def test_placement_is_the_same_in_every_interpreter(profile):
    """Ties between equally scored GPU sets must break the same way whatever the hash order of the process."""
    script = ("import importlib.util, json; "
              f"spec = importlib.util.spec_from_file_location('t', {__file__!r}); "
              "t = importlib.util.module_from_spec(spec); spec.loader.exec_module(t); "
              f"print(json.dumps(t.placed(t.plan_with({profile!r})) + t.placed(t.plan_with({profile!r}, "
              "vllm_omni_tensor_parallel_size=2))))")
    first, *others = in_fresh_interpreters(script)
    assert len(json.loads(first)) >= 3 and all(other == first for other in others), [first, *others]
