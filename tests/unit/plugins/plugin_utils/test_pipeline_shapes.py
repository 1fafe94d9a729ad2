"""Text-out pipelines (vllm_omni_audio_output: false) and pipelines on one shared GPU group."""

from __future__ import annotations

import dataclasses

import pytest
from unitlib import one_host, problems_of

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.host import _engine_data
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan


def only_pipeline(plan):
    (host,) = plan["hosts"].values()
    return host["pipelines"]


def stage_memory(pipeline):
    return [(s["engine_args"]["model_stage"], s["runtime"]["devices"], s["engine_args"]["gpu_memory_utilization"])
            for s in pipeline["stage_config"]["stage_args"]]


def test_text_pd_is_prefill_and_decode_on_two_gpus_each_pipeline():
    plan = build_plan(one_host(gpus=range(4), vllm_omni_audio_output=False))
    first, second = only_pipeline(plan)
    assert [s["role"] for s in first["stages"]] == ["prefill", "decode"]
    assert (first["gpus"], second["gpus"]) == ([0, 1], [2, 3])
    prefill, decode = first["stage_config"]["stage_args"]
    assert decode["final_output"] is True and decode["final_output_type"] == "text"
    # Nothing reads decode's output: no hand-over function to a talker that is not there.
    assert "custom_process_next_stage_input_func" not in decode["engine_args"]
    assert prefill["engine_args"]["kv_transfer_config"]["kv_role"] == "kv_producer"


def test_text_aggregated_is_one_thinker_per_gpu():
    plan = build_plan(one_host(gpus=range(3), vllm_omni_layout="aggregated", vllm_omni_audio_output=False))
    assert [p["gpus"] for p in only_pipeline(plan)] == [[0], [1], [2]]
    assert [s["role"] for s in only_pipeline(plan)[0]["stages"]] == ["thinker"]


def test_one_gpu_pd_shares_it_with_the_planners_memory_split():
    plan = build_plan(one_host(gpus=[0], vllm_omni_audio_output=False, vllm_omni_share_gpus=True))
    (pipeline,) = only_pipeline(plan)
    assert pipeline["gpus"] == [0] and pipeline["environment"]["CUDA_VISIBLE_DEVICES"] == "0"
    assert stage_memory(pipeline) == [("thinker", "0", 0.4), ("thinker", "0", 0.5)]
    assert any("vllm_omni_share_gpus" in w and "prefill, decode (0.4, 0.5)" in w for w in plan["warnings"])
    assert "every stage shares the pipeline's GPUs (vllm_omni_share_gpus)" in pipeline["placement"]["explain"]


def test_one_gpu_full_pd_puts_all_four_stages_on_it():
    plan = build_plan(one_host(gpus=[0], vllm_omni_share_gpus=True))
    (pipeline,) = only_pipeline(plan)
    assert stage_memory(pipeline) == [("thinker", "0", 0.25), ("thinker", "0", 0.35), ("talker", "0", 0.2),
                                      ("code2wav", "0", 0.1)]


def test_a_user_share_wins_over_the_split_and_the_sum_is_checked():
    plan = build_plan(one_host(gpus=[0], vllm_omni_audio_output=False, vllm_omni_share_gpus=True,
                               vllm_omni_stage_engine_args={"thinker": {"gpu_memory_utilization": 0.15}}))
    assert [m for _unused, _unused, m in stage_memory(only_pipeline(plan)[0])] == [0.15, 0.15]
    problems = problems_of(one_host(gpus=[0], vllm_omni_audio_output=False, vllm_omni_share_gpus=True,
                                    vllm_omni_stage_engine_args={"decode": {"gpu_memory_utilization": 0.7}}))
    assert len(problems) == 1
    assert "vllm_omni_stage_engine_args" in problems[0] and "adds up to 1.1 (prefill 0.4 + decode 0.7)" in problems[0]
    assert "at most 0.95" in problems[0]


def test_the_memory_sum_is_checked_on_the_unshared_talker_gpu_too():
    problems = problems_of(one_host(gpus=range(3), vllm_omni_stage_engine_args={"talker": {"gpu_memory_utilization": 0.9}}))
    assert len(problems) == 1 and "talker 0.9 + code2wav 0.1" in problems[0]


