"""Rolling upgrades and faults on the local lab (simulator backend; needs root).

Two machines: lab-1 runs two pipelines and the router, lab-2 one pipeline. A bounded load
generator (benchmarks/loadgen.py: count- and time-bounded, lab addresses only) sends requests
through the router while pipelines are upgraded, killed or refused, and the tests count failures.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from lab import SUFFIX  # "" in the first lab, "-<lane>" in a lane: this lane's scratch files on the controller
from test_lab import CACHE, LAB, LAB_INVENTORY, MEASURED, REPO, lab, on, playbook, put, recap, scenario, started_at

KEY_FILE = Path(tempfile.gettempdir()) / f"vllm-omni-faults{SUFFIX}.key"
REPORT = MEASURED / "faults.json"


def record(name: str, **measured) -> None:
    """Keep what a fault test measured (docs/benchmarks.md quotes these) in the reports directory."""
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    with open(REPORT.with_suffix(".lock"), "w") as held:  # both lanes record into it
        fcntl.flock(held, fcntl.LOCK_EX)
        found = json.loads(REPORT.read_text()) if REPORT.is_file() else {}
        found[name] = {**measured, "when": time.strftime("%Y-%m-%d %H:%M:%S")}
        REPORT.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")


ROUTER = "https://10.77.0.11:8000"  # the front door (TLS, key checked); vllm-router itself is on loopback
ROUTER_ADMIN = "http://127.0.0.1:18000"  # vllm-router's own API, from lab-1 only
CA_FILE = CACHE / "tls" / "ca.pem"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root (CI runs as root)")


class Load:
    """Requests through the router in the background until stopped; .report() has sent/ok/failed.

    Paced at 15 requests a second: a gap between requests of 67 ms still finds any window in which the
    fleet refuses work, while an unpaced generator (about 45 a second, each a new TLS connection) kept about a core
    of the 2-core CI machine busy between itself, the front door, the router and the engines, slowing the deploy
    under test and everything beside it."""

    RATE = 15

    def __init__(self, concurrency: int = 4, max_seconds: int = 300, key_file: Path = KEY_FILE):
        self.process = subprocess.Popen(
            [sys.executable, str(REPO / "benchmarks" / "loadgen.py"), ROUTER, "--requests", "100000",
             "--concurrency", str(concurrency), "--max-seconds", str(max_seconds), "--rate", str(self.RATE),
             "--key-file", str(key_file), "--ca-file", str(CA_FILE), "--json"], stdout=subprocess.PIPE, text=True)
        time.sleep(2)

    def report(self) -> dict:
        self.process.send_signal(signal.SIGTERM)
        out, _unused = self.process.communicate(timeout=120)
        return json.loads(out)


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory):
    lab("up", "--hosts", "2")
    key = "faults-test-key-0123456789abcdef"
    KEY_FILE.write_text(key + "\n")

    def inventory(**group_vars) -> Path:
        base = {"vllm_omni_engine_backend": "simulator", "vllm_omni_served_model_name": "qwen3-omni",
                "vllm_omni_api_key": key, **group_vars}
        groups = {"vllm_omni": {"hosts": {"lab-1": {"vllm_omni_gpus": list(range(6))},
                                          "lab-2": {"vllm_omni_gpus": list(range(3))}}},
                  "vllm_omni_router": {"hosts": {"lab-1": None}}}
        return scenario(tmp_path_factory.mktemp("inventory"), groups, {**base, "vllm_omni_api_key": key})

    playbook("deploy.yml", inventory())
    yield inventory
    lab("down")


def env_mark(host: str, pipeline: str) -> str:
    return on(host, f"grep -h ROLLOUT_MARK /etc/vllm-omni/{pipeline}/engine.env").strip()


class Members:
    """How many pipelines the router lists, sampled in the background: the roll's bound seen from outside."""

    def __init__(self):
        self.counts: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(ValueError, KeyError):  # nothing parseable this once: no sample
                self.counts.append(len(json.loads(on("lab-1", f"curl -s {ROUTER_ADMIN}/list_workers"))["urls"]))
            time.sleep(0.2)

    def stop(self) -> list[int]:
        self._stop.set()
        self._thread.join()
        return self.counts


