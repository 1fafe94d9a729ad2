"""Deploys to real systemd hosts in the local lab (systemd-nspawn), beyond the molecule scenarios.

`make lab-test` (part of `make test`; needs root). The module's host, lab-1, runs Debian 13 (trixie,
CPython 3.13, systemd 257): what it proves, it proves for that platform's locks and interpreter (the
other lab modules run Debian 12 hosts, test_multihost.py a fleet of both). Each test states what it proves:
* the lab itself: `up` is idempotent, `down` leaves nothing behind;
* `--check --diff` on a fresh host shows the diffs and changes nothing;
* changing one pipeline restarts only that pipeline (unit start timestamps), removing one stops it,
  deletes its files and updates the router without touching the other engines;
* the real-engine backend installs from the controller wheelhouse on a GPU-less lab host, and the
  on-host config check (the installed vLLM-Omni) accepts every stage config before it goes live;
* mooncake_master from the non-CUDA wheel runs for real and answers /health;
* uninstall removes units, configs, venvs and users and keeps the model cache.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from lab import INVENTORY as LAB_INVENTORY  # this lane's (lab.py, LAB_LANE), written by `up`

REPO = Path(__file__).resolve().parents[2]
LAB = [sys.executable, str(REPO / "tests" / "lab" / "lab.py")]

# This lane's controller cache (the deploys' TLS material, reports); what the modules measured for the docs goes
# to the first lab's reports directory, whichever lane measured it (tests/lab/lane.py sets LAB_MEASURED_DIR).
CACHE = Path(os.environ.get("VLLM_OMNI_CACHE") or Path.home() / ".cache" / "vllm-omni-serve")
MEASURED = Path(os.environ.get("LAB_MEASURED_DIR") or CACHE / "reports")
KEY = "lab-test-key-0123456789abcdef0123"
TRIXIE = "lab-1=trixie"  # this module's host: Debian 13 (data/platforms.yml debian13, CPython 3.13)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root (CI runs as root)")


def lab(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*LAB, *args], capture_output=True, text=True, check=True)


def on(host: str, command: str) -> str:
    result = subprocess.run([*LAB, "exec", host, "--", "sh", "-c", command], capture_output=True, text=True, check=False)
    return result.stdout


def put(host: str, path: str, text: str) -> None:
    subprocess.run([*LAB, "exec", host, "--", "sh", "-c", f"cat > {path}"], input=text, text=True, check=True)


def scenario(tmp_path: Path, groups: dict, group_vars: dict) -> Path:
    directory = tmp_path / "inventory"
    (directory / "group_vars").mkdir(parents=True, exist_ok=True)
    (directory / "hosts.yml").write_text(yaml.safe_dump(groups))
    (directory / "group_vars" / "all.yml").write_text(yaml.safe_dump({"vllm_omni_api_key": KEY, **group_vars}))
    return directory


def playbook(name: str, inventory: Path, *extra: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}
    result = subprocess.run(["ansible-playbook", f"playbooks/{name}", "-i", str(LAB_INVENTORY), "-i", str(inventory),
                             *extra], cwd=REPO, env=env, capture_output=True, text=True, check=False)
    if check:
        assert result.returncode == 0, failed_tasks(result.stdout) + result.stdout[-4000:] + result.stderr[-2000:]
    return result


def failed_tasks(output: str) -> str:
    """Each task block of a playbook's output that holds a failure (its TASK line and results, 3,000 characters
    at most each): the tail of a long run is its recap, which names the failing host but not the task."""
    blocks = [block for block in output.split("\nTASK [") if "fatal: [" in block or "failed: [" in block]
    return "".join(f"TASK [{block[:3000]}\n" for block in blocks[:4]) + ("...\n" if blocks else "")


def recap(output: str) -> dict[str, dict[str, int]]:
    hosts = {}
    for line in output.split("PLAY RECAP")[-1].splitlines():
        parts = line.split(":")
        if len(parts) == 2 and "ok=" in parts[1]:
            hosts[parts[0].strip()] = {k: int(v) for k, v in (f.split("=") for f in parts[1].split())}
    return hosts


def started_at(host: str, unit: str) -> str:
    return on(host, f"systemctl show -p ActiveEnterTimestampMonotonic --value {unit}").strip()


@pytest.fixture(scope="module")
def one_host():
    lab("up", "--hosts", "1", "--releases", TRIXIE)  # no GPU stand-in: GPUs come from vllm_omni_gpus, ascending
    yield "lab-1"
    lab("down")


def test_lab_up_is_idempotent_and_down_leaves_nothing():
    lab("up", "--hosts", "1")
    again = lab("up", "--hosts", "1")
    assert "started: none, all were running" in again.stdout
    lab("down")
    clean = subprocess.run([*LAB, "check-clean"], capture_output=True, text=True, check=False)
    assert clean.returncode == 0, clean.stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    assert "vomni-br0" not in links and "vb-lab-" not in links
    assert str(REPO / "inventories" / "lab") not in Path("/proc/mounts").read_text()


def simulator(tmp_path: Path, **group_vars) -> Path:
    return scenario(tmp_path, {"vllm_omni": {"hosts": {"lab-1": {"vllm_omni_gpus": group_vars.pop("gpus")}}}},
                    {"vllm_omni_engine_backend": "simulator", "vllm_omni_served_model_name": "qwen3-omni",
                     **group_vars})


def test_check_diff_on_a_fresh_host_shows_the_change_and_makes_none(one_host, tmp_path):
    inventory = simulator(tmp_path, gpus=list(range(6)))
    result = playbook("deploy.yml", inventory, "--check", "--diff")
    assert "+++ after: /etc/vllm-omni/omni1/stage_config.yaml" in result.stdout or \
        "would build /opt/vllm-omni/venvs/xpyd-sim" in result.stdout
    assert on(one_host, "ls /etc/vllm-omni /opt/vllm-omni 2>&1").count("No such file") == 2


def test_one_changed_pipeline_restarts_alone_and_a_removed_one_goes(one_host, tmp_path):
    first = simulator(tmp_path, gpus=list(range(6)))
    playbook("deploy.yml", first)
    before = {unit: started_at(one_host, unit) for unit in ("vllm-omni@omni0", "vllm-omni@omni1")}
    router_before = started_at(one_host, "vllm-omni-router")
    # GPU 5 -> 7 changes only omni1's GPU set (omni0 keeps 0,1,2).
    changed = simulator(tmp_path, gpus=[0, 1, 2, 3, 4, 7])
    playbook("deploy.yml", changed)
    after = {unit: started_at(one_host, unit) for unit in before}
    assert after["vllm-omni@omni0"] == before["vllm-omni@omni0"], "omni0 was restarted though nothing of it changed"
    assert after["vllm-omni@omni1"] != before["vllm-omni@omni1"], "omni1 changed but was not restarted"
    assert 'CUDA_VISIBLE_DEVICES="3,4,7"' in on(one_host, "cat /etc/vllm-omni/omni1/engine.env")
    assert started_at(one_host, "vllm-omni-router") == router_before  # membership unchanged
    # One pipeline fewer: omni1 stops, its files go, the router drops it, omni0 keeps running.
    fewer = simulator(tmp_path, gpus=[0, 1, 2, 3, 4, 7], vllm_omni_pipelines_per_host=1)
    playbook("deploy.yml", fewer)
    assert on(one_host, "systemctl is-active vllm-omni@omni1").strip() in ("inactive", "unknown")
    assert "No such file" in on(one_host, "ls /etc/vllm-omni/omni1 /etc/systemd/system/vllm-omni@omni1.service.d 2>&1")
    assert started_at(one_host, "vllm-omni@omni0") == before["vllm-omni@omni0"]
    # Membership is live (/remove_worker): the router keeps running and serving omni0.
    assert started_at(one_host, "vllm-omni-router") == router_before
    workers = json.loads(on(one_host, "curl -s http://127.0.0.1:18000/list_workers"))["urls"]  # vllm-router's own API
    assert workers == ["http://10.77.0.11:8091"]


def other_controller_python() -> str:
    """A Python for the controller that is not the hosts' (3.13 on this module's host) and not 3.11 (this machine's)."""
    pyenv = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates = [shutil.which("python3.12"), shutil.which("python3.13"),
                  *sorted(glob.glob(f"{pyenv}/versions/3.1[2-9]*/bin/python3")),
                  *sorted(glob.glob("/usr/local/bin/python3.1[2-9]")), *sorted(glob.glob("/usr/bin/python3.1[2-9]"))]
    for candidate in filter(None, candidates):
        probe = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[1])"],
                               capture_output=True, text=True, check=False)
        if probe.returncode == 0 and probe.stdout.strip() not in ("", "11", "13"):
            return candidate
    pytest.fail("this test needs a Python 3.12 for the controller (this machine runs 3.11, the host 3.13): install one")


