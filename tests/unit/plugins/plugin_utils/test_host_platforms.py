"""Each host's platform: chosen per host, its locks and wheel sets, and the hosts no lock fits refused."""

from __future__ import annotations

import pytest
from unitlib import inventory, problems_of

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.host import _locks, _platforms
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan import _host_platforms
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._problems import Problems
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._summary import summary_lines
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.texts._render import render_tree

OS = {
    "debian12": {"distribution": "Debian", "major": "12", "version": "12.8", "machine": "x86_64"},
    "debian13": {"distribution": "Debian", "major": "13", "version": "13.2", "machine": "x86_64"},
    "ubuntu2204": {"distribution": "Ubuntu", "major": "22", "version": "22.04", "machine": "x86_64"},
    "ubuntu2404": {"distribution": "Ubuntu", "major": "24", "version": "24.04", "machine": "x86_64"},
    "rhel9": {"distribution": "AlmaLinux", "major": "9", "version": "9.5", "machine": "x86_64"},
}


def host(ip: str, os_facts: dict | None = None, **more) -> dict:
    entry = {"ansible_host": ip, "vllm_omni_gpus": [0, 1, 2], **more}
    if os_facts is not None:
        entry["vllm_omni_os_facts"] = os_facts
    return entry


def mixed_fleet(**settings) -> dict:
    """Four engine hosts of three platforms, and a router-only host on a fourth."""
    hosts = {"gpu-a": host("10.0.0.11", OS["debian12"]), "gpu-b": host("10.0.0.12", OS["debian13"]),
             "gpu-c": host("10.0.0.13", OS["debian13"]), "gpu-d": host("10.0.0.14", OS["ubuntu2404"])}
    inv = inventory(hosts, {"vllm_omni_engine_backend": "simulator", **settings}, router=["edge"])
    inv["hostvars"]["edge"]["vllm_omni_os_facts"] = OS["rhel9"]
    return build_plan(inv)


@pytest.mark.parametrize("platform", sorted(OS))
def test_every_supported_os_is_matched_to_its_platform_and_planned(platform):
    plan = build_plan(inventory({"gpu-a": host("10.0.0.11", OS[platform])}))
    assert plan["host_platforms"] == {"gpu-a": platform}
    assert plan["host_platform_sources"] == {"gpu-a": "discovered"}
    target = plan["platforms"][platform]
    assert target["python"] == _platforms.target(platform)["python"]
    assert target["abi"] == "cp" + target["python"].replace(".", "")
    assert target["pip_platforms"][0] == f"manylinux_2_{target['glibc'].split('.')[1]}_x86_64"
    for name, entry in plan["locks"][platform].items():
        assert entry["file"] == f"{platform}/{name}.txt" and (_locks.LOCK_DIR / entry["file"]).is_file()
    engine_set = next(i for i in plan["artifacts"]["items"] if i["kind"] == "wheels" and i["hosts"] == ["gpu-a"])
    assert engine_set["platform"] == platform and engine_set["lock"]["platform"] == platform


def test_a_mixed_fleet_gets_one_wheel_set_per_lock_and_platform_each_to_its_own_hosts():
    plan = mixed_fleet()
    assert plan["host_platforms"] == {"edge": "rhel9", "gpu-a": "debian12", "gpu-b": "debian13", "gpu-c": "debian13",
                                      "gpu-d": "ubuntu2404"}
    sets = {(i["lock"]["name"], i["platform"]): i for i in plan["artifacts"]["items"] if i["kind"] == "wheels"}
    simulator = plan["backend"]["lock"]
    assert sets[(simulator, "debian12")]["hosts"] == ["gpu-a"]
    assert sets[(simulator, "debian13")]["hosts"] == ["gpu-b", "gpu-c"]
    assert sets[(simulator, "ubuntu2404")]["hosts"] == ["gpu-d"]
    assert sets[(plan["router"]["lock"], "rhel9")]["hosts"] == ["edge"]
    assert len(sets) == 4, sorted(sets)
    # Each set is fanned out among its own hosts only: gpu-c pulls the debian13 set from gpu-b.
    per_host = plan["artifacts"]["per_host"]
    trixie_set = sets[(simulator, "debian13")]["id"]
    assert per_host["gpu-c"]["pulls"][trixie_set]["parent"] == "gpu-b"
    assert plan["artifacts"]["wheel_sets"]["debian13"][simulator] == sets[(simulator, "debian13")]["host_dir"]
    assert len({item["id"] for item in sets.values()}) == 4 and all(p in i["id"] for (_n, p), i in sets.items())
    assert plan["platforms"]["rhel9"]["interpreter"] == "/usr/bin/python3.12"
    lines = summary_lines(plan)
    assert "platform debian13 (discovered; venvs from /usr/bin/python3, Python 3.13, glibc >= 2.41): gpu-b, gpu-c" \
        in lines


