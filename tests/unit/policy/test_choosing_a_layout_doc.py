"""docs/choosing-a-layout.md against what it describes: its weights table is generated (scripts/gen_docs.py), and the
numbers in its prose are the planner's and the data's, so neither can drift from the other."""

from __future__ import annotations

from testlib import REPO
from unitlib import inventory

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.host._engine_data import model_weights, support_table
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._summary import summary_lines

DOC = (REPO / "docs" / "choosing-a-layout.md").read_text()


def test_the_example_sizing_line_is_what_the_summary_says_for_an_80_gb_gpu():
    inv = inventory({"gpu-a": {"ansible_host": "10.0.0.1", "vllm_omni_gpus": list(range(8))}}, {"vllm_omni_layout": "pd"})
    inv["hostvars"]["gpu-a"]["vllm_omni_gpu_facts"] = {
        "gpus": [{"index": i, "busy": False, "memory_total_mib": 81559} for i in range(8)], "cuda_major": 13}
    line = next(line for line in summary_lines(build_plan(inv)) if line.startswith("sizing: weights"))
    example = next(text.strip() for text in DOC.splitlines() if text.strip().startswith("sizing: weights"))
    assert line.startswith(example.removesuffix("..."))


def test_the_prose_states_the_thinkers_weights_and_the_engines_default_shares():
    thinker = model_weights("Qwen/Qwen3-Omni-30B-A3B-Instruct")["thinker"]
    assert f"exceeds {thinker / 2**30:.1f} GiB" in DOC
    shares = {stage["engine_args"]["model_stage"]: stage["engine_args"]["gpu_memory_utilization"]
              for stage in support_table()["0.26.0"].data["legacy_stages"]}
    assert f"thinker {shares['thinker']:g}, talker {shares['talker']:g},\ncode2wav {shares['code2wav']:g}" in DOC
