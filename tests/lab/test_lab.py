"""Deploys to real systemd hosts in the local lab (systemd-nspawn), beyond the molecule scenarios.

`make lab-test` (part of `make test`; needs root). The module's host, lab-1, runs Debian 13 (trixie,
CPython 3.13, systemd 257): what it proves, it proves for that platform's locks and interpreter (the
other lab modules run Debian 12 hosts, test_multihost.py a fleet of both). Each test states what it proves:
* the lab itself: `up` is idempotent, `down` leaves nothing behind;
* `--check --diff` on a fresh host shows the diffs and changes nothing;
* changing one pipeline restarts only that pipeline (unit start timestamps), removing one stops it,
  deletes its files and updates the router without touching the other engines; mooncake_master from the
  non-CUDA wheel runs beside them for real and answers /health;
* the installed tarball, driven by another Python's ansible-core, deploys; uninstall removes units, configs,
  venvs and users and keeps the model cache.
The real engine on lab hosts is test_real_engine.py's.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
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
    result = subprocess.run([*LAB, *args], capture_output=True, text=True, check=False)
    shown = f"lab.py {' '.join(args)}: exit {result.returncode}\n{result.stdout[-2000:]}{result.stderr[-3000:]}"
    assert result.returncode == 0, shown
    return result


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


def the_master_from_the_non_cuda_wheel_answers_health_on_its_address_only(host: str) -> None:
    health = json.loads(on(host, "curl -s http://10.77.0.11:9003/health"))
    assert health["status"] == "ok"
    assert "master_" in on(host, "curl -s http://10.77.0.11:9003/metrics")
    sockets = on(host, "ss -H -ltn")
    assert "10.77.0.11:50051" in sockets and "0.0.0.0:50051" not in sockets and ":8080" not in sockets
    journal = on(host, "journalctl -a -u mooncake-master -n 50 --no-pager")  # docs/operations.md, Logs
    assert len(journal.splitlines()) > 1 and "blob data" not in journal, journal[-2000:]


def test_one_changed_pipeline_restarts_alone_and_a_removed_one_goes(one_host, tmp_path):
    # With the Mooncake master (from its non-CUDA wheel set, on Debian 13): it stays through both changes.
    master = {"vllm_omni_mooncake_master_enabled": True}
    first = simulator(tmp_path, gpus=list(range(6)), **master)
    playbook("deploy.yml", first)
    the_master_from_the_non_cuda_wheel_answers_health_on_its_address_only(one_host)
    before = {unit: started_at(one_host, unit) for unit in ("vllm-omni@omni0", "vllm-omni@omni1")}
    router_before = started_at(one_host, "vllm-omni-router")
    # GPU 5 -> 7 changes only omni1's GPU set (omni0 keeps 0,1,2).
    changed = simulator(tmp_path, gpus=[0, 1, 2, 3, 4, 7], **master)
    playbook("deploy.yml", changed)
    after = {unit: started_at(one_host, unit) for unit in before}
    assert after["vllm-omni@omni0"] == before["vllm-omni@omni0"], "omni0 was restarted though nothing of it changed"
    assert after["vllm-omni@omni1"] != before["vllm-omni@omni1"], "omni1 changed but was not restarted"
    assert 'CUDA_VISIBLE_DEVICES="3,4,7"' in on(one_host, "cat /etc/vllm-omni/omni1/engine.env")
    assert started_at(one_host, "vllm-omni-router") == router_before  # membership unchanged
    # One pipeline fewer: omni1 stops, its files go, the router drops it, omni0 keeps running.
    fewer = simulator(tmp_path, gpus=[0, 1, 2, 3, 4, 7], vllm_omni_pipelines_per_host=1, **master)
    playbook("deploy.yml", fewer)
    assert on(one_host, "systemctl is-active vllm-omni@omni1").strip() in ("inactive", "unknown")
    assert "No such file" in on(one_host, "ls /etc/vllm-omni/omni1 /etc/systemd/system/vllm-omni@omni1.service.d 2>&1")
    assert started_at(one_host, "vllm-omni@omni0") == before["vllm-omni@omni0"]
    # Membership is live (/remove_worker): the router keeps running and serving omni0.
    assert started_at(one_host, "vllm-omni-router") == router_before
    workers = json.loads(on(one_host, "curl -s http://127.0.0.1:18000/list_workers"))["urls"]  # vllm-router's own API
    assert workers == ["http://10.77.0.11:8091"]
    playbook("uninstall.yml", fewer)  # the next test installs the tarball onto a host without a deployment


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
