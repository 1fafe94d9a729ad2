"""One engine host's own values (plan/_host_values.py): a per-host setting, the host's address and its GPUs."""

from __future__ import annotations

import copy

import pytest
from unitlib import deployment_of, gpu_facts, inventory, problems_of

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan import _host_values
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._deployment import Deployment
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._host_values import HostGpus
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._problems import Problems

HOST = "gpu-a"
BUSY_FIX = "stop what runs there, remove them from vllm_omni_gpus, or set vllm_omni_allow_busy_gpus: true"


def deployment(**values) -> Deployment:
    return deployment_of(**values)


def lines(problems: Problems) -> list[str]:
    return [p.line() for p in problems.items]


def facts(profile: str = "h200x2", busy: dict[int, list[str]] | None = None, **top) -> dict:
    """Discovery's facts of a recorded host, with ``busy`` GPUs (index -> reasons) and top-level keys replaced."""
    found = copy.deepcopy(gpu_facts(profile))
    for gpu in found["gpus"]:
        if gpu["index"] in (busy or {}):
            gpu["busy"], gpu["busy_reasons"] = True, busy[gpu["index"]]
    found.update(top)
    return found


def gpus_of(variables: dict, found: dict | None, context: Deployment | None = None) -> tuple[HostGpus | None, list[str]]:
    problems = Problems()
    result = _host_values.host_gpus(HOST, variables, found, context or deployment(), problems)
    return result, lines(problems)


# --- host_value -----------------------------------------------------------------------------------------------------


def test_an_unset_host_setting_is_its_default():
    problems = Problems()
    assert _host_values.host_value(HOST, {}, "vllm_omni_pipelines_per_host", problems) == ("auto", "default")
    assert _host_values.host_value(HOST, {}, "vllm_omni_span_group", problems) == ("all", "default")
    assert not problems.items


def test_a_set_host_setting_is_its_validated_value_from_the_inventory():
    problems = Problems()
    assert _host_values.host_value(HOST, {"vllm_omni_gpus": [3, 1]}, "vllm_omni_gpus", problems) == ([1, 3], "inventory")
    assert not problems.items


def test_an_invalid_host_setting_is_none_and_names_the_host_variable_and_fix():
    problems = Problems()
    value = _host_values.host_value(HOST, {"vllm_omni_gpus": "0,1"}, "vllm_omni_gpus", problems)
    assert value == (None, "invalid")
    assert lines(problems) == ['host gpu-a: vllm_omni_gpus is a string ("0,1"), not a list of GPU indices '
                               "-> write a YAML list of numbers, e.g. vllm_omni_gpus: [0, 1, 2, 3]"]


# --- host_ip --------------------------------------------------------------------------------------------------------


def test_vllm_omni_ip_wins_over_an_ansible_host_name():
    problems = Problems()
    assert _host_values.host_ip(HOST, {"vllm_omni_ip": "10.0.0.21", "ansible_host": "gpu-a.lab"}, problems) == "10.0.0.21"
    assert not problems.items


def test_an_invalid_vllm_omni_ip_is_refused_even_when_ansible_host_is_an_address():
    problems = Problems()
    assert _host_values.host_ip(HOST, {"vllm_omni_ip": "10.0.0.300", "ansible_host": "10.0.0.11"}, problems) is None
    assert lines(problems) == ['host gpu-a: vllm_omni_ip "10.0.0.300" is not an IP address '
                               "-> set vllm_omni_ip to the IPv4 address the other hosts reach this host on"]


def test_an_ansible_host_address_is_the_host_s_address():
    problems = Problems()
    assert _host_values.host_ip(HOST, {"ansible_host": "10.0.0.12"}, problems) == "10.0.0.12"
    assert not problems.items


def test_without_ansible_host_an_inventory_name_that_is_an_address_is_used():
    problems = Problems()
    assert _host_values.host_ip("10.0.0.5", {}, problems) == "10.0.0.5"
    assert not problems.items


@pytest.mark.parametrize(("variables", "shown"), [({"ansible_host": "gpu-a.lab"}, '"gpu-a.lab"'), ({}, '"gpu-a"')],
                         ids=["ansible_host-a-name", "no-ansible_host"])
