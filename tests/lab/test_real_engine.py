"""The real engine (vLLM-Omni 0.26.0) on lab hosts without a GPU: `make lab-test` (part of `make test`; needs root).

Each test states what it proves:
* the real-engine backend installs from the controller wheelhouse on a GPU-less Debian 13 lab host without a
  route to the index, and the on-host config check (the installed vLLM-Omni) accepts every stage config before
  it goes live, and refuses the recipe as documented;
* a pipeline's head and headless stage, on two lab hosts, register with each other through the firewall with
  the values the plan gave their units.
Both need what conformance leaves in the controller cache: the engine's venv and the model config it resolved.
`make test` starts this module once the checks chain has ended (tests/lab/lanes.py), when it has also freed the
disk its other engines held.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest
from test_lab import CACHE, LAB, LAB_INVENTORY, REPO, TRIXIE, lab, on, playbook, put, scenario  # the lab's helpers

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.host._engine_data import support_table

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root (CI runs as root)")


@pytest.fixture(scope="module")
def one_host():
    lab("up", "--hosts", "1", "--releases", TRIXIE)  # no GPU stand-in: GPUs come from vllm_omni_gpus, ascending
    yield "lab-1"
    lab("down")


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
    revision = str(support_table()["0.26.0"].kv_connector("mooncake")["revision"])  # the one the plan pins
    assert connector == ["/opt/vllm-omni/venvs/vllm-omni-0.26.0/lib/python3.13/site-packages/vllm_omni_serve_kv.py",
                         revision]
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
    # Never discovered in this lab's cache: a module that ran before in the same lane may have deployed a lab-3 of
    # another release (test_multihost's is Debian 13), and a host outside the limit is planned from its last
    # discovery, which would then contradict the platform this inventory says.
    (CACHE / "discovery" / "lab-3.json").unlink(missing_ok=True)
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
    # lab-3's wheel set (Debian 12), outside the limit, is neither filled on the controller nor described.
    assert "-debian12-" not in result.stdout, [line for line in result.stdout.splitlines() if "-debian12-" in line][:5]
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
