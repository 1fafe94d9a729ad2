"""Drive vllm_omni.serve's KV connectors through vLLM's own Mooncake and NIXL scheduler code (no GPU).

Run by an engine venv's Python after the connector module was installed into that venv the way
the engine role installs it (``tests/conformance/test_kv_connector.py`` does both). It builds
real ``MooncakeConnectorScheduler`` and ``NixlPullConnectorScheduler`` objects (vLLM's configuration
classes, a one-group KV cache spec), feeds them finished prefill requests and decode pulls, and prints
one JSON line of what came back, for the stock connectors and for ours side by side. The test asserts on it.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from types import SimpleNamespace

import torch
from vllm.config import KVTransferConfig
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.mooncake_connector import MooncakeConnector
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import KVConnectorOutput
from vllm.v1.request import RequestStatus

MODULE, CLASS, NIXL_CLASS = "vllm_omni_serve_kv", "ServeMooncakeConnector", "ServeNixlConnector"
CHECK_TRANSFER = "xfer-chatcmpl-vllm-omni-serve-check-probe-1a2b3c4d"  # sent by the collection's checks
USER_TRANSFER = "xfer-chatcmpl-0f9e8d7c6b5a-1a2b3c4d"  # any other client's request


class Captured(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


# A prefill engine's own address (kv_ip); the probe runs with VLLM_MOONCAKE_BOOTSTRAP_PORT=BOOTSTRAP_PORT.
KV_IP = "10.1.2.3"
BOOTSTRAP_PORT = "9123"


def transfer_config(role: str) -> KVTransferConfig:
    return KVTransferConfig(kv_connector=CLASS, kv_connector_module_path=MODULE, kv_role=role,
                            engine_id=f"probe-{role}", kv_ip=KV_IP,
                            kv_connector_extra_config={"mooncake_protocol": "tcp"})


# The side-channel ports the plan gives a pipeline's two NIXL engines (vllm_omni_nixl_side_channel_port_base).
NIXL_PORTS = {"kv_producer": 5612, "kv_consumer": 5613}


def nixl_transfer_config(role: str) -> KVTransferConfig:
    return KVTransferConfig(kv_connector=NIXL_CLASS, kv_connector_module_path=MODULE, kv_role=role,
                            engine_id=f"probe-{role}", kv_ip=KV_IP, kv_buffer_device="cuda",
                            kv_connector_extra_config={"backends": ["UCX"], "side_channel_port": NIXL_PORTS[role]})


def connector(cls, role: str, groups: int = 1, config=transfer_config):
    """A scheduler-side connector built by its real constructor, with vLLM's config classes."""
    spec = FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=64, dtype=torch.bfloat16)
    kv_cache = KVCacheConfig(num_blocks=64, kv_cache_tensors=[],
                             kv_cache_groups=[KVCacheGroupSpec([f"layer.{i}"], spec) for i in range(groups)])
    # What vLLM's scheduler-side connectors read of the config (0.30's NIXL scheduler reads the most).
    parallel = SimpleNamespace(data_parallel_index=0, tensor_parallel_size=1, prefill_context_parallel_size=1,
                               decode_context_parallel_size=1, pipeline_parallel_size=1)
    vllm_config = SimpleNamespace(kv_transfer_config=config(role),
                                  cache_config=SimpleNamespace(block_size=16, mamba_cache_mode="none"),
                                  scheduler_config=SimpleNamespace(disable_hybrid_kv_cache_manager=groups == 1),
                                  parallel_config=parallel)
    return cls(vllm_config, KVConnectorRole.SCHEDULER, kv_cache)


class Blocks:
    """The allocation vLLM hands update_state_after_alloc: block ids per group, and (vLLM 0.30) the blocks
    themselves, none of them a local prefix-cache hit."""

    def __init__(self, ids):
        self.ids = ids
        self.blocks = tuple([SimpleNamespace(block_hash=None, is_null=False) for _unused in group] for group in ids)

    def get_unhashed_block_ids_all_groups(self):
        return self.ids


def prefill_request(request_id: str, status: RequestStatus, params: dict | None):
    return SimpleNamespace(request_id=request_id, status=status, kv_transfer_params=params)


