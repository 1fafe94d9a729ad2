"""Distributed pipelines: engines as processes of their own, across hosts (spanning) and xPyD replicas."""

from __future__ import annotations

import pytest
from unitlib import gpu_facts as facts
from unitlib import inventory, problems_of

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan import _distributed
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.texts._render import render_tree

TEXT = {"vllm_omni_audio_output": False}


def hosts(*gpu_counts: int, **extra) -> dict:
    return {f"gpu-{chr(97 + i)}": {"ansible_host": f"10.0.0.{11 + i}", "vllm_omni_gpus": list(range(n)), **extra}
            for i, n in enumerate(gpu_counts)}


def processes(plan: dict) -> dict[tuple[str, str], dict]:
    return {(host, p["name"]): p for host, hp in plan["hosts"].items() for p in hp["pipelines"]}


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_two_small_hosts_make_one_pipeline_head_on_the_first_headless_decode_on_the_second():
    plan = build_plan(inventory(hosts(2, 2), {**TEXT, "vllm_omni_tensor_parallel_size": 2}))
    entries = processes(plan)
    head, decode = entries[("gpu-a", "omni-span0")], entries[("gpu-b", "omni-span0-decode0")]
    assert (head["process"], decode["process"]) == ("head", "headless")
    assert flag(head["argv"], "--stage-id") == "0" and flag(head["argv"], "--omni-master-address") == "10.0.0.11"
    assert flag(head["argv"], "--omni-master-port") == "8400" == flag(decode["argv"], "--omni-master-port")
    assert "--headless" in decode["argv"] and flag(decode["argv"], "--stage-id") == "1"
    assert flag(decode["argv"], "--omni-replica-address") == "10.0.0.12" and "--port" not in decode["argv"]
    # Each process's own ports; decode runs no bootstrap server; VLLM_PORT pins what vLLM draws itself.
    assert head["environment"]["VLLM_MOONCAKE_BOOTSTRAP_PORT"] == "8998"
    assert "VLLM_MOONCAKE_BOOTSTRAP_PORT" not in decode["environment"] and "bootstrap" not in decode["ports"]
    assert head["environment"]["VLLM_PORT"] == "20000" == decode["environment"]["VLLM_PORT"]
    assert head["environment"]["CUDA_VISIBLE_DEVICES"] == "0,1" == decode["environment"]["CUDA_VISIBLE_DEVICES"]
    # Each config: its own stage's address and engine id; the other stage is engine 0 of that role.
    kv = [s["engine_args"]["kv_transfer_config"] for s in decode["stage_config"]["stage_args"]]
    assert (kv[0]["kv_ip"], kv[0]["engine_id"]) == ("10.0.0.11", "gpu-a-omni-span0-prefill")
    assert (kv[1]["kv_ip"], kv[1]["engine_id"]) == ("10.0.0.12", "gpu-b-omni-span0-decode0-decode")
    assert decode["pd_bootstrap"] == "10.0.0.11:8998" and decode["url"] is None
    # The router knows the head only; plan.json says who runs what.
    assert plan["worker_urls"] == ["http://10.0.0.11:8091"]
    pipeline = plan["distributed_pipelines"]["omni-span0"]
    assert pipeline["hosts"] == ["gpu-a", "gpu-b"] and pipeline["head"]["master"] == "10.0.0.11:8400"
    assert any("spans gpu-a, gpu-b" in line and line.endswith("(Mooncake)") for line in pipeline["explain"])


def test_a_spanning_pipeline_names_the_kv_transport_it_crosses_hosts_with():
    nixl = build_plan(inventory(hosts(2, 2), {**TEXT, "vllm_omni_tensor_parallel_size": 2, "vllm_omni_kv_connector": "nixl"}))
    explain = nixl["distributed_pipelines"]["omni-span0"]["explain"]
    assert explain[-1].startswith("spans gpu-a, gpu-b") and explain[-1].endswith("crosses the network (NIXL)"), explain
    assert not any("Mooncake" in line for line in explain)


def test_the_spanning_pipelines_ports_answer_its_own_hosts_only():
    plan = build_plan(inventory(hosts(2, 1, 1), TEXT))  # gpu-a: a whole pipeline; gpu-b + gpu-c: one spanning
    peers = plan["firewall"]["per_host"]["gpu-b"]["pipeline_peers"]
    assert peers == {"omni-span0": ["10.0.0.12", "10.0.0.13"]}
    rules = {r["purpose"]: r for r in plan["firewall"]["per_host"]["gpu-b"]["rules"]}
    pipeline_only = {p for p, r in rules.items() if r.get("pipeline")}
    assert pipeline_only == {"mooncake_bootstrap", "mooncake_rpc", "stage_master", "stage_zmq"}
    assert "pipeline" not in rules["api"]  # the head's API: open to the inventory (the router)
    ruleset = render_tree(plan)["gpu-b/firewall.nft"]
    assert "elements = { 10.0.0.12, 10.0.0.13 }" in ruleset and "ip saddr @pipeline_peers_0 accept" in ruleset
    assert "pipeline_peers" not in render_tree(plan)["gpu-a/firewall.nft"]  # gpu-a takes no part in it
    assert plan["reserved_ports"]["gpu-b"] == "8091,8400,8873,8998,9097-9098,16000-16063,20000-20063"


