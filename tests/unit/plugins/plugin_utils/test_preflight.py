"""The preflight judge: host facts against the plan, one check per concern, a fix for every non-ok."""

from __future__ import annotations

import pytest
from unitlib import inventory

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.host import _platforms
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime._preflight import evaluate, summary_table

GIB = 1024 ** 3
# Every distribution package of every platform, installed.
EVERY_PACKAGE = {name: "installed" for platform in _platforms.platform_ids()
                 for names in _platforms.packages(platform).values() for name in names}


def plan(**settings) -> dict:
    return build_plan(inventory({"gpu-a": {"ansible_host": "10.0.0.11", "vllm_omni_gpus": [0, 1, 2, 3, 4, 5]},
                                 "gpu-b": {"ansible_host": "10.0.0.12", "vllm_omni_gpus": [0, 1, 2]}}, settings))


def healthy_facts(**overrides) -> dict:
    facts = {"systemd": True, "python_version": "3.11", "machine": "x86_64", "memlock_hard": "unlimited", "listening": [],
             "clock_synchronized": True, "rdma_devices": None, "nft": "/usr/sbin/nft", "packages": EVERY_PACKAGE,
             "disk": {"/opt/vllm-omni": {"checked": "/opt", "free_bytes": 500 * GIB},
                      "/var/lib/vllm-omni/hf": {"checked": "/var", "free_bytes": 500 * GIB}}}
    facts.update(overrides)
    return facts


GPU = {"driver_version": "580.159.04", "cuda_version": "13.0", "count": 8}  # the device machine's H200
UBUNTU_2404 = {"distribution": "Ubuntu", "major": "24", "version": "24.04", "machine": "x86_64"}
ROCKY_9 = {"distribution": "Rocky", "major": "9", "version": "9.4", "machine": "x86_64"}


def by_name(report: dict) -> dict:
    return {check["check"]: check for check in report["checks"]}


def test_a_healthy_host_is_ok_on_every_check():
    report = evaluate(plan(), "gpu-a", healthy_facts(), GPU)
    assert report["status"] == "ok", report
    assert {"systemd", "python", "nvidia driver", "memlock", "ports", "packages", "clock"} <= set(by_name(report))


def test_no_systemd_fails_and_says_why():
    check = by_name(evaluate(plan(), "gpu-a", healthy_facts(systemd=False), GPU))["systemd"]
    assert check["status"] == "fail" and "systemd unit" in check["fix"]


def test_missing_driver_fails_for_the_engine_but_not_for_the_simulator():
    assert by_name(evaluate(plan(), "gpu-a", healthy_facts(), None))["nvidia driver"]["status"] == "fail"
    simulator = plan(vllm_omni_engine_backend="simulator")
    assert by_name(evaluate(simulator, "gpu-a", healthy_facts(), None))["nvidia driver"]["status"] == "ok"


@pytest.mark.parametrize(("python", "machine", "status"), [
    ("3.11", "x86_64", "ok"), ("3.12", "x86_64", "fail"), ("3.10", "x86_64", "fail"),
    ("3.11", "aarch64", "fail"), (None, "x86_64", "fail")])
def test_python_and_architecture_must_be_what_the_locks_are_for(python, machine, status):
    for backend in ("engine", "simulator"):
        check = by_name(evaluate(plan(vllm_omni_engine_backend=backend), "gpu-a",
                                 healthy_facts(python_version=python, machine=machine), GPU))["python"]
        assert check["status"] == status, (backend, check)
        if status == "fail":
            assert "CPython 3.11 on x86_64" in check["fix"] and (python or "missing") in check["detail"]


def discovered(os_facts: dict, **settings) -> dict:
    """A plan after discovery read the engine host's OS."""
    return build_plan(inventory({"gpu-a": {"ansible_host": "10.0.0.11", "vllm_omni_gpus": [0, 1, 2],
                                           "vllm_omni_os_facts": os_facts}}, settings))


def test_each_host_is_checked_against_its_own_platform():
    ubuntu = discovered(UBUNTU_2404)
    assert by_name(evaluate(ubuntu, "gpu-a", healthy_facts(python_version="3.12", glibc="2.39"), GPU))["python"][
        "status"] == "ok"
    wrong = by_name(evaluate(ubuntu, "gpu-a", healthy_facts(python_version="3.11"), GPU))["python"]
    assert wrong["status"] == "fail" and "ubuntu2404" in wrong["fix"] and "CPython 3.12" in wrong["fix"]


def test_rhel_builds_with_its_python312_package_and_says_how_to_get_it():
    rocky = discovered(ROCKY_9)
    assert rocky["platforms"]["rhel9"]["interpreter"] == "/usr/bin/python3.12"
    missing = by_name(evaluate(rocky, "gpu-a", healthy_facts(python_version=None, glibc="2.34"), GPU))["python"]
    assert missing["status"] == "fail" and "/usr/bin/python3.12 is missing" in missing["detail"]
    assert "install the distribution's Python 3.12 package" in missing["fix"] and "stays as it is" in missing["fix"]