# What the first test rolls the fleet to, and what the tests after it that deploy the fleet as it stands use: the
# failing upgrades and refused deploys between them leave it so, and a test that asked for other settings here would
# first roll all three pipelines back (bound 1: one at a time) for nothing it checks.
SETTLED = {"vllm_omni_extra_env": {"ROLLOUT_MARK": "1"}, "vllm_omni_rolling_max_unavailable": 2,
           "vllm_omni_kv_connector": "nixl"}


def test_a_deploy_under_load_rolls_every_changed_pipeline_within_the_bound(two_hosts):
    """Settings of every pipeline change on a serving fleet: deploy rolls them, two at a time at most.

    The change is the KV connector's too (Mooncake -> NIXL, the upgrade path of docs/operations.md): every
    pipeline's environment, ports, firewall rules and reserved ports move while the fleet serves."""
    before = {(h, p): started_at(h, f"vllm-omni@{p}") for h, p in (("lab-1", "omni0"), ("lab-1", "omni1"),
                                                                   ("lab-2", "omni0"))}
    changed = two_hosts(**SETTLED)
    load = Load()
    members = Members()
    started = time.monotonic()
    result = playbook("deploy.yml", changed)
    seconds = time.monotonic() - started
    counts = members.stop()
    report = load.report()
    assert report["failed"] == 0, report
    assert report["ok"] > 100, report
    for (host, pipeline), when in before.items():
        assert env_mark(host, pipeline) == 'ROLLOUT_MARK="1"'
        assert started_at(host, f"vllm-omni@{pipeline}") != when, f"{host}/{pipeline} was not restarted"
        env = on(host, f"cat /etc/vllm-omni/{pipeline}/engine.env")
        assert "UCX_TCP_PORT_RANGE=" in env and "MC_MIN_RPC_PORT" not in env, env
    # The firewall now opens NIXL's ports, not Mooncake's (lab-1's omni1: side channel 5602-5603).
    table = on("lab-1", "nft list table inet vllm_omni")
    assert "5602-5603" in table and "16064-16127" not in table, table[-2000:]
    # 3 serving pipelines, at most 2 down: lab-1/omni0 and lab-2/omni0 together, then lab-1/omni1.
    assert "3 serving pipeline(s) change: 2 wave(s), at most 2 down at a time" in " ".join(result.stdout.split())
    assert len(counts) > 20 and min(counts) >= 1, counts
    assert counts[-1] == 3
    record("rolling_deploy", seconds=round(seconds, 1), load=report, fewest_members=min(counts))
    assert "Upgrade | drain" in result.stdout
    again = playbook("deploy.yml", changed)
    assert {host: c["changed"] for host, c in recap(again.stdout).items() if host.startswith("lab-")} == \
        {"lab-1": 0, "lab-2": 0}
    # The runbook's reads (docs/operations.md): status as one JSON document, each kind of unit's journal.
    playbook("status.yml", changed, "-e", "status_json=true")
    statuses = (CACHE / "reports").glob("*/status.json")  # this lane's controller cache, where status.yml writes
    document = json.loads(max(statuses, key=lambda path: path.stat().st_mtime).read_text())
    assert document["ok"] is True, document
    assert sorted((p["host"], p["pipeline"], p["state"]) for p in document["pipelines"]) == [
        ("lab-1", "omni0", "active/running"), ("lab-1", "omni1", "active/running"), ("lab-2", "omni0", "active/running")]
    journals = {"pipeline": on("lab-1", "journalctl -a -u vllm-omni@omni0 -n 200 --no-pager"),
                "router": on("lab-1", "journalctl -a -u vllm-omni-router -n 200 --no-pager"),
                "front door": on("lab-1", "journalctl -a -u nginx -n 50 --no-pager")}
    for what, journal in journals.items():
        assert len(journal.splitlines()) > 1 and "blob data" not in journal, (what, journal[-2000:])


