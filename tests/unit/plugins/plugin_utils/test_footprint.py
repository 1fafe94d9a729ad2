"""Each host's footprint: what a deploy creates there, rendered once, pruned and removed from the record."""

from __future__ import annotations

import copy

import pytest
from unitlib import inventory, one_host

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.host import _footprint
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.texts import _render


def everything_plan():
    """Every component: two engine hosts, a router, master and Prometheus host, the firewall on."""
    return build_plan(inventory(
        {"gpu-a": {"ansible_host": "10.0.0.11", "vllm_omni_gpus": list(range(6))},
         "gpu-b": {"ansible_host": "10.0.0.12", "vllm_omni_gpus": [0, 1, 2]}},
        {"vllm_omni_mooncake_master_enabled": True, "vllm_omni_monitoring_enabled": True},
        router=["edge-1"]) | {"master_hosts": ["edge-1"], "monitoring_hosts": ["edge-1"]})


@pytest.fixture(scope="module")
def plan():
    return everything_plan()


def test_every_host_of_the_plan_has_a_footprint(plan):
    assert sorted(plan["footprint"]) == ["edge-1", "gpu-a", "gpu-b"]
    edge = plan["footprint"]["edge-1"]
    assert {u["name"] for u in edge["units"]} == {
        "vllm-omni-router.service", "mooncake-master.service", "vllm-omni-firewall.service"}
    assert {a["user"] for a in edge["accounts"]} == {"vllm-omni-router", "mooncake"}
    gpu_a = plan["footprint"]["gpu-a"]
    engine_units = [u["name"] for u in gpu_a["units"] if u["component"] == "engine"]
    # The self-heal agent first: stop and uninstall stop units in this order. The GPU exporter last.
    assert engine_units == ["vllm-omni-heal.service", "vllm-omni@omni0.service", "vllm-omni@omni1.service",
                            "vllm-omni-gpu-metrics.service"]
    assert plan["paths"]["hf_home"] in [d["path"] for d in gpu_a["directories"] if d["remove"] == "never"]


def test_the_render_holds_every_file_a_deploy_installs(plan):
    tree = _render.render_tree(plan)
    for host, footprint in plan["footprint"].items():
        paths = [entry["path"] for entry in footprint["files"]]
        assert len(paths) == len(set(paths)), f"{host}: two files share a path"
        for entry in footprint["files"]:
            if entry["render"] is None:
                # Secrets and TLS material: made on the host or the controller, never in a render.
                frontdoor = plan["router"]["frontdoor"]
                # Made on the controller: TLS material, the key map, each artifact's manifest (hashes of
                # the controller's copy) and the staged model's ref (written with the snapshot).
                made_there = {frontdoor["api_keys"], frontdoor["certificate"], frontdoor["certificate_key"],
                              frontdoor["ca"]}
                made_there |= {f"{plan['artifacts']['manifest_dir']}/{a['id']}.json" for a in plan["artifacts"]["items"]}
                made_there |= {a["ref_file"] for a in plan["artifacts"]["items"] if a["kind"] == "model"}
                # Made on the host: the front door's /metrics (the installed certificate's expiry; frontdoor role).
                made_there.add(frontdoor["metrics"])
                # The collection's own programs, copied as they are (roles/engine/files/): not from the plan.
                made_there |= {plan["self_heal"]["program"], plan["gpu_metrics"]["program"]}
                assert entry["path"] in made_there, entry
                continue
            assert entry["render"] in tree, f"{host}: {entry['path']} ({entry['render']}) is not in the render"


def test_one_hosts_files_are_the_renders_texts(plan):
    tree = _render.render_tree(plan)
    for host in plan["footprint"]:
        sliced = _render.host_slice(plan, host)
        files = _render.host_files(sliced, host)
        assert files == {key: tree[key] for key in files}
        assert set(files) == {e["render"] for e in plan["footprint"][host]["files"] if e["render"]}


