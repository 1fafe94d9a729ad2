"""The plan's footprint is what a deploy creates on real hosts, no more, and what uninstall takes away.

Two lab machines carry every component: lab-1 the pipelines (simulator backend), lab-2 the router,
the Mooncake master and Prometheus; the firewall is on both. After a deploy:

* every file of each host's footprint is on the host, byte for byte the render directory's text
  (engine.env: the rendered part; the host adds its secrets block), with the planned owner and mode;
* every planned unit is installed and enabled, every planned account exists with its home, every
  planned directory exists; the host's footprint record equals the plan's footprint;
* nothing of ours is there that the footprint does not list (units named like ours, files under
  the config root and the unit directory);
* molecule's verify playbook (molecule/shared/verify.yml, which `make test` runs here rather than in a molecule
  scenario of its own) passes: units active, API ports bound to the planned address only, /health, installed files
  equal to the render, the router's members, the key refused and accepted through the front door, every planned
  Prometheus target up and every dashboard query valid PromQL on the real Prometheus;
then uninstall leaves nothing of the footprint but what the plan says is kept.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from urllib.parse import quote

import pytest
import yaml
from test_faults import CA_FILE, record  # measured numbers kept for docs/benchmarks.md
from test_lab import KEY, LAB, REPO, lab, on, playbook, put, scenario  # the lab's own helpers (same directory)

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime._upgrade import strip_secrets

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root (CI runs as root)")


@pytest.fixture(scope="module")
def two_hosts():
    lab("up", "--hosts", "2")
    yield ["lab-1", "lab-2"]
    lab("down")


def inventory(tmp_path: Path) -> Path:
    return scenario(tmp_path, {
        "vllm_omni": {"hosts": {"lab-1": {"vllm_omni_gpus": [0, 1, 2, 3, 4, 5]}}},
        "vllm_omni_router": {"hosts": {"lab-2": {}}},
        "vllm_omni_mooncake_master": {"hosts": {"lab-2": {}}},
        "vllm_omni_monitoring": {"hosts": {"lab-2": {}}},
    }, {"vllm_omni_engine_backend": "simulator", "vllm_omni_served_model_name": "qwen3-omni",
        "vllm_omni_mooncake_master_enabled": True, "vllm_omni_monitoring_enabled": True,
        "vllm_omni_monitoring_client_cidrs": ["10.77.0.0/24"],
        # The GPU health exporter beside the simulator (its default is the real engine only), read against the
        # GPU stand-in put_gpu_standin places.
        "vllm_omni_gpu_metrics": True})


def render(tmp_path: Path, inventory_dir: Path) -> tuple[dict, Path]:
    out = tmp_path / "render"
    playbook("render.yml", inventory_dir, "-e", f"vllm_omni_render_dir={out}")
    return json.loads((out / "plan.json").read_text()), out


def host_file(host: str, path: str) -> str:
    return subprocess.run([*LAB, "exec", host, "--", "cat", path], capture_output=True, text=True, check=False).stdout


def stat(host: str, path: str) -> str:
    return on(host, f"stat -c '%U:%G %a' {path} 2>&1").strip()


def engine_alerts(plan: dict) -> list[dict]:
    """VllmOmniEngineDown alerts as the deployment's Prometheus (on lab-2) holds them, with their state."""
    listen = plan["monitoring"]["per_host"]["lab-2"]["listen_address"]
    answer = json.loads(on("lab-2", f"curl -s http://{listen}/api/v1/alerts") or "{}")
    return [a for a in answer.get("data", {}).get("alerts", []) if a["labels"].get("alertname") == "VllmOmniEngineDown"]


def engine_down_alert_fires_for_the_stopped_pipeline_only(plan: dict) -> None:
    """Issue 25: a rule that fires. Prometheus scrapes every 15 s and evaluates every 15 s; the rule waits 1 min."""
    pipelines = [p["name"] for p in plan["hosts"]["lab-1"]["pipelines"]]
    assert engine_alerts(plan) == [], "an engine-down alert before any engine stopped"
    stopped = pipelines[0]
    on("lab-1", f"systemctl stop vllm-omni@{stopped}")
    started = time.monotonic()
    while time.monotonic() - started < 240:
        firing = [a for a in engine_alerts(plan) if a["state"] == "firing"]
        if firing:
            break
        time.sleep(5)
    else:
        pytest.fail(f"VllmOmniEngineDown did not fire within 240 s of stopping {stopped}: {engine_alerts(plan)}")
    record("engine_down_alert", seconds_to_firing=round(time.monotonic() - started, 1))
    assert [(a["labels"]["host"], a["labels"]["pipeline"]) for a in firing] == [("lab-1", stopped)], firing
    assert "journalctl -a -u vllm-omni@" + stopped in firing[0]["annotations"]["description"]