def installed_collection(tmp_path: Path) -> dict:
    """The collection as a user gets it: its tarball installed into a fresh collections path, driven by
    ansible-core in a venv of another Python, with a cache of its own (so the hosts' wheel sets are
    filled by that Python, for the host's 3.13), run from outside the checkout (no ansible.cfg)."""
    build = tmp_path / "build"
    subprocess.run(["ansible-galaxy", "collection", "build", "--output-path", str(build)], cwd=REPO,
                   capture_output=True, text=True, check=True)
    tarball = next(build.glob("vllm_omni-serve-*.tar.gz"))
    venv = tmp_path / "controller"
    subprocess.run(["uv", "venv", "-q", "--seed", "--python", other_controller_python(), str(venv)], check=True)
    core = next(line for line in (REPO / "requirements/tools.txt").read_text().splitlines()
                if line.startswith("ansible-core=="))
    subprocess.run(["uv", "pip", "install", "-q", "--python", str(venv / "bin/python"), core], check=True)
    collections = tmp_path / "collections"
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    env.update(ANSIBLE_COLLECTIONS_PATH=str(collections), VLLM_OMNI_CACHE=str(tmp_path / "cache"))
    installed = subprocess.run([str(venv / "bin/ansible-galaxy"), "collection", "install", "-p", str(collections),
                                str(tarball)], cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    assert (collections / "ansible_collections/vllm_omni/serve/playbooks/deploy.yml").is_file(), installed.stdout
    return {"venv": venv, "cwd": tmp_path, "env": env}


def installed_playbook(controller: dict, name: str, inventory: Path) -> subprocess.CompletedProcess:
    result = subprocess.run([str(controller["venv"] / "bin/ansible-playbook"), f"vllm_omni.serve.{name}",
                             "-i", str(LAB_INVENTORY), "-i", str(inventory)], cwd=controller["cwd"],
                            env=controller["env"], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    return result


def test_the_installed_tarball_on_another_python_deploys_and_uninstall_keeps_only_the_model_cache(one_host, tmp_path):
    controller = installed_collection(tmp_path)
    version = subprocess.run([str(controller["venv"] / "bin/python"), "--version"], capture_output=True, text=True,
                             check=True).stdout
    assert not version.startswith(("Python 3.11", "Python 3.13")), version
    inventory = simulator(tmp_path, gpus=list(range(3)))
    # Start from a bare host (the tests before leave a deployment): the installed copy must build every venv.
    playbook("uninstall.yml", inventory)
    deployed = installed_playbook(controller, "deploy", inventory)
    assert str(REPO) not in deployed.stdout  # every task came from the installed copy
    assert "ok=" in deployed.stdout and recap(deployed.stdout)["lab-1"]["failed"] == 0
    # The host's wheel set was filled by the 3.12 controller, for the host's platform (debian13, CPython 3.13).
    wheel_sets = list((tmp_path / "cache").glob("wheelhouse/*/.complete"))
    assert wheel_sets and all("-debian13-" in path.parent.name for path in wheel_sets), wheel_sets
    wheels = [wheel.name for wheel in (tmp_path / "cache").glob("wheelhouse/*/*.whl")]
    assert any("cp313" in name for name in wheels) and not any("cp312" in name for name in wheels)
    versions = on(one_host, 'for venv in /opt/vllm-omni/venvs/*/; do "$venv/bin/python" --version; done 2>&1').split("\n")
    versions = [line for line in versions if line]
    assert len(versions) >= 2 and all(line.startswith("Python 3.13") for line in versions), versions  # simulator, router
    on(one_host, "touch /var/lib/vllm-omni/hf/weights.marker")
    installed_playbook(controller, "uninstall", inventory)
    listing = on(one_host, "ls -d /etc/vllm-omni /opt/vllm-omni /etc/systemd/system/vllm-omni@.service "
                           "/etc/systemd/system/vllm-omni-router.service 2>&1")
    assert listing.count("No such file") == 4, listing
    # systemd forgets an unloaded unit in its idle-time garbage collection: on a loaded machine (the other lab lane
    # beside this one) that can come a few seconds after the playbook ends. A failed unit it never forgets.
    deadline = time.monotonic() + 30
    while (left := on(one_host, "systemctl list-units --all --plain --no-legend 'vllm-omni*'").strip()) and \
            time.monotonic() < deadline:
        time.sleep(0.5)
    assert left == "", left  # their states, if systemd still holds any
    assert "vllm-omni" not in on(one_host, "getent passwd | cut -d: -f1")
    assert "weights.marker" in on(one_host, "ls /var/lib/vllm-omni/hf")


def test_mooncake_master_from_the_non_cuda_wheel_answers_health(one_host, tmp_path):
    inventory = simulator(tmp_path, gpus=list(range(3)), vllm_omni_mooncake_master_enabled=True)
    playbook("deploy.yml", inventory)
    health = json.loads(on(one_host, "curl -s http://10.77.0.11:9003/health"))
    assert health["status"] == "ok"
    assert "master_" in on(one_host, "curl -s http://10.77.0.11:9003/metrics")
    sockets = on(one_host, "ss -H -ltn")
    assert "10.77.0.11:50051" in sockets and "0.0.0.0:50051" not in sockets and ":8080" not in sockets
    journal = on(one_host, "journalctl -a -u mooncake-master -n 50 --no-pager")  # docs/operations.md, Logs
    assert len(journal.splitlines()) > 1 and "blob data" not in journal, journal[-2000:]
    playbook("uninstall.yml", inventory)


def test_real_engine_installs_from_the_wheelhouse_and_checks_its_configs_on_the_host(one_host, tmp_path):
    """vllm + vllm-omni 0.26.0 (8 GB) through the wheelhouse onto a lab host without a route to PyPI.

    No GPU: units are not started (engine_install_only), and the CUDA Mooncake variant's import needs
    libcuda, so only its presence as the single variant is asserted (mooncake_import_check false).
    """
    # The model staged from a controller directory (the Qwen3-Omni config conformance resolved), so the
    # config check loads the staged snapshot offline (HF_HUB_OFFLINE=1) as the engines would.
    model = tmp_path / "model"
    model.mkdir()
    conformance = CACHE / "models" / \
        "0.26.0" / "hub" / "models--Qwen--Qwen3-Omni-30B-A3B-Instruct" / "snapshots" / "conformance" / "config.json"
    shutil.copy(conformance, model / "config.json")
    # A model directory must hold weights to be staged (the deploy door refuses one without): an empty but
    # valid safetensors file (an 8-byte header length, then the header "{}"). The config check loads none.
    (model / "model.safetensors").write_bytes((2).to_bytes(8, "little") + b"{}")
    inventory = scenario(tmp_path, {"vllm_omni": {"hosts": {"lab-1": {"vllm_omni_gpus": list(range(6))}}}},
                         {"vllm_omni_engine_backend": "engine", "vllm_omni_version": "0.26.0",
                          "vllm_omni_model_source": "directory", "vllm_omni_model_directory": str(model),
                          "vllm_omni_model_revision": "conformance-config"})
    result = playbook("deploy.yml", inventory, "--tags", "artifacts,mooncake,engine",
                      "-e", '{"engine_install_only": true, "mooncake_import_check": false, "mooncake_tune_kernel": false}')
    checked = result.stdout.split("Engine | the installed engine accepts each candidate")[1].split("TASK [")[0]
    assert "ok: [lab-1] => (item=omni0)" in checked and "ok: [lab-1] => (item=omni1)" in checked, checked
    snapshot = "/var/lib/vllm-omni/hf/hub/models--Qwen--Qwen3-Omni-30B-A3B-Instruct/snapshots/conformance-config"
    assert on(one_host, f"cat {snapshot}/config.json") == (model / "config.json").read_text()
    assert 'HF_HUB_OFFLINE="1"' in on(one_host, "cat /etc/vllm-omni/omni0/engine.env")
    versions = on(one_host, "/opt/vllm-omni/venvs/vllm-omni-0.26.0/bin/python -c "
                            "'import importlib.metadata as m; print(m.version(\"vllm\"), m.version(\"vllm-omni\"))'")
    assert versions.split() == ["0.26.0", "0.26.0"]
    # The collection's KV connector sits in the venv's site-packages, and the engine imports it there.
    connector = on(one_host, "/opt/vllm-omni/venvs/vllm-omni-0.26.0/bin/python -c "
                             "'import vllm_omni_serve_kv as k; print(k.__file__, k.REVISION)'").split()[-2:]
    assert connector == ["/opt/vllm-omni/venvs/vllm-omni-0.26.0/lib/python3.13/site-packages/vllm_omni_serve_kv.py", "3"]
    for pipeline in ("omni0", "omni1"):
        config = on(one_host, f"cat /etc/vllm-omni/{pipeline}/stage_config.yaml")
        assert "is_prefill_only: true" in config and "kv_ip: \"10.77.0.11\"" in config
        assert "kv_connector: ServeMooncakeConnector" in config and "kv_connector_module_path: vllm_omni_serve_kv" in config
        assert "No such file" in on(one_host, f"ls /etc/vllm-omni/{pipeline}/stage_config.yaml.candidate 2>&1")
    # A config the installed engine refuses never replaces the live one.
    broken = textwrap.dedent("""
        - hosts: vllm_omni
          become: true
          tasks:
            - name: the recipe as documented, through the same check
              vllm_omni.serve.config_check:
                venv: /opt/vllm-omni/venvs/vllm-omni-0.26.0
                config: /tmp/recipe.yaml
                config_flag: --stage-configs-path
    """)
    (tmp_path / "broken.yml").write_text(broken)
    put(one_host, "/tmp/recipe.yaml", (REPO / "tests" / "fixtures" / "recipe_as_documented.yaml").read_text())
    refused = subprocess.run(["ansible-playbook", str(tmp_path / "broken.yml"), "-i", str(LAB_INVENTORY), "-i",
                              str(inventory)], cwd=REPO, env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")},
                             capture_output=True, text=True, check=False)
    assert refused.returncode != 0
    assert "Missing key final_output_type" in refused.stdout
    assert "talker2code2wav_token_only cannot be imported" in refused.stdout


# How long the handshake's sides wait for each other (the engine's imports on both; the head's master port): generous,
# since on make test's two cores the other lab lane runs beside this test, and waits end as soon as they are met.
HANDSHAKE_WAIT = 300


def test_real_engine_head_and_headless_stage_register_across_lab_hosts_through_the_firewall(one_host, tmp_path):
    """A pipeline spanning lab-1 (head) and lab-2 (headless decode), with the real engine on lab-1.

    The CPU platform stops both engine processes before the head's OmniMasterServer starts
    (tests/conformance), so the handshake after that runs with vLLM-Omni's own classes
    (tests/lab/stage_handshake.py) and the units' values: the master on lab-1 with the installed
    venv, the head argv's address and port and its VLLM_PORT; the registration from lab-2's network
    with the headless argv's values. lab-3 is an inventory host outside the pipeline: dropped.
    """
    sys.path.insert(0, str(REPO / "tests" / "conformance"))
    from conftest import ensure_engine  # the controller's engine venv (make conformance builds it first)

    lab("up", "--hosts", "3", "--releases", f"{TRIXIE},lab-2=trixie")  # both pipeline hosts: one wheel set
    inventory = scenario(tmp_path, {"vllm_omni": {"hosts": {"lab-1": {"vllm_omni_gpus": [0, 1, 2]},
                                                            "lab-2": {"vllm_omni_gpus": [0]},
                                                            # Outside the limit, never discovered: its platform said.
                                                            "lab-3": {"vllm_omni_gpus": [0, 1],
                                                                      "vllm_omni_host_platform": "debian12"}}},
                                    "vllm_omni_router": {"hosts": {"lab-1": None}}},
                         {"vllm_omni_engine_backend": "engine", "vllm_omni_version": "0.26.0",
                          "vllm_omni_audio_output": False})
    # The spanning pipeline's hosts together (a limit that splits it is refused); lab-3 stays out.
    result = playbook("deploy.yml", inventory, "--limit", "lab-1,lab-2,localhost", "--tags", "artifacts,firewall,mooncake,engine",
                      "-e", '{"engine_install_only": true, "mooncake_import_check": false, "mooncake_tune_kernel": false}')
    checked = result.stdout.split("Engine | the installed engine accepts each candidate")[1].split("TASK [")[0]
    assert "ok: [lab-1] => (item=omni-span0)" in checked and "ok: [lab-1] => (item=omni0)" in checked, checked
    render = tmp_path / "render"
    playbook("render.yml", inventory, "-e", f"vllm_omni_render_dir={render}")
    plan = json.loads((render / "plan.json").read_text())
    head = next(p for p in plan["hosts"]["lab-1"]["pipelines"] if p["name"] == "omni-span0")
    decode = next(p for p in plan["hosts"]["lab-2"]["pipelines"] if p["name"] == "omni-span0-decode0")
    assert decode["argv"][decode["argv"].index("--omni-master-address") + 1] == head["kv_ip"] == "10.77.0.11"
    master = int(decode["argv"][decode["argv"].index("--omni-master-port") + 1])
    assert master == head["ports"]["master"] == int(head["argv"][head["argv"].index("--omni-master-port") + 1])
    replica = decode["argv"][decode["argv"].index("--omni-replica-address") + 1]
    put("lab-1", "/tmp/stage_handshake.py", (REPO / "tests" / "lab" / "stage_handshake.py").read_text())
    python = f"{head['paths']['venv']}/bin/python"
    on("lab-1", f"VLLM_PORT={head['environment']['VLLM_PORT']} nohup {python} /tmp/stage_handshake.py head "
                f"{head['kv_ip']} {master} 1 1 {HANDSHAKE_WAIT} > /tmp/handshake-head.out 2>&1 &")
    # The master is up once its port answers a peer of the pipeline; lab-3 (not of the pipeline) is dropped.
    from test_security import reaches
    deadline = time.monotonic() + HANDSHAKE_WAIT
    while not reaches("lab-2", head["kv_ip"], master):
        assert time.monotonic() < deadline, on("lab-1", "cat /tmp/handshake-head.out")
        time.sleep(2)
    assert not reaches("lab-3", head["kv_ip"], master)
    # The registration from lab-2's address, through lab-1's firewall: the controller's engine venv in lab-2's
    # network namespace (the same packages as lab-2's own venv).
    headless = subprocess.run([*LAB, "net", "lab-2", "--", str(ensure_engine("0.26.0") / "bin" / "python"),
                               str(REPO / "tests" / "lab" / "stage_handshake.py"), "headless", head["kv_ip"], str(master),
                               "1", replica], capture_output=True, text=True, timeout=300, check=False)
    registered = json.loads(headless.stdout.split("@@handshake@@")[-1])
    assert registered["registered"], headless.stdout[-3000:] + headless.stderr[-3000:]
    deadline = time.monotonic() + HANDSHAKE_WAIT
    while "@@handshake@@" not in on("lab-1", "cat /tmp/handshake-head.out"):
        assert time.monotonic() < deadline, on("lab-1", "cat /tmp/handshake-head.out")
        time.sleep(2)
    seen = json.loads(on("lab-1", "cat /tmp/handshake-head.out").split("@@handshake@@")[-1])
    assert seen["registered"] and seen["replica_host"] == "10.77.0.12", seen
    assert seen["handshake_message"] == "hello from stage 1 at 10.77.0.12", seen
    low, high = head["ports"]["zmq"]
    port = int(seen["handshake_address"].rsplit(":", 1)[1])
    assert seen["handshake_address"].startswith("tcp://10.77.0.11:") and low <= port <= high, seen
