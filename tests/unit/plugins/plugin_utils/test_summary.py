"""The plan's summary (what render and deploy print): each host of a small inventory, one block a host shape for a
fleet, warnings that differ only in their host said once."""

from __future__ import annotations

import re

from unitlib import inventory

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._summary import GROUP_ABOVE, summary_lines


def fleet(count: int, gpus_of=lambda index: [0, 1, 2, 3, 4, 5, 6, 7], **group_vars) -> dict:
    # Addresses 10.0.0.1 .. 10.0.0.N: 10.0.0.1 is a prefix of 10.0.0.10-19, which must not be taken for it.
    hosts = {f"gpu-{index:02d}": {"ansible_host": f"10.0.0.{index + 1}", "vllm_omni_gpus": gpus_of(index)}
             for index in range(count)}
    return inventory(hosts, {"vllm_omni_layout": "pd", **group_vars})


# The weights-per-GPU lines (tests at the end) are not the shape line.
WEIGHTS = ("sizing: weights", "sizing: GPU memory")


def test_a_small_inventory_shows_every_host_by_name_and_address():
    lines = summary_lines(build_plan(fleet(GROUP_ABOVE)))
    heads = [line for line in lines if line.startswith("host gpu-")]
    assert len(heads) == GROUP_ABOVE and heads[0].startswith("host gpu-00 10.0.0.1: GPUs [0, 1, 2, 3, 4, 5, 6, 7]")
    assert sum(line.startswith("WARNING: host gpu-") for line in lines) == GROUP_ABOVE


def test_a_fleet_of_one_shape_is_one_block_and_one_warning():
    count = 20
    lines = summary_lines(build_plan(fleet(count)))
    (head,) = [line for line in lines if "hosts (" in line]
    assert head == (f"{count} hosts (gpu-00, gpu-01, gpu-02 ... gpu-19), each: GPUs [0, 1, 2, 3, 4, 5, 6, 7] -> "
                    "2 pipeline(s) x 3 GPUs, unused [6, 7]")
    pipelines = lines[lines.index(head) + 1:lines.index(head) + 3]
    assert [line.split(";")[-1] for line in pipelines] == [" http://<ip>:8091", " http://<ip>:8092"]
    assert not any(line.startswith("host gpu-") for line in lines)
    (warning,) = [line for line in lines if line.startswith("WARNING")]
    assert warning.startswith(f"WARNING: {count} hosts gpu-00, gpu-01, gpu-02 ... gpu-19: GPUs [6, 7] are left unused")
    assert len(lines) < 17  # whatever the count: the header, one block, sizing, the router and one warning


def test_an_address_that_starts_like_another_is_never_cut_into_the_placeholder():
    lines = summary_lines(build_plan(fleet(20)))
    assert not re.search(r"<ip>\d|\d<ip>|<host>\d", "\n".join(lines))


def test_hosts_of_another_shape_get_a_block_of_their_own_and_a_lone_host_keeps_its_name():
    # Every host 8 GPUs but gpu-07, which has 4: two shapes, the second a host alone.
    lines = summary_lines(build_plan(fleet(12, gpus_of=lambda index: [0, 1, 2, 3] if index == 7 else list(range(8)))))
    assert any(line.startswith("11 hosts (gpu-00, gpu-01, gpu-02 ... gpu-11), each:") for line in lines)
    assert any(line.startswith("host gpu-07 10.0.0.8: GPUs [0, 1, 2, 3] -> 1 pipeline(s) x 3 GPUs") for line in lines)
    assert any(line.endswith("http://10.0.0.8:8091") for line in lines)


def test_a_fleet_of_many_shapes_shows_the_first_and_counts_the_rest():
    # A distinct GPU list a host: every host its own shape.
    lines = summary_lines(build_plan(fleet(GROUP_ABOVE + 5, gpus_of=lambda index: list(range(index, index + 3)))))
    heads = [line for line in lines if line.startswith(("host gpu-", f"{GROUP_ABOVE + 5} hosts"))]
    assert len(heads) <= GROUP_ABOVE
    (rest,) = [line for line in lines if line.startswith("... ")]
    assert re.fullmatch(r"\.\.\. \d+ more hosts in \d+ more shapes \(plan\.json has every host\)", rest)


