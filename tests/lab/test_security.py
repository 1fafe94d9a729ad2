"""Firewall and unit sandboxing on the local lab (simulator backend, real router and Mooncake master; needs root).

Three machines: lab-1 (one engine pipeline, the router and the Mooncake master), lab-2 (one engine
pipeline) and lab-3, which is on the same bridge but NOT in the deployment's
inventory: the outsider. The controller (10.77.0.1) is a configured router client (the lab inventory
sets vllm_omni_router_client_cidrs to it) but not an inventory peer.
"""

from __future__ import annotations

import json
import os
import re
import ssl
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from test_lab import CACHE, MEASURED, lab, on, playbook, scenario, started_at

REPO = Path(__file__).resolve().parents[2]
KEY = "security-test-key-0123456789abcdef"
ENGINES = {"lab-1": "10.77.0.11", "lab-2": "10.77.0.12"}
OUTSIDER = "lab-3"
UNITS = {"lab-1": ["vllm-omni@omni0", "vllm-omni-router", "mooncake-master", "vllm-omni-firewall"],
         "lab-2": ["vllm-omni@omni0", "vllm-omni-firewall"]}

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root (CI runs as root)")


def inventory(tmp_path_factory, **group_vars) -> Path:
    groups = {"vllm_omni": {"hosts": {"lab-1": {"vllm_omni_gpus": [0, 1, 2]}, "lab-2": {"vllm_omni_gpus": [0, 1, 2]}}},
              "vllm_omni_router": {"hosts": {"lab-1": None}}}
    return scenario(tmp_path_factory.mktemp("inventory"), groups,
                    {"vllm_omni_engine_backend": "simulator", "vllm_omni_served_model_name": "qwen3-omni",
                     "vllm_omni_api_key": KEY, "vllm_omni_mooncake_master_enabled": True, **group_vars})


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    lab("up", "--hosts", "3")
    playbook("deploy.yml", inventory(tmp_path_factory))
    yield tmp_path_factory
    lab("down")


def reaches(source: str, address: str, port: int) -> bool:
    """Whether a TCP connection from lab machine ``source`` to address:port is accepted (2 s timeout)."""
    probe = ("import socket,sys\ns=socket.socket();s.settimeout(2)\n"
             f"try:\n s.connect(('{address}',{port}));print('OPEN')\nexcept OSError as e:\n print('SHUT',e)")
    return on(source, f"python3 -c \"{probe}\"").startswith("OPEN")


CA_FILE = CACHE / "tls" / "ca.pem"
FRONT_DOOR = "https://10.77.0.11:8000"


def tls() -> ssl.SSLContext:
    """What a client of the deployment trusts: the collection's CA (make demo prints its path), verified strictly
    as Python 3.13's default context does (a CA without keyUsage, or a certificate without an authority key id,
    is refused there)."""
    context = ssl.create_default_context(cafile=str(CA_FILE))
    context.verify_flags |= ssl.VERIFY_X509_STRICT
    return context


def controller_get(url: str, key: str | None = None, method: str = "GET", body: dict | None = None) -> int:
    request = urllib.request.Request(url, method=method, data=json.dumps(body).encode() if body else None,  # noqa: S310
                                     headers={"Content-Type": "application/json",
                                              **({"Authorization": f"Bearer {key}"} if key else {})})
    try:
        with urllib.request.urlopen(request, timeout=5,  # noqa: S310 - lab address
                                    context=tls() if url.startswith("https") else None) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return 0


def test_engine_bootstrap_and_mooncake_ports_answer_peers_only(deployed):
    # lab-2 is a peer: it reaches lab-1's engine API, bootstrap and Mooncake range.
    assert reaches("lab-2", ENGINES["lab-1"], 8091)
    # lab-3 is on the same network but not in the inventory: every planned port is closed to it...
    for host, address in ENGINES.items():
        for port in (8091, 8998, 16000):
            assert not reaches(OUTSIDER, address, port), f"{OUTSIDER} reached {host}:{port}"
    assert not reaches(OUTSIDER, ENGINES["lab-1"], 50051), "the Mooncake master's RPC port is open to a non-peer"
    # ...and ports the plan does not own are not touched (sshd).
    assert reaches(OUTSIDER, ENGINES["lab-1"], 22)
    drops = on("lab-1", "nft list chain inet vllm_omni input")
    assert re.search(r"tcp dport 8091 counter packets [1-9]\d* bytes \d+ drop", drops), drops


def test_router_port_answers_configured_clients_and_peers_only(deployed):
    assert controller_get(f"{FRONT_DOOR}/health") == 200  # the controller is a configured client
    assert controller_get("http://10.77.0.11:8091/health") == 0  # but not a peer: the engine stays closed
    assert reaches("lab-2", ENGINES["lab-1"], 8000)
    assert not reaches(OUTSIDER, ENGINES["lab-1"], 8000)


