"""GPU fact parsing on the real 2xH200 capture and the synthetic 8-GPU topologies."""

from __future__ import annotations

import pytest
from unitlib import FIXTURES

from ansible_collections.vllm_omni.serve.plugins.module_utils import _gpu
from ansible_collections.vllm_omni.serve.plugins.module_utils._host import owner_unit

GPU = FIXTURES / "gpu"


def facts_of(profile: str, apps: str = "", busy_memory_mib: int = 1024) -> dict:
    path = GPU / profile
    return _gpu.build_facts((path / "query-gpu.csv").read_text(), apps, (path / "nvidia-smi.txt").read_text(),
                            (path / "topo-m.txt").read_text(), busy_memory_mib)


def test_real_h200x2_capture():
    facts = facts_of("h200x2")
    assert (facts["driver_version"], facts["cuda_version"], facts["cuda_major"]) == ("580.159.04", "13.0", 13)
    assert facts["count"] == 2
    first = facts["gpus"][0]
    assert first["uuid"] == "GPU-5192bdb2-d45a-1572-1297-509e99d0fce7"
    assert (first["name"], first["pci_bus_id"], first["memory_total_mib"]) == ("NVIDIA H200", "00000000:00:06.0", 143771)
    assert (first["compute_cap"], first["mig_mode"], first["busy"]) == ("9.0", "Disabled", False)
    assert (first["cpu_affinity"], first["numa_node"]) == ("0-31", 0)
    assert facts["links"] == {"0": {"1": "NV18"}, "1": {"0": "NV18"}}
    assert facts["nvlink_islands"] == [[0, 1]]


def test_synthetic_nvswitch_host_is_one_island_over_two_numa_nodes():
    facts = facts_of("h200x8-nvswitch")
    assert facts["nvlink_islands"] == [list(range(8))]
    assert [g["numa_node"] for g in facts["gpus"]] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert facts["nics"] == ["NIC0", "NIC1"]
    assert facts["links"]["3"]["4"] == "NV18"


def test_synthetic_pcie_host_has_no_nvlink_and_two_numa_islands():
    facts = facts_of("pcie-2numa-x8")
    assert facts["nvlink_islands"] == [[i] for i in range(8)]
    assert facts["links"]["0"]["1"] == "PIX" and facts["links"]["0"]["2"] == "PXB" and facts["links"]["3"]["4"] == "SYS"
    assert _gpu.link_rank("NV18") < _gpu.link_rank("NV4") < _gpu.link_rank("PIX") < _gpu.link_rank("SYS")


def test_busy_gpus_name_their_processes_or_memory():
    uuid = facts_of("h200x2")["gpus"][1]["uuid"]
    facts = facts_of("h200x2", apps=f"4242, {uuid}, python3, 30000\n")
    assert [g["busy"] for g in facts["gpus"]] == [False, True]
    assert facts["gpus"][1]["busy_reasons"] == ["1 compute process(es): python3 (pid 4242)"]
    query = (GPU / "h200x2" / "query-gpu.csv").read_text().replace(", 143771, 0,", ", 143771, 2048,", 1)
    by_memory = _gpu.build_facts(query, "", (GPU / "h200x2" / "nvidia-smi.txt").read_text(), None, 1024)
    assert by_memory["gpus"][0]["busy_reasons"] == ["2048 MiB of memory in use by others (threshold 1024 MiB)"]
    assert "links" not in by_memory


@pytest.mark.parametrize(("function", "text", "fragment"), [
    (_gpu.parse_query_gpu, "0, GPU-x, NVIDIA H200\n", "has 3 fields, expected 10"),
    (_gpu.parse_banner, "Mon Nov 30\n", "no Driver Version"),
    (_gpu.parse_topology, "Legend:\n", "no GPU0 header"),
    (_gpu.parse_compute_apps, "1, GPU-x\n", "has 2 fields"),
])
def test_unreadable_output_is_a_clear_error(function, text, fragment):
    with pytest.raises(_gpu.GpuParseError, match=fragment):
        function(text)


def test_own_pipeline_processes_do_not_make_a_gpu_busy():
    uuid = facts_of("h200x2")["gpus"][0]["uuid"]
    query = (GPU / "h200x2" / "query-gpu.csv").read_text().replace(", 143771, 0,", ", 143771, 120000,", 1)
    apps = f"900, {uuid}, python3, 118000\n901, {uuid}, python3, 1500\n"
    owners = {900: owner_unit("0::/system.slice/system-vllm\\x2domni.slice/vllm-omni@omni0.service\n",
                              ["vllm-omni@.service"])}
    facts = _gpu.build_facts(query, apps, (GPU / "h200x2" / "nvidia-smi.txt").read_text(), None, 1024, owners)
    gpu = facts["gpus"][0]
    assert gpu["own_units"] == ["vllm-omni@omni0.service"]
    assert gpu["busy_reasons"] == ["1 compute process(es): python3 (pid 901)", "2000 MiB of memory in use by others "
                                   "(threshold 1024 MiB)"]