def test_a_python_that_cannot_make_a_venv_names_the_package():
    check = by_name(evaluate(discovered(UBUNTU_2404), "gpu-a",
                             healthy_facts(python_version="3.12", python_venv=False), GPU))["python"]
    assert check["status"] == "fail" and "python3.12-venv" in check["fix"]


def test_a_glibc_older_than_the_platform_fails_with_both_versions():
    check = by_name(evaluate(plan(), "gpu-a", healthy_facts(glibc="2.31"), GPU))["glibc"]
    assert check["status"] == "fail" and "glibc 2.31" in check["detail"] and "2.36" in check["detail"]
    assert by_name(evaluate(plan(), "gpu-a", healthy_facts(glibc="2.41"), GPU))["glibc"]["status"] == "ok"


def test_a_driver_older_than_the_locked_cuda_needs_fails_with_the_numbers():
    old = {"driver_version": "570.86.15", "cuda_version": "12.8", "count": 8}
    check = by_name(evaluate(plan(), "gpu-a", healthy_facts(), old))["nvidia driver"]
    assert check["status"] == "fail"
    assert "570.86.15" in check["detail"] and "CUDA 13" in check["detail"] and "580.65.06" in check["fix"]
    # The simulator does not run torch: an old driver is fine there.
    simulator = plan(vllm_omni_engine_backend="simulator")
    assert by_name(evaluate(simulator, "gpu-a", healthy_facts(), old))["nvidia driver"]["status"] == "ok"


def test_a_foreign_process_on_a_planned_port_fails_naming_it():
    squatter = {"address": "0.0.0.0", "port": 8091, "process": "python3", "pid": 4242, "unit": None}
    report = evaluate(plan(), "gpu-a", healthy_facts(listening=[squatter]), GPU)
    check = by_name(report)["port 8091 (omni0 api)"]
    assert check["status"] == "fail" and "python3 (pid 4242)" in check["detail"]
    assert report["status"] == "fail"


def test_our_own_unit_on_its_port_is_not_a_clash():
    ours = {"address": "10.0.0.11", "port": 8091, "process": "vllm", "pid": 7, "unit": "vllm-omni@omni0.service"}
    assert by_name(evaluate(plan(), "gpu-a", healthy_facts(listening=[ours]), GPU))["ports"]["status"] == "ok"


def test_a_socket_on_another_address_is_not_a_clash():
    other = {"address": "192.168.5.5", "port": 8091, "process": "x", "pid": 9, "unit": None}
    assert by_name(evaluate(plan(), "gpu-a", healthy_facts(listening=[other]), GPU))["ports"]["status"] == "ok"


def test_a_few_taken_mooncake_ports_warn_most_taken_fail():
    def taken(count):
        return [{"address": "0.0.0.0", "port": 16000 + i, "process": "x", "pid": 9, "unit": None}
                for i in range(count)]
    few = by_name(evaluate(plan(), "gpu-a", healthy_facts(listening=taken(3)), GPU))
    many = by_name(evaluate(plan(), "gpu-a", healthy_facts(listening=taken(40)), GPU))
    assert few["ports omni0 mooncake_rpc"]["status"] == "warn"
    assert many["ports omni0 mooncake_rpc"]["status"] == "fail"


def test_disk_short_for_the_model_cache_fails_with_the_need():
    disk = {"/opt/vllm-omni": {"checked": "/opt", "free_bytes": 500 * GIB},
            "/var/lib/vllm-omni/hf": {"checked": "/var", "free_bytes": 10 * GIB}}
    check = by_name(evaluate(plan(), "gpu-a", healthy_facts(disk=disk), GPU))["disk model cache (HF_HOME)"]
    assert check["status"] == "fail" and "need 80 GiB" in check["detail"]


def test_memlock_and_clock_only_warn():
    report = evaluate(plan(), "gpu-a", healthy_facts(memlock_hard="65536", clock_synchronized=False), GPU)
    assert report["status"] == "warn"
    assert by_name(report)["memlock"]["status"] == "warn" and by_name(report)["clock"]["status"] == "warn"