def test_failed_upgrade_restores_the_pipeline_and_stops_the_rollout(two_hosts):
    load = Load()
    broken = two_hosts(vllm_omni_extra_env={"ROLLOUT_MARK": "2", "XPYD_SIM_PROFILE": "/nonexistent/profile.yaml"})
    result = playbook("upgrade.yml", broken, "-e", '{"engine_health_timeout": 20}', check=False)
    report = load.report()
    record("failed_upgrade", load=report)
    assert result.returncode != 0
    assert "The previous version was restored, is healthy and back in the router; the rollout stops here" in result.stdout
    assert report["failed"] == 0, report
    # lab-1/omni0 failed and came back as it was; nothing after it was touched.
    assert env_mark("lab-1", "omni0") == 'ROLLOUT_MARK="1"'
    assert env_mark("lab-1", "omni1") == 'ROLLOUT_MARK="1"' and env_mark("lab-2", "omni0") == 'ROLLOUT_MARK="1"'
    assert on("lab-1", "systemctl is-active vllm-omni@omni0").strip() == "active"
    assert len(json.loads(on("lab-1", f"curl -s {ROUTER_ADMIN}/list_workers"))["urls"]) == 3


def test_an_upgrade_whose_pipeline_answers_wrong_is_stopped_by_the_answer_check_and_restored(two_hosts):
    """The answer check: the first deploy left on each host the answer its pipelines agreed on; an upgrade whose
    pipeline answers otherwise fails that pipeline's verify, named with both answers, and the pipeline is restored.
    The stand-in that answers wrong: lab-2's simulator, given other words by a sitecustomize on PYTHONPATH that only
    lab-2 has (lab-1's pipelines get the same environment and still answer right)."""
    references = json.loads(on("lab-1", "cat /var/lib/vllm-omni-serve/answers.json"))["references"]
    (reference,) = references.values()
    assert reference["answer"].startswith("The quick brown fox") and reference["pipelines"] == ["lab-1/omni0", "lab-1/omni1"]
    (key, lab_2), = json.loads(on("lab-2", "cat /var/lib/vllm-omni-serve/answers.json"))["references"].items()
    assert key in references and lab_2["answer"] == reference["answer"] and lab_2["pipelines"] == ["lab-2/omni0"]
    on("lab-2", "mkdir -p /opt/wrong-answer")
    put("lab-2", "/opt/wrong-answer/sitecustomize.py",
        "import xpyd_sim.common.helpers as helpers\nhelpers.DUMMY_TOKENS = ['wrong'] * 8\n")
    try:
        wrong = two_hosts(vllm_omni_extra_env={"ROLLOUT_MARK": "4", "PYTHONPATH": "/opt/wrong-answer"})
        result = playbook("upgrade.yml", wrong, check=False)
    finally:
        on("lab-2", "rm -rf /opt/wrong-answer")
    assert result.returncode != 0
    assert "lab-2/omni0 answered differently from the reference" in result.stdout, result.stdout[-4000:]
    assert 'It answered: "wrong wrong wrong' in result.stdout and '"The quick brown fox' in result.stdout
    assert "The previous version was restored, is healthy and back in the router; the rollout stops here" in result.stdout
    assert env_mark("lab-2", "omni0") != 'ROLLOUT_MARK="4"'
    assert on("lab-2", "systemctl is-active vllm-omni@omni0").strip() == "active"


# A stand-in stuck where vLLM #55114 leaves a real producer: it prints the engine's Mooncake line and never serves.
HANGING_START = """import sys, time
if sys.argv and sys.argv[0].endswith("xpyd-sim"):
    print("(StageEngineCoreProc_stage1_replica0 pid=948) INFO 12-06 10:00:01 [mooncake_connector.py:210] "
          "Initializing Mooncake Transfer Engine worker, bootstrap 10.77.0.12:9101", flush=True)
    while True:
        time.sleep(3600)
"""


