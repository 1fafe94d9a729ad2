"""Artifacts: the distribution tree, the plan's section, the daemons' configurations, the model source checks."""

from __future__ import annotations

import math

import pytest
from unitlib import inventory

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan import _artifacts
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._problems import PlanError
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.texts import _rsyncd
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.texts._render import render_tree

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def fleet(hosts: int, **settings) -> dict:
    inv = inventory({f"gpu-{i:04d}": {"ansible_host": f"10.0.{i // 250}.{i % 250 + 1}", "vllm_omni_gpus": [0, 1, 2]}
                     for i in range(hosts)}, settings, router=["edge"])
    inv["hostvars"]["edge"] = {"ansible_host": "10.9.0.1"}
    return build_plan(inv)


@pytest.mark.parametrize("count", [1, 2, 3, 4, 5, 8, 9, 100, 1000])
def test_every_holder_serves_at_most_one_host_a_round_and_the_controller_one(count):
    hosts = [f"h{i:04d}" for i in range(count)]
    tree = _artifacts.distribution_tree(hosts)
    assert set(tree) == set(hosts)
    assert [h for h, n in tree.items() if n["parent"] == _artifacts.CONTROLLER] == ["h0000"]
    holders_before = {}
    for host in hosts:  # a parent got it in an earlier round
        node = tree[host]
        if node["parent"] != _artifacts.CONTROLLER:
            assert tree[node["parent"]]["round"] < node["round"]
        holders_before.setdefault(node["round"], []).append(node["parent"])
    for parents in holders_before.values():
        assert len(parents) == len(set(parents)), "a holder serves two hosts in one round"
    # Doubling: after round r, 2**r hosts hold it, so every host has it after ceil(log2(n)) + 1 rounds.
    assert max(n["round"] for n in tree.values()) + 1 == (math.ceil(math.log2(count)) + 1 if count > 1 else 1)


def test_the_plan_sends_each_wheel_set_once_out_of_the_controller_and_names_where_it_lands():
    plan = fleet(9)
    section = plan["artifacts"]
    kinds = {item["id"]: item for item in section["items"]}
    engine = next(i for i in kinds.values() if i["lock"]["name"] == plan["backend"]["lock"])
    router = next(i for i in kinds.values() if i["lock"]["name"] == plan["router"]["lock"])
    assert len(engine["hosts"]) == 9 and router["hosts"] == ["edge"]
    assert {k: len(v) for k, v in section["controller_children"].items()} == {engine["id"]: 1, router["id"]: 1}
    assert section["rounds"] == 5  # 9 hosts: 1, 2, 4, 8, then the 9th
    assert section["wheel_sets"]["debian12"][plan["backend"]["lock"]] == engine["host_dir"]
    # The port is open to peers on every holder (so the tree can move without touching other firewalls).
    for host in section["per_host"]:
        assert {"service": "artifacts", "purpose": "rsync", "first": 8873, "last": 8873} in plan["listen_ports"][host]


def test_the_plan_has_the_controller_caches_layout_and_every_manifests_place():
    plan = fleet(2, vllm_omni_model_source="hub", vllm_omni_model_revision=COMMIT)
    section = plan["artifacts"]
    # Relative to the controller's cache (each controller joins its own): the role spells none of it.
    assert section["controller"] == {"directories": ["wheelhouse", "models", "artifacts"], "daemon_dir": "artifacts",
                                     "daemon_config": "artifacts/rsyncd.conf", "daemon_pid": "artifacts/rsyncd.pid",
                                     "daemon_log": "artifacts/rsyncd.log", "reports_dir": "reports"}
    for item in section["items"]:
        top = "wheelhouse" if item["kind"] == "wheels" else "models"
        assert item["controller_dir"] == f"{top}/{item['id']}"
        assert item["controller_manifest"] == f"artifacts/{item['id']}.json"
        assert item["manifest"] == f"{section['manifest_dir']}/{item['id']}.json"
    assert {item["kind"] for item in section["items"]} == {"wheels", "model"}
    # A host's slice names nothing of the controller's.
    host = _artifacts.host_slice(section, "gpu-0000")
    assert "controller" not in host and host["items"]
    assert not any("controller_dir" in item or "controller_manifest" in item for item in host["items"])