GPU_PROFILE = REPO / "tests" / "fixtures" / "gpu" / "h200x2"
XID_LINE = "3,900,9000,-;NVRM: Xid (PCI:0000:00:07): 48, pid=4242, name=python3, An uncorrectable double bit error"


def put_gpu_standin(host: str) -> None:
    """The GPU stand-in on a running lab machine: nvidia-smi replaying the H200 host's capture (2 GPUs) and, since
    the lab's machines have no /dev/kmsg, a regular file there that the exporter reads as the kernel log."""
    put(host, "/usr/local/bin/nvidia-smi", (REPO / "tests" / "lab" / "fake_nvidia_smi.py").read_text())
    on(host, "chmod 755 /usr/local/bin/nvidia-smi; mkdir -p /usr/local/share/fake-nvidia-smi; : > /dev/kmsg")
    put(host, "/usr/local/share/fake-nvidia-smi/nvidia-smi-q.xml", (GPU_PROFILE / "nvidia-smi-q.xml").read_text())


def gpu_health_reaches_prometheus_and_a_lost_gpu_fires(plan: dict) -> None:
    """Issue 44 item 4: the exporter on lab-1, scraped by lab-2's Prometheus (job vllm-omni-gpu). The plan puts
    stages on GPUs 0-5 of lab-1; until the stand-in came there was no nvidia-smi at all (every planned GPU
    missing since the deploy); now it lists the capture's 2, so VllmOmniGpuLost stays firing for 2-5 only. An Xid
    line in the kernel log is counted for the GPU it names, and its alert fires on the first one."""
    on("lab-1", f"echo '{XID_LINE}' >> /dev/kmsg")
    mib = 1024 * 1024
    started = time.monotonic()
    while time.monotonic() - started < 240:
        memory = prometheus(plan, "/api/v1/query?query=" + quote('vllm_omni_gpu_memory_total_bytes{job="vllm-omni-gpu"}'))
        xids = prometheus(plan, "/api/v1/query?query=" + quote('vllm_omni_gpu_xid_errors_total{job="vllm-omni-gpu"}'))
        lost = sorted(a["labels"].get("gpu", "") for a in prometheus(plan, "/api/v1/alerts").get("alerts", [])
                      if a["labels"].get("alertname") == "VllmOmniGpuLost" and a["state"] == "firing")
        # Until nvidia-smi was there, every planned GPU was missing: wait for GPUs 0 and 1 to resolve.
        if memory.get("result") and xids.get("result") and lost == ["2", "3", "4", "5"]:
            break
        time.sleep(5)
    else:
        pytest.fail(f"GPU metrics did not reach Prometheus within 240 s: {memory} {xids} {lost}")
    record("gpu_health_scraped", seconds_after_the_standin=round(time.monotonic() - started, 1))
    assert {(s["metric"]["host"], s["metric"]["gpu"], s["value"][1]) for s in memory["result"]} == {
        ("lab-1", "0", str(143771 * mib)), ("lab-1", "1", str(143771 * mib))}
    (xid,) = xids["result"]
    assert (xid["metric"]["gpu"], xid["metric"]["xid"], xid["value"][1]) == ("1", "48", "1"), xid
    rules = {r["name"]: r for g in prometheus(plan, "/api/v1/rules")["groups"] for r in g["rules"]}
    assert rules["VllmOmniGpuXidErrors"]["state"] == "firing" and rules["VllmOmniGpuXidErrors"]["health"] == "ok"


def prometheus(plan: dict, path: str) -> dict:
    listen = plan["monitoring"]["per_host"]["lab-2"]["listen_address"]
    return json.loads(on("lab-2", f"curl -s 'http://{listen}{path}'") or "{}").get("data", {})