def test_a_start_stuck_in_one_phase_fails_the_deploy_within_the_stall_bound_naming_stage_and_phase(two_hosts):
    """Bounded starts: lab-2's stand-in hangs after the engine's Mooncake line (a sitecustomize only lab-2 has).
    The deploy's health wait fails once the stand-in made no progress for vllm_omni_start_stall_timeout (30 s),
    naming the stage and phase, instead of waiting out the 1,800 s health timeout; the roll restores lab-2, and the
    deploy (limited to lab-2) leaves the fleet as the inventory has it."""
    on("lab-2", "mkdir -p /opt/hanging-start")
    put("lab-2", "/opt/hanging-start/sitecustomize.py", HANGING_START)
    started = time.monotonic()
    try:
        hung = two_hosts(vllm_omni_start_stall_timeout=30,
                         vllm_omni_extra_env={"ROLLOUT_MARK": "5", "PYTHONPATH": "/opt/hanging-start"})
        # lab-2 only: lab-1 keeps the fleet's environment, and the restored lab-2 is back to it too.
        result = playbook("deploy.yml", hung, "--limit", "lab-2", check=False)
    finally:
        on("lab-2", "rm -rf /opt/hanging-start")
    took = time.monotonic() - started
    assert result.returncode != 0, result.stdout[-4000:]
    found = re.search(r"lab-2/omni0 \(vllm-omni@omni0\.service\) made no progress for (\d+) s \(bound 30 s", result.stdout)
    assert found, result.stdout[-6000:]
    assert 30 <= int(found.group(1)) <= 40
    assert "stuck at: stage 1: setting up the KV transfer (Mooncake); its newest line: Initializing Mooncake " \
           "Transfer Engine worker, bootstrap 10.77.0.12:9101" in result.stdout
    assert "The previous version was restored, is healthy and back in the router" in result.stdout
    assert on("lab-2", "systemctl is-active vllm-omni@omni0").strip() == "active"
    assert took < 600, took  # the health timeout (1,800 s) was not waited out
    record("bounded_start", stall_timeout_s=30, stalled_for_s=int(found.group(1)), deploy_s=round(took, 1))


def test_killed_pipeline_is_restarted_and_routed_around(two_hosts):
    load = Load()
    restarts = int(on("lab-2", "systemctl show -p NRestarts --value vllm-omni@omni0").strip())
    on("lab-2", "kill -9 $(systemctl show -p MainPID --value vllm-omni@omni0)")
    for _round in range(60):
        if int(on("lab-2", "systemctl show -p NRestarts --value vllm-omni@omni0").strip() or 0) > restarts and \
                on("lab-2", "curl -s -o /dev/null -w '%{http_code}' http://10.77.0.12:8091/health") == "200":
            break
        time.sleep(1)
    else:
        pytest.fail("systemd did not bring the killed pipeline back")
    time.sleep(5)
    report = load.report()
    record("kill_9", load=report)
    # New requests never reach the dead pipeline for long: the router retries a refused request on
    # another pipeline (vllm_omni_router_max_retries = 2) and its health check takes the pipeline out.
    # Only requests the killed process was already answering can fail: at most the load's concurrency.
    assert report["failed"] <= 4, report
    assert report["ok"] > 200, report