def test_xpyd_on_one_host_runs_one_process_per_engine_and_waits_for_its_decode_engines():
    plan = build_plan(inventory(hosts(8), {**TEXT, "vllm_omni_prefill_replicas": 2, "vllm_omni_decode_replicas": 2}))
    names = [p["name"] for p in plan["hosts"]["gpu-a"]["pipelines"]]
    assert names == ["omni0", "omni0-prefill1", "omni0-decode0", "omni0-decode1",
                     "omni1", "omni1-prefill1", "omni1-decode0", "omni1-decode1"]
    entries = processes(plan)
    assert [p["index"] for p in plan["hosts"]["gpu-a"]["pipelines"]] == list(range(8))
    head = entries[("gpu-a", "omni1")]
    runtime = [s["runtime"]["num_replicas"] for s in head["stage_config"]["stage_args"]]
    assert runtime == [2, 2]  # the engine applies --omni-dp-size-local (1) to the head's own stage
    assert flag(head["argv"], "--omni-master-port") == "8404" and head["ports"]["zmq"] == [20256, 20319]
    prefill1 = entries[("gpu-a", "omni1-prefill1")]
    kv = prefill1["stage_config"]["stage_args"][0]["engine_args"]["kv_transfer_config"]
    assert kv["engine_id"] == "gpu-a-omni1-prefill1-prefill"
    assert kv["kv_connector_extra_config"]["mooncake_bootstrap_port"] == 9003
    assert set(plan["distributed_pipelines"]) == {"gpu-a/omni0", "gpu-a/omni1"}
    assert plan["firewall"]["per_host"]["gpu-a"]["pipeline_peers"]["gpu-a/omni0"] == ["10.0.0.11"]


def test_the_four_host_two_to_one_layout():
    plan = build_plan(inventory(hosts(8, 8, 8, 8), {**TEXT, "vllm_omni_tensor_parallel_size": 2,
                                                    "vllm_omni_prefill_replicas": 2, "vllm_omni_decode_replicas": 1}))
    span = plan["distributed_pipelines"]["omni-span0"]
    assert [(e["host"], e["role"], e["gpus"]) for e in span["engines"]] == [
        ("gpu-a", "prefill", [6, 7]), ("gpu-b", "prefill", [6, 7]), ("gpu-c", "decode", [6, 7])]
    assert len(plan["distributed_pipelines"]) == 5 and len(plan["worker_urls"]) == 5
    (unused,) = [w for w in plan["warnings"] if "left unused" in w]
    assert unused.startswith("host gpu-d: GPUs [6, 7] are left unused (8 usable, 6 per pd pipeline: 2 prefill + 1 "
                             "decode engines of TP 2); to use them: lower vllm_omni_tensor_parallel_size")
    assert "vllm_omni_span_group" in unused and unused.endswith("or list only the GPUs to use in vllm_omni_gpus")


def test_topology_keeps_each_tp_group_inside_an_nvlink_island():
    groups = _distributed.tp_groups(list(range(8)), 2, facts("pcie-2numa-x8"))
    assert [g for g, _unused in groups] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert all("PIX" in locality for _unused, locality in groups)


def test_a_host_with_a_fixed_pipeline_count_gives_no_gpu_to_spanning_pipelines():
    fixed = {"ansible_host": "10.0.0.11", "vllm_omni_gpus": [0, 1, 2], "vllm_omni_pipelines_per_host": 1}
    inv = inventory({**hosts(3, 1), "gpu-a": fixed}, TEXT)
    [line] = problems_of(inv)
    assert line.startswith("host gpu-b: vllm_omni_gpus offers 1 GPU(s) [0], which no pipeline uses")


def test_span_groups_keep_pooling_apart():
    rack_b = {"ansible_host": "10.0.0.12", "vllm_omni_gpus": [0], "vllm_omni_span_group": "rack-b"}
    inv = inventory({**hosts(1, 1), "gpu-b": rack_b}, TEXT)
    lines = problems_of(inv)
    assert len(lines) == 2 and all("which no pipeline uses" in line for line in lines)
    assert "span group 'rack-b'" in lines[1]