def test_the_install_set_is_the_footprint_with_the_renders_texts(plan):
    tree = _render.render_tree(plan)
    for host, footprint in plan["footprint"].items():
        sliced = _render.host_slice(plan, host)
        components = sorted({entry["component"] for entry in footprint["files"] + footprint["directories"]})
        wanted = _render.install_set(sliced, host, components, {".nft": "nft -c -f %s"})
        assert [d["path"] for d in wanted["directories"]] == [d["path"] for d in footprint["directories"]]
        rendered = [e for e in footprint["files"] if e["render"]]
        assert [f["path"] for f in wanted["files"]] == [e["path"] for e in rendered]
        for item, entry in zip(wanted["files"], rendered, strict=True):
            assert item["content"] == tree[entry["render"]]
            assert (item["owner"], item["group"], item["mode"]) == (entry["owner"], entry["group"], entry["mode"])
            assert ("validate" in item) == entry["path"].endswith(".nft")
            assert set(item) <= {"path", "owner", "group", "mode", "content", "validate"}  # plan_files' options
    gpu_a = plan["footprint"]["gpu-a"]
    one = next(e["path"] for e in gpu_a["files"] if e["path"].endswith("stage_config.yaml"))
    picked = _render.install_set(_render.host_slice(plan, "gpu-a"), "gpu-a", ["engine"], paths=[one])
    assert [f["path"] for f in picked["files"]] == [one]
    assert picked["directories"] == [{k: d[k] for k in ("path", "owner", "group", "mode")}
                                     for d in gpu_a["directories"] if d["component"] == "engine"]


def test_a_host_slice_does_not_carry_other_hosts(plan):
    sliced = _render.host_slice(plan, "gpu-b")
    assert list(sliced["hosts"]) == ["gpu-b"] and list(sliced["footprint"]) == ["gpu-b"]
    assert list(sliced["firewall"]["per_host"]) == ["gpu-b"]
    monitoring = _render.host_slice(plan, "edge-1")
    assert sorted(monitoring["hosts"]) == ["gpu-a", "gpu-b"]  # Prometheus scrapes every pipeline


def test_units_are_rendered_from_the_plan(plan):
    tree = _render.render_tree(plan)
    template = tree["gpu-a/systemd/vllm-omni@.service"]
    assert "User=vllm-omni\nGroup=vllm-omni\nWorkingDirectory=/var/lib/vllm-omni" in template
    assert "TimeoutStartSec=2400" in template  # --init-timeout 1800 + 600
    router = tree["edge-1/systemd/vllm-omni-router.service"]
    assert "--log-level info" in router and "User=vllm-omni-router" in router
    assert tree["edge-1/router/argv-shape.json"].count("--worker-urls") == 1
    assert "10.0.0.11:8091" not in tree["edge-1/router/argv-shape.json"]  # workers change live, not by restart
    # The front door, router backend (loopback), metrics, Prometheus and master ports of edge-1, reserved
    # from the ephemeral range: an outgoing connection must never take one before its service binds it.
    sysctl = tree["edge-1/sysctl/60-vllm-omni-mooncake.conf"]
    assert "net.ipv4.ip_local_reserved_ports = 8000,8873,9003,9090,18000,29000,50051\n" in sysctl


def test_prune_takes_away_what_the_record_has_and_the_plan_does_not(plan):
    recorded = plan["footprint"]["gpu-a"]
    fewer = build_plan(inventory(
        {"gpu-a": {"ansible_host": "10.0.0.11", "vllm_omni_gpus": list(range(6)), "vllm_omni_pipelines_per_host": 1},
         "gpu-b": {"ansible_host": "10.0.0.12", "vllm_omni_gpus": [0, 1, 2]}},
        {"vllm_omni_mooncake_master_enabled": True, "vllm_omni_monitoring_enabled": True},
        router=["edge-1"]) | {"master_hosts": ["edge-1"], "monitoring_hosts": ["edge-1"]})
    gone = _footprint.stale(recorded, fewer["footprint"]["gpu-a"], ["engine"])
    assert [u["name"] for u in gone["units"]] == ["vllm-omni@omni1.service"]
    assert sorted(f["path"] for f in gone["files"]) == [
        "/etc/systemd/system/vllm-omni@omni1.service.d/10-pipeline.conf", "/etc/vllm-omni/omni1/engine.env",
        "/etc/vllm-omni/omni1/stage_config.yaml"]
    assert [d["path"] for d in gone["directories"]] == ["/etc/systemd/system/vllm-omni@omni1.service.d",
                                                        "/etc/vllm-omni/omni1"]
    assert gone["venvs"] == [] and gone["accounts"] == []