def test_port_in_use_is_refused_by_preflight_and_the_running_version_keeps_serving(two_hosts):
    squatter = subprocess.Popen([*LAB, "exec", "lab-2", "--", "python3", "-m", "http.server", "9191",
                                 "--bind", "0.0.0.0"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(2)
        moved = two_hosts(vllm_omni_extra_env={"ROLLOUT_MARK": "1"}, vllm_omni_api_port_base=9191)
        result = playbook("deploy.yml", moved, check=False)
        assert result.returncode != 0
        assert "port 9191 (omni0 api): already in use by python3" in result.stdout
        assert "Preflight | stop on failed checks (nothing has been changed)" in result.stdout
        assert "TASK [vllm_omni.serve.engine" not in result.stdout
        assert on("lab-2", "curl -s -o /dev/null -w '%{http_code}' http://10.77.0.12:8091/health") == "200"
    finally:
        squatter.terminate()
        on("lab-2", "pkill -f 'http.server 9191' || true")


def test_nearly_full_disk_is_refused_by_preflight(two_hosts):
    on("lab-2", "mkdir -p /srv/small && mount -t tmpfs -o size=20m tmpfs /srv/small")
    try:
        moved = two_hosts(vllm_omni_extra_env={"ROLLOUT_MARK": "1"}, vllm_omni_install_root="/srv/small/vllm-omni")
        result = playbook("deploy.yml", moved, check=False)
        assert result.returncode != 0
        assert "FAIL disk venvs: 0.0 GiB free under /srv/small, need 1 GiB" in result.stdout
        assert on("lab-2", "ls /srv/small").strip() == ""
        assert on("lab-2", "curl -s -o /dev/null -w '%{http_code}' http://10.77.0.12:8091/health") == "200"
    finally:
        on("lab-2", "umount /srv/small")


def test_corrupted_venv_is_named_and_rebuilt_while_the_pipelines_serve(two_hosts):
    venv = "/opt/vllm-omni/venvs/xpyd-sim-0.5.0"
    current = two_hosts(**SETTLED)
    playbook("upgrade.yml", current)  # the state the earlier tests leave; a no-op when they ran
    on("lab-2", f"rm -f {venv}/lib/python3.*/site-packages/xpyd_sim/server.py")
    load = Load()
    result = playbook("deploy.yml", current)
    report = load.report()
    flat = " ".join(result.stdout.split())
    assert f"{venv} is damaged (1 missing:" in flat and "xpyd_sim/server.py" in flat, flat[-3000:]
    assert on("lab-2", f"ls {venv}/lib/python3.*/site-packages/xpyd_sim/server.py").strip()
    assert report["failed"] == 0, report


def changed_on_lab_hosts(output: str) -> dict[str, int]:
    return {host: counts["changed"] for host, counts in recap(output).items() if host.startswith("lab-")}


def test_a_deploy_with_nothing_to_do_skips_every_play_and_drift_brings_them_back(two_hosts):
    """The no-op check (playbooks/converge.yml): after a whole deploy, the same deploy ends after one look per
    host, changing nothing; a file changed by hand on one host is named, and that deploy runs every play and
    puts it back; the one after it skips again. -e vllm_omni_converge=full runs every play regardless."""
    current = two_hosts(**SETTLED)
    playbook("deploy.yml", current)  # a whole deploy: both hosts record what it left
    started = time.monotonic()
    quiet = playbook("deploy.yml", current)
    fast_seconds = round(time.monotonic() - started, 1)
    flat = " ".join(quiet.stdout.split())
    assert "2 host(s) as the last whole deploy left them" in flat, flat[-3000:]
    assert "TASK [vllm_omni.serve.engine" not in quiet.stdout and "Smoke | POST" not in quiet.stdout
    assert changed_on_lab_hosts(quiet.stdout) == {"lab-1": 0, "lab-2": 0}
    stage_config = "/etc/vllm-omni/omni0/stage_config.yaml"
    on("lab-2", f"echo '# edited by hand' >> {stage_config}")
    started = time.monotonic()
    repaired = playbook("deploy.yml", current)
    repair_seconds = round(time.monotonic() - started, 1)
    flat = " ".join(repaired.stdout.split())
    assert "1 of 2 host(s) differ from the last whole deploy" in flat and f"lab-2: files {stage_config}: " in flat, \
        flat[-3000:]
    assert "TASK [vllm_omni.serve.engine" in repaired.stdout
    assert "edited by hand" not in on("lab-2", f"cat {stage_config}")
    again = playbook("deploy.yml", current)
    assert "2 host(s) as the last whole deploy left them" in " ".join(again.stdout.split())
    started = time.monotonic()
    every_play = playbook("deploy.yml", current, "-e", "vllm_omni_converge=full")
    full_seconds = round(time.monotonic() - started, 1)
    assert "TASK [vllm_omni.serve.engine" in every_play.stdout
    assert changed_on_lab_hosts(every_play.stdout) == {"lab-1": 0, "lab-2": 0}
    record("no_op", fast_seconds=fast_seconds, drift_repair_seconds=repair_seconds, every_play_seconds=full_seconds)


def test_host_lost_mid_deploy_fails_alone_and_a_rerun_completes(two_hosts):
    changed = two_hosts(vllm_omni_extra_env={"ROLLOUT_MARK": "3"})
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}
    run = subprocess.Popen(["ansible-playbook", "playbooks/deploy.yml", "-i", str(LAB_INVENTORY), "-i", str(changed)],
                           cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = []
    for line in run.stdout:
        output.append(line)
        if "TASK [vllm_omni.serve.mooncake" in line and not any("poweroff" in o for o in output):
            lab("poweroff", "lab-2")
            output.append("poweroff\n")
    run.wait()
    text = "".join(output)
    (Path(tempfile.gettempdir()) / f"vllm-omni-host-lost{SUFFIX}.log").write_text(text)
    assert run.returncode != 0
    hosts = recap(text)
    print(f"\nhost lost mid-deploy: {hosts}")
    assert hosts["lab-2"]["unreachable"] + hosts["lab-2"]["failed"] >= 1
    assert hosts["lab-1"]["failed"] == 0 and hosts["lab-1"]["unreachable"] == 0
    assert env_mark("lab-1", "omni0") == 'ROLLOUT_MARK="3"'  # lab-1 converged
    lab("up", "--hosts", "2")  # boots lab-2 again, its disk as it was
    playbook("deploy.yml", changed)
    assert env_mark("lab-2", "omni0") == 'ROLLOUT_MARK="3"'


NEW_KEY_FILE = Path(tempfile.gettempdir()) / f"vllm-omni-faults-new{SUFFIX}.key"


def door_status(key: str) -> str:
    """The front door's answer to GET /v1/models with this key (from the controller, as a client)."""
    return subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert", str(CA_FILE),
                           "-H", f"Authorization: Bearer {key}", f"{ROUTER}/v1/models"],
                          capture_output=True, text=True, check=False).stdout


