"""vllm_omni_extra_env on its own: what it may not set (secrets, the planner's own variables, the model cache)
and where the search paths it may set may not point; one problem each, naming what to do instead."""

from __future__ import annotations

import pytest

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.host._names import ENGINE_HOME
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._extra_env import check_extra_env
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._problems import Problems

SETTINGS = {"vllm_omni_hf_home": "/var/lib/vllm-omni/hf", "vllm_omni_install_root": "/opt/vllm-omni"}


def problems_of(extra_env: dict) -> list[tuple[str, str, str]]:
    problems = Problems()
    check_extra_env({**SETTINGS, "vllm_omni_extra_env": extra_env}, problems)
    return [(p.variable, p.problem, p.fix) for p in problems.items]


def test_ordinary_tuning_variables_pass():
    assert problems_of({"NCCL_DEBUG": "INFO", "VLLM_LOGGING_LEVEL": "DEBUG",
                        "LD_LIBRARY_PATH": "/opt/vllm-omni/lib:/usr/local/cuda/lib64"}) == []


def test_a_secret_goes_to_the_vaulted_settings_not_extra_env():
    (problem,) = problems_of({"HF_TOKEN": "hf_x", "NCCL_DEBUG": "INFO"})
    assert problem[0] == "vllm_omni_extra_env" and "sets HF_TOKEN" in problem[1]
    assert "Ansible Vault" in problem[2]


def test_the_planners_own_variables_are_refused_with_a_pointer():
    (problem,) = problems_of({"CUDA_VISIBLE_DEVICES": "0", "VLLM_PORT": "1"})
    assert "CUDA_VISIBLE_DEVICES, VLLM_PORT, which the planner computes per pipeline" in problem[1]
    assert problem[2] == "remove them; set vllm_omni_gpus / vllm_omni_stage_zmq_port_range instead"


@pytest.mark.parametrize(("name", "setting"), [("UCX_TCP_PORT_RANGE", "vllm_omni_nixl_ucx_port_range"),
                                               ("VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT", "vllm_omni_mooncake_abort_timeout"),
                                               ("HF_HOME", "vllm_omni_hf_home")])
def test_a_variable_a_setting_owns_is_refused_naming_that_setting(name, setting):
    (problem,) = problems_of({name: "1"})
    assert problem[2] == f"remove it; set {setting} instead"


def test_a_variable_the_collection_fixes_says_so_and_names_no_setting():
    (problem,) = problems_of({"DO_NOT_TRACK": "0"})
    assert "(DO_NOT_TRACK: always, to the same value)" in problem[1] and problem[2] == "remove it"


def test_every_owned_variable_is_one_the_planner_sets_and_names_a_real_setting():
    from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._pipelines import OWNED_ENV
    from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._settings import SETTINGS

    names = {setting.name for setting in SETTINGS}
    assert {setting for setting in OWNED_ENV.values() if setting} <= names


def test_moving_the_model_cache_is_refused_in_favour_of_hf_home():
    (problem,) = problems_of({"HF_HUB_CACHE": "/data/hub"})
    assert "away from vllm_omni_hf_home (/var/lib/vllm-omni/hf)" in problem[1]
    assert problem[2] == "remove it; set vllm_omni_hf_home to move the model cache"


@pytest.mark.parametrize(("value", "place"), [
    ("/tmp/libs", "/tmp, which anyone may write"),
    ("/opt/vllm-omni/lib:/dev/shm/x", "/dev/shm, which anyone may write"),
    ("libs", 'the relative path "libs"'),
    (f"{ENGINE_HOME}/plugins", f"{ENGINE_HOME}, the engine user's home"),
    # The model cache lies inside the engine user's home: the home is named, either is the engine user's.
    ("/var/lib/vllm-omni/hf/modules", f"{ENGINE_HOME}, the engine user's home"),
])
def test_a_search_path_into_a_place_others_write_is_refused(value, place):
    (problem,) = problems_of({"PYTHONPATH": value})
    assert problem[1].startswith(f"PYTHONPATH points into {place}"), problem
    assert "under /opt/vllm-omni" in problem[2]


def test_a_secret_looking_name_is_refused_but_a_key_inside_a_word_is_not():
    (problem,) = problems_of({"MY_SERVICE_TOKEN": "x"})
    assert "MY_SERVICE_TOKEN looks like a secret" in problem[1]
    assert problems_of({"KEYBOARD_LAYOUT": "us", "MONKEY_PATCH": "1"}) == []


def test_a_search_path_into_a_model_cache_outside_the_home_names_the_cache():
    problems = Problems()
    check_extra_env({**SETTINGS, "vllm_omni_hf_home": "/data/hf", "vllm_omni_extra_env": {"LD_PRELOAD": "/data/hf/x.so"}},
                    problems)
    (problem,) = problems.items
    assert problem.problem.startswith("LD_PRELOAD points into /data/hf, the model cache (vllm_omni_hf_home)")