def test_the_render_of_a_mixed_fleet_serves_each_set_to_its_own_children():
    files = render_tree(mixed_fleet())
    rsyncd = files["gpu-b/artifacts/rsyncd.conf"]
    assert "-debian13-" in rsyncd and "hosts allow = 10.0.0.13" in rsyncd and "-debian12-" not in rsyncd


def test_before_discovery_the_default_platform_is_assumed_and_said_so():
    plan = build_plan(inventory({"gpu-a": host("10.0.0.11")}))
    assert plan["host_platforms"] == {"gpu-a": _platforms.DEFAULT}
    assert plan["host_platform_sources"] == {"gpu-a": "assumed until discovery"}
    assert any(line.startswith("platform debian12 (assumed until discovery;") for line in summary_lines(plan))


def test_the_setting_names_the_platform_for_render_and_for_a_derivative_os():
    named = build_plan(inventory({"gpu-a": host("10.0.0.11", vllm_omni_host_platform="ubuntu2204")}))
    assert named["host_platforms"] == {"gpu-a": "ubuntu2204"}
    assert named["host_platform_sources"] == {"gpu-a": "vllm_omni_host_platform"}
    pop_os = {"distribution": "Pop!_OS", "major": "22", "version": "22.04", "machine": "x86_64"}
    derived = build_plan(inventory({"gpu-a": host("10.0.0.11", pop_os, vllm_omni_host_platform="ubuntu2204")}))
    assert derived["host_platforms"] == {"gpu-a": "ubuntu2204"}


def test_an_unsupported_os_is_refused_naming_host_os_and_the_supported_ones():
    centos7 = {"distribution": "CentOS", "major": "7", "version": "7.9", "machine": "x86_64"}
    [line] = problems_of(inventory({"gpu-a": host("10.0.0.11", centos7)}))
    assert line.startswith("host gpu-a: vllm_omni_host_platform")
    assert "CentOS 7.9 (x86_64)" in line and "ubuntu2404 (Ubuntu 24.04 LTS" in line and "rhel9" in line


def test_a_setting_that_contradicts_the_discovered_os_is_refused():
    [line] = problems_of(inventory({"gpu-a": host("10.0.0.11", OS["ubuntu2404"], vllm_omni_host_platform="debian12")}))
    assert "is debian12, but discovery read Ubuntu 24.04 (x86_64), which is platform ubuntu2404" in line
    assert "set it to ubuntu2404" in line


def test_an_aarch64_host_is_refused_with_what_is_missing():
    grace = {**OS["ubuntu2404"], "machine": "aarch64"}
    [line] = problems_of(inventory({"gpu-a": host("10.0.0.11", grace)}))
    assert "GH200/GB200 hosts (aarch64) are not supported yet" in line and "deploy onto x86_64 hosts" in line


def test_an_unknown_platform_name_is_refused_with_the_choices():
    [line] = problems_of(inventory({"gpu-a": host("10.0.0.11", vllm_omni_host_platform="centos7")}))
    assert "vllm_omni_host_platform" in line and "auto, debian12, debian13, ubuntu2204, ubuntu2404, rhel9" in line


def test_a_venv_no_lock_exists_for_is_refused_with_the_resolvers_reason(monkeypatch):
    reason = "mooncake-transfer-engine-cuda13==0.3.14 has no wheel for manylinux_2_34"
    monkeypatch.setattr(_locks, "unavailable",
                        lambda platform: {"vllm-omni-0.26.0-pd": reason} if platform == "rhel9" else {})
    problems = Problems()
    chosen = _host_platforms.host_platforms({"backend": ["gpu-a"], "router": ["edge"]},
                                            {"backend": "vllm-omni-0.26.0-pd", "router": "vllm-router-0.1.17"},
                                            {"gpu-a": {"vllm_omni_os_facts": OS["rhel9"]},
                                             "edge": {"vllm_omni_os_facts": OS["rhel9"]}}, {}, problems)
    [problem] = problems.items
    assert problem.where == "host gpu-a" and reason in problem.problem and "backend venv" in problem.problem
    assert "use another layout or version" in problem.fix
    assert chosen["edge"] == {"platform": "rhel9", "source": "discovered"}


def test_the_front_door_files_belong_to_the_group_the_platforms_nginx_runs_as():
    plan = mixed_fleet()  # the router-only host edge runs RHEL (AlmaLinux 9)
    frontdoor = [f for f in plan["footprint"]["edge"]["files"] if f["component"] == "frontdoor" and f["secrets"]]
    assert frontdoor and {f["group"] for f in frontdoor} == {"nginx"}
    debian = build_plan(inventory({"gpu-a": host("10.0.0.11", OS["debian13"])}))
    assert {f["group"] for f in debian["footprint"]["gpu-a"]["files"]
            if f["component"] == "frontdoor" and f["secrets"]} == {"www-data"}