def served_certificate() -> str:
    import ssl

    return ssl.get_server_certificate(("10.77.0.11", 8000))


def test_api_key_rotation_and_certificate_renewal_under_load_drop_no_request(two_hosts):
    """Keys: {old, new} at the front door, clients move to new, old dropped (401); then a forced certificate
    renewal. Every step is deploy.yml under load; nginx reloads, no pipeline and not nginx itself restarts."""
    old, new = "faults-test-key-0123456789abcdef", "rotated-key-fedcba9876543210-xyz"
    NEW_KEY_FILE.write_text(new + "\n")
    mark = env_mark("lab-1", "omni0").partition("=")[2].strip('"')  # what the earlier tests left, if any
    same = {"vllm_omni_extra_env": {"ROLLOUT_MARK": mark}} if mark else {}
    pipelines = {(h, p): started_at(h, f"vllm-omni@{p}")
                 for h, p in (("lab-1", "omni0"), ("lab-1", "omni1"), ("lab-2", "omni0"))}
    nginx = on("lab-1", "systemctl show -p MainPID --value nginx").strip()
    certificate = served_certificate()
    timings = {}

    # 1. The set {old, new}: the clients holding the old key keep working through the deploy.
    old_clients = Load(max_seconds=900)
    started = time.monotonic()
    playbook("deploy.yml", two_hosts(**same, vllm_omni_api_keys=[old, new]))
    timings["both_keys"] = round(time.monotonic() - started, 1)
    assert door_status(new) == "200" and door_status(old) == "200"
    # 2. The clients switch to the new key; 3. the old key is dropped while they send.
    new_clients = Load(max_seconds=900, key_file=NEW_KEY_FILE)
    old_report = old_clients.report()
    started = time.monotonic()
    playbook("deploy.yml", two_hosts(**same, vllm_omni_api_keys=[new]))
    timings["old_key_dropped"] = round(time.monotonic() - started, 1)
    assert door_status(old) == "401" and door_status(new) == "200"
    # 4. A forced renewal of the generated certificate, the same clients still sending.
    started = time.monotonic()
    result = playbook("deploy.yml", two_hosts(**same, vllm_omni_api_keys=[new]), "-e", "frontdoor_certificate_renew=true")
    timings["certificate_renewed"] = round(time.monotonic() - started, 1)
    new_report = new_clients.report()
    record("key_rotation", seconds=timings, old_key_load=old_report, new_key_load=new_report)
    assert old_report["failed"] == 0 and old_report["ok"] > 20, old_report
    assert new_report["failed"] == 0 and new_report["ok"] > 20, new_report
    assert "RUNNING HANDLER [vllm_omni.serve.frontdoor : Front door | reload nginx]" in result.stdout
    assert served_certificate() != certificate  # nginx serves the new one
    # Only nginx reloaded: the same master process, every pipeline as it was.
    assert on("lab-1", "systemctl show -p MainPID --value nginx").strip() == nginx
    for (host, pipeline), when in pipelines.items():
        assert started_at(host, f"vllm-omni@{pipeline}") == when, f"{host}/{pipeline} was restarted"
    # status.yml: the router's certificate, days left.
    status = playbook("status.yml", two_hosts(**same, vllm_omni_api_keys=[new]))
    assert "certificate expires" in status.stdout and "(824 days left)" in status.stdout, status.stdout[-3000:]


# --- --limit and --check (issue 24). At the end of the module: each starts from one full deploy of its own. ---

