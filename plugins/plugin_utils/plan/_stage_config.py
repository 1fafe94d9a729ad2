# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""Stage-config documents: built from the engine's own stage definitions, and checked.

Building (``build_document``):

* ``stage_args`` versions (<= 0.26, launched with ``--stage-configs-path``): start from the
  engine's resolved stages (``legacy_stages`` in the version's data file, derived with
  ``async_chunk: false``). For PD the thinker is duplicated into a prefill stage (stage 0,
  ``is_prefill_only``, ``kv_producer``) and a decode stage (stage 1, ``is_decode_only``,
  ``kv_consumer``, reads 0); the talker (2) reads 1 and code2wav (3) reads 2 on the talker's GPU.
  ``input_connectors`` are dropped: they name a connector only the deploy schema defines, and
  with none the engine wires a shared-memory connector per edge itself.
* ``stages`` versions (0.28+, ``--deploy-config``): the engine's bundled deploy document with our
  devices, tensor-parallel size and overrides; platform overlays other than ``cuda`` are dropped
  because the collection deploys NVIDIA hosts. PD names the pipeline the collection's engine plugin
  registers (``pipeline:``, the thinker's bundled settings on both prefill and decode), a
  ``kv_transfer_config`` per PD stage and ``async_chunk: false``.

Checking (``_stage_config_checks.check_document``): the static rules the engine enforces (or silently gets wrong),
so a bad document is refused on the controller with a readable message instead of failing on a
GPU host ten minutes into start-up. It checks our own renders too: a render that fails it is a
planner bug and stops the plan.
"""

from __future__ import annotations

from typing import Any

from ..host._engine_data import EngineVersion
from ._stages import LAYOUT_ROLES, MODEL_STAGE

# vLLM's own connector class per transport (vllm_omni_kv_connector), and where vLLM finds it.
STOCK_CONNECTORS = {"mooncake": "MooncakeConnector", "nixl": "NixlConnector"}
LEGACY_REQUIRED_KEYS = {
    "runtime": "every stage needs runtime.devices",
    "final_output": "non-final stages need final_output: false",
    "final_output_type": "non-final stages need final_output_type: null",
    "is_comprehension": "set is_comprehension: true on thinker stages, false elsewhere",
}


def _copy(value: Any) -> Any:
    """Copy of JSON-like data; ~10x faster than copy.deepcopy, which matters at 4,096 pipelines."""
    if isinstance(value, dict):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy(item) for item in value]
    return value


def _by_model_stage(stages: list[dict]) -> dict[str, dict]:
    found = {}
    for stage in stages:
        found[stage["engine_args"]["model_stage"]] = stage
    return found


def build_document(engine: EngineVersion, pipeline: dict, overrides: dict) -> dict:
    """The stage-config document of one pipeline.

    ``pipeline`` carries ``layout``, ``stages`` (role, devices, tensor_parallel_size, reads_from,
    engine_id, kv_role), ``kv_ip``, ``ports``, ``mooncake``; ``overrides`` maps role ->
    {"engine_args": {...}, "sampling": {...}} (already validated).
    """
    if engine.schema == "stage_args":
        return _build_legacy(engine, pipeline, overrides)
    return _build_deploy(engine, pipeline, overrides)


def stage_engine_args(document: dict) -> dict[int, dict]:
    """{stage id: that stage's engine arguments} of a rendered document of either schema (under ``engine_args``
    in ``stage_args``, flat in ``stages:``)."""
    if "stage_args" in document:
        return {stage.get("stage_id", index): stage.get("engine_args") or {}
                for index, stage in enumerate(document["stage_args"])}
    return {stage.get("stage_id", index): stage for index, stage in enumerate(document.get("stages") or [])}


def kv_connector_name(engine: EngineVersion, transport: str = "mooncake") -> tuple[str, str | None]:
    """(kv_connector, kv_connector_module_path) PD stages of ``engine``'s version load for ``transport``.

    Where the support table names a connector of ours, that one (vLLM-Omni only requires the Mooncake
    name to contain "mooncake"); vLLM's own class otherwise.
    """
    ours = engine.kv_connector(transport)
    if ours:
        return ours["class"], ours["module"]
    return STOCK_CONNECTORS[transport], None


def transport_of(kv: dict) -> str:
    """Which transport a stage's kv_transfer_config names: nixl for a NIXL class, mooncake otherwise."""
    return "nixl" if "nixl" in str(kv.get("kv_connector", "")).lower() else "mooncake"


def _kv_transfer_config(stage: dict, pipeline: dict, engine: EngineVersion) -> dict:
    transport = "nixl" if "nixl" in pipeline else "mooncake"
    kv_plan = pipeline[transport]
    connector, module_path = kv_connector_name(engine, transport)
    config = {"kv_connector": connector}
    if module_path:
        config["kv_connector_module_path"] = module_path
    common = {
        "kv_role": stage["kv_role"],
        "engine_id": stage["engine_id"],
        # A distributed process's config names where each stage's engine is (its own, or engine 0 of the
        # other role); a single-process pipeline's stages all run at its address.
        "kv_ip": stage.get("kv_ip", pipeline["kv_ip"]),
        # A failed KV load ends the request with an error (fail, vLLM 0.26's default, said on purpose) or
        # prefills it again on decode (recompute): vllm_omni_kv_load_failure_policy.
        "kv_load_failure_policy": kv_plan.get("kv_load_failure_policy", "fail"),
    }
    if transport == "nixl":
        side_channel = stage.get("side_channel_port", pipeline["ports"]["nixl_side_channel"].get(stage["role"]))
        # ServeNixlConnector listens for handshakes at kv_ip:side_channel_port, the stage's own (both stages of a
        # single-process pipeline share one environment, so VLLM_NIXL_SIDE_CHANNEL_PORT cannot tell them apart).
        # UCX is NIXL's backend; the KV stays in GPU memory (kv_buffer_device cuda) and UCX moves it.
        return {**config, **common, "kv_buffer_device": "cuda",
                "kv_connector_extra_config": {"backends": ["UCX"], "side_channel_port": side_channel}}
    extra: dict[str, Any] = {
        # Read only by vllm-omni's PD validation; the engine's bootstrap address itself comes from
        # VLLM_MOONCAKE_BOOTSTRAP_PORT in the unit environment. Kept equal so both agree.
        "mooncake_bootstrap_port": stage.get("bootstrap", pipeline["ports"].get("bootstrap")),
        # vLLM's MooncakeConnector defaults to rdma; always say which one we mean.
        "mooncake_protocol": kv_plan["protocol"],
    }
    if kv_plan["rdma_devices"]:
        extra["device_name"] = ",".join(kv_plan["rdma_devices"])
    producer = stage["kv_role"] == "kv_producer"
    return {
        **config,
        "kv_role": common["kv_role"],
        "kv_rank": 0 if producer else 1,
        "kv_parallel_size": 2,
        "engine_id": common["engine_id"],
        "kv_ip": common["kv_ip"],
        "kv_load_failure_policy": common["kv_load_failure_policy"],
        "kv_connector_extra_config": extra,
    }


def _build_legacy(engine: EngineVersion, pipeline: dict, overrides: dict) -> dict:
    base = _by_model_stage(engine.data["legacy_stages"])
    read = {source for stage in pipeline["stages"] for source in stage["reads_from"]}
    stage_args = []
    for stage in pipeline["stages"]:
        role = stage["role"]
        doc = _copy(base[MODEL_STAGE[role]])
        doc.pop("input_connectors", None)
        doc["stage_id"] = stage["id"]
        if role in ("prefill", "decode"):
            # PD markers are read from the top level of the stage object (pd_utils getattr).
            doc = _insert_after(doc, "stage_type", "is_prefill_only" if role == "prefill" else "is_decode_only", True)
        engine_args = doc["engine_args"]
        if stage["tensor_parallel_size"] > 1 or MODEL_STAGE[role] == "thinker":
            engine_args["tensor_parallel_size"] = stage["tensor_parallel_size"]
        if role == "prefill":
            # The prefill stage only exports KV: the orchestrator hands decode the original
            # prompt plus the transfer parameters, never a processed payload.
            engine_args.pop("custom_process_next_stage_input_func", None)
            doc["final_output"] = False
            doc["final_output_type"] = None
        if stage["id"] not in read:
            # The last stage of a text-out pipeline: nothing downstream to hand its output to.
            engine_args.pop("custom_process_next_stage_input_func", None)
        if stage.get("kv_role"):
            engine_args["kv_transfer_config"] = _kv_transfer_config(stage, pipeline, engine)
        engine_args.update(overrides.get(role, {}).get("engine_args", {}))
        doc["runtime"]["devices"] = stage["devices"]
        if "replicas" in stage:
            # The stage's engines in the pipeline (xPyD). The head pre-allocates that many slots for a remote
            # stage and waits for them; a process's own stage is one engine (--omni-dp-size-local 1).
            doc["runtime"]["num_replicas"] = stage["replicas"]
        doc["engine_input_source"] = list(stage["reads_from"])
        sampling = overrides.get(role, {}).get("sampling", {})
        if sampling:
            doc["default_sampling_params"] = {**doc.get("default_sampling_params", {}), **sampling}
        stage_args.append(doc)
    return {"async_chunk": False, "stage_args": stage_args}


def bundled_stage(engine: EngineVersion, role: str) -> dict:
    """The engine's bundled deploy definition of ``role``'s model stage (stages schema).

    The bundled document numbers the engine's own Qwen3-Omni pipeline (thinker, talker, code2wav); a PD
    pipeline has the thinker twice, so roles are matched by model stage, not by stage id.
    """
    bundled_id = LAYOUT_ROLES["aggregated"].index(MODEL_STAGE[role])
    for stage in engine.data["bundled_deploy"]["stages"]:
        if stage["stage_id"] == bundled_id:
            return stage
    raise KeyError(f"vLLM-Omni {engine.version}'s bundled deploy config has no stage {bundled_id} ({role})")


def _build_deploy(engine: EngineVersion, pipeline: dict, overrides: dict) -> dict:
    bundled = engine.data["bundled_deploy"]
    pd = pipeline["layout"] == "pd"
    stages = []
    for stage in pipeline["stages"]:
        role = stage["role"]
        doc = _copy(bundled_stage(engine, role))
        doc["stage_id"] = stage["id"]
        if pd:
            # Its keys name the engine pipeline's stage ids (from_stage_0 is the thinker); the registered PD
            # pipeline's edges are listed in the document instead (below).
            doc.pop("input_connectors", None)
        if stage["tensor_parallel_size"] > 1 or MODEL_STAGE[role] == "thinker":
            doc["tensor_parallel_size"] = stage["tensor_parallel_size"]
        doc["devices"] = stage["devices"]
        if "replicas" in stage:
            # xPyD, as in stage_args: the head pre-allocates that many engines of a remote stage and waits for them.
            doc["num_replicas"] = stage["replicas"]
        if stage.get("kv_role"):
            doc["kv_transfer_config"] = _kv_transfer_config(stage, pipeline, engine)
        doc.update(overrides.get(role, {}).get("engine_args", {}))
        sampling = overrides.get(role, {}).get("sampling", {})
        if sampling:
            doc["default_sampling_params"] = {**doc.get("default_sampling_params", {}), **sampling}
        stages.append(doc)
    document = {key: _copy(value) for key, value in bundled.items() if key not in ("stages", "platforms")}
    if pd:
        # The registered PD pipeline (the collection's engine plugin), whole-request hand-offs only: KV transfer
        # and chunked streaming between stages do not mix (the engine refuses native KV with async_chunk).
        audio = any(stage["role"] == "talker" for stage in pipeline["stages"])
        document = {"pipeline": engine.pd_pipeline(audio), **document, "async_chunk": False}
        document.pop("connectors", None)
        # The stages: schema takes a pipeline's edges from the document alone (input_connectors or edges), not
        # from the registered pipeline: listed here, the engine puts its shared-memory connector on each, as
        # 0.26 does from engine_input_source.
        document["edges"] = [{"from": source, "to": stage["id"]} for stage in pipeline["stages"]
                             for source in stage["reads_from"]]
    document["stages"] = stages
    cuda = (bundled.get("platforms") or {}).get("cuda")
    if cuda:
        document["platforms"] = {"cuda": _cuda_overlay(_copy(cuda), pipeline) if pd else _copy(cuda)}
    return document


def _cuda_overlay(cuda: dict, pipeline: dict) -> dict:
    """The bundled CUDA overlay renumbered for a PD pipeline: a thinker entry applies to prefill and decode."""
    by_bundled_id: dict[int, list[int]] = {}
    for stage in pipeline["stages"]:
        by_bundled_id.setdefault(LAYOUT_ROLES["aggregated"].index(MODEL_STAGE[stage["role"]]), []).append(stage["id"])
    stages = []
    for entry in cuda.get("stages") or []:
        for stage_id in by_bundled_id.get(entry.get("stage_id"), []):
            stages.append({**_copy(entry), "stage_id": stage_id})
    return {**cuda, "stages": stages} if "stages" in cuda else cuda


def _insert_after(mapping: dict, after: str, key: str, value: Any) -> dict:
    result = {}
    for existing, item in mapping.items():
        result[existing] = item
        if existing == after:
            result[key] = value
    if key not in result:
        result[key] = value
    return result


# --- checking -----------------------------------------------------------------------------------


def expected_roles(layout: str) -> tuple[str, ...]:
    return LAYOUT_ROLES[layout]
