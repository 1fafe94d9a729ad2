"""The controller-side stage-config check: the documented recipe and version traps are refused."""

from __future__ import annotations

import copy

import pytest
import yaml
from unitlib import FIXTURES, one_host

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.host._engine_data import support_table
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._stage_config_checks import check_document, check_launch

V026, V030 = support_table()["0.26.0"], support_table()["0.30.0"]


@pytest.fixture
def recipe():
    return yaml.safe_load((FIXTURES / "recipe_as_documented.yaml").read_text())


@pytest.fixture
def rendered_pd():
    return build_plan(one_host())["hosts"]["gpu-a"]["pipelines"][0]


def test_the_documented_recipe_is_refused_for_every_reason_the_engine_has(recipe):
    text = "\n".join(check_document(recipe, V026))
    # The engine's own first failure (Missing key final_output_type, checked on 0.26.0).
    assert "stage_args[0]: missing key final_output_type" in text
    assert "stage_args[2]: missing key final_output " in text
    assert "stage_args[3]: missing key is_comprehension" in text
    # The function the recipe names for code2wav does not exist in 0.26.
    assert "'vllm_omni.model_executor.stage_input_processors.qwen3_omni.talker2code2wav_token_only' does not exist" in text
    assert "this version's module has:" in text and "talker2code2wav_full_payload" in text
    # The key the recipe uses is not read by the legacy loader.
    assert "sync_process_input_func is not read by the stage_args loader" in text
    # kv transfer protocol left to the rdma default.
    assert "mooncake_protocol must be tcp or rdma" in text


def test_the_documented_launch_flag_silently_drops_pd_on_026(recipe):
    (problem,) = check_launch(recipe, V026, "--deploy-config")
    assert "silently runs the model's 3-stage registry pipeline" in problem
    assert "--stage-configs-path" in problem


def test_stage_args_on_030_is_refused(recipe):
    problems = check_launch(recipe, V030, "--deploy-config")
    assert any("rejects the stage_args schema" in p for p in problems)
    assert any("has no --stage-configs-path flag" in p for p in check_launch(recipe, V030, "--stage-configs-path"))


def test_our_renders_pass_the_check(rendered_pd):
    assert check_document(rendered_pd["stage_config"], V026, rendered_pd["environment"]) == []
    assert check_launch(rendered_pd["stage_config"], V026, "--stage-configs-path") == []
    aggregated = build_plan(one_host(vllm_omni_version="0.30.0", vllm_omni_layout="aggregated"))
    pipeline = aggregated["hosts"]["gpu-a"]["pipelines"][0]
    assert check_document(pipeline["stage_config"], V030) == []


@pytest.mark.parametrize(("mutate", "fragment"), [
    (lambda d: d["stage_args"][1]["engine_args"]["kv_transfer_config"].update(kv_role="kv_producer"),
     "decode kv_role is 'kv_producer'"),
    (lambda d: d["stage_args"][1]["engine_args"].update(tensor_parallel_size=2), "prefill tensor_parallel_size 1 != decode 2"),
    (lambda d: d["stage_args"][1].update(engine_input_source=[]), "decode stage 1 must read the prefill stage 0"),
    (lambda d: d["stage_args"][1]["engine_args"]["kv_transfer_config"].update(kv_connector="NixlConnector"),
     "same, non-empty kv_connector"),
    (lambda d: d["stage_args"][0]["engine_args"].pop("kv_transfer_config"), "both PD stages need"),
    (lambda d: d["stage_args"][2].update(stage_id=5), "stage_id is 5"),
    (lambda d: d["stage_args"][3].update(input_connectors={"from_stage_2": "shm"}), "which runtime.connectors does not"),
    (lambda d: d["stage_args"][1]["engine_args"]["kv_transfer_config"].update(engine_id="gpu-a-omni0-prefill"),
     "share an engine_id"),
])
def test_broken_pd_wiring_is_named(rendered_pd, mutate, fragment):
    document = copy.deepcopy(rendered_pd["stage_config"])
    mutate(document)
    text = "\n".join(check_document(document, V026, rendered_pd["environment"]))
    assert fragment in text


def test_bootstrap_port_in_config_must_equal_the_environment(rendered_pd):
    environment = dict(rendered_pd["environment"], VLLM_MOONCAKE_BOOTSTRAP_PORT="9999")
    (problem,) = check_document(rendered_pd["stage_config"], V026, environment)
    assert "mooncake_bootstrap_port 8998 != VLLM_MOONCAKE_BOOTSTRAP_PORT 9999" in problem


def test_pd_markers_in_the_deploy_schema_are_refused():
    document = copy.deepcopy(V030.data["bundled_deploy"])
    document["stages"][0]["is_prefill_only"] = True
    assert any("is_prefill_only cannot be expressed in the stages: schema" in p for p in check_document(document, V030))