LIMIT_BASE = {"vllm_omni_extra_env": {"ROLLOUT_MARK": "1"}}
# What a deploy installs on an engine host: configs, units, drop-ins, the footprint record (venvs: by their lock).
FILES = ("find /etc/vllm-omni /etc/systemd/system /var/lib/vllm-omni -xdev -type f "
         "\\( -path '*vllm-omni*' -o -path '*mooncake*' -o -path '*nginx*' \\) -print0 2>/dev/null "
         "| sort -z | xargs -0 sha256sum")


def host_state(host: str) -> dict:
    """Every file a deploy manages there (by hash) and the main PID of every unit of ours."""
    units = on(host, "systemctl list-units --all --plain --no-legend 'vllm-omni*' 'mooncake*' nginx.service "
                     "| awk '{print $1}'").split()
    return {"files": on(host, FILES), "pids": {u: on(host, f"systemctl show -p MainPID --value {u}").strip()
                                               for u in sorted(units)}}


def test_a_deploy_limited_to_one_host_changes_that_host_only(two_hosts):
    base = two_hosts(**LIMIT_BASE)
    playbook("deploy.yml", base)  # a known starting point (and the discovery of both hosts kept on the controller)
    # The operator restarted lab-2's pipeline as often as systemd's start limit allows within its interval
    # (StartLimitBurst 5 in 900 s): a sixth start would be refused ("start request repeated too quickly")
    # unless the deploy clears the counter before its own, deliberate start (roles/engine reset_start_limit.yml).
    restarts = on("lab-2", "systemctl reset-failed vllm-omni@omni0; for i in 1 2 3 4 5; do "
                           "systemctl restart vllm-omni@omni0 || exit 1; done; echo restarted")
    assert restarts.strip() == "restarted", restarts
    # Then it drifts: its pipeline is stopped and its environment file edited.
    on("lab-2", "systemctl stop vllm-omni@omni0 && echo DRIFT=1 >> /etc/vllm-omni/omni0/engine.env")
    lab1 = host_state("lab-1")
    started = time.monotonic()
    result = playbook("deploy.yml", base, "--limit", "lab-2")
    seconds = round(time.monotonic() - started, 1)
    record("limit_one_host", seconds=seconds)
    assert set(recap(result.stdout)) == {"lab-2"}, result.stdout[-3000:]
    assert host_state("lab-1") == lab1, "a deploy limited to lab-2 changed lab-1"
    assert "DRIFT" not in on("lab-2", "cat /etc/vllm-omni/omni0/engine.env")
    assert on("lab-2", "systemctl is-active vllm-omni@omni0").strip() == "active"
    assert "planned from their last discovery" in result.stdout or "leaves lab-1 as they are" in result.stdout
    # lab-2 converged: the same limit again changes nothing.
    again = playbook("deploy.yml", base, "--limit", "lab-2")
    assert recap(again.stdout)["lab-2"]["changed"] == 0, again.stdout[-3000:]


def test_a_limit_leaving_out_the_router_of_a_new_pipeline_is_refused_then_the_pipeline_and_router_deploy(
        two_hosts, tmp_path):
    two_hosts(**LIMIT_BASE)  # the deployed state of the previous test
    # lab-2 gets room for a second pipeline, which the router on lab-1 does not route to yet.
    wider = scenario(tmp_path, {"vllm_omni": {"hosts": {"lab-1": {"vllm_omni_gpus": list(range(6))},
                                                        "lab-2": {"vllm_omni_gpus": list(range(6))}}},
                                "vllm_omni_router": {"hosts": {"lab-1": None}}},
                     {"vllm_omni_engine_backend": "simulator", "vllm_omni_served_model_name": "qwen3-omni",
                      "vllm_omni_api_key": KEY_FILE.read_text().strip(), **LIMIT_BASE})
    before = {host: host_state(host) for host in ("lab-1", "lab-2")}
    result = playbook("deploy.yml", wider, "--limit", "lab-2", check=False)
    assert result.returncode != 0
    assert result.stdout.count("fatal: [") == 1, result.stdout[-3000:]
    line = " ".join(result.stdout.split("fatal: [")[-1].split())
    assert "--limit lab-2 leaves out router host lab-1, which does not route to http://10.77.0.12:8092 yet: " \
           "add lab-1 to --limit (nothing has been changed)" in line, line
    assert {host: host_state(host) for host in before} == before
    # As told: the new pipeline's host and the router. lab-1's pipelines go on as they were.
    lab1_pipelines = {u: pid for u, pid in before["lab-1"]["pids"].items() if u.startswith("vllm-omni@")}
    playbook("deploy.yml", wider, "--limit", "lab-2,lab-1")
    assert {u: pid for u, pid in host_state("lab-1")["pids"].items() if u.startswith("vllm-omni@")} == lab1_pipelines
    assert "http://10.77.0.12:8092" in json.loads(on("lab-1", f"curl -s {ROUTER_ADMIN}/list_workers"))["urls"]
    assert on("lab-2", "systemctl is-active vllm-omni@omni1").strip() == "active"


