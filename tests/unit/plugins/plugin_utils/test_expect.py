"""What config_check is told the engine must resolve from a pipeline's stage config: its stages and the PD pair."""

from __future__ import annotations

import copy

from unitlib import inventory, one_host

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime import _expect


def first_pipeline(plan: dict, host: str = "gpu-a") -> dict:
    return plan["hosts"][host]["pipelines"][0]


def test_a_pd_pipelines_stages_are_expected_with_their_model_stage_devices_tp_and_inputs():
    pipeline = first_pipeline(build_plan(one_host(gpus=range(5), vllm_omni_tensor_parallel_size=2)))
    assert _expect.expected_stages(pipeline) == [
        {"id": 0, "model_stage": "thinker", "devices": "0,1", "tensor_parallel_size": 2, "inputs": []},
        {"id": 1, "model_stage": "thinker", "devices": "2,3", "tensor_parallel_size": 2, "inputs": [0]},
        {"id": 2, "model_stage": "talker", "devices": "4", "tensor_parallel_size": 1, "inputs": [1]},
        {"id": 3, "model_stage": "code2wav", "devices": "4", "tensor_parallel_size": 1, "inputs": [2]},
    ]


def test_an_aggregated_text_pipeline_expects_its_one_thinker_stage():
    pipeline = first_pipeline(build_plan(one_host(gpus=[0], vllm_omni_layout="aggregated", vllm_omni_audio_output=False)))
    assert _expect.expected_stages(pipeline) == [
        {"id": 0, "model_stage": "thinker", "devices": "0", "tensor_parallel_size": 1, "inputs": []}]


def test_expected_stages_are_read_from_the_pipelines_stages_not_its_position():
    pipeline = {"stages": [{"id": 7, "role": "code2wav", "devices": "3", "tensor_parallel_size": 1, "reads_from": [6],
                            "kv_role": "ignored"}]}
    assert _expect.expected_stages(pipeline) == [
        {"id": 7, "model_stage": "code2wav", "devices": "3", "tensor_parallel_size": 1, "inputs": [6]}]


def test_a_non_pd_plan_expects_no_pair():
    plan = build_plan(one_host(vllm_omni_version="0.30.0", vllm_omni_layout="aggregated"))
    assert _expect.expected_pd(first_pipeline(plan), plan) == {"pair": None}


def test_a_single_process_mooncake_pd_pipeline_expects_our_connector_and_its_own_bootstrap():
    plan = build_plan(one_host(gpus=range(6)))
    second = plan["hosts"]["gpu-a"]["pipelines"][1]
    assert _expect.expected_pd(second, plan) == {
        "pair": [0, 1], "bootstrap": "10.0.0.11:8999", "kv_connector": "vllm_omni_serve_kv.ServeMooncakeConnector",
        "orchestrator": True}


def test_a_nixl_pd_pipeline_has_no_bootstrap_server():
    plan = build_plan(one_host(vllm_omni_kv_connector="nixl"))
    assert _expect.expected_pd(first_pipeline(plan), plan) == {
        "pair": [0, 1], "bootstrap": None, "kv_connector": "vllm_omni_serve_kv.ServeNixlConnector", "orchestrator": True}


def test_a_distributed_pipelines_headless_decode_names_the_heads_bootstrap_and_runs_no_orchestrator():
    hosts = {f"gpu-{name}": {"ansible_host": ip, "vllm_omni_gpus": [0, 1]}
             for name, ip in (("a", "10.0.0.11"), ("b", "10.0.0.12"))}
    plan = build_plan(inventory(hosts, {"vllm_omni_audio_output": False, "vllm_omni_tensor_parallel_size": 2}))
    head, decode = first_pipeline(plan, "gpu-a"), first_pipeline(plan, "gpu-b")
    assert (head["process"], decode["process"]) == ("head", "headless")
    assert _expect.expected_pd(head, plan) == {
        "pair": [0, 1], "bootstrap": "10.0.0.11:8998", "kv_connector": "vllm_omni_serve_kv.ServeMooncakeConnector",
        "orchestrator": True}
    assert _expect.expected_pd(decode, plan) == {
        "pair": [0, 1], "bootstrap": "10.0.0.11:8998", "kv_connector": "vllm_omni_serve_kv.ServeMooncakeConnector",
        "orchestrator": False}


def stock_pipeline(plan: dict, connector: str) -> dict:
    """The first pipeline with its prefill stage loading ``connector`` from vLLM itself (no module path)."""
    pipeline = copy.deepcopy(first_pipeline(plan))
    kv = pipeline["stage_config"]["stage_args"][0]["engine_args"]["kv_transfer_config"]
    kv.pop("kv_connector_module_path")
    kv["kv_connector"] = connector
    return pipeline


def test_a_stock_connector_is_expected_from_vllms_own_module():
    plan = build_plan(one_host())
    assert _expect.expected_pd(stock_pipeline(plan, "MooncakeConnector"), plan)["kv_connector"] == (
        "vllm.distributed.kv_transfer.kv_connector.v1.mooncake.mooncake_connector.MooncakeConnector")
    assert _expect.expected_pd(stock_pipeline(plan, "NixlConnector"), plan)["kv_connector"] == (
        "vllm.distributed.kv_transfer.kv_connector.v1.nixl.connector.NixlConnector")


def test_an_unknown_connector_without_a_module_path_is_expected_from_an_unknown_module():
    plan = build_plan(one_host())
    assert _expect.expected_pd(stock_pipeline(plan, "AcmeConnector"), plan)["kv_connector"] == "?.AcmeConnector"


def test_an_explicit_pd_bootstrap_wins_over_the_pipelines_own_port():
    plan = build_plan(one_host())
    pipeline = dict(first_pipeline(plan), pd_bootstrap="10.9.9.9:7000")
    assert _expect.expected_pd(pipeline, plan)["bootstrap"] == "10.9.9.9:7000"
    assert _expect.expected_pd(first_pipeline(plan), plan)["bootstrap"] == "10.0.0.11:8998"


def test_a_pipeline_without_a_process_kind_runs_the_orchestrator():
    plan = build_plan(one_host())
    pipeline = {key: value for key, value in first_pipeline(plan).items() if key != "process"}
    assert _expect.expected_pd(pipeline, plan)["orchestrator"] is True