def test_compile_caches_are_kept_per_engine_version_and_a_version_change_prunes_the_old_one(plan):
    cache = "/var/lib/vllm-omni/compile-cache/vllm-omni-0.26.0"
    engine = plan["hosts"]["gpu-a"]["pipelines"][0]["environment"]
    assert (engine["VLLM_CACHE_ROOT"], engine["TORCHINDUCTOR_CACHE_DIR"], engine["TRITON_CACHE_DIR"]) == \
        (f"{cache}/vllm", f"{cache}/inductor", f"{cache}/triton")
    directories = {d["path"]: d for d in plan["footprint"]["gpu-a"]["directories"]}
    assert directories[cache]["owner"] == "vllm-omni" and directories[cache]["remove"] == "always"
    # Not in /tmp: the unit's PrivateTmp would empty it at every start.
    assert not any(value.startswith("/tmp") for value in engine.values())
    newer = build_plan(inventory(
        {"gpu-a": {"ansible_host": "10.0.0.11", "vllm_omni_gpus": list(range(6))},
         "gpu-b": {"ansible_host": "10.0.0.12", "vllm_omni_gpus": [0, 1, 2]}},
        {"vllm_omni_mooncake_master_enabled": True, "vllm_omni_monitoring_enabled": True, "vllm_omni_version": "0.30.0",
         "vllm_omni_layout": "aggregated"},
        router=["edge-1"]) | {"master_hosts": ["edge-1"], "monitoring_hosts": ["edge-1"]})
    gone = _footprint.stale(plan["footprint"]["gpu-a"], newer["footprint"]["gpu-a"], ["engine"])
    assert cache in [d["path"] for d in gone["directories"]]
    assert "/var/lib/vllm-omni/compile-cache" not in [d["path"] for d in gone["directories"]]
    # The simulator compiles nothing.
    simulated = build_plan(one_host(vllm_omni_engine_backend="simulator"))
    assert "VLLM_CACHE_ROOT" not in simulated["hosts"]["gpu-a"]["pipelines"][0]["environment"]


def test_a_host_leaving_the_plan_loses_everything_but_the_model_cache(plan):
    recorded = plan["footprint"]["gpu-b"]
    gone = _footprint.stale(recorded, None)
    assert {u["name"] for u in gone["units"]} == {u["name"] for u in recorded["units"]}
    assert plan["paths"]["hf_home"] not in [d["path"] for d in gone["directories"]]
    assert gone["accounts"] and gone["venvs"] == recorded["venvs"]
    # Deepest first: a directory is emptied before its parent goes.
    depths = [d["path"].count("/") for d in gone["directories"]]
    assert depths == sorted(depths, reverse=True)


def test_uninstall_is_the_union_of_record_and_plan_and_keeps_the_cache_unless_purged(plan):
    recorded = copy.deepcopy(plan["footprint"]["gpu-a"])
    recorded["units"].append({"name": "vllm-omni@omni7.service", "component": "engine", "pipeline": "omni7"})
    everything = _footprint.everything(recorded, plan["footprint"]["gpu-a"])
    assert "vllm-omni@omni7.service" in [u["name"] for u in everything["units"]]
    assert plan["paths"]["hf_home"] in everything["kept"] and "/var/lib/vllm-omni" in everything["kept"]
    assert plan["paths"]["hf_home"] not in [d["path"] for d in everything["directories"]]
    purged = _footprint.everything(recorded, plan["footprint"]["gpu-a"], purge=True)
    assert purged["kept"] == [] and plan["paths"]["hf_home"] in [d["path"] for d in purged["directories"]]


def test_a_single_host_has_engine_router_and_firewall_parts():
    plan = build_plan(one_host(gpus=range(3)))
    components = {u["component"] for u in plan["footprint"]["gpu-a"]["units"]}
    assert components == {"engine", "router", "firewall"}