def test_a_host_known_only_by_name_must_set_vllm_omni_ip(variables, shown):
    problems = Problems()
    assert _host_values.host_ip(HOST, variables, problems) is None
    assert lines(problems) == [f"host gpu-a: vllm_omni_ip is not set and ansible_host {shown} is a name, not an address; "
                               "peers need an IP -> set vllm_omni_ip to the IPv4 address the other hosts reach this host on"]


@pytest.mark.parametrize(("address", "why"), [
    ("fd00::11", '"fd00::11" is an IPv6 address'),
    ("0.0.0.0", '"0.0.0.0" cannot be a peer address (unspecified, multicast or broadcast)'),
    ("239.1.1.1", '"239.1.1.1" cannot be a peer address'),
])
def test_an_ansible_host_address_peers_cannot_use_is_refused_with_the_reason(address, why):
    problems = Problems()
    assert _host_values.host_ip(HOST, {"ansible_host": address}, problems) is None
    [line] = lines(problems)
    assert line.startswith(f'host gpu-a: vllm_omni_ip is not set, and ansible_host "{address}" cannot serve: {why}'), line
    assert line.endswith("-> set vllm_omni_ip to this host's IPv4 address on the network the other hosts share")


# --- gpu_facts_shape_ok ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("profile", ["h200x2", "h200x8-nvswitch", "pcie-2numa-x8"])
def test_discovery_s_own_facts_have_the_shape(profile):
    assert _host_values.gpu_facts_shape_ok(gpu_facts(profile)) is True


def test_optional_fact_fields_may_be_missing_or_null():
    minimal = {"gpus": [{"index": 0}, {"index": 1, "numa_node": None, "busy_reasons": None}], "cuda_major": None}
    assert _host_values.gpu_facts_shape_ok(minimal) is True
    assert _host_values.gpu_facts_shape_ok({"gpus": [], "links": {0: {1: "NV4"}}}) is True  # int indices also do


def broken(change) -> dict:
    found = copy.deepcopy(gpu_facts("h200x2"))
    change(found)
    return found


@pytest.mark.parametrize("bad", [
    pytest.param([], id="not-a-mapping"),
    pytest.param({"gpus": "0,1"}, id="gpus-not-a-list"),
    pytest.param({}, id="no-gpus"),
    pytest.param({"gpus": ["GPU0"]}, id="gpu-not-a-mapping"),
    pytest.param({"gpus": [{"name": "H200"}]}, id="gpu-without-index"),
    pytest.param({"gpus": [{"index": "0"}]}, id="index-a-string"),
    pytest.param({"gpus": [{"index": True}]}, id="index-a-bool"),
    pytest.param({"gpus": [{"index": -1}]}, id="index-negative"),
    pytest.param({"gpus": [{"index": 0, "busy": "yes"}]}, id="busy-not-a-bool"),
    pytest.param({"gpus": [{"index": 0, "busy_reasons": "in use"}]}, id="busy-reasons-a-string"),
    pytest.param({"gpus": [{"index": 0, "numa_node": "0"}]}, id="numa-node-a-string"),
    pytest.param(broken(lambda f: f.update(links=[[0, 1]])), id="links-not-a-mapping"),
    pytest.param(broken(lambda f: f.update(links={"0": "NV18"})), id="links-row-not-a-mapping"),
    pytest.param(broken(lambda f: f.update(links={"0": {"1": 18}})), id="link-kind-not-a-string"),
    pytest.param(broken(lambda f: f.update(links={"GPU0": {"GPU1": "NV18"}})), id="link-index-not-digits"),
    pytest.param(broken(lambda f: f.update(links={"0": {"-1": "NV18"}})), id="link-index-negative"),
    pytest.param(broken(lambda f: f.update(nvlink_islands={"0": [0, 1]})), id="islands-not-a-list"),
    pytest.param(broken(lambda f: f.update(nvlink_islands=[[0, "1"]])), id="island-holds-a-string"),
    pytest.param(broken(lambda f: f.update(nvlink_islands=[0, 1])), id="island-not-a-list"),
    pytest.param(broken(lambda f: f.update(cuda_major="13")), id="cuda-major-a-string"),
    pytest.param(broken(lambda f: f.update(cuda_major=True)), id="cuda-major-a-bool"),
    pytest.param(broken(lambda f: f["gpus"][0].update(busy=True, busy_reasons=[1])), id="busy-reason-not-text"),
])
def test_facts_the_planner_could_not_read_are_refused(bad):
    assert _host_values.gpu_facts_shape_ok(bad) is False