def certificate_expiry_is_scraped_and_status_reads_prometheus(plan: dict, inventory_dir: Path) -> None:
    """Issue 25: the front door's certificate expiry reaches Prometheus (the door's own /metrics, job
    vllm-omni-frontdoor, scraped every 60 s) with its rule loaded; status asks Prometheus and says what it got."""
    name = "vllm_omni_frontdoor_certificate_expiry_timestamp_seconds"
    door = plan["router"]["per_host"]["lab-2"]["url"]
    text = on("lab-2", f"curl -s --cacert {plan['router']['frontdoor']['ca']} {door}/metrics")
    (sample,) = [line for line in text.splitlines() if line.startswith(name + " ")]
    not_after = float(sample.split()[1])
    assert not_after > time.time() + 30 * 86400, sample  # the collection's certificate: 825 days
    started = time.monotonic()
    while time.monotonic() - started < 120:
        targets = [t for t in prometheus(plan, "/api/v1/targets").get("activeTargets", [])
                   if t["labels"].get("job") == "vllm-omni-frontdoor"]
        if targets and all(t["health"] == "up" for t in targets):
            break
        time.sleep(5)
    else:
        pytest.fail(f"Prometheus does not scrape the front door: {targets}")
    (series,) = prometheus(plan, f"/api/v1/query?query={name}")["result"]
    assert float(series["value"][1]) == not_after and series["metric"]["host"] == "lab-2"
    rules = [r for g in prometheus(plan, "/api/v1/rules")["groups"] for r in g["rules"]]
    (expiry,) = [r for r in rules if r["name"] == "VllmOmniCertificateExpiresSoon"]
    assert expiry["health"] == "ok" and expiry["state"] == "inactive", expiry
    record("certificate_expiry_scraped", seconds_to_up=round(time.monotonic() - started, 1))
    playbook("status.yml", inventory_dir, "-e", "status_json=true")
    document = json.loads((CA_FILE.parents[1] / "reports" / plan["deployment_id"] / "status.json").read_text())
    assert document["metrics_source"] == "prometheus" and document["version"].endswith("stands in")
    running = [p for p in document["pipelines"] if p["state"] == "active/running"]
    assert running and all(p["uptime_s"] >= 0 and p["restarts"] == 0 for p in running), running
    # The simulator's /metrics has none of the engine's names: no data, said, not a failure.
    assert {p["metrics_note"] for p in running} == {"no data"}, running