def finish_prefill(cls, status: RequestStatus, groups: int = 1, params: bool = True,
                   transfer_id: str = CHECK_TRANSFER) -> dict:
    """A prefill the orchestrator marked for remote decode, allocated, then finished with ``status``."""
    conn = connector(cls, "kv_producer", groups)
    kv_params = {"do_remote_decode": True, "do_remote_prefill": False, "transfer_id": transfer_id}
    request = prefill_request("chatcmpl-probe-0a1b", status, kv_params if params else None)
    conn.update_state_after_alloc(request, Blocks(()), 0)
    block_ids = tuple([10 + g, 20 + g] for g in range(groups))
    if groups == 1:
        delay, returned = conn.request_finished(request, block_ids[0])
    else:
        delay, returned = conn.request_finished_all_groups(request, block_ids)
    scheduler = conn.connector_scheduler
    queued = scheduler._reqs_need_send.get(request.request_id)
    return {"delay_free_blocks": delay, "returned": returned,
            "kv_queued_for_send": None if queued is None else [list(group) for group in queued[1]],
            "not_processed": sorted(scheduler._reqs_not_processed),
            "status_after": request.status.name}


def decode_pull(cls) -> dict:
    """A decode request told to pull KV, then told by the workers that the KV arrived."""
    conn = connector(cls, "kv_consumer")
    params = {"do_remote_prefill": True, "do_remote_decode": False, "transfer_id": CHECK_TRANSFER,
              "remote_engine_id": "probe-kv_producer", "remote_bootstrap_addr": "http://127.0.0.1:8998",
              "remote_request_id": "chatcmpl-probe-0a1b"}
    request = SimpleNamespace(request_id="chatcmpl-probe-9z", status=RequestStatus.WAITING_FOR_REMOTE_KVS,
                              kv_transfer_params=params, prompt_token_ids=list(range(40)))
    conn.update_state_after_alloc(request, Blocks(([1, 2, 3],)), 40)
    conn.update_connector_output(KVConnectorOutput(finished_recving={"chatcmpl-probe-9z"}))
    return {"pending_after": len(getattr(conn, "_pulls", {}))}


def nixl_prefill(cls, status: RequestStatus, transfer_id: str = CHECK_TRANSFER) -> dict:
    """A NIXL prefill the orchestrator marked for remote decode, allocated, then finished with ``status``."""
    conn = connector(cls, "kv_producer", config=nixl_transfer_config)
    kv_params = {"do_remote_decode": True, "do_remote_prefill": False, "transfer_id": transfer_id}
    request = SimpleNamespace(request_id="chatcmpl-probe-0a1b", status=status, kv_transfer_params=kv_params,
                              num_computed_tokens=40)
    conn.update_state_after_alloc(request, Blocks(()), 0)
    delay, returned = conn.request_finished(request, [10, 20])
    return {"delay_free_blocks": delay, "returned": returned}


def nixl_decode_pull(cls) -> dict:
    """A NIXL decode request told to pull KV from the prefill's side channel, then told the KV arrived."""
    conn = connector(cls, "kv_consumer", config=nixl_transfer_config)
    params = {"do_remote_prefill": True, "do_remote_decode": False, "transfer_id": CHECK_TRANSFER,
              "remote_engine_id": "probe-kv_producer", "remote_request_id": "chatcmpl-probe-0a1b",
              "remote_block_ids": [10, 20], "remote_host": KV_IP, "remote_port": NIXL_PORTS["kv_producer"],
              "tp_size": 1}
    request = SimpleNamespace(request_id="chatcmpl-probe-9z", status=RequestStatus.WAITING_FOR_REMOTE_KVS,
                              kv_transfer_params=params, prompt_token_ids=list(range(40)))
    conn.update_state_after_alloc(request, Blocks(([1, 2, 3],)), 40)
    queued = conn.connector_scheduler._reqs_need_recv.get(request.request_id)
    conn.update_connector_output(KVConnectorOutput(finished_recving={"chatcmpl-probe-9z"}))
    return {"queued_for_recv": None if queued is None else [list(group) for group in queued[1]],
            "pending_after": len(getattr(conn, "_pulls", {}))}


