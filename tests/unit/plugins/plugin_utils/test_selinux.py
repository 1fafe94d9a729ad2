"""The plan's SELinux needs (plan/_selinux.py) against its own ports, and what the roles apply of them.

The lab cannot enforce SELinux (Debian machines): these tests hold the needs to the plan's ports and platforms, the
module (tests/unit/plugins/modules/test_selinux_policy.py) to semanage's and getsebool's behaviour."""

from __future__ import annotations

import pytest
import yaml
from testlib import REPO
from unitlib import inventory

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._summary import summary_lines
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.texts._render import render_tree

TEXT = {"vllm_omni_layout": "pd", "vllm_omni_audio_output": False, "vllm_omni_api_key": "k" * 32}


def fleet(platform: str, **settings) -> dict:
    """Three engine hosts of two GPUs (one text PD pipeline each) and a router host, all of ``platform``."""
    machines = {f"gpu-{i}": {"ansible_host": f"10.0.0.{11 + i}", "vllm_omni_gpus": [0, 1],
                             "vllm_omni_host_platform": platform} for i in range(3)}
    inv = inventory(machines, {**TEXT, **settings}, router=["edge-1"])
    inv["hostvars"]["edge-1"].update({"vllm_omni_host_platform": platform, **TEXT, **settings})
    return build_plan(inv)


def test_a_rhel9_fleet_gets_the_front_door_and_the_rsync_daemon_their_ports_and_booleans_from_the_plan():
    plan = fleet("rhel9")
    needs = plan["selinux"]["per_host"]
    assert plan["platforms"]["rhel9"]["selinux"] is True
    backend = next(p["first"] for p in plan["router"]["listen_ports"]["edge-1"] if p["purpose"] == "backend")
    door = needs["edge-1"]["frontdoor"]
    assert [(p["port"], p["proto"], p["type"]) for p in door["ports"]] == [(plan["router"]["port"], "tcp", "http_port_t")]
    assert [(b["name"], b["value"]) for b in door["booleans"]] == [("httpd_can_network_connect", True)]
    assert f"127.0.0.1:{backend}" in door["booleans"][0]["why"]
    serving = [host for host, entry in plan["artifacts"]["per_host"].items() if entry["serves"]]
    assert serving, "no host serves another in this fleet: the rsync need is not exercised"
    for host in serving:
        rsync = needs[host]["artifacts"]
        assert [(p["port"], p["type"]) for p in rsync["ports"]] == [(plan["artifacts"]["port"], "rsync_port_t")]
        assert [(b["name"], b["value"]) for b in rsync["booleans"]] == [("rsync_export_all_ro", True)]
    # Hosts that serve nothing and run no front door need nothing: the engines run unconfined.
    for host in set(plan["hosts"]) - set(serving):
        assert host not in needs or set(needs[host]) == {"frontdoor"}


@pytest.mark.parametrize("platform", ["debian12", "debian13", "ubuntu2204", "ubuntu2404"])
def test_platforms_without_selinux_get_no_needs(platform):
    assert fleet(platform)["selinux"] == {"per_host": {}}


def test_the_needs_follow_the_ports_the_inventory_sets():
    plan = fleet("rhel9", vllm_omni_router_port=8443, vllm_omni_router_backend_port=18443, vllm_omni_artifact_port=9873)
    needs = plan["selinux"]["per_host"]
    assert needs["edge-1"]["frontdoor"]["ports"][0]["port"] == 8443
    assert "127.0.0.1:18443" in needs["edge-1"]["frontdoor"]["booleans"][0]["why"]
    assert {need["artifacts"]["ports"][0]["port"] for need in needs.values() if "artifacts" in need} == {9873}


def test_without_the_front_door_nginx_needs_nothing():
    plan = fleet("rhel9", vllm_omni_frontdoor_enabled=False)
    assert "frontdoor" not in plan["selinux"]["per_host"].get("edge-1", {})


def test_semanage_is_installed_with_the_parts_that_need_it_on_rhel9_only():
    rhel, debian = fleet("rhel9"), fleet("debian12")
    assert "policycoreutils-python-utils" in rhel["os_packages"]["edge-1"]["packages"]["frontdoor"]
    for host, need in rhel["selinux"]["per_host"].items():
        if "artifacts" in need:
            assert "policycoreutils-python-utils" in rhel["os_packages"][host]["packages"]["artifacts"]
    assert not any("policycoreutils" in name for entry in debian["os_packages"].values()
                   for names in entry["packages"].values() for name in names)


def test_the_artifact_daemon_runs_as_nobody_with_the_platforms_own_group():
    for platform, group in (("rhel9", "nobody"), ("debian12", "nogroup")):
        plan = fleet(platform)
        host = next(h for h, entry in plan["artifacts"]["per_host"].items() if entry["serves"])
        text = render_tree(plan)[f"{host}/artifacts/rsyncd.conf"]
        assert "uid = nobody\n" in text and f"gid = {group}\n" in text, (platform, text)


def test_the_roles_apply_the_component_the_planner_names_and_nothing_else():
    for role, task_file, component in (("frontdoor", "main.yml", "frontdoor"), ("artifacts", "daemon.yml", "artifacts")):
        tasks = yaml.safe_load((REPO / "roles" / role / "tasks" / task_file).read_text())
        applying = [t for t in tasks if "vllm_omni.serve.selinux_policy" in t]
        assert len(applying) == 1, role
        task = applying[0]
        own = f"vllm_omni_plan.selinux.per_host[inventory_hostname].{component}"
        wanted = {"ports": f"{{{{ {own}.ports }}}}", "booleans": f"{{{{ {own}.booleans }}}}"}
        assert task["vllm_omni.serve.selinux_policy"] == wanted
        assert task["when"] == f"'{component}' in vllm_omni_plan.selinux.per_host.get(inventory_hostname, {{}})"


def test_the_summary_says_what_deploy_will_set_in_the_policy_and_nothing_without_selinux():
    plan = fleet("rhel9")
    lines = [line for line in summary_lines(plan) if line.startswith("selinux")]
    assert "selinux (where enabled, set by deploy): edge-1: frontdoor: port tcp/8000 http_port_t, " \
           "httpd_can_network_connect on" in lines
    serving = sorted(h for h, entry in plan["artifacts"]["per_host"].items() if entry["serves"])
    assert any(line.endswith(": artifacts: port tcp/8873 rsync_port_t, rsync_export_all_ro on")
               and all(host in line for host in serving) for line in lines), lines
    assert not [line for line in summary_lines(fleet("debian12")) if line.startswith("selinux")]
