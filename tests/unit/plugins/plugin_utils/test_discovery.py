"""--limit: discovery kept on the controller, hosts outside the limit planned from it, inconsistent limits refused."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from testlib import load_ansible_inventory
from unitlib import REPO, inventory

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._problems import PlanError
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime import _discovery

DEBIAN12 = {"distribution": "Debian", "major": "12", "version": "12.8", "machine": "x86_64"}
DEBIAN13 = {"distribution": "Debian", "major": "13", "version": "13.2", "machine": "x86_64"}


def two_hosts(**first) -> dict:
    return inventory({"gpu-a": {"ansible_host": "10.0.0.11", **first},
                      "gpu-b": {"ansible_host": "10.0.0.12", "vllm_omni_gpus": [0, 1, 2]}},
                     {"vllm_omni_engine_backend": "simulator"})


def test_the_cache_is_written_atomically_with_discovery_only_and_read_back(tmp_path):
    facts = _facts(2)
    variables = {"vllm_omni_gpu_facts": facts, "vllm_omni_os_facts": DEBIAN12, "vllm_omni_api_key": "secret",
                 "ansible_host": "10.0.0.11"}
    assert _discovery.write(tmp_path, "gpu-a", variables) is True
    record = json.loads((tmp_path / "gpu-a.json").read_text())
    assert set(record) == {"schema", "host", "discovered", "vllm_omni_gpu_facts", "vllm_omni_os_facts"}
    assert "secret" not in (tmp_path / "gpu-a.json").read_text()
    assert oct((tmp_path / "gpu-a.json").stat().st_mode & 0o777) == "0o644"
    assert [p.name for p in tmp_path.iterdir()] == ["gpu-a.json"]  # no temporary file left
    assert _discovery.read(tmp_path, "gpu-a") == {"vllm_omni_gpu_facts": facts, "vllm_omni_os_facts": DEBIAN12}
    # The same discovery again: the file is not rewritten.
    assert _discovery.write(tmp_path, "gpu-a", variables) is False
    # An OS-only discovery (a router host) keeps the GPU entry.
    assert _discovery.write(tmp_path, "gpu-a", {"vllm_omni_os_facts": DEBIAN13}) is True
    assert _discovery.read(tmp_path, "gpu-a") == {"vllm_omni_gpu_facts": facts, "vllm_omni_os_facts": DEBIAN13}
    assert _discovery.write(tmp_path, "gpu-b", {"ansible_host": "x"}) is False  # nothing discovered: nothing kept


def test_a_cache_file_that_is_not_ours_counts_as_none(tmp_path):
    (tmp_path / "gpu-a.json").write_text("{not json")
    assert _discovery.read(tmp_path, "gpu-a") == {}
    (tmp_path / "gpu-a.json").write_text(json.dumps({"schema": 1, "host": "gpu-b", "vllm_omni_os_facts": DEBIAN12}))
    assert _discovery.read(tmp_path, "gpu-a") == {}
    assert _discovery.read(tmp_path / "missing", "gpu-a") == {}


def test_host_names_never_leave_the_cache_directory(tmp_path):
    assert _discovery.cache_file(tmp_path, "../../etc/passwd").parent == tmp_path
    assert not _discovery.cache_file(tmp_path, ".hidden").name.startswith(".")


def test_the_cache_lives_under_the_controller_cache_root():
    assert _discovery.cache_dir({"VLLM_OMNI_CACHE": "/srv/cache"}) == Path("/srv/cache/discovery")
    assert _discovery.cache_dir({"HOME": "/home/op"}) == Path("/home/op/.cache/vllm-omni-serve/discovery")


def test_a_host_outside_the_limit_is_planned_from_its_cached_discovery():
    inv = two_hosts()
    from_cache, problems = _discovery.fill_from_cache(
        inv, {"gpu-b"}, {"gpu-a": {"vllm_omni_gpu_facts": _facts(3), "vllm_omni_os_facts": DEBIAN13}})
    assert (from_cache, problems) == (["gpu-a"], [])
    plan = build_plan(inv)
    assert plan["host_platforms"]["gpu-a"] == "debian13"
    assert len(plan["hosts"]["gpu-a"]["pipelines"]) == 1


def test_inventory_gpus_are_enough_for_a_host_outside_the_limit_with_a_platform():
    inv = two_hosts(vllm_omni_gpus=[0, 1, 2], vllm_omni_host_platform="debian12")
    assert _discovery.fill_from_cache(inv, {"gpu-b"}, {}) == ([], [])
    build_plan(inv)


def test_a_host_outside_the_limit_that_nothing_is_known_of_is_one_problem_with_the_fix():
    _unused, problems = _discovery.fill_from_cache(two_hosts(), {"gpu-b"}, {})
    assert [p.line() for p in problems] == [
        "host gpu-a: vllm_omni_gpus is not set and no discovery of this host is cached on the controller (it is "
        "outside --limit, so it was not discovered in this run) -> run once without --limit, or add gpu-a to --limit"]
    _unused, problems = _discovery.fill_from_cache(two_hosts(vllm_omni_gpus=[0, 1, 2]), {"gpu-b"}, {})
    assert [(p.where, p.variable) for p in problems] == [("host gpu-a", "vllm_omni_host_platform")]
    assert "add gpu-a to --limit" in problems[0].fix


def test_hosts_inside_the_limit_are_never_taken_from_the_cache():
    inv = two_hosts()
    from_cache, problems = _discovery.fill_from_cache(
        inv, {"gpu-a", "gpu-b"}, {"gpu-a": {"vllm_omni_gpu_facts": _facts(3)}})
    assert (from_cache, problems) == ([], [])
    assert "vllm_omni_gpu_facts" not in inv["hostvars"]["gpu-a"]


def test_what_discovery_found_in_this_run_beats_the_cache():
    inv = two_hosts(vllm_omni_os_facts=DEBIAN12, vllm_omni_gpus=[0, 1, 2])
    _discovery.fill_from_cache(inv, {"gpu-b"}, {"gpu-a": {"vllm_omni_os_facts": DEBIAN13}})
    assert inv["hostvars"]["gpu-a"]["vllm_omni_os_facts"] == DEBIAN12


def _facts(count: int) -> dict:
    return {"gpus": [{"index": i, "name": "NVIDIA H200", "memory_total_mib": 143771, "memory_used_mib": 0,
                      "busy": False, "busy_reasons": [], "uuid": f"GPU-{i}", "pci_bus_id": f"0000:0{i}:00.0",
                      "numa_node": 0} for i in range(count)],
            "links": {}, "nvlink_islands": [], "driver_version": "580.65.06", "cuda_version": "13.0", "cuda_major": 13}


@pytest.fixture(scope="module")
def span_plan():
    return build_plan(load_ansible_inventory(REPO / "tests" / "golden" / "pd-span-2hosts" / "inventory"))


def test_a_limit_that_splits_a_spanning_pipeline_is_refused_naming_the_hosts_to_add(span_plan):
    spanning = {name: p["hosts"] for name, p in span_plan["distributed_pipelines"].items() if len(set(p["hosts"])) > 1}
    assert spanning, "the golden case has a pipeline across hosts"
    name, hosts = sorted(spanning.items())[0]
    inside, outside = hosts[0], sorted(set(hosts) - {hosts[0]})
    problems = _discovery.limit_problems(span_plan, {inside})
    assert len(problems) >= 1
    assert problems[0].variable == "--limit" and problems[0].fix == f"add {','.join(outside)} to --limit"
    assert name in problems[0].problem
    assert _discovery.limit_problems(span_plan, set(span_plan["hosts"])) == []


def test_router_outside_the_limit_must_already_route_to_the_limited_hosts_pipelines():
    plan = build_plan(two_hosts(vllm_omni_gpus=[0, 1, 2]))
    router = plan["router"]["hosts"][0]
    assert router == "gpu-a"
    needs = _discovery.router_needs(plan, {"gpu-b"})
    assert needs == {"gpu-a": {"admin_url": plan["router"]["per_host"]["gpu-a"]["admin_url"],
                               "urls": [e["url"] for e in plan["hosts"]["gpu-b"]["pipelines"]]}}
    assert _discovery.router_needs(plan, {"gpu-a"}) == {}  # the router is in the run: it reconciles itself
    assert _discovery.router_needs(plan, {"gpu-a", "gpu-b"}) == {}


def test_the_plan_is_the_same_whatever_the_limit():
    full = build_plan(two_hosts(vllm_omni_gpus=[0, 1, 2], vllm_omni_os_facts=DEBIAN12))
    limited = two_hosts(vllm_omni_gpus=[0, 1, 2])
    _discovery.fill_from_cache(limited, {"gpu-b"}, {"gpu-a": {"vllm_omni_os_facts": DEBIAN12}})
    assert build_plan(limited) == full


def test_planning_errors_keep_the_problem_model():
    with pytest.raises(PlanError) as caught:
        raise PlanError(_discovery.fill_from_cache(two_hosts(), {"gpu-b"}, {})[1])
    assert str(caught.value).splitlines()[0] == "vllm_omni.serve: the inventory has 1 problem; nothing was changed."
    assert os.linesep not in caught.value.problems[0].line()