# --- host_gpus ------------------------------------------------------------------------------------------------------


def test_facts_of_the_wrong_shape_are_refused_as_an_inventory_mistake():
    result, found = gpus_of({"vllm_omni_gpus": [0, 1]}, {"gpus": "all"})
    assert result is None
    assert found == ["host gpu-a: vllm_omni_gpu_facts is not the output of vllm_omni.serve.nvidia_gpu_facts (it is "
                     "computed by discovery; an inventory must not set it) -> remove the variable from the inventory; "
                     "deploy.yml discovers GPUs itself, or set vllm_omni_gpus"]


def test_a_host_without_declared_gpus_or_discovery_is_refused():
    result, found = gpus_of({}, None)
    assert result is None
    assert found == ["host gpu-a: vllm_omni_gpus is not set and no GPU discovery ran for this host -> set "
                     "vllm_omni_gpus to the physical GPU indices, e.g. [0, 1, 2, 3, 4, 5, 6, 7], or run deploy.yml, "
                     "which discovers them"]


@pytest.mark.parametrize("discovered", [None, "facts"], ids=["declared-only", "with-discovery"])
def test_an_invalid_gpu_list_is_its_one_problem(discovered):
    result, found = gpus_of({"vllm_omni_gpus": [0, 0]}, facts() if discovered else None)
    assert result is None
    assert found == ["host gpu-a: vllm_omni_gpus lists GPU 0 twice -> list every GPU once"]


def test_declared_gpus_without_discovery_are_taken_as_they_are_sorted():
    result, found = gpus_of({"vllm_omni_gpus": [5, 2, 7]}, None)
    assert result == HostGpus([2, 5, 7], "vllm_omni_gpus", {}) and found == []


def test_declared_gpus_that_discovery_shows_free_are_checked_and_taken():
    result, found = gpus_of({"vllm_omni_gpus": [1]}, facts())
    assert result == HostGpus([1], "vllm_omni_gpus (checked against discovery)", {}) and found == []


def test_without_declared_gpus_every_free_discovered_gpu_is_used():
    result, found = gpus_of({}, facts("h200x8-nvswitch"))
    assert result == HostGpus(list(range(8)), "discovered", {}) and found == []


def test_discovery_skips_busy_gpus_and_says_why():
    busy = {2: ["memory in use: 4096 MiB", "compute process 4242 (python)"], 5: []}
    result, found = gpus_of({}, facts("h200x8-nvswitch", busy=busy))
    assert found == []
    assert result == HostGpus([0, 1, 3, 4, 6, 7], "discovered",
                              {2: "memory in use: 4096 MiB; compute process 4242 (python)", 5: "busy"})


def test_allow_busy_gpus_uses_every_discovered_gpu_and_skips_none():
    context = deployment(vllm_omni_allow_busy_gpus=True)
    result, found = gpus_of({}, facts(busy={0: ["memory in use"]}), context)
    assert result == HostGpus([0, 1], "discovered", {}) and found == []


def test_a_host_whose_discovered_gpus_are_all_busy_is_refused_with_each_reason():
    result, found = gpus_of({}, facts(busy={0: ["memory in use: 1 MiB"], 1: ["compute process 7"]}))
    assert result is None
    assert found == ['host gpu-a: GPUs discovery found 2 GPU(s) and all are busy ({"0": "memory in use: 1 MiB", '
                     '"1": "compute process 7"}) -> free them, or set vllm_omni_allow_busy_gpus: true']


@pytest.mark.parametrize(("declared", "named"), [([1, 7], "GPU [7]"), ([0, 5, 7], "GPUs [5, 7]")])
def test_declared_gpus_the_host_does_not_have_are_named(declared, named):
    result, found = gpus_of({"vllm_omni_gpus": declared}, facts())
    assert result is None
    assert found == [f"host gpu-a: vllm_omni_gpus lists {named} that nvidia-smi does not show (it lists [0, 1]) "
                     "-> list only GPUs the host has"]


