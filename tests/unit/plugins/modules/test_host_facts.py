"""host_facts: the OS as Ansible's setup names it and the GPUs as nvidia_gpu_facts finds them, in one call."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest
from unitlib import FIXTURES, ModuleExit, run_gpu_module

from ansible_collections.vllm_omni.serve.plugins.modules import host_facts, nvidia_gpu_facts

H200X2 = FIXTURES / "gpu" / "h200x2"


@pytest.fixture
def run_module(monkeypatch):
    def run(data_dir=H200X2, binary="/usr/bin/nvidia-smi", **params) -> ModuleExit:
        return run_gpu_module(monkeypatch, host_facts.main, data_dir, binary, **params)
    return run


def os_release() -> dict[str, str]:
    pairs = (line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line)
    return {key: value.strip('"') for key, value in pairs}


def test_the_os_facts_are_this_machines_and_the_gpu_facts_those_of_nvidia_gpu_facts(run_module):
    outcome = run_module()
    assert outcome.kind == "exit" and outcome.result["changed"] is False
    facts = outcome.result["ansible_facts"]
    release = os_release()
    os_facts = facts["vllm_omni_os_facts"]
    # What the planner matches against data/platforms.yml: from the machine itself, not from the collector's code.
    assert os_facts["distribution"].lower() == release["ID"] and os_facts["major"] == release["VERSION_ID"].split(".")[0]
    assert os_facts["version"].startswith(os_facts["major"]) and os_facts["machine"] == platform.machine()
    # The same values where the roles read them (ansible_facts.distribution, .os_family ...), and only there.
    assert facts["ansible_distribution"] == os_facts["distribution"] and facts["ansible_architecture"] == os_facts["machine"]
    assert facts["ansible_distribution_major_version"] == os_facts["major"] and facts["ansible_os_family"]
    assert all(name.startswith(("ansible_", "vllm_omni_")) for name in facts), sorted(facts)
    # The GPUs: exactly what the GPU module returns for the same nvidia-smi, its four queries.
    assert facts["vllm_omni_gpu_facts"]["count"] == 2 and len(outcome.calls) == 4


def test_gpu_facts_equal_nvidia_gpu_facts(run_module, monkeypatch):
    both = run_module(own_units=["vllm-omni@.service"]).result["ansible_facts"]["vllm_omni_gpu_facts"]
    alone = run_gpu_module(monkeypatch, nvidia_gpu_facts.main, H200X2, own_units=["vllm-omni@.service"])
    assert both == alone.result["ansible_facts"]["vllm_omni_gpu_facts"]


def test_a_host_without_nvidia_smi_has_os_facts_and_no_gpu_facts(run_module):
    outcome = run_module(binary=None)
    assert outcome.kind == "exit" and "vllm_omni_os_facts" in outcome.result["ansible_facts"]
    assert "vllm_omni_gpu_facts" not in outcome.result["ansible_facts"]


def test_gpus_false_never_runs_nvidia_smi(run_module):
    outcome = run_module(gpus=False)
    assert outcome.kind == "exit" and outcome.calls == []
    assert "vllm_omni_gpu_facts" not in outcome.result["ansible_facts"]


def test_nvidia_smi_without_a_driver_fails_with_the_fix(run_module, tmp_path):
    outcome = run_module(tmp_path / "no-driver")
    assert outcome.kind == "fail" and "load the NVIDIA kernel driver" in outcome.result["msg"]


def test_with_the_converge_record_the_same_call_takes_the_no_op_check_s_look(run_module, tmp_path):
    from ansible_collections.vllm_omni.serve.plugins.module_utils._converge import fingerprint, snapshot, write_record

    record = tmp_path / "converge.json"
    assert "converge_taken" not in run_module(gpus=False).result  # not asked: not looked at
    assert run_module(gpus=False, converge_record=str(record)).result["converge_taken"] == {
        "path": str(record), "record": False}
    config = tmp_path / "engine.env"
    config.write_text("VLLM_PORT=20000\n")
    look = {"files": [str(config)]}
    write_record(str(record), "d1", look, snapshot(look))
    outcome = run_module(gpus=False, converge_record=str(record))
    assert outcome.kind == "exit" and outcome.calls == [] and outcome.result["changed"] is False
    assert outcome.result["converge_taken"] == {"path": str(record), "record": True, "digest": fingerprint("d1"),
                                                "look": fingerprint(look), "reasons": []}
    config.write_text("VLLM_PORT=20001\n")
    reasons = run_module(gpus=False, converge_record=str(record)).result["converge_taken"]["reasons"]
    assert len(reasons) == 1 and reasons[0].startswith(f"files {config}: ")
