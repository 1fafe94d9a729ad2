"""The planner's behaviour: layouts, placement, ports, environment, argv, and the validation errors."""

from __future__ import annotations

import json

import pytest
from unitlib import in_fresh_interpreters, inventory, one_host, problems_of

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._problems import PlanError


def pipelines(plan, host="gpu-a"):
    return plan["hosts"][host]["pipelines"]


# --- layouts and placement ----------------------------------------------------------------------


def test_docs_layout_three_gpus_gives_the_four_stage_pd_pipeline():
    plan = build_plan(one_host())
    (pipeline,) = pipelines(plan)
    assert [s["role"] for s in pipeline["stages"]] == ["prefill", "decode", "talker", "code2wav"]
    assert [s["devices"] for s in pipeline["stages"]] == ["0", "1", "2", "2"]
    assert [s["reads_from"] for s in pipeline["stages"]] == [[], [0], [1], [2]]
    assert pipeline["environment"]["CUDA_VISIBLE_DEVICES"] == "0,1,2"
    assert pipeline["environment"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert plan["hosts"]["gpu-a"]["unused_gpus"] == []


def test_eight_gpus_give_two_pd_pipelines_and_report_the_two_left_over():
    plan = build_plan(one_host(gpus=range(8)))
    assert [p["gpus"] for p in pipelines(plan)] == [[0, 1, 2], [3, 4, 5]]
    assert plan["hosts"]["gpu-a"]["unused_gpus"] == [6, 7]
    assert any("[6, 7] are left unused" in w for w in plan["warnings"])


def test_stage_devices_are_logical_indices_into_the_visible_set():
    plan = build_plan(one_host(gpus=[4, 5, 6, 7, 9, 11, 12]))
    second = pipelines(plan)[1]
    assert second["environment"]["CUDA_VISIBLE_DEVICES"] == "7,9,11"
    assert [s["devices"] for s in second["stages"]] == ["0", "1", "2", "2"]
    assert [s["physical_gpus"] for s in second["stages"]] == [[7], [9], [11], [11]]


def test_gpus_are_taken_in_ascending_order_whatever_the_inventory_order():
    plan = build_plan(one_host(gpus=[2, 0, 1]))
    assert pipelines(plan)[0]["gpus"] == [0, 1, 2]


def test_tensor_parallel_two_gives_prefill_and_decode_two_gpus_each():
    plan = build_plan(one_host(gpus=range(8), vllm_omni_tensor_parallel_size=2))
    (pipeline,) = pipelines(plan)
    assert [s["devices"] for s in pipeline["stages"]] == ["0,1", "2,3", "4", "4"]
    assert [s["tensor_parallel_size"] for s in pipeline["stages"]] == [2, 2, 1, 1]
    stage_args = pipeline["stage_config"]["stage_args"]
    assert stage_args[0]["engine_args"]["tensor_parallel_size"] == 2
    assert stage_args[1]["engine_args"]["tensor_parallel_size"] == 2
    assert plan["hosts"]["gpu-a"]["unused_gpus"] == [5, 6, 7]


def test_aggregated_on_030_uses_the_engines_three_stage_layout_and_deploy_schema():
    plan = build_plan(one_host(gpus=range(8), vllm_omni_version="0.30.0", vllm_omni_layout="aggregated"))
    assert len(pipelines(plan)) == 4
    pipeline = pipelines(plan)[3]
    assert pipeline["gpus"] == [6, 7]
    document = pipeline["stage_config"]
    assert "stage_args" not in document
    assert [(s["stage_id"], s["devices"]) for s in document["stages"]] == [(0, "0"), (1, "1"), (2, "1")]
    assert set(document["platforms"]) == {"cuda"}
    assert "--deploy-config" in pipeline["argv"]
    assert "--stage-configs-path" not in pipeline["argv"]
    assert "VLLM_MOONCAKE_BOOTSTRAP_PORT" not in pipeline["environment"]


def test_pipelines_per_host_number_limits_the_count():
    plan = build_plan(one_host(gpus=range(8), vllm_omni_pipelines_per_host=1))
    assert len(pipelines(plan)) == 1
    assert plan["hosts"]["gpu-a"]["unused_gpus"] == [3, 4, 5, 6, 7]


def test_per_host_pipeline_count_may_differ_between_hosts():
    inv = inventory({
        "gpu-a": {"ansible_host": "10.0.0.11", "vllm_omni_gpus": list(range(6)), "vllm_omni_pipelines_per_host": 1},
        "gpu-b": {"ansible_host": "10.0.0.12", "vllm_omni_gpus": list(range(6))},
    })
    plan = build_plan(inv)
    assert [len(h["pipelines"]) for h in plan["hosts"].values()] == [1, 2]


# --- PD wiring ----------------------------------------------------------------------------------


def test_pd_stages_carry_the_flags_roles_and_kv_wiring_the_engine_checks():
    plan = build_plan(one_host(gpus=range(6)))
    second = pipelines(plan)[1]
    prefill, decode, talker, code2wav = second["stage_config"]["stage_args"]
    assert prefill["is_prefill_only"] is True and "is_decode_only" not in prefill
    assert decode["is_decode_only"] is True and decode["engine_input_source"] == [0]
    p_kv, d_kv = prefill["engine_args"]["kv_transfer_config"], decode["engine_args"]["kv_transfer_config"]
    assert (p_kv["kv_role"], d_kv["kv_role"]) == ("kv_producer", "kv_consumer")
    # vLLM 0.26's own MooncakeConnector kills vLLM-Omni PD at the first request: both stages load ours.
    assert p_kv["kv_connector"] == d_kv["kv_connector"] == "ServeMooncakeConnector"
    assert p_kv["kv_connector_module_path"] == d_kv["kv_connector_module_path"] == "vllm_omni_serve_kv"
    assert plan["backend"]["kv_connector"] == {"module": "vllm_omni_serve_kv", "class": "ServeMooncakeConnector",
                                               "revision": 4, "transport": "mooncake"}
    assert p_kv["kv_ip"] == "10.0.0.11"
    assert p_kv["engine_id"] == "gpu-a-omni1-prefill" and d_kv["engine_id"] == "gpu-a-omni1-decode"
    assert p_kv["kv_connector_extra_config"]["mooncake_bootstrap_port"] == 8999
    assert second["environment"]["VLLM_MOONCAKE_BOOTSTRAP_PORT"] == "8999"
    assert p_kv["kv_connector_extra_config"]["mooncake_protocol"] == "tcp"
    assert prefill["final_output"] is False and prefill["final_output_type"] is None
    assert decode["final_output"] is True and decode["final_output_type"] == "text"
    assert talker["engine_input_source"] == [1] and code2wav["engine_input_source"] == [2]
    assert talker["custom_process_input_func"].endswith("qwen3_omni.thinker2talker_token_only")
    assert "custom_process_next_stage_input_func" not in prefill["engine_args"]
    for stage in (prefill, decode, talker, code2wav):
        assert "input_connectors" not in stage
        assert "final_output" in stage and "final_output_type" in stage


def test_nixl_gives_each_engine_its_own_side_channel_and_ucx_slice_and_no_mooncake_ports():
    plan = build_plan(one_host(gpus=range(6), vllm_omni_kv_connector="nixl", vllm_omni_audio_output=False))
    first, second = pipelines(plan)[:2]
    prefill, decode = second["stage_config"]["stage_args"]
    p_kv, d_kv = prefill["engine_args"]["kv_transfer_config"], decode["engine_args"]["kv_transfer_config"]
    assert p_kv["kv_connector"] == d_kv["kv_connector"] == "ServeNixlConnector"
    assert p_kv["kv_connector_module_path"] == "vllm_omni_serve_kv" and p_kv["kv_buffer_device"] == "cuda"
    assert (p_kv["kv_role"], d_kv["kv_role"]) == ("kv_producer", "kv_consumer")
    # Pipeline 1 of the host: prefill base + 2, decode base + 3; pipeline 0 had 5600 and 5601.
    assert p_kv["kv_connector_extra_config"] == {"backends": ["UCX"], "side_channel_port": 5602}
    assert d_kv["kv_connector_extra_config"] == {"backends": ["UCX"], "side_channel_port": 5603}
    assert first["stage_config"]["stage_args"][0]["engine_args"]["kv_transfer_config"][
        "kv_connector_extra_config"]["side_channel_port"] == 5600
    assert p_kv["kv_ip"] == d_kv["kv_ip"] == "10.0.0.11"
    assert second["ports"] == {"api": 8092, "nixl_side_channel": {"prefill": 5602, "decode": 5603},
                               "ucx_tcp": [17064, 17127]}
    env = second["environment"]
    assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "10.0.0.11" and env["UCX_TCP_PORT_RANGE"] == "17064-17127"
    assert not any(name.startswith(("MC_", "VLLM_MOONCAKE")) for name in env)
    assert second["nixl"] == {"kv_load_failure_policy": "fail"} and "mooncake" not in second
    assert plan["backend"]["lock"] == "vllm-omni-0.26.0-pd-nixl"
    assert plan["backend"]["packages"] == ["vllm==0.26.0", "vllm-omni==0.26.0", "nixl==1.5.1", "nixl-cu13==1.5.1"]
    assert plan["backend"]["kv_connector"]["class"] == "ServeNixlConnector"
    purposes = {(r["purpose"], r["first"], r["last"]) for r in plan["listen_ports"]["gpu-a"] if r["service"] == "omni1"}
    assert purposes == {("api", 8092, 8092), ("nixl_side_channel", 5602, 5603), ("ucx_tcp", 17064, 17127)}


def test_a_connector_setting_that_cannot_take_effect_is_said():
    plan = build_plan(one_host(gpus=range(4), vllm_omni_kv_connector="nixl", vllm_omni_layout="aggregated"))
    assert any(w.startswith("vllm_omni_kv_connector is set but has no effect: vllm_omni_layout is aggregated")
               for w in plan["warnings"])
    plan = build_plan(one_host(gpus=range(4), vllm_omni_kv_connector="nixl", vllm_omni_mooncake_abort_timeout=60))
    assert any(w.startswith("vllm_omni_mooncake_abort_timeout is set but has no effect: vllm_omni_kv_connector is nixl")
               for w in plan["warnings"])
    plan = build_plan(one_host(gpus=range(4), vllm_omni_nixl_side_channel_port_base=7000))
    assert any(w.startswith("vllm_omni_nixl_side_channel_port_base is set but has no effect: vllm_omni_kv_connector "
                            "is mooncake") for w in plan["warnings"])


def test_a_connector_the_version_does_not_run_is_refused(monkeypatch):
    from dataclasses import replace

    from ansible_collections.vllm_omni.serve.plugins.plugin_utils.host import _engine_data

    table = dict(_engine_data.support_table())
    table["0.26.0"] = replace(table["0.26.0"], kv_connectors={"mooncake": table["0.26.0"].kv_connectors["mooncake"]})
    monkeypatch.setattr(_engine_data, "support_table", lambda: table)
    expect(one_host(gpus=range(4), vllm_omni_kv_connector="nixl"),
           "vllm_omni_kv_connector is nixl, which the collection does not run with vLLM-Omni 0.26.0",
           "(its PD connectors: mooncake)", "set vllm_omni_version to 0.30.0 for nixl, "
           "or vllm_omni_kv_connector to one of: mooncake")


def test_nixl_ports_are_checked_like_the_others():
    expect(one_host(gpus=range(8), vllm_omni_kv_connector="nixl", vllm_omni_nixl_side_channel_port_base=8090),
           "collide")
    expect(one_host(gpus=range(8), vllm_omni_kv_connector="nixl", vllm_omni_nixl_ucx_port_range=[17000, 17100]),
           "vllm_omni_nixl_ucx_port_range", "holds 1 slices of 64 ports, but this host runs 2 pipelines")
    expect(one_host(gpus=range(8), vllm_omni_kv_connector="nixl", vllm_omni_tensor_parallel_size=2,
                    vllm_omni_nixl_ucx_ports_per_pipeline=8), "vllm_omni_nixl_ucx_ports_per_pipeline", "needs 16")


def test_engine_ids_are_unique_across_the_deployment():
    inv = inventory({f"gpu-{c}": {"ansible_host": f"10.0.0.{i + 10}", "vllm_omni_gpus": list(range(8))}
                     for i, c in enumerate("abc")})
    plan = build_plan(inv)
    ids = [s["engine_id"] for h in plan["hosts"].values() for p in h["pipelines"] for s in p["stages"]
           if "engine_id" in s]
    assert len(ids) == len(set(ids)) == 12


def test_ports_and_mooncake_slices_per_pipeline():
    plan = build_plan(one_host(gpus=range(9), vllm_omni_api_port_base=9100, vllm_omni_bootstrap_port_base=9200,
                               vllm_omni_mooncake_rpc_port_range=[20000, 20299],
                               vllm_omni_mooncake_rpc_ports_per_pipeline=100))
    ports = [p["ports"] for p in pipelines(plan)]
    assert ports == [
        {"api": 9100, "bootstrap": 9200, "mooncake_rpc": [20000, 20099]},
        {"api": 9101, "bootstrap": 9201, "mooncake_rpc": [20100, 20199]},
        {"api": 9102, "bootstrap": 9202, "mooncake_rpc": [20200, 20299]},
    ]
    env = pipelines(plan)[2]["environment"]
    assert (env["MC_MIN_RPC_PORT"], env["MC_MAX_RPC_PORT"]) == ("20200", "20299")
    assert pipelines(plan)[2]["url"] == "http://10.0.0.11:9102"


def test_a_pipelines_ports_do_not_move_when_another_pipeline_is_added_or_removed():
    two = build_plan(one_host(gpus=range(6)))
    one = build_plan(one_host(gpus=range(6), vllm_omni_pipelines_per_host=1))
    assert pipelines(one)[0]["environment"] == pipelines(two)[0]["environment"]
    assert pipelines(one)[0]["stage_config"] == pipelines(two)[0]["stage_config"]


def test_rdma_protocol_names_devices_and_drops_the_tcp_pool():
    plan = build_plan(one_host(vllm_omni_mooncake_protocol="rdma", vllm_omni_mooncake_rdma_devices=["mlx5_0", "mlx5_1"]))
    (pipeline,) = pipelines(plan)
    extra = pipeline["stage_config"]["stage_args"][0]["engine_args"]["kv_transfer_config"]["kv_connector_extra_config"]
    assert extra["mooncake_protocol"] == "rdma" and extra["device_name"] == "mlx5_0,mlx5_1"
    assert "MC_TCP_ENABLE_CONNECTION_POOL" not in pipeline["environment"]


def test_tcp_protocol_enables_mooncakes_connection_pool():
    (pipeline,) = pipelines(build_plan(one_host()))
    assert pipeline["environment"]["MC_TCP_ENABLE_CONNECTION_POOL"] == "1"


def test_kv_failure_policy_and_abort_timeout_are_set_on_purpose_on_both_pd_stages():
    (pipeline,) = pipelines(build_plan(one_host()))
    kv = [stage["engine_args"]["kv_transfer_config"] for stage in pipeline["stage_config"]["stage_args"][:2]]
    assert [c["kv_load_failure_policy"] for c in kv] == ["fail", "fail"]  # fail fast, not a silent recompute
    assert pipeline["environment"]["VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT"] == "120"  # not vLLM's 480
    (tuned,) = pipelines(build_plan(one_host(vllm_omni_kv_load_failure_policy="recompute",
                                             vllm_omni_mooncake_abort_timeout=300)))
    assert {s["engine_args"]["kv_transfer_config"]["kv_load_failure_policy"]
            for s in tuned["stage_config"]["stage_args"][:2]} == {"recompute"}
    assert tuned["environment"]["VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT"] == "300"
    (aggregated,) = pipelines(build_plan(one_host(vllm_omni_layout="aggregated")))
    assert "VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT" not in aggregated["environment"]


# --- environment and argv -----------------------------------------------------------------------


def test_argv_is_the_exact_engine_command_with_the_versions_flag():
    (pipeline,) = pipelines(build_plan(one_host(vllm_omni_served_model_name="qwen3-omni")))
    assert pipeline["argv"] == [
        "/opt/vllm-omni/venvs/vllm-omni-0.26.0/bin/vllm", "serve", "Qwen/Qwen3-Omni-30B-A3B-Instruct", "--omni",
        "--host", "10.0.0.11", "--port", "8091", "--served-model-name", "qwen3-omni",
        "--stage-configs-path", "/etc/vllm-omni/omni0/stage_config.yaml",
        "--init-timeout", "1800", "--stage-init-timeout", "1800", "--log-stats",
    ]


def test_environment_sets_host_ip_hf_home_and_offline_only_when_staged():
    (plain,) = pipelines(build_plan(one_host()))
    assert plain["environment"]["VLLM_HOST_IP"] == "10.0.0.11"
    assert plain["environment"]["HF_HOME"] == "/var/lib/vllm-omni/hf"
    assert "HF_HUB_OFFLINE" not in plain["environment"]
    (staged,) = pipelines(build_plan(one_host(vllm_omni_model_staging=True)))
    assert staged["environment"]["HF_HUB_OFFLINE"] == "1"


def test_extra_env_reaches_every_pipeline():
    (pipeline,) = pipelines(build_plan(one_host(vllm_omni_extra_env={"NCCL_DEBUG": "WARN"})))
    assert pipeline["environment"]["NCCL_DEBUG"] == "WARN"


def test_simulator_backend_runs_xpyd_sim_on_the_same_address_and_port():
    plan = build_plan(one_host(vllm_omni_engine_backend="simulator"))
    (pipeline,) = pipelines(plan)
    assert pipeline["argv"][:2] == ["/opt/vllm-omni/venvs/xpyd-sim-0.5.0/bin/xpyd-sim", "serve"]
    assert pipeline["argv"][pipeline["argv"].index("--host") + 1] == "10.0.0.11"
    assert pipeline["argv"][pipeline["argv"].index("--port") + 1] == "8091"
    assert plan["backend"]["stand_in"] is True


# --- overrides ----------------------------------------------------------------------------------


def test_stage_overrides_apply_by_role_and_thinker_sets_both_thinker_stages_in_pd():
    plan = build_plan(one_host(
        vllm_omni_stage_engine_args={"thinker": {"max_num_seqs": 8},
                                     "decode": {"max_num_seqs": 32, "gpu_memory_utilization": 0.85}},
        vllm_omni_stage_sampling_params={"decode": {"temperature": 0.7}, "talker": {"top_k": 40}},
    ))
    prefill, decode, talker, _unused = pipelines(plan)[0]["stage_config"]["stage_args"]
    assert prefill["engine_args"]["max_num_seqs"] == 8
    assert decode["engine_args"]["max_num_seqs"] == 32
    assert decode["engine_args"]["gpu_memory_utilization"] == 0.85
    assert decode["default_sampling_params"]["temperature"] == 0.7
    assert talker["default_sampling_params"]["top_k"] == 40
    assert talker["default_sampling_params"]["stop_token_ids"] == [2150]  # engine's own value kept


def test_settings_report_what_was_set_and_what_defaulted():
    plan = build_plan(one_host(vllm_omni_api_port_base=9000))
    assert plan["settings"]["vllm_omni_api_port_base"] == {"value": 9000, "source": "inventory"}
    assert plan["settings"]["vllm_omni_layout"] == {"value": "pd", "source": "default"}


def test_plan_is_json_serialisable_and_the_same_in_every_interpreter():
    """Key order included (plan.json keeps the plan's order): a plan that followed a set's hash order would differ."""
    script = ("import json; from unitlib import inventory; "
              "from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan; "
              "hosts = {f'gpu-{i}': {'ansible_host': f'10.0.0.{10 + i}', 'vllm_omni_gpus': list(range(8))} for i in range(3)}; "
              "clients = {'vllm_omni_router_client_cidrs': ['10.1.0.0/16', '10.2.0.0/16']}; "
              "print(json.dumps(build_plan(inventory(hosts, clients))))")
    first, *others = in_fresh_interpreters(script)
    assert json.loads(first)["hosts"] and all(other == first for other in others)


def test_router_defaults_to_the_first_engine_host_and_lists_every_worker():
    inv = inventory({"gpu-b": {"ansible_host": "10.0.0.12", "vllm_omni_gpus": [0, 1, 2]},
                     "gpu-a": {"ansible_host": "10.0.0.11", "vllm_omni_gpus": [0, 1, 2]}})
    plan = build_plan(inv)
    assert plan["router"]["hosts"] == ["gpu-a"] and plan["router"]["defaulted"] is True
    assert plan["worker_urls"] == ["http://10.0.0.11:8091", "http://10.0.0.12:8091"]


# --- validation ---------------------------------------------------------------------------------


def expect(inv, *fragments):
    lines = problems_of(inv)
    text = "\n".join(lines)
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in:\n{text}"
    return lines


def test_empty_inventory_says_which_group_to_fill():
    expect({"engine_hosts": [], "router_hosts": [], "hostvars": {}}, "group vllm_omni has no hosts")


@pytest.mark.parametrize(("settings", "fragments"), [
    ({"vllm_omni_tensor_paralel_size": 2}, ("vllm_omni_tensor_paralel_size is not a setting",
                                            "did you mean vllm_omni_tensor_parallel_size")),
    ({"vlm_omni_version": "0.26.0"}, ("vlm_omni_version looks like a misspelled setting",
                                      "did you mean vllm_omni_version")),
    ({"vllm_omni_api_port_base": "9000"}, ("is a string (\"9000\"), not a number",
                                           "-e '{\"vllm_omni_api_port_base\": 9000}'")),
    ({"vllm_omni_model_staging": "yes"}, ("is the string \"yes\", not a boolean", "write true or false")),
    ({"vllm_omni_version": 0.26}, ("vllm_omni_version must be a string",)),
    ({"vllm_omni_version": "0.27.0"}, ("has not been checked against", "0.26.0, 0.30.0")),
    ({"vllm_omni_layout": "disaggregated"}, ("must be one of pd, aggregated",)),
    ({"vllm_omni_api_port_base": 80}, ("is 80, must be between 1024 and 65535",)),
    ({"vllm_omni_tensor_parallel_size": 3}, ("splits over 1, 2, 4 or 8 GPUs",)),
    ({"vllm_omni_mooncake_rpc_port_range": [17000, 16000]}, ("is not below last port",)),
    ({"vllm_omni_mooncake_rdma_devices": ["mlx5_0"]}, ("protocol is tcp",)),
    ({"vllm_omni_extra_env": {"CUDA_VISIBLE_DEVICES": "0"}}, ("which the planner computes",)),
    ({"vllm_omni_extra_env": {"FOO": "a$b"}}, ("holds characters",)),
    ({"vllm_omni_model": "Qwen/Qwen3 Omni; rm -rf /"}, ("is not a Hugging Face id",)),
    ({"vllm_omni_install_root": "/opt/../etc"}, ("contains '..'",)),
    ({"vllm_omni_pipeline_prefix": "Omni$"}, ("is not a lower-case name",)),
])
def test_bad_deployment_settings_are_named_with_a_fix(settings, fragments):
    expect(one_host(**settings), *fragments)


def test_port_range_running_past_65535_is_refused():
    expect(one_host(gpus=range(6), vllm_omni_api_port_base=65535), "past 65535", "lower vllm_omni_api_port_base")


def test_pd_on_a_version_that_cannot_run_it_names_the_versions_that_can(monkeypatch):
    from dataclasses import replace

    from ansible_collections.vllm_omni.serve.plugins.plugin_utils.host import _engine_data

    table = dict(_engine_data.support_table())
    table["0.30.0"] = replace(table["0.30.0"], layouts=("aggregated",), pd_refused_because="no PD pipeline")
    monkeypatch.setattr(_engine_data, "support_table", lambda: table)
    expect(one_host(vllm_omni_version="0.30.0"),
           "vllm_omni_layout is pd, which vLLM-Omni 0.30.0 cannot run: no PD pipeline", "set vllm_omni_version to 0.26.0")


@pytest.mark.parametrize("audio, pipeline", [(True, "qwen3_omni_moe_pd"), (False, "qwen3_omni_moe_pd_text")])
def test_pd_on_030_names_the_plugins_pipeline_and_wires_each_pd_stage(audio, pipeline):
    plan = build_plan(one_host(gpus=range(6), vllm_omni_version="0.30.0", vllm_omni_audio_output=audio))
    document = pipelines(plan)[1]["stage_config"]
    assert (document["pipeline"], document["async_chunk"]) == (pipeline, False) and "connectors" not in document
    stages = document["stages"]
    assert [stage["stage_id"] for stage in stages] == list(range(4 if audio else 2))
    assert document["edges"] == [{"from": i - 1, "to": i} for i in range(1, len(stages))]
    prefill, decode = stages[:2]
    assert (prefill["kv_transfer_config"]["kv_role"], decode["kv_transfer_config"]["kv_role"]) == \
        ("kv_producer", "kv_consumer")
    assert prefill["kv_transfer_config"]["kv_connector"] == "ServeMooncakeConnector"
    assert not any("kv_transfer_config" in stage or "input_connectors" in stage for stage in stages[2:])
    # both thinker copies take the bundled thinker's settings, and its CUDA overlay
    assert prefill["max_num_seqs"] == decode["max_num_seqs"] == 64
    assert [entry["stage_id"] for entry in document["platforms"]["cuda"]["stages"]] == [0, 1]
    assert plan["backend"]["engine_plugin"]["fixes"] == ["qwen3_omni_pd_pipelines", "request_sampling_reaches_answer_stage"]


def test_pd_deploy_config_check_refuses_what_the_engine_would_not_run():
    from ansible_collections.vllm_omni.serve.plugins.plugin_utils.host._engine_data import support_table
    from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._stage_config_checks import check_document

    engine = support_table()["0.30.0"]
    good = pipelines(build_plan(one_host(gpus=range(6), vllm_omni_version="0.30.0",
                                         vllm_omni_audio_output=False)))[0]["stage_config"]
    assert check_document(good, engine) == []
    chunked = {**good, "async_chunk": True}
    assert any("async_chunk must be false" in p for p in check_document(chunked, engine))
    unwired = {key: value for key, value in good.items() if key != "edges"}
    assert any("edges: 0 -> 1 missing" in p for p in check_document(unwired, engine))
    unknown = {**good, "pipeline": "qwen3_omni_moe_pd_audio"}
    assert any("is not a Qwen3-Omni pipeline the collection runs" in p for p in check_document(unknown, engine))
    marked = {**good, "stages": [{**good["stages"][0], "is_prefill_only": True}, good["stages"][1]]}
    assert any("is_prefill_only cannot be expressed" in p for p in check_document(marked, engine))
    same_role = {**good, "stages": [good["stages"][0], {**good["stages"][1], "kv_transfer_config": {
        **good["stages"][1]["kv_transfer_config"], "kv_role": "kv_producer"}}]}
    assert any("decode kv_role is 'kv_producer'" in p for p in check_document(same_role, engine))
    aggregated = pipelines(build_plan(one_host(gpus=range(6), vllm_omni_version="0.30.0",
                                               vllm_omni_layout="aggregated")))[0]["stage_config"]
    with_kv = {**aggregated, "stages": [{**aggregated["stages"][0], "kv_transfer_config": {}}, *aggregated["stages"][1:]]}
    assert any("kv_transfer_config belongs to the prefill and decode stages" in p for p in check_document(with_kv, engine))


@pytest.mark.parametrize(("gpus", "fragments"), [
    ([0, 1], ("lists 2 GPUs [0, 1], but one pd pipeline needs 3 (prefill TP 1 + decode TP 1 + 1 for talker/code2wav)",)),
    ([0, 1, 1], ("lists GPU 1 twice",)),
    ([0, -1, 2], ("holds -1",)),
    ("0,1,2", ("is a string", "write a YAML list")),
    ([], ("is an empty list",)),
])
def test_bad_gpu_lists(gpus, fragments):
    expect(inventory({"gpu-a": {"ansible_host": "10.0.0.11", "vllm_omni_gpus": gpus}}), "host gpu-a", *fragments)


def test_missing_gpus_say_what_to_set():
    expect(inventory({"gpu-a": {"ansible_host": "10.0.0.11"}}), "host gpu-a: vllm_omni_gpus is not set")


def test_too_many_pipelines_say_needed_versus_available():
    expect(one_host(gpus=range(8), vllm_omni_pipelines_per_host=3),
           "asks for 3 pipelines, which need 9 GPUs", "vllm_omni_gpus lists 8", "at most 2")


def test_tp_mismatch_between_prefill_and_decode_is_refused():
    expect(one_host(gpus=range(8), vllm_omni_stage_engine_args={"decode": {"tensor_parallel_size": 2}}),
           "prefill 1, decode 2", "MooncakeConnector needs prefill and decode equal")


@pytest.mark.parametrize(("overrides", "fragments"), [
    ({"decode": {"max_num_seq": 8}}, ("is not an overridable setting", "did you mean max_num_seqs")),
    ({"decode": {"kv_transfer_config": {}}}, ("is computed by the collection",)),
    ({"decode": {"gpu_memory_utilization": 1.5}}, ("must be in (0.0, 1.0]",)),
    ({"decode": {"gpu_memory_utilization": 10**400}}, ("far outside",)),
    ({"thinker_prefill": {"max_num_seqs": 8}}, ("names no stage of the pd layout", "prefill, decode, talker")),
])
def test_bad_stage_overrides(overrides, fragments):
    expect(one_host(vllm_omni_stage_engine_args=overrides), *fragments)


def test_port_ranges_that_collide_are_named():
    expect(one_host(gpus=range(6), vllm_omni_api_port_base=8998),
           "vllm_omni_api_port_base / vllm_omni_bootstrap_port_base collide")


def test_mooncake_range_too_small_for_the_pipelines_says_how_wide():
    expect(one_host(gpus=range(6), vllm_omni_mooncake_rpc_port_range=[16000, 16100]),
           "holds 1 slices of 64 ports, but this host runs 2 pipelines", "widen it to at least 128 ports")


def test_mooncake_slice_too_small_for_the_tensor_parallel_size():
    expect(one_host(gpus=range(9), vllm_omni_tensor_parallel_size=4, vllm_omni_mooncake_rpc_ports_per_pipeline=16),
           "a pipeline at TP 4 needs 32")


def test_loopback_address_is_refused_when_peers_must_reach_it():
    inv = inventory({"gpu-a": {"ansible_host": "127.0.0.1", "vllm_omni_gpus": [0, 1, 2]},
                     "gpu-b": {"ansible_host": "10.0.0.12", "vllm_omni_gpus": [0, 1, 2]}})
    expect(inv, "host gpu-a: vllm_omni_ip is the loopback address 127.0.0.1")


def test_loopback_is_fine_when_engines_and_router_share_one_host():
    plan = build_plan(one_host(ip="127.0.0.1"))
    assert plan["worker_urls"] == ["http://127.0.0.1:8091"]


@pytest.mark.parametrize(("host_vars", "fragment"), [
    ({"ansible_host": "gpu-a.example.com"}, "is a name, not an address"),
    ({"vllm_omni_ip": "fe80::1"}, "is an IPv6 address"),
    ({"vllm_omni_ip": "0.0.0.0"}, "cannot be a peer address"),
    ({"vllm_omni_ip": "10.0.0.300"}, "is not an IP address"),
])
def test_bad_addresses(host_vars, fragment):
    expect(inventory({"gpu-a": {"vllm_omni_gpus": [0, 1, 2], **host_vars}}), fragment)


def test_duplicate_addresses_are_refused():
    inv = inventory({"gpu-a": {"ansible_host": "10.0.0.11", "vllm_omni_gpus": [0, 1, 2]},
                     "gpu-b": {"ansible_host": "10.0.0.11", "vllm_omni_gpus": [0, 1, 2]}})
    expect(inv, "hosts gpu-a, gpu-b", "share the address 10.0.0.11")


def test_deployment_setting_differing_between_hosts_is_refused():
    inv = inventory({"gpu-a": {"ansible_host": "10.0.0.11", "vllm_omni_gpus": [0, 1, 2], "vllm_omni_version": "0.26.0"},
                     "gpu-b": {"ansible_host": "10.0.0.12", "vllm_omni_gpus": [0, 1, 2], "vllm_omni_version": "0.30.0"}})
    expect(inv, "vllm_omni_version differs between hosts", "set it once in group_vars/vllm_omni.yml")


def test_long_deployment_values_that_differ_only_past_the_shown_part_are_refused_naming_both_hosts():
    shared = "x" * 100
    inv = inventory({"gpu-a": {"ansible_host": "10.0.0.11", "vllm_omni_gpus": [0, 1, 2],
                               "vllm_omni_extra_env": {"NOTE": shared + "a"}},
                     "gpu-b": {"ansible_host": "10.0.0.12", "vllm_omni_gpus": [0, 1, 2],
                               "vllm_omni_extra_env": {"NOTE": shared + "b"}}})
    expect(inv, "vllm_omni_extra_env differs between hosts (gpu-a: ", "gpu-b: ")


@pytest.mark.parametrize("name", ["gpu a", "../etc", "gpü-1", "gpu;rm", "-gpu"])
def test_host_names_that_would_reach_paths_or_units_are_refused(name):
    expect(inventory({name: {"ansible_host": "10.0.0.11", "vllm_omni_gpus": [0, 1, 2]}}), "is not a plain host name")


def test_one_error_lists_every_problem_and_merges_hosts_sharing_one():
    inv = inventory({f"gpu-{i}": {"ansible_host": f"10.0.0.{i + 1}", "vllm_omni_gpus": [0, 1, 2], "vllm_omni_foo": 1}
                     for i in range(5)})
    with pytest.raises(PlanError) as caught:
        build_plan(inv)
    message = str(caught.value)
    assert message.startswith("vllm_omni.serve: the inventory has 1 problem; nothing was changed.")
    assert "hosts gpu-0, gpu-1, gpu-2 and 2 more: vllm_omni_foo is not a setting" in message
    assert "Traceback" not in message


def test_every_engine_rule_is_about_an_override_the_planner_passes_through():
    """data/engine_rules.yml: each bounded name is an overridable key of its kind, each version's rules resolve."""
    from ansible_collections.vllm_omni.serve.plugins.plugin_utils.host import _engine_data
    from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan import _stages

    for version in _engine_data.supported_versions():
        rules = _engine_data.engine_rules(version)
        assert set(rules["sampling"]) <= set(_stages.SAMPLING_PARAMS), version
        assert set(rules["engine_args"]) <= set(_stages.ENGINE_ARGS), version
        assert all(rule["rule"] and rule["checked_by"] for section in ("sampling", "engine_args", "cross")
                   for rule in rules[section].values()), version


# --- the garbage collector around planning ------------------------------------------------------


def test_gc_paused_resumes_the_collector_and_leaves_nothing_young_or_frozen():
    import gc

    from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import gc_paused

    assert gc.isenabled() and gc.get_freeze_count() == 0
    with pytest.raises(ValueError), gc_paused():
        assert not gc.isenabled()
        made = [[n] for n in range(5000)]  # lists, always tracked: far more than the youngest generation holds
        raise ValueError("an exception inside still resumes the collector")
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0  # frozen only for the splice, then thawed into the oldest generation
    # Straight into the oldest generation, not left in the youngest for one big pass at the next allocation.
    assert any(obj is made[0] for obj in gc.get_objects(generation=2))
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # a caller that had it off keeps it off
    finally:
        gc.enable()


def test_gc_paused_leaves_a_process_s_own_frozen_objects_frozen():
    import gc

    from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import gc_paused

    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with gc_paused():
            build_plan(one_host())
        assert gc.isenabled() and gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()


def test_xpyd_on_030_gives_each_stage_its_replica_count_as_stage_args_does():
    from testlib import REPO, load_ansible_inventory

    plan = build_plan(load_ansible_inventory(REPO / "tests" / "golden" / "pd-030-xpyd-4hosts" / "inventory"))
    heads = [p for host in plan["hosts"].values() for p in host["pipelines"] if p["process"] == "head"]
    assert heads
    for pipeline in heads:
        replicas = {stage["id"]: stage["replicas"] for stage in pipeline["stages"]}
        assert {stage["stage_id"]: stage["num_replicas"] for stage in pipeline["stage_config"]["stages"]} == replicas
    assert {2, 1} <= {count for p in heads for count in (s["replicas"] for s in p["stages"])}
