"""The deployment context (plan/_deployment.py): its setting groups and the values derived from the settings."""

from __future__ import annotations

import dataclasses

import pytest
from unitlib import deployment_of

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan import _validate
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._deployment import Deployment
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._problems import Problems
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._setting_groups import (
    EngineProcessSettings,
    KvTransferSettings,
    PortSettings,
    RouterSettings,
)

TEXT = {"vllm_omni_audio_output": False}
SHARE = "set vllm_omni_share_gpus: true (every stage on one GPU group)"
AUDIO_OFF = "set vllm_omni_audio_output: false (text out, one GPU less)"
LOWER_TP = "lower vllm_omni_tensor_parallel_size"
LOWER_REPLICAS = "lower vllm_omni_prefill_replicas / vllm_omni_decode_replicas"


def deployment(**values) -> Deployment:
    return deployment_of(**values)


def test_the_setting_groups_are_built_from_the_deployment_s_settings():
    context = deployment(vllm_omni_kv_connector="nixl", vllm_omni_engine_backend="simulator", vllm_omni_router_port=9100,
                         vllm_omni_api_port_base=8200)
    assert isinstance(context.port_settings, PortSettings) and context.port_settings.api_port_base == 8200
    assert isinstance(context.router_settings, RouterSettings) and context.router_settings.port == 9100
    assert isinstance(context.process_settings, EngineProcessSettings) and context.process_settings.backend == "simulator"
    assert isinstance(context.kv_settings, KvTransferSettings) and context.kv_settings.kv_connector == "nixl"


def test_derived_values_are_computed_once_and_the_deployment_cannot_be_changed():
    context = deployment()
    assert context.process_settings is context.process_settings
    assert context.replicas is context.replicas
    with pytest.raises(dataclasses.FrozenInstanceError):
        context.settings = {}


def test_the_plain_settings_are_read_through():
    context = deployment(vllm_omni_layout="aggregated", vllm_omni_tensor_parallel_size=4, vllm_omni_share_gpus=True, **TEXT)
    assert (context.layout, context.tp, context.audio, context.share) == ("aggregated", 4, False, True)
    assert context.sources["vllm_omni_layout"] == "inventory" and context.sources["vllm_omni_model"] == "default"


def test_the_served_name_is_the_model_unless_a_served_model_name_is_set():
    assert deployment().served == "Qwen/Qwen3-Omni-30B-A3B-Instruct"
    assert deployment(vllm_omni_served_model_name="omni").served == "omni"


def test_a_default_pd_pipeline_is_two_engines_plus_the_talker_gpu_and_stays_in_one_process():
    context = deployment()
    assert context.replicas == {"prefill": 1, "decode": 1}
    assert context.gpus_per_pipeline == 3
    assert context.gpu_formula == "prefill TP 1 + decode TP 1 + 1 for talker/code2wav"
    assert (context.distributable, context.replicated, context.spanning) == (False, False, False)
    assert context.replicas_culprit is None
    assert context.fewer_gpus == f"{AUDIO_OFF}, {SHARE}"


def test_a_text_out_pd_pipeline_of_tp_2_needs_4_gpus_and_may_span_hosts():
    context = deployment(vllm_omni_tensor_parallel_size=2, **TEXT)
    assert context.gpus_per_pipeline == 4
    assert context.gpu_formula == "prefill TP 2 + decode TP 2"
    assert (context.distributable, context.replicated, context.spanning) == (True, False, True)
    assert context.fewer_gpus == f"{LOWER_TP}, {SHARE}"


def test_span_hosts_false_keeps_a_distributable_pipeline_on_one_host():
    context = deployment(vllm_omni_span_hosts=False, **TEXT)
    assert context.distributable is True and context.spanning is False


def test_xpyd_replicas_count_every_engine_and_name_both_replica_settings():
    context = deployment(vllm_omni_prefill_replicas=2, vllm_omni_decode_replicas=3, **TEXT)
    assert context.replicas == {"prefill": 2, "decode": 3}
    assert context.gpus_per_pipeline == 5
    assert context.gpu_formula == "2 prefill + 3 decode engines of TP 1"
    assert context.replicated is True and context.distributable is True
    assert context.replicas_culprit == "vllm_omni_prefill_replicas / vllm_omni_decode_replicas"
    assert context.fewer_gpus == LOWER_REPLICAS  # sharing GPUs is refused with replicas, so it is not offered


def test_only_the_replica_setting_above_one_is_the_culprit():
    context = deployment(vllm_omni_decode_replicas=2, vllm_omni_tensor_parallel_size=2, **TEXT)
    assert context.replicas_culprit == "vllm_omni_decode_replicas"
    assert context.gpus_per_pipeline == 6
    assert context.gpu_formula == "1 prefill + 2 decode engines of TP 2"
    assert context.fewer_gpus == f"{LOWER_TP}, {LOWER_REPLICAS}"


def test_an_aggregated_pipeline_has_no_replicas_and_needs_the_thinker_tp_plus_the_talker_gpu():
    context = deployment(vllm_omni_layout="aggregated", vllm_omni_tensor_parallel_size=4)
    assert context.replicas == {}
    assert context.gpus_per_pipeline == 5
    assert context.gpu_formula == "thinker TP 4 + 1 for talker/code2wav"
    assert (context.distributable, context.replicated, context.spanning) == (False, False, False)
    assert context.replicas_culprit is None
    assert context.fewer_gpus == f"{LOWER_TP}, {AUDIO_OFF}, {SHARE}"


def test_a_text_out_aggregated_pipeline_needs_only_the_thinker_gpus():
    context = deployment(vllm_omni_layout="aggregated", vllm_omni_tensor_parallel_size=2, **TEXT)
    assert context.gpus_per_pipeline == 2
    assert context.gpu_formula == "thinker TP 2"
    assert context.fewer_gpus == LOWER_TP  # sharing would still need the thinker's TP 2 GPUs: not offered
    assert context.distributable is False  # only pd pipelines split into processes


def test_shared_gpus_put_every_stage_on_one_tp_group_of_one_process():
    context = deployment(vllm_omni_share_gpus=True, vllm_omni_tensor_parallel_size=2)
    assert context.gpus_per_pipeline == 2
    assert context.gpu_formula == "every stage shares one TP 2 GPU group"
    assert context.distributable is False and context.spanning is False
    assert context.fewer_gpus == LOWER_TP
    assert context.planner_shares == ["prefill", "decode", "talker", "code2wav"]


def test_a_pipeline_at_every_floor_can_only_ask_for_a_bigger_host():
    context = deployment(vllm_omni_share_gpus=True)
    assert context.gpus_per_pipeline == 1
    assert context.fewer_gpus == "use a host with more GPUs"


def test_audio_output_keeps_a_pd_pipeline_in_one_process_even_with_span_hosts():
    context = deployment(vllm_omni_span_hosts=True)
    assert context.distributable is False and context.spanning is False


def test_properties_read_a_directly_built_deployment_without_an_engine():
    settings, _sources = _validate.deployment_settings(["h"], {"h": {"vllm_omni_decode_replicas": 4, **TEXT}}, Problems())
    context = Deployment(settings, {}, None, {}, [])
    assert context.engine is None
    assert context.gpus_per_pipeline == 5 and context.replicas_culprit == "vllm_omni_decode_replicas"
    assert context.gpu_formula == "1 prefill + 4 decode engines of TP 1"