def nixl_cases(captured: Captured) -> dict:
    """The same questions of ServeNixlConnector against vLLM's NixlConnector."""
    from vllm.distributed.kv_transfer.kv_connector.v1.nixl.connector import NixlConnector

    ours = KVConnectorFactory.get_connector_class(nixl_transfer_config("kv_producer"))
    result = {"factory_class": f"{ours.__module__}.{ours.__qualname__}",
              "is_nixl_subclass": issubclass(ours, NixlConnector), "side_channels": {}, "cases": {}}
    for label, cls in (("stock", NixlConnector), ("ours", ours)):
        result["side_channels"][label] = {
            role: [scheduler.side_channel_host, scheduler.side_channel_port]
            for role in NIXL_PORTS
            for scheduler in [connector(cls, role, config=nixl_transfer_config).connector_scheduler]}
        start = len(captured.lines)
        cases = result["cases"]
        cases[f"{label}/length_capped"] = nixl_prefill(cls, RequestStatus.FINISHED_LENGTH_CAPPED)
        cases[f"{label}/eos_first_token"] = nixl_prefill(cls, RequestStatus.FINISHED_STOPPED)
        cases[f"{label}/aborted"] = nixl_prefill(cls, RequestStatus.FINISHED_ABORTED)
        cases[f"{label}/prefill_log"] = [line for line in captured.lines[start:] if "prefill handed off" in line]
        start = len(captured.lines)
        cases[f"{label}/decode_pull"] = {**nixl_decode_pull(cls), "log": captured.lines[start:]}
    return result


def main() -> int:
    captured = Captured()
    logging.getLogger("vllm").addHandler(captured)
    logging.getLogger("vllm").setLevel(logging.INFO)
    ours = KVConnectorFactory.get_connector_class(transfer_config("kv_producer"))
    result = {
        "factory_class": f"{ours.__module__}.{ours.__qualname__}",
        "is_mooncake_subclass": issubclass(ours, MooncakeConnector),
        "cases": {},
    }
    for label, cls in (("stock", MooncakeConnector), ("ours", ours)):
        cases = result["cases"]
        cases[f"{label}/length_capped"] = finish_prefill(cls, RequestStatus.FINISHED_LENGTH_CAPPED)
        cases[f"{label}/eos_first_token"] = finish_prefill(cls, RequestStatus.FINISHED_STOPPED)
        cases[f"{label}/aborted"] = finish_prefill(cls, RequestStatus.FINISHED_ABORTED)
        cases[f"{label}/no_kv_params"] = finish_prefill(cls, RequestStatus.FINISHED_LENGTH_CAPPED, params=False)
        cases[f"{label}/two_groups"] = finish_prefill(cls, RequestStatus.FINISHED_LENGTH_CAPPED, groups=2)
        start = len(captured.lines)
        cases[f"{label}/decode_pull"] = {**decode_pull(cls), "log": captured.lines[start:]}
    result["prefill_log"] = [line for line in captured.lines if "prefill handed off" in line]
    result["nixl"] = nixl_cases(captured)
    # Other clients' requests: DEBUG only, plus the periodic count (forced due here).
    module = sys.modules[ours.__module__]
    start = len(captured.lines)
    result["user_request"] = finish_prefill(ours, RequestStatus.FINISHED_LENGTH_CAPPED, transfer_id=USER_TRANSFER)
    module.SUMMARY_SECONDS = 0.0
    finish_prefill(ours, RequestStatus.FINISHED_LENGTH_CAPPED, transfer_id=USER_TRANSFER)
    result["user_request_log"] = [line for line in captured.lines[start:] if "vllm_omni.serve PD" in line]
    # The import guard: under a vLLM the module was not written for, importing it must fail.
    guard = subprocess.run([sys.executable, "-c", "import vllm; vllm.__version__ = '0.0.0-other'; import " + MODULE],
                           capture_output=True, text=True, check=False)
    result["guard"] = {"rc": guard.returncode, "last_line": (guard.stderr.strip().splitlines() or [""])[-1]}
    print("@@kv_connector_probe@@" + json.dumps(result, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
