"""Planning from GPU facts captured on the real 2xH200 machine (tests/fixtures/device-h200x2*, record/gpu-evidence.md)."""

from __future__ import annotations

import json

from unitlib import FIXTURES, inventory, problems_of

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan

EVIDENCE = FIXTURES / "device-h200x2"
BUSY = FIXTURES / "device-h200x2-busy"


def device_inventory(facts_file):
    facts = json.loads(facts_file.read_text())["vllm_omni_gpu_facts"]
    return inventory({"h200-device": {"vllm_omni_ip": "10.0.0.50", "vllm_omni_gpu_facts": facts}},
                     {"vllm_omni_version": "0.30.0", "vllm_omni_layout": "aggregated"})


def test_real_h200x2_facts_plan_one_aggregated_pipeline_over_nvlink():
    plan = build_plan(device_inventory(EVIDENCE / "gpu_facts_vars.json"))
    host = plan["hosts"]["h200-device"]
    assert host["gpu_source"] == "discovered" and host["cuda_version"] == "13.0"
    (pipeline,) = host["pipelines"]
    assert pipeline["gpus"] == [0, 1]
    assert [s["physical_gpus"] for s in pipeline["stages"]] == [[0], [1], [1]]
    assert pipeline["placement"]["score"] == 100
    assert "talker + code2wav GPU 1: NUMA node 0 (same as the thinker)" in pipeline["placement"]["explain"]


def test_the_device_render_matches_what_the_planner_says_now():
    plan = build_plan(device_inventory(EVIDENCE / "gpu_facts_vars.json"))
    rendered = json.loads((EVIDENCE / "render" / "plan.json").read_text())
    ours = plan["hosts"]["h200-device"]["pipelines"][0]
    theirs = rendered["hosts"]["h200-device"]["pipelines"][0]
    assert ours["gpus"] == theirs["gpus"] and ours["placement"] == theirs["placement"]
    assert ours["stage_config"] == theirs["stage_config"]


def test_a_real_foreign_gpu_process_makes_gpu1_busy_and_the_plan_says_so():
    facts = json.loads((BUSY / "gpu_facts_vars.json").read_text())["vllm_omni_gpu_facts"]
    gpu1 = facts["gpus"][1]
    assert gpu1["busy"] and gpu1["processes"][0]["process_name"] == "python3"
    assert gpu1["processes"][0]["used_memory_mib"] > 10000
    lines = problems_of(device_inventory(BUSY / "gpu_facts_vars.json"))
    assert any("discovery found 1 free GPU [0] (GPU 1 busy: 1 compute process(es): python3" in line
               and "one aggregated pipeline needs 2" in line for line in lines)