def test_serving_hosts_get_a_daemon_whose_modules_open_to_their_children_only():
    plan = fleet(4)
    tree = render_tree(plan)
    first = tree["gpu-0000/artifacts/rsyncd.conf"]
    # gpu-0000 serves gpu-0001 (round 1) and gpu-0002 (round 2); gpu-0001 serves gpu-0003.
    assert "hosts allow = 10.0.0.2 10.0.0.3\n" in first and "address = 10.0.0.1\n" in first
    assert "read only = yes" in first and "use chroot = yes" in first and "uid = nobody" in first
    assert "hosts allow = 10.0.0.4\n" in tree["gpu-0001/artifacts/rsyncd.conf"]
    assert "gpu-0003/artifacts/rsyncd.conf" not in tree and "gpu-0002/artifacts/rsyncd.conf" not in tree
    sources = {i["id"]: f"/cache/{i['id']}" for i in plan["artifacts"]["items"]}
    controller = _rsyncd.controller_rsyncd_text(plan, sources, "/cache/rsyncd.log")
    assert "use chroot = no" in controller and "transfer logging = yes" in controller
    assert "hosts allow = 10.0.0.1 10.0.0.2 10.0.0.3 10.0.0.4 10.9.0.1\n" in controller


def test_a_staged_model_lands_in_the_hf_cache_layout_and_the_engines_run_offline_on_it():
    plan = fleet(2, vllm_omni_model_source="hub", vllm_omni_model_revision=COMMIT)
    model = next(i for i in plan["artifacts"]["items"] if i["kind"] == "model")
    repo = "/var/lib/vllm-omni/hf/hub/models--Qwen--Qwen3-Omni-30B-A3B-Instruct"
    assert model["host_dir"] == f"{repo}/snapshots/{COMMIT}" and model["ref_file"] == f"{repo}/refs/main"
    assert model["hosts"] == ["gpu-0000", "gpu-0001"]
    env = plan["hosts"]["gpu-0000"]["pipelines"][0]["environment"]
    assert env["HF_HUB_OFFLINE"] == "1" and env["VLLM_OMNI_MODEL_SNAPSHOT"] == COMMIT
    footprint = plan["footprint"]["gpu-0000"]
    assert model["host_dir"] in footprint["kept"]  # weights stay on uninstall, like HF_HOME
    assert model["ref_file"] in [f["path"] for f in footprint["files"]]


@pytest.mark.parametrize(("settings", "variable", "words"), [
    ({"vllm_omni_model_source": "hub"}, "vllm_omni_model_revision", "pinned to one commit"),
    ({"vllm_omni_model_source": "hub", "vllm_omni_model_revision": "main"}, "vllm_omni_model_revision", "40-character"),
    ({"vllm_omni_model_source": "directory", "vllm_omni_model_revision": "v1"}, "vllm_omni_model_directory", "unset"),
    ({"vllm_omni_model_source": "directory", "vllm_omni_model_directory": "/srv/m"}, "vllm_omni_model_revision",
     "needs a name"),
    ({"vllm_omni_model_source": "hub", "vllm_omni_model_revision": COMMIT, "vllm_omni_model": "/srv/models/q"},
     "vllm_omni_model", "repository id"),
    ({"vllm_omni_model_source": "s3"}, "vllm_omni_model_source", "s3"),
])
def test_a_model_source_that_cannot_work_is_refused_with_the_variable_and_a_fix(settings, variable, words):
    with pytest.raises(PlanError) as raised:
        fleet(1, **settings)
    lines = [p for p in raised.value.problems if p.variable == variable]
    assert lines, [p.line() for p in raised.value.problems]
    assert words in lines[0].line() and lines[0].fix