def test_packages_the_host_sources_cannot_give_fail_before_anything_changes_naming_part_and_platform():
    fleet = plan()
    mooncake = ["libibverbs1", "ibverbs-providers", "libnuma1", "libcurl4"]
    assert fleet["os_packages"]["gpu-b"] == {"platform": "debian12", "packages": {
        "artifacts": ["rsync"], "firewall": ["nftables"], "mooncake": mooncake}}
    # The router host (gpu-a, the first engine host) gets nginx for the front door too.
    assert fleet["os_packages"]["gpu-a"]["packages"] == {"artifacts": ["rsync"], "firewall": ["nftables"],
                                                         "frontdoor": ["nginx"], "mooncake": mooncake}
    air_gapped = {**EVERY_PACKAGE, "nftables": "unavailable", "libnuma1": "unavailable"}
    check = by_name(evaluate(fleet, "gpu-b", healthy_facts(packages=air_gapped), GPU))["packages"]
    assert check["status"] == "fail"
    assert check["detail"].startswith("nftables (firewall), libnuma1 (mooncake) not installed, and the host's package "
                                      "sources do not offer them")
    assert "your site's mirror" in check["fix"] and "for debian12" in check["fix"] and "nothing was changed" in check["fix"]
    # Installable from the host's sources: fine, said.
    check = by_name(evaluate(fleet, "gpu-b", healthy_facts(packages={**EVERY_PACKAGE, "rsync": "installable"}), GPU))
    assert check["packages"]["status"] == "ok" and "rsync will be installed from the host's package sources" in \
        check["packages"]["detail"]
    # No package tool the module knows: a warning, not a verdict.
    unknown = dict.fromkeys(EVERY_PACKAGE, "unknown")
    check = by_name(evaluate(fleet, "gpu-b", healthy_facts(packages=unknown), GPU))["packages"]
    assert check["status"] == "warn" and "neither dpkg nor rpm" in check["detail"]
    # Mooncake's packages not asked about (mooncake_manage_packages: false): judged on the others only.
    others = {name: "installed" for name in ("rsync", "nftables")}
    check = by_name(evaluate(fleet, "gpu-b", healthy_facts(packages=others), GPU))["packages"]
    assert check["status"] == "ok" and check["detail"] == "2 of 2 installed"
    # The firewall off: nftables is not the host's to have.
    assert "firewall" not in plan(vllm_omni_firewall_enabled=False)["os_packages"]["gpu-a"]["packages"]


def test_rdma_without_devices_fails_because_mooncake_would_fall_back_to_tcp():
    rdma = plan(vllm_omni_mooncake_protocol="rdma", vllm_omni_mooncake_rdma_devices=["mlx5_0"])
    assert by_name(evaluate(rdma, "gpu-a", healthy_facts(rdma_devices=[]), GPU))["rdma"]["status"] == "fail"
    assert by_name(evaluate(rdma, "gpu-a", healthy_facts(rdma_devices=["mlx5_1"]), GPU))["rdma"]["status"] == "fail"
    assert by_name(evaluate(rdma, "gpu-a", healthy_facts(rdma_devices=["mlx5_0"]), GPU))["rdma"]["status"] == "ok"


def test_summary_lists_each_problem_with_its_fix():
    reports = [evaluate(plan(), "gpu-a", healthy_facts(systemd=False), GPU), evaluate(plan(), "gpu-b", healthy_facts(), GPU)]
    lines = summary_table(reports)
    assert lines[0].startswith("gpu-a") and "FAIL" in lines[0]
    assert any(line.strip().startswith("FAIL systemd:") and " -> " in line for line in lines)
    assert any(line.startswith("gpu-b") and "OK" in line for line in lines)


def test_a_monitoring_only_host_gets_its_platform_s_names_and_nixl_engine_hosts_no_mooncake_libraries():
    rocky = {"distribution": "Rocky", "major": "9", "version": "9.4", "machine": "x86_64"}
    inv = inventory({"gpu-a": {"ansible_host": "10.0.0.11", "vllm_omni_gpus": [0, 1, 2]}},
                    {"vllm_omni_monitoring_enabled": True, "vllm_omni_mooncake_protocol": "rdma"}, router=["edge"])
    inv["hostvars"]["watch"] = {"ansible_host": "10.0.9.2", "vllm_omni_os_facts": rocky}
    fleet = build_plan(inv | {"monitoring_hosts": ["watch"]})
    # No venv there, so no wheel set to pull: no rsync either.
    assert fleet["os_packages"]["watch"] == {"platform": "rhel9", "packages": {
        "firewall": ["nftables"], "monitoring": ["golang-github-prometheus"]}}
    assert fleet["os_packages"]["gpu-a"]["packages"]["mooncake_rdma"] == ["rdma-core", "librdmacm1", "ibverbs-utils"]
    assert "monitoring" not in fleet["os_packages"]["edge"]["packages"]
    nixl = build_plan(inventory({"gpu-a": {"ansible_host": "10.0.0.11", "vllm_omni_gpus": [0, 1, 2]}},
                                {"vllm_omni_kv_connector": "nixl", "vllm_omni_audio_output": False}))
    assert "mooncake" not in nixl["os_packages"]["gpu-a"]["packages"]