def test_text_only_is_refused_where_the_schema_cannot_drop_the_talker():
    problems = problems_of(one_host(gpus=range(2), vllm_omni_version="0.30.0", vllm_omni_layout="aggregated",
                                    vllm_omni_audio_output=False))
    assert len(problems) == 1 and "vllm_omni_audio_output" in problems[0] and "0.26.0" in problems[0]


def test_overrides_name_only_stages_of_the_text_layout():
    problems = problems_of(one_host(gpus=range(2), vllm_omni_audio_output=False,
                                    vllm_omni_stage_engine_args={"talker": {"max_num_seqs": 8}}))
    assert len(problems) == 1 and "names no stage of the text-only (vllm_omni_audio_output: false) pd layout" in problems[0]


def test_too_few_gpus_say_the_shape_in_the_message():
    problems = problems_of(one_host(gpus=[0], vllm_omni_audio_output=False))
    assert len(problems) == 1 and "needs 2 (prefill TP 1 + decode TP 1)" in problems[0]


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_the_new_switches_take_booleans_only(value):
    for name in ("vllm_omni_audio_output", "vllm_omni_share_gpus"):
        problems = problems_of(one_host(gpus=range(3), **{name: value}))
        assert len(problems) == 1 and name in problems[0]


def test_load_format_dummy_is_an_allowed_override():
    plan = build_plan(one_host(gpus=range(3), vllm_omni_stage_engine_args={"thinker": {"load_format": "dummy"}}))
    prefill = only_pipeline(plan)[0]["stage_config"]["stage_args"][0]
    assert prefill["engine_args"]["load_format"] == "dummy"
    problems = problems_of(one_host(gpus=range(3), vllm_omni_stage_engine_args={"thinker": {"load_format": "bogus"}}))
    assert len(problems) == 1 and "load_format" in problems[0]


def test_pd_plans_on_0_26_carry_the_fix_that_hands_request_sampling_to_decode(monkeypatch):
    """Seen on an H200: a request's max_tokens 32 reached prefill only; decode made its default 2,048. The engine
    plugin's fix is in force on 0.26 (conformance, GPU run 11): no warning. A version without it still warns."""
    plan = build_plan(one_host(gpus=range(3), vllm_omni_stage_sampling_params={"decode": {"max_tokens": 256}}))
    assert not any("prefill stage only" in w for w in plan["warnings"])
    assert plan["backend"]["engine_plugin"]["fixes"] == ["request_sampling_reaches_answer_stage"]
    row = _engine_data.support_table()["0.26.0"]
    monkeypatch.setitem(_engine_data.support_table(), "0.26.0", dataclasses.replace(row, engine_plugin=None))
    plan = build_plan(one_host(gpus=range(3), vllm_omni_stage_sampling_params={"decode": {"max_tokens": 256}}))
    (warning,) = [w for w in plan["warnings"] if "prefill stage only" in w]
    assert "max_tokens 256" in warning and "vllm_omni_stage_sampling_params.decode" in warning
    assert plan["backend"]["engine_plugin"] is None
    aggregated = build_plan(one_host(gpus=range(2), vllm_omni_layout="aggregated"))
    assert not any("prefill stage only" in w for w in aggregated["warnings"])


def test_openings_wider_than_the_inventory_are_said_out_loud():
    plan = build_plan(one_host(gpus=range(3), vllm_omni_firewall_enabled=False,
                               vllm_omni_router_client_cidrs=["0.0.0.0/0", "::/0"]))
    assert any(w.startswith("vllm_omni_firewall_enabled is false") for w in plan["warnings"])
    assert any("vllm_omni_router_client_cidrs lists 0.0.0.0/0, ::/0" in w for w in plan["warnings"])
    quiet = build_plan(one_host(gpus=range(3), vllm_omni_router_client_cidrs=["10.1.0.0/16"]))
    assert not any("every address" in w or "firewall_enabled is false" in w for w in quiet["warnings"])
