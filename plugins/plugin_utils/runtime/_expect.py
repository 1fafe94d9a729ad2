# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""What the engine must resolve from a pipeline's stage config, per the plan (for config_check)."""

from __future__ import annotations

from ..plan._stage_config import stage_engine_args
from ..plan._stages import MODEL_STAGE

# Where vLLM's own connectors live (vLLM 0.26), by class name.
STOCK_CONNECTOR_MODULES = {
    "MooncakeConnector": "vllm.distributed.kv_transfer.kv_connector.v1.mooncake.mooncake_connector",
    "NixlConnector": "vllm.distributed.kv_transfer.kv_connector.v1.nixl.connector",
}


def expected_stages(pipeline: dict) -> list[dict]:
    return [{"id": stage["id"], "model_stage": MODEL_STAGE[stage["role"]], "devices": stage["devices"],
             "tensor_parallel_size": stage["tensor_parallel_size"], "inputs": stage["reads_from"]}
            for stage in pipeline["stages"]]


def expected_pd(pipeline: dict, plan: dict) -> dict:
    if plan["layout"] != "pd":
        return {"pair": None}
    kv = stage_engine_args(pipeline["stage_config"])[0]["kv_transfer_config"]
    # The class vLLM's KVConnectorFactory must load for both PD stages.
    module = kv.get("kv_connector_module_path") or STOCK_CONNECTOR_MODULES.get(kv["kv_connector"], "?")
    connector = f"{module}.{kv['kv_connector']}"
    # Mooncake: a distributed process's config names the prefill engine it refers to (its own, or the head's).
    # NIXL has no bootstrap server: decode reaches prefill's side channel through the KV parameters handed back.
    bootstrap = pipeline.get("pd_bootstrap") or (
        f"{pipeline['kv_ip']}:{pipeline['ports']['bootstrap']}" if "bootstrap" in pipeline["ports"] else None)
    return {"pair": [0, 1], "bootstrap": bootstrap, "kv_connector": connector,
            "orchestrator": pipeline.get("process", "single") != "headless"}
