"""The controller's half of the no-op check: what each host is looked at for, and what the digest covers."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess

import yaml
from unitlib import REPO

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime import _converge
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime._converge import (
    COMPUTED_VARIABLES,
    RUN_SWITCHES,
    VARIABLE_PREFIXES,
    certificates_due,
    fleet_digest,
    host_look,
    operator_variables,
)

GOLDEN = REPO / "tests" / "golden"


def plan(name: str = "pd-2hosts") -> dict:
    return json.loads((GOLDEN / name / "expected" / "plan.json").read_text())


def openssl(due: set[str]):
    def run(argv, **_kwargs):
        assert argv[:2] == ["openssl", "x509"], argv
        return subprocess.CompletedProcess(argv, 1 if any(h in argv[3] for h in due) else 0, "", "")
    return run


def test_an_engine_host_is_looked_at_for_its_footprint_artifacts_kernel_settings_firewall_and_health():
    fleet = plan()
    look = host_look(fleet, "gpu-1")
    footprint = fleet["footprint"]["gpu-1"]
    assert look["files"] == [f["path"] for f in footprint["files"]]
    assert look["units"] == [u["name"] for u in footprint["units"]]
    assert look["venvs"] == footprint["venvs"] and look["directories"] == [d["path"] for d in footprint["directories"]]
    assert look["trees"] and all(tree.startswith(("/var/cache/vllm-omni/wheelhouse/", "/var/lib/vllm-omni/hf/"))
                                 for tree in look["trees"])
    assert look["sysctl"] == fleet["paths"]["mooncake_sysctl"]
    assert look["firewall"] == "inet vllm_omni"
    assert look["health"] == ["http://192.168.10.21:9000/health"]


def test_a_router_host_adds_the_front_door_service_and_the_router_s_own_readiness():
    look = host_look(plan(), "edge-1")
    assert "nginx.service" in look["units"] and "vllm-omni-router.service" in look["units"]
    assert look["health"] == ["http://127.0.0.1:18000/readiness"]
    assert look["sysctl"] is None  # no Mooncake on a router-only host
    assert host_look(plan(), "not-a-host") == {}


def test_the_digest_follows_the_plan_the_code_the_tls_material_and_a_staged_directory(tmp_path):
    environ = {"VLLM_OMNI_CACHE": str(tmp_path / "cache")}
    fleet, code = plan(), tmp_path / "collection"
    for part in ("plugins", "roles", "playbooks", "data", "meta"):
        (code / part).mkdir(parents=True)
    (code / "galaxy.yml").write_text("version: 1\n")
    (code / "roles" / "main.yml").write_text("a\n")
    (code / "plugins" / "__pycache__").mkdir()
    first = fleet_digest(fleet, environ=environ, root=code, run=openssl(set()))
    assert first == fleet_digest(copy.deepcopy(fleet), environ=environ, root=code, run=openssl(set()))
    changed = copy.deepcopy(fleet)
    changed["hosts"]["gpu-1"]["pipelines"][0]["argv"].append("--enforce-eager")
    assert fleet_digest(changed, environ=environ, root=code, run=openssl(set())) != first
    # Bytecode is not code that changed; a role file is (the digest is taken once per controller process).
    (code / "plugins" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    _converge._code_digests.clear()
    assert fleet_digest(fleet, environ=environ, root=code, run=openssl(set())) == first
    (code / "roles" / "main.yml").write_text("b\n")
    _converge._code_digests.clear()
    second = fleet_digest(fleet, environ=environ, root=code, run=openssl(set()))
    assert second != first
    # The collection's own TLS material on the controller (a new CA or certificate is installed by a deploy).
    (tmp_path / "cache" / "tls").mkdir(parents=True)
    (tmp_path / "cache" / "tls" / "ca.pem").write_text("CA 1\n")
    third = fleet_digest(fleet, environ=environ, root=code, run=openssl(set()))
    (tmp_path / "cache" / "tls" / "ca.pem").write_text("CA 2\n")
    assert len({second, third, fleet_digest(fleet, environ=environ, root=code, run=openssl(set()))}) == 3
    # A certificate a deploy would renew now.
    assert fleet_digest(fleet, environ=environ, root=code, run=openssl({"edge-1"})) != \
        fleet_digest(fleet, environ=environ, root=code, run=openssl(set()))
    # A model staged from a controller directory: its files' listing (not their bytes).
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    staged = copy.deepcopy(fleet)
    item = next(i for i in staged["artifacts"]["items"] if i["kind"] == "wheels")
    item["source"] = {"kind": "directory", "directory": str(model)}
    before = fleet_digest(staged, environ=environ, root=code, run=openssl(set()))
    (model / "model.safetensors").write_bytes(b"\0" * 8)
    assert fleet_digest(staged, environ=environ, root=code, run=openssl(set())) != before
    shutil.rmtree(model)
    try:
        fleet_digest(staged, environ=environ, root=code, run=openssl(set()))
    except OSError as error:  # the filter turns this into one line naming the path
        raise AssertionError("a missing directory is an empty listing, not an error") from error


def test_only_generated_certificates_on_router_hosts_can_be_due_within_the_plan_s_renewal_window(tmp_path):
    environ = {"VLLM_OMNI_CACHE": str(tmp_path)}
    fleet = plan()
    assert certificates_due(fleet, environ, openssl({"edge-1"})) == ["edge-1"]
    assert certificates_due(fleet, environ, openssl(set())) == []
    own = copy.deepcopy(fleet)
    own["router"]["frontdoor"]["tls"]["source"] = "files"
    assert certificates_due(own, environ, openssl({"edge-1"})) == []
    # The window openssl is asked about is vllm_omni_tls_certificate_renew_days, as the frontdoor role renews.
    asked = []
    windowed = copy.deepcopy(fleet)
    windowed["router"]["frontdoor"]["tls"]["renew_days"] = 45
    certificates_due(windowed, environ, lambda argv, **_: asked.append(argv) or subprocess.CompletedProcess(argv, 0))
    assert asked and all(argv[argv.index("-checkend") + 1] == str(45 * 86400) for argv in asked)


def test_operator_variables_are_the_collection_s_and_the_roles_without_computed_facts_or_one_run_switches():
    chosen = operator_variables({
        "vllm_omni_api_key": "k", "engine_install_only": True, "frontdoor_certificate_days": 90,
        "vllm_omni_plan": {"huge": True}, "vllm_omni_gpu_facts": {"memory_used": 7}, "vllm_omni_converge": "full",
        "upgrade_force_restart": True, "ansible_host": "10.0.0.1", "inventory_hostname": "gpu-1", "hostvars": {},
    })
    assert chosen == {"vllm_omni_api_key": "k", "engine_install_only": True, "frontdoor_certificate_days": 90}


def _set_names(node, found: set[str]) -> None:
    if isinstance(node, list):
        for item in node:
            _set_names(item, found)
    elif isinstance(node, dict):
        for key, value in node.items():
            if key == "register" and isinstance(value, str):
                found.add(value)
            elif key in ("set_fact", "ansible.builtin.set_fact") and isinstance(value, dict):
                found.update(name for name in value if name != "cacheable")
            elif key == "vars" and isinstance(value, dict):
                found.update(value)
            _set_names(value, found)


def test_every_variable_the_plays_before_the_check_set_is_left_out_of_the_operator_s():
    """plan.yml, facts.yml, preflight.yml up to the check and converge.yml itself run before the check: a name they
    set (register, set_fact, play or task vars) that has a digest prefix must be declared computed, or every run
    would differ from the last."""
    found: set[str] = set()
    for name in ("plan.yml", "facts.yml", "preflight.yml", "converge.yml"):
        plays = yaml.safe_load((REPO / "playbooks" / name).read_text())
        if name == "preflight.yml":
            imports = [str(play.get("ansible.builtin.import_playbook")) for play in plays]
            plays = plays[:imports.index("converge.yml")]
        _set_names(plays, found)
    for variables in ("plan.yml", "converge.yml"):
        for line in (REPO / "playbooks" / "vars" / variables).read_text().splitlines():
            if line and not line.startswith(("#", "-", " ")):
                found.add(line.split(":", 1)[0])
    prefixed = {name for name in found if name.startswith(VARIABLE_PREFIXES)}
    assert prefixed, "the scan found nothing: it reads the wrong files"
    assert prefixed <= COMPUTED_VARIABLES | RUN_SWITCHES, sorted(prefixed - COMPUTED_VARIABLES)


def test_the_check_and_the_front_door_read_one_renewal_window_the_plan_s():
    generated = (REPO / "roles" / "frontdoor" / "tasks" / "tls_generated.yml").read_text()
    assert "vllm_omni_plan.router.frontdoor.tls.renew_days" in generated
    for playbook in ("converge.yml", "record.yml"):
        text = (REPO / "playbooks" / playbook).read_text()
        assert "vllm_omni_plan | vllm_omni.serve.converge_digest" in text and "renew_days" not in text


def test_the_record_holds_the_digest_taken_at_the_end_of_the_deploy():
    """A deploy that makes the front door's certificate (a new router host) must record the material it installed:
    with the digest of the run's start, the next deploy found it changed and ran every play once more (seen at 8
    and 16 lab machines, docs/benchmarks.md "Scale")."""
    record = yaml.safe_load((REPO / "playbooks" / "record.yml").read_text())
    tasks = record[0]["tasks"]
    names = [task["name"] for task in tasks]
    at_end = names.index("Footprint | the digest of what this deploy installed (plan, collection, TLS material as it is now)")
    recorded = names.index("Footprint | record this whole deploy for the next one's no-op check")
    assert at_end < recorded and "converge_digest" in tasks[at_end]["ansible.builtin.set_fact"]["converge_fleet_digest_at_end"]
    assert tasks[recorded]["vllm_omni.serve.converge_state"]["digest"] == \
        "{{ hostvars['localhost'].converge_fleet_digest_at_end }}"