def test_deploy_creates_exactly_the_footprint_and_uninstall_takes_it_away(two_hosts, tmp_path):
    inventory_dir = inventory(tmp_path)
    playbook("deploy.yml", inventory_dir)
    plan, rendered = render(tmp_path, inventory_dir)
    assert set(plan["footprint"]) == {"lab-1", "lab-2"}
    for host, footprint in plan["footprint"].items():
        for entry in footprint["files"]:
            text = host_file(host, entry["path"])
            if entry["render"] is None:  # a secret or TLS material: made on the host or the controller, not rendered
                assert text, f"{host}:{entry['path']} is missing or empty"
                assert KEY not in text or entry["secrets"], f"{host}:{entry['path']} holds the key but is not a secret file"
                assert stat(host, entry["path"]) == f"{entry['owner']}:{entry['group']} {entry['mode'].lstrip('0')}"
                continue
            want = (rendered / entry["render"]).read_text()
            got = strip_secrets(text) if entry["secrets"] else text
            assert got == want, f"{host}:{entry['path']} differs from the render's {entry['render']}"
            if entry["secrets"]:  # the key is on the host only, never in the render
                assert KEY not in want and KEY in text
            mode = entry["mode"].lstrip("0")
            assert stat(host, entry["path"]) == f"{entry['owner']}:{entry['group']} {mode}", (host, entry["path"])
        for directory in footprint["directories"]:
            assert stat(host, directory["path"]).endswith(directory["mode"].lstrip("0")), (host, directory["path"])
        for unit in footprint["units"]:
            assert on(host, f"systemctl is-enabled {unit['name']}").strip() == "enabled", (host, unit["name"])
        for account in footprint["accounts"]:
            entry = on(host, f"getent passwd {account['user']}").strip().split(":")
            assert entry[5] == account["home"] and entry[6] == "/usr/sbin/nologin", (host, account)
        for venv in footprint["venvs"]:
            assert on(host, f"test -x {venv}/bin/python && echo yes").strip() == "yes", (host, venv)
        record = json.loads(host_file(host, plan["paths"]["footprint_record"]))
        assert record == footprint, f"{host}: the footprint record differs from the plan"
        # Nothing of ours beyond the footprint: units named like ours, files in the unit and config dirs.
        # list-unit-files shows unit files (a template, not its enabled instances); list-units the loaded ones.
        patterns = "'vllm-omni*' 'mooncake-master*'"
        ours = set(on(host, f"{{ systemctl list-unit-files --no-legend --plain {patterns}; "
                            f"systemctl list-units --all --no-legend --plain {patterns}; }} | awk '{{print $1}}'").split())
        planned = {u["name"] for u in footprint["units"]} | (
            {"vllm-omni@.service"} if any(u["component"] == "engine" for u in footprint["units"]) else set())
        assert ours == planned, f"{host}: units {sorted(ours - planned)} are not in the footprint"
        files_here = set(on(host, f"find {plan['paths']['unit_dir']} {plan['paths']['config_root']} -type f "
                                  "\\( -path '*vllm-omni*' -o -path '*mooncake*' \\) 2>/dev/null").split())
        listed = {e["path"] for e in footprint["files"]}
        assert files_here <= listed, f"{host}: {sorted(files_here - listed)} are not in the footprint"

    playbook("../molecule/shared/verify.yml", inventory_dir)
    engine_down_alert_fires_for_the_stopped_pipeline_only(plan)
    certificate_expiry_is_scraped_and_status_reads_prometheus(plan, inventory_dir)
    # Last, and taken away again: the playbooks' GPU discovery would read the stand-in's 2 GPUs.
    put_gpu_standin("lab-1")
    try:
        gpu_health_reaches_prometheus_and_a_lost_gpu_fires(plan)
    finally:
        on("lab-1", "rm -rf /usr/local/bin/nvidia-smi /usr/local/share/fake-nvidia-smi /dev/kmsg")

    # No vault needed to take a deployment away: the key is blanked and uninstall still runs.
    playbook("uninstall.yml", inventory_dir, "-e", "vllm_omni_api_key=")
    # The front door's site went with it: nginx (the distribution's, it stays) no longer holds the router port.
    assert ":8000 " not in on("lab-2", "ss -H -ltn"), on("lab-2", "ss -H -ltnp")
    for host, footprint in plan["footprint"].items():
        kept = {d["path"] for d in footprint["directories"] if d["remove"] == "never"}
        kept |= {a["home"] for a in footprint["accounts"]}
        present = [path for path in [e["path"] for e in footprint["files"]] + footprint["venvs"]
                   + [d["path"] for d in footprint["directories"] if d["remove"] == "always"]
                   if path not in kept and on(host, f"test -e {path} && echo present").strip() == "present"]
        assert present == [], f"{host}: uninstall left {present}"
        for unit in footprint["units"]:
            assert on(host, f"systemctl list-unit-files --no-legend {unit['name']} | wc -l").strip() == "0"
        for account in footprint["accounts"]:
            assert on(host, f"getent passwd {account['user']}").strip() == "", (host, account["user"])
        for path in kept:
            assert on(host, f"test -d {path} && echo kept").strip() == "kept", (host, path)


def test_a_router_moved_to_another_host_is_taken_away_from_the_first(two_hosts, tmp_path):
    """No globbing: the first host's record says it ran a router; the next deploy takes it away."""
    on_one = scenario(tmp_path / "a", {"vllm_omni": {"hosts": {"lab-1": {"vllm_omni_gpus": [0, 1, 2]}}}},
                      {"vllm_omni_engine_backend": "simulator", "vllm_omni_served_model_name": "qwen3-omni"})
    playbook("deploy.yml", on_one)
    assert on("lab-1", "systemctl is-active vllm-omni-router").strip() == "active"
    moved = scenario(tmp_path / "b", {"vllm_omni": {"hosts": {"lab-1": {"vllm_omni_gpus": [0, 1, 2]}}},
                                      "vllm_omni_router": {"hosts": {"lab-2": {}}}},
                     {"vllm_omni_engine_backend": "simulator", "vllm_omni_served_model_name": "qwen3-omni"})
    playbook("deploy.yml", moved)
    assert on("lab-2", "systemctl is-active vllm-omni-router").strip() == "active"
    assert on("lab-1", "systemctl list-unit-files --no-legend vllm-omni-router.service | wc -l").strip() == "0"
    assert on("lab-1", "getent passwd vllm-omni-router").strip() == ""
    record = yaml.safe_load(host_file("lab-1", "/var/lib/vllm-omni-serve/footprint.json"))
    assert not any(u["component"] == "router" for u in record["units"])
    playbook("uninstall.yml", moved)