CHAT = {"model": "qwen3-omni", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def front_door_log() -> list[str]:
    return on("lab-1", "cat /var/log/nginx/vllm-omni.access.log").splitlines()


def test_the_front_door_speaks_tls_checks_the_key_and_hides_the_routers_admin_api(deployed):
    """From the controller, a client inside the client networks, and the outsider (not in any list)."""
    # Plain HTTP to the TLS port fails (nginx answers 400, "plain HTTP request was sent to HTTPS port").
    assert controller_get("http://10.77.0.11:8000/v1/chat/completions", KEY, "POST", CHAT) == 400
    # No key, a wrong key: refused at the door, and the router never saw them (no upstream in the log).
    before = len(front_door_log())
    assert controller_get(f"{FRONT_DOOR}/v1/chat/completions", None, "POST", CHAT) == 401
    assert controller_get(f"{FRONT_DOOR}/v1/chat/completions", "x" * 32, "POST", CHAT) == 401
    # nginx matches plain map strings ignoring case: the key in other case must still be refused.
    assert controller_get(f"{FRONT_DOOR}/v1/chat/completions", KEY.upper(), "POST", CHAT) == 401
    refused = front_door_log()[before:]
    assert len(refused) == 3 and all(" 401 " in line and "upstream=- " in line for line in refused), refused
    # The right key over TLS: a completion, through the door to the router.
    assert controller_get(f"{FRONT_DOOR}/v1/chat/completions", KEY, "POST", CHAT) == 200
    assert "upstream=127.0.0.1:18000" in front_door_log()[-1]
    # vllm-router's admin API is not there at the door, and its own port is loopback only.
    for path in ("/add_worker?url=http://10.77.0.13:1", "/remove_worker?url=http://10.77.0.11:8091", "/list_workers",
                 "/workers"):
        assert controller_get(f"{FRONT_DOOR}{path}", KEY, "POST") == 404, path
    # Nor through /v1/ with dot segments, encoded dots or doubled slashes (sent as they are, unnormalised).
    for path in ("/v1/../list_workers", "/v1/%2e%2e/list_workers", "/v1//models"):
        status = on("lab-2", f"curl -s -o /dev/null -w '%{{http_code}}' --path-as-is -k -H 'Authorization: Bearer {KEY}' "
                             f"{FRONT_DOOR}{path}")
        assert status == "404", (path, status)
    assert not reaches("lab-2", ENGINES["lab-1"], 18000)  # even a peer: vllm-router listens on 127.0.0.1
    assert "127.0.0.1:18000" in on("lab-1", "ss -H -ltn") and "0.0.0.0:18000" not in on("lab-1", "ss -H -ltn")
    # The client reaches the door and nothing behind it: engines, bootstrap, Mooncake, the router's own port.
    for port in (8091, 8998, 16000, 18000, 50051):
        assert controller_get(f"http://10.77.0.11:{port}/health") == 0, port
    # The key never lands in the door's log.
    assert KEY not in on("lab-1", "cat /var/log/nginx/vllm-omni.access.log /var/log/nginx/error.log")


def test_the_front_door_turned_off_and_on_again(deployed):
    """Off: vllm-router itself takes the port, in plain HTTP (and says so); on again: TLS and loopback.

    Each of the two deploys also changes the engines' environment, so it rolls both pipelines before the router
    play moves the router: the drain and the re-admission find the running router at its address of the door's
    other state (off: loopback behind the old door; on: its public port)."""
    before = {host: started_at(host, "vllm-omni@omni0") for host in ENGINES}
    playbook("deploy.yml", inventory(deployed, vllm_omni_frontdoor_enabled=False,
                                     vllm_omni_extra_env={"DOOR_MARK": "off"}))
    try:
        listening = on("lab-1", "ss -H -ltnp")
        assert "10.77.0.11:8000" in listening and "vllm" in listening.split("10.77.0.11:8000")[1].split("\n")[0]
        assert controller_get("http://10.77.0.11:8000/health") == 200
        assert on("lab-1", "test -e /etc/nginx/conf.d/vllm-omni.conf || echo gone").strip() == "gone"
        rolled = {host: started_at(host, "vllm-omni@omni0") for host in ENGINES}
        assert all(rolled[host] != before[host] for host in ENGINES), (before, rolled)
        workers = on("lab-1", "curl -s http://10.77.0.11:8000/list_workers")
        assert all(f"{ip}:8091" in workers for ip in ENGINES.values()), workers
    finally:
        playbook("deploy.yml", inventory(deployed))
    assert controller_get(f"{FRONT_DOOR}/v1/chat/completions", KEY, "POST", CHAT) == 200
    assert "127.0.0.1:18000" in on("lab-1", "ss -H -ltn")
    assert all(started_at(host, "vllm-omni@omni0") != rolled[host] for host in ENGINES), "the second deploy rolled nothing"
    workers = on("lab-1", "curl -s http://127.0.0.1:18000/list_workers")
    assert all(f"{ip}:8091" in workers for ip in ENGINES.values()), workers


def test_the_table_comes_back_when_nftables_service_reloads_restarts_or_stops(deployed):
    """nftables.service flushes the whole ruleset on start, reload and stop; the engines keep listening."""
    for action in ("restart", "reload", "stop", "start"):
        on("lab-1", f"systemctl {action} nftables; sleep 1")
        assert "table inet vllm_omni" in on("lab-1", "nft list tables"), f"nftables {action} dropped our table"
        assert on("lab-1", "systemctl is-active vllm-omni@omni0").strip() == "active"
        assert not reaches(OUTSIDER, ENGINES["lab-1"], 8091), f"after nftables {action} the engine port is open"


def test_engines_do_not_serve_without_their_firewall(deployed):
    """Fail closed: the engine units require the firewall unit; stopping it stops them, they never run unfiltered."""
    on("lab-2", "systemctl stop vllm-omni-firewall; "
                "for i in $(seq 20); do systemctl is-active -q vllm-omni-firewall || break; sleep 0.5; done")
    try:
        tables = on("lab-2", "nft list tables")
        if "vllm_omni" in tables:
            # The nspawn lab only: systemd there sometimes cannot re-create a finished oneshot's cgroup, so
            # ExecStop fails to spawn (219/CGROUP) and the table stays (which still filters). Anything else
            # is a real failure; after that quirk the table goes by hand and the rest of the test holds.
            journal = on("lab-2", "journalctl --no-pager -n 60 2>&1")
            assert "vllm-omni-firewall.service: Failed at step CGROUP" in journal, tables + journal
            on("lab-2", "nft delete table inet vllm_omni")
        assert on("lab-2", "systemctl is-active vllm-omni@omni0").strip() != "active"
        assert not reaches(OUTSIDER, ENGINES["lab-2"], 8091)
    finally:
        on("lab-2", "systemctl start vllm-omni@omni0; sleep 2")  # pulls the firewall up first (Requires=, After=)
    assert "table inet vllm_omni" in on("lab-2", "nft list tables")
    assert on("lab-2", "systemctl is-active vllm-omni@omni0").strip() == "active"


def test_units_are_sandboxed_and_everything_still_serves(deployed):
    exposure = {}
    for host, units in UNITS.items():
        for unit in units:
            assert on(host, f"systemctl is-active {unit}").strip() == "active", f"{host}: {unit} not active"
            score = on(host, f"systemd-analyze security {unit} 2>&1 | tail -1")
            match = re.search(r"exposure level for \S+: (\d+\.\d+)", score)
            assert match, score
            exposure[f"{host}/{unit}"] = float(match.group(1))
            assert exposure[f"{host}/{unit}"] <= 2.0, f"{unit}: {score}"
            if unit == "vllm-omni-firewall":
                continue  # a oneshot: nothing left running to inspect
            pid = on(host, f"systemctl show -p MainPID --value {unit}").strip()
            status = on(host, f"grep -E '^(NoNewPrivs|Seccomp|CapEff):' /proc/{pid}/status")
            assert "NoNewPrivs:\t1" in status and "Seccomp:\t2" in status and "CapEff:\t0000000000000000" in status, \
                f"{host} {unit} (pid {pid}): {status} " + on(host, f"systemctl show -p NRestarts,SubState {unit}")
            user = on(host, f"stat -c %U /proc/{pid}").strip()
            assert user and user != "root", f"{unit} runs as {user!r}"
            # ProtectSystem=strict: the venv and /etc are read-only to the service.
            ro = on(host, f"nsenter -t {pid} -m sh -c 'touch /etc/probe /opt/vllm-omni/probe' 2>&1")
            assert ro.count("Read-only file system") == 2, ro
    # The real engine's relaxed profile, analysed as a unit file (it cannot run without a GPU).
    profile = subprocess.run([sys.executable, "-c", ENGINE_PROFILE], capture_output=True, text=True, check=True,
                             cwd=REPO).stdout
    subprocess.run([*LAB_EXEC, "lab-1", "--", "sh", "-c",
                    "cat > /etc/systemd/system/vomni-engine-profile.service && systemctl daemon-reload"],
                   input=profile, text=True, check=True)
    score = on("lab-1", "systemd-analyze security vomni-engine-profile 2>&1 | tail -1; "
                        "rm /etc/systemd/system/vomni-engine-profile.service; systemctl daemon-reload")
    exposure["engine backend (GPU), unit file only"] = float(re.search(r": (\d+\.\d+)", score).group(1))
    MEASURED.mkdir(parents=True, exist_ok=True)
    (MEASURED / "security-exposure.json").write_text(json.dumps(exposure, indent=1, sort_keys=True) + "\n")
    # And they still serve: a real chat completion through the router, from a configured client.
    assert controller_get(f"{FRONT_DOOR}/v1/chat/completions", KEY, "POST", CHAT) == 200
    assert "ok" in on("lab-1", "curl -s http://10.77.0.11:9003/health")


def test_secrets_stay_in_0640_env_files_and_out_of_the_plan(deployed):
    listing = on("lab-1", "stat -c '%a %U %G' /etc/vllm-omni/omni0/engine.env")
    assert listing.strip() == "640 root vllm-omni", listing
    assert KEY in on("lab-1", "cat /etc/vllm-omni/omni0/engine.env")
    render = deployed.mktemp("render")
    playbook("render.yml", inventory(deployed), "-e", f"vllm_omni_render_dir={render}/out")
    for path in (render / "out").rglob("*"):
        if path.is_file():
            assert KEY not in path.read_text(), f"{path} holds the API key"


# Every secret the collection reads, each with a value of its own, for the -vvv search.
CLIENT_KEY = "security-client-key-abcdef0123456789"
HF_TOKEN = "hf_securityTestHubToken0123456789"  # noqa: S105 - a test value, searched for
ENGINE_HF_TOKEN = "hf_securityTestEngineToken0123456"  # noqa: S105 - a test value
EVERY_SECRET = {"vllm_omni_api_key": KEY, "vllm_omni_api_keys[0]": CLIENT_KEY, "vllm_omni_hf_token": HF_TOKEN,
                "engine_hf_token": ENGINE_HF_TOKEN}


def test_the_key_is_never_printed_even_at_vvv(deployed):
    """deploy, upgrade, status and bench at -vvv with every secret set (the API key, the keys clients may send,
    the hub token, the engines' HF token), and a smoke test that fails (the router stopped): no secret anywhere."""
    inventory_dir = inventory(deployed, vllm_omni_api_keys=[CLIENT_KEY, KEY], vllm_omni_hf_token=HF_TOKEN,
                              engine_hf_token=ENGINE_HF_TOKEN)
    outputs = {name: playbook(name, inventory_dir, "-vvv") for name in ("deploy.yml", "upgrade.yml", "status.yml")}
    # bench through the front door with the client key (one cell, two requests: it is the output that counts).
    with tempfile.TemporaryDirectory() as bench_dir:
        outputs["bench.yml"] = playbook("bench.yml", inventory_dir, "-vvv", "-e", json.dumps(
            {"bench_output_dir": bench_dir, "bench_input_lens": [16], "bench_output_lens": [8],
             "bench_concurrency": [1], "bench_prompts_per_concurrency": 2, "bench_prompts_min": 2}))
    on("lab-1", "systemctl stop vllm-omni-router")
    try:
        outputs["smoke (failing)"] = playbook("deploy.yml", inventory_dir, "--tags", "smoke", "-vvv", check=False)
        assert outputs["smoke (failing)"].returncode != 0, "the smoke test passed with the router stopped"
    finally:
        on("lab-1", "systemctl start vllm-omni-router")
    for name, result in outputs.items():
        text = result.stdout + result.stderr
        assert "vllm_omni" in text and len(text) > 10000, f"{name}: no -vvv output to search"
        for secret, value in EVERY_SECRET.items():
            assert value not in text, f"{name} printed {secret}"
    # The engines got the HF token (their 0640 secrets block) without any task showing it.
    assert ENGINE_HF_TOKEN in on("lab-1", "cat /etc/vllm-omni/omni0/engine.env")
    playbook("deploy.yml", inventory(deployed))  # back to the module's inventory for the other tests


def test_disabling_the_firewall_removes_only_our_table(deployed):
    playbook("deploy.yml", inventory(deployed, vllm_omni_firewall_enabled=False))
    assert "vllm_omni" not in on("lab-1", "nft list tables")
    assert "table inet filter" in on("lab-1", "nft list tables")  # the host's own ruleset stays
    assert reaches(OUTSIDER, ENGINES["lab-1"], 8091)
    playbook("deploy.yml", inventory(deployed))
    assert not reaches(OUTSIDER, ENGINES["lab-1"], 8091)


LAB_EXEC = [sys.executable, str(REPO / "tests" / "lab" / "lab.py"), "exec"]
ENGINE_PROFILE = """
import sys
import tempfile
sys.path.insert(0, ".collection")
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._hardening import unit_hardening
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.texts._host_files import directives_text
entries = unit_hardening("engine", "/var/lib/vllm-omni", "/var/lib/vllm-omni/hf")["engine"]
print("[Service]\\nType=oneshot\\nUser=vllm-omni\\nExecStart=/bin/true\\n" + directives_text(entries))
"""
