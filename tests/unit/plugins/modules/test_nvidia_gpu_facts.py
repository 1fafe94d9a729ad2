"""nvidia_gpu_facts on replayed nvidia-smi output (the lab stand-in's answers), and its failures."""

from __future__ import annotations

import pytest
from unitlib import FIXTURES, ModuleExit, run_gpu_module

from ansible_collections.vllm_omni.serve.plugins.modules import nvidia_gpu_facts


@pytest.fixture
def run_module(monkeypatch):
    def run(data_dir, binary="/usr/bin/nvidia-smi", **params) -> ModuleExit:
        return run_gpu_module(monkeypatch, nvidia_gpu_facts.main, data_dir, binary, **params)
    return run


def test_facts_from_the_real_capture_through_the_stand_in(run_module):
    outcome = run_module(FIXTURES / "gpu" / "h200x2")
    assert outcome.kind == "exit" and outcome.result["changed"] is False
    facts = outcome.result["ansible_facts"]["vllm_omni_gpu_facts"]
    assert facts["count"] == 2 and facts["cuda_major"] == 13 and facts["nvlink_islands"] == [[0, 1]]


def test_busy_process_from_the_stand_in(run_module, tmp_path):
    import shutil
    shutil.copytree(FIXTURES / "gpu" / "h200x2", tmp_path / "gpu")
    uuid = "GPU-af7d9b17-be6d-6450-ca7a-6b13f63de8b7"
    (tmp_path / "gpu" / "compute-apps.csv").write_text(f"777, {uuid}, vllm, 90000\n")
    facts = run_module(tmp_path / "gpu").result["ansible_facts"]["vllm_omni_gpu_facts"]
    assert [g["busy"] for g in facts["gpus"]] == [False, True]


def test_missing_nvidia_smi_says_install_the_driver(run_module):
    outcome = run_module(FIXTURES / "gpu" / "h200x2", binary=None)
    assert outcome.kind == "fail" and "install the NVIDIA driver" in outcome.result["msg"]


def test_driver_not_loaded_says_load_it(run_module, tmp_path):
    outcome = run_module(tmp_path / "no-driver")
    assert outcome.kind == "fail" and "load the NVIDIA kernel driver" in outcome.result["msg"]