def test_spanning_can_be_turned_off():
    [line] = problems_of(inventory(hosts(1, 1), {**TEXT, "vllm_omni_span_hosts": False}))
    assert "but one pd pipeline needs 2" in line


def test_audio_pipelines_never_span_and_small_hosts_are_refused_as_before():
    lines = problems_of(inventory(hosts(2, 1)))
    assert any("one pd pipeline needs 3" in line for line in lines)


@pytest.mark.parametrize(("settings", "fragments"), [
    ({"vllm_omni_prefill_replicas": 2}, ["vllm_omni_prefill_replicas", "vllm_omni_audio_output is true",
                                         "set vllm_omni_audio_output: false"]),
    ({**TEXT, "vllm_omni_decode_replicas": 2, "vllm_omni_layout": "aggregated"},
     ["vllm_omni_decode_replicas", "vllm_omni_layout is aggregated"]),
    ({**TEXT, "vllm_omni_prefill_replicas": 2, "vllm_omni_share_gpus": True},
     ["vllm_omni_prefill_replicas", "vllm_omni_share_gpus"]),
    ({**TEXT, "vllm_omni_prefill_replicas": 3, "vllm_omni_stage_zmq_port_range": [20000, 20100]},
     ["host gpu-a", "vllm_omni_stage_zmq_port_range", "holds 1 slices of 64 ports"]),
    ({**TEXT, "vllm_omni_prefill_replicas": 2, "vllm_omni_stage_master_port_base": 8998},
     ["bootstrap ports", "stage master ports", "overlap"]),
])
def test_distributed_settings_that_cannot_work_are_refused(settings, fragments):
    [line] = problems_of(inventory(hosts(8), settings))
    position = 0
    for fragment in fragments:  # each fragment, in this order
        assert fragment in line[position:], (fragment, line)
        position = line.index(fragment, position) + len(fragment)


def test_stand_ins_of_a_distributed_pipeline_are_a_pd_router_and_prefill_decode_simulators():
    plan = build_plan(inventory(hosts(1, 1), {**TEXT, "vllm_omni_engine_backend": "simulator"}))
    entries = processes(plan)
    head, decode = entries[("gpu-a", "omni-span0")], entries[("gpu-b", "omni-span0-decode0")]
    assert head["argv"][:2] == ["/bin/sh", "-c"] and "--vllm-pd-disaggregation" in head["argv"]
    assert head["argv"][head["argv"].index("--decode") + 1] == "http://10.0.0.12:8091"
    assert decode["argv"][-8:] == ["--mode", "decode", "--host", "10.0.0.12", "--port", "8091", "--model",
                                   "Qwen/Qwen3-Omni-30B-A3B-Instruct"]
    assert decode["health_url"] == "http://10.0.0.12:8091/health" and decode["api_key_env"] is None
    assert decode["metrics_url"] == "http://10.0.0.12:8091/metrics" and decode["url"] is None
    assert "vllm-router==0.1.17" in plan["backend"]["packages"]
    assert plan["distributed_pipelines"]["omni-span0"]["in_flight_metrics"] == [
        "http://127.0.0.1:8400/metrics", "http://10.0.0.12:8091/metrics"]
    # The stand-in decode's API is the head's to call: the pipeline's hosts only.
    api = next(r for r in plan["firewall"]["per_host"]["gpu-b"]["rules"] if r["purpose"] == "api")
    assert api["pipeline"] == "omni-span0"


@pytest.mark.parametrize(("group_vars", "count", "advice"), [
    ({"vllm_omni_layout": "aggregated"}, 2,
     "to use them: set vllm_omni_pipelines_per_host to 3 or auto (3 fit; it is 2); or list only the GPUs to use "
     "in vllm_omni_gpus"),
    ({"vllm_omni_layout": "pd", "vllm_omni_span_hosts": False}, "auto",
     "to use them: set vllm_omni_share_gpus: true (every stage on one GPU group); set vllm_omni_span_hosts: true "
     "(left-over GPUs of several hosts make a pipeline); or list only the GPUs to use in vllm_omni_gpus")])
def test_the_warning_about_left_over_gpus_names_what_would_use_them(group_vars, count, advice):
    inv = inventory({"gpu-a": {"ansible_host": "10.0.0.11", "vllm_omni_gpus": [0, 1, 2],
                               "vllm_omni_pipelines_per_host": count}},
                    {"vllm_omni_audio_output": False, "vllm_omni_tensor_parallel_size": 1, **group_vars})
    (unused,) = [w for w in build_plan(inv)["warnings"] if "left unused" in w]
    assert unused.startswith("host gpu-a: GPUs [2] are left unused (3 usable, ") and unused.endswith(advice), unused