def test_declared_busy_gpus_are_refused_with_each_gpu_s_reasons():
    result, found = gpus_of({"vllm_omni_gpus": [0, 1]}, facts(busy={1: ["memory in use: 900 MiB", "pid 12"]}))
    assert result is None
    assert found == [f"host gpu-a: vllm_omni_gpus lists busy GPUs (GPU 1: memory in use: 900 MiB; pid 12) -> {BUSY_FIX}"]


def test_declared_busy_gpus_are_taken_with_allow_busy_gpus():
    context = deployment(vllm_omni_allow_busy_gpus=True)
    result, found = gpus_of({"vllm_omni_gpus": [0, 1]}, facts(busy={1: []}), context)
    assert result == HostGpus([0, 1], "vllm_omni_gpus (checked against discovery)", {}) and found == []


def test_a_driver_older_than_the_wheels_cuda_is_a_problem_and_the_gpus_are_still_checked():
    result, found = gpus_of({}, facts(cuda_major=12, cuda_version="12.8"))
    assert found == ["host gpu-a: NVIDIA driver supports CUDA 12.8, but vLLM-Omni 0.26.0's wheels need CUDA 13 -> "
                     "upgrade the driver to one whose nvidia-smi shows CUDA Version 13.x or newer"]
    assert result == HostGpus([0, 1], "discovered", {})  # every problem of the host is reported in one run


def test_a_busy_reason_that_is_not_text_is_one_problem_not_a_traceback():
    found = facts()
    found["gpus"][0].update(busy=True, busy_reasons=[1])
    result, problems = gpus_of({}, found)
    assert result is None and len(problems) == 1
    assert problems[0].startswith("host gpu-a: vllm_omni_gpu_facts is not the output of vllm_omni.serve.nvidia_gpu_facts")


def test_a_driver_without_its_cuda_version_text_is_named_by_its_major():
    found = gpus_of({}, facts(cuda_major=12, cuda_version=None))[1]
    assert found and found[0].startswith("host gpu-a: NVIDIA driver supports CUDA 12, but"), found


def test_a_host_whose_discovery_found_no_gpu_is_told_so_not_that_they_are_busy():
    for allow_busy in (False, True):
        result, found = gpus_of({}, facts(gpus=[]), deployment(vllm_omni_allow_busy_gpus=allow_busy))
        assert result is None
        assert found == ["host gpu-a: GPUs discovery found no GPU on this host (nvidia-smi lists none) -> check the "
                         "driver (nvidia-smi -L), or take the host out of group vllm_omni"]


def test_a_driver_as_new_as_the_wheels_cuda_or_of_unknown_cuda_is_no_problem():
    assert gpus_of({}, facts(cuda_major=13))[1] == []
    assert gpus_of({}, facts(cuda_major=None, cuda_version=None))[1] == []


def test_the_simulator_and_a_refused_engine_version_skip_the_driver_check():
    simulator = deployment(vllm_omni_engine_backend="simulator")
    assert gpus_of({}, facts(cuda_major=11), simulator) == (HostGpus([0, 1], "discovered", {}), [])
    no_engine = Deployment(deployment().settings, {}, None, {}, [])
    assert gpus_of({}, facts(cuda_major=11), no_engine) == (HostGpus([0, 1], "discovered", {}), [])


# --- through the planner --------------------------------------------------------------------------------------------


def test_the_planner_reports_a_named_host_and_a_busy_gpu_of_another_in_one_run():
    inv = inventory({"gpu-a": {"ansible_host": "gpu-a.lab", "vllm_omni_gpus": [0, 1, 2]},
                     "gpu-b": {"ansible_host": "10.0.0.12", "vllm_omni_gpus": [0, 1, 2],
                               "vllm_omni_gpu_facts": facts("h200x8-nvswitch", busy={2: ["memory in use: 7 MiB"]})}})
    found = problems_of(inv)
    assert any(line.startswith('host gpu-a: vllm_omni_ip is not set and ansible_host "gpu-a.lab" is a name') for line in found)
    assert f"host gpu-b: vllm_omni_gpus lists busy GPUs (GPU 2: memory in use: 7 MiB) -> {BUSY_FIX}" in found