def test_the_sizing_line_states_each_pipeline_shape_its_tp_memory_shares_and_p_to_d():
    lines = summary_lines(build_plan(fleet(3, vllm_omni_tensor_parallel_size=2, vllm_omni_audio_output=False)))
    sizing = [line for line in lines if line.startswith("sizing:") and not line.startswith(WEIGHTS)]
    # 8 GPUs a host, 4 a text-out pipeline at TP 2 (prefill 2 + decode 2): 2 pipelines a host, one shape.
    assert sizing == ["sizing: 6 pipelines of prefill on 2 GPUs (TP 2), memory share prefill 0.9; decode on 2 GPUs "
                      "(TP 2), memory share decode 0.9; P:D 1:1"]
    xpyd = summary_lines(build_plan(fleet(1, vllm_omni_audio_output=False, vllm_omni_prefill_replicas=2,
                                          vllm_omni_decode_replicas=1)))
    assert [line for line in xpyd if line.startswith("sizing:") and not line.startswith(WEIGHTS)] == [
        "sizing: 2 distributed pipeline(s), P:D 2:1, TP 1 per engine (below: each engine's host and GPUs)"]
    aggregated = summary_lines(build_plan(fleet(1, vllm_omni_layout="aggregated", vllm_omni_audio_output=False)))
    assert any(line.startswith("sizing: 8 pipelines of thinker on 1 GPU, memory share thinker 0.9") and
               line.endswith("no P:D split (aggregated)") for line in aggregated), aggregated


def test_gpus_taken_on_trust_are_said_to_be_unchecked_and_discovered_ones_are_not():
    lines = summary_lines(build_plan(fleet(GROUP_ABOVE + 3)))
    (unchecked,) = [line for line in lines if line.startswith("not checked without the hosts")]
    assert "vllm_omni_gpus of gpu-00, gpu-01" in unchecked and unchecked.count("gpu-") == GROUP_ABOVE
    assert "and 3 more" in unchecked and "a missing GPU is refused" in unchecked
    # After discovery (the facts a deploy gathers) the same GPUs are checked: nothing to say.
    facts = {"gpus": [{"index": index, "busy": False} for index in range(8)], "cuda_major": 13}
    discovered = fleet(2)
    for variables in discovered["hostvars"].values():
        variables["vllm_omni_gpu_facts"] = facts
    assert not [line for line in summary_lines(build_plan(discovered)) if line.startswith("not checked")]


def weight_lines(plan: dict) -> list[str]:
    return [line for line in summary_lines(plan) if line.startswith("sizing: weights")]


def discovered(inv: dict, memory_mib: int) -> dict:
    """Discovery's facts for every host: eight idle GPUs of ``memory_mib`` each."""
    facts = {"gpus": [{"index": index, "busy": False, "memory_total_mib": memory_mib} for index in range(8)],
             "cuda_major": 13}
    for variables in inv["hostvars"].values():
        variables["vllm_omni_gpu_facts"] = facts
    return inv


def test_sizing_says_each_stages_weights_per_gpu_and_what_its_share_of_a_discovered_gpu_leaves_for_kv():
    from ansible_collections.vllm_omni.serve.plugins.plugin_utils.host._engine_data import model_weights

    thinker = model_weights("Qwen/Qwen3-Omni-30B-A3B-Instruct")["thinker"]
    assert round(thinker / 2**30, 1) == 59.1  # 31.7 billion bf16 parameters (data/models.yml)
    h100 = weight_lines(build_plan(discovered(fleet(1), 81559)))  # an H100's memory.total
    room = 0.9 * 81559 * 2**20 - thinker
    assert h100 == [f"sizing: weights per GPU (2 processes): prefill 59.1 GiB in 0.9 x 79.6 GiB: {room / 2**30:.1f} GiB left "
                    f"for KV cache; decode 59.1 GiB in 0.9 x 79.6 GiB: {room / 2**30:.1f} GiB left for KV cache; talker 6.2 GiB "
                    f"in 0.6 x 79.6 GiB: 41.6 GiB left for KV cache; code2wav 0.4 GiB in 0.1 x 79.6 GiB: 7.6 GiB left for KV "
                    "cache"], h100
    # A 48 GB GPU (L40S: 46068 MiB) cannot hold the thinker in its 0.9 share; TP 2 halves what each GPU holds.
    small = weight_lines(build_plan(discovered(fleet(1), 46068)))
    assert "prefill 59.1 GiB DOES NOT FIT its 0.9 share of 45.0 GiB: raise vllm_omni_tensor_parallel_size" in small[0]
    tp2 = weight_lines(build_plan(discovered(fleet(1, vllm_omni_tensor_parallel_size=2), 46068)))
    half = (0.9 * 46068 * 2**20 - thinker / 2) / 2**30
    assert f"prefill 29.5 GiB in 0.9 x 45.0 GiB: {half:.1f} GiB left for KV cache" in tp2[0], tp2


def test_before_discovery_sizing_gives_weights_and_shares_and_says_the_memory_comes_later():
    lines = [line for line in summary_lines(build_plan(fleet(1))) if line.startswith("sizing")]
    assert any("prefill 59.1 GiB in a 0.9 share of the GPU" in line for line in lines), lines
    assert lines[-1] == "sizing: GPU memory is read by discovery: deploy says what is left for the KV cache"


def test_a_model_without_weights_data_is_said_to_be_unsized():
    lines = weight_lines(build_plan(fleet(1, vllm_omni_model="someone/Other-Omni")))
    assert lines == ["sizing: weights per GPU not known for someone/Other-Omni (data/models.yml lists the models sized)"]