def test_check_diff_on_an_empty_controller_cache_downloads_and_writes_nothing(two_hosts, tmp_path):
    # A setting of every serving pipeline changes: --check shows the roll it would do, and does none of it.
    base = two_hosts(vllm_omni_extra_env={"ROLLOUT_MARK": "check"})
    before = {host: host_state(host) for host in ("lab-1", "lab-2")}
    cache = tmp_path / "empty-cache"
    cache.mkdir()
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "VLLM_OMNI_CACHE": str(cache)}
    result = subprocess.run(["ansible-playbook", "playbooks/deploy.yml", "-i", str(LAB_INVENTORY), "-i", str(base),
                             "--check", "--diff"], cwd=REPO, env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    out = " ".join(result.stdout.split())
    assert "--check: nothing was downloaded or written on the controller or the hosts; a deploy would:" in out, out[-4000:]
    assert "not filled on the controller: would download" in out and "bytes unknown" in out, out[-4000:]
    assert "a deploy would make the CA and issue the certificate of this router" in out, out[-4000:]
    assert "lab-2: would drain omni0 from the routers, restart, check and re-admit" in out, out[-4000:]
    # Nothing at all on the controller: no wheel set, model, manifest, discovery, report, CA or certificate.
    written = sorted(str(p.relative_to(cache)) for p in cache.rglob("*"))
    record("check_empty_cache", controller_written=written)
    assert written == [], written
    assert {host: host_state(host) for host in before} == before


def test_bench_runs_a_tiny_grid_through_the_front_door_and_compares(two_hosts, tmp_path):
    """vllm_omni.serve.bench against the simulator: report.json, report.md, PNGs; compare on two reports."""
    out = tmp_path / "bench"
    grid = json.dumps({"bench_input_lens": [16], "bench_output_lens": [8], "bench_concurrency": [1, 2],
                       "bench_prompts_min": 2, "bench_prompts_per_concurrency": 2})
    started = time.monotonic()
    result = playbook("bench.yml", two_hosts(), "-e", f"bench_output_dir={out}", "-e", "bench_label=sim", "-e", grid)
    seconds = time.monotonic() - started
    assert "faults-test-key" not in result.stdout + result.stderr  # the key is never printed
    report = json.loads((out / "report.json").read_text())
    meta, cells = report["meta"], report["cells"]
    assert meta["simulator"] is True and meta["harness"] == "builtin" and meta["url"] == ROUTER and meta["label"] == "sim"
    assert (meta["pipelines"], meta["gpus"]) == (3, 9)
    assert [(c["concurrency"], c["num_prompts"], c["failed"]) for c in cells] == [(1, 2, 0), (2, 4, 0)]
    assert all(c["completed"] == c["num_prompts"] and c["ttft_ms"]["p50"] > 0 and c["output_throughput"] > 0
               for c in cells), cells
    assert "SIMULATOR" in (out / "report.md").read_text() and "SIMULATOR" in result.stdout
    for name in ("ttft.png", "itl.png", "throughput.png", "throughput_per_gpu.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG", name
    compared = tmp_path / "compare"
    playbook("bench.yml", two_hosts(), "-e", f"bench_output_dir={compared}",
             "-e", json.dumps({"bench_compare": [str(out / "report.json"), str(out / "report.json")]}))
    text = (compared / "compare.md").read_text()
    assert "| 16 | 8 | 2 | TTFT p50 ms |" in text and (compared / "compare_ttft.png").is_file()
    record("bench_tiny_grid", seconds=round(seconds), cells=[{k: c[k] for k in ("concurrency", "completed")}
                                                             | {"ttft_p50_ms": c["ttft_ms"]["p50"]} for c in cells])
