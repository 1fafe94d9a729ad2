# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""Checking a stage-config document (``_stage_config`` builds them) against the engine's own schema, the way
its launch reads it: every pipeline's before it is planned (``_pipelines``), the engine's recipes in the
conformance tests."""

from __future__ import annotations

import ipaddress
from typing import Any

from ..host._engine_data import EngineVersion
from ._stage_config import LEGACY_REQUIRED_KEYS, STOCK_CONNECTORS, kv_connector_name, transport_of
from ._stages import LAYOUT_ROLES, TEXT_ROLES


def check_launch(document: Any, engine: EngineVersion, config_flag: str) -> list[str]:
    """Problems with loading ``document`` through ``config_flag`` on ``engine``'s version."""
    if not isinstance(document, dict):
        return [f"the stage config is a {type(document).__name__}, not a mapping"]
    problems = []
    legacy = "stage_args" in document
    if config_flag not in engine.serve_flags:
        problems.append(f"vLLM-Omni {engine.version} has no {config_flag} flag; "
                        f"load configs with {engine.config_flag}")
    if legacy and engine.schema == "stages":
        problems.append(f"vLLM-Omni {engine.version} rejects the stage_args schema "
                        f"(\"uses the removed stage_args schema\"); write the stages: schema for {engine.config_flag}")
    elif legacy and config_flag == "--deploy-config":
        problems.append(f"on vLLM-Omni {engine.version}, --deploy-config ignores stage_args and silently "
                        "runs the model's 3-stage registry pipeline (no prefill/decode split); "
                        "pass a stage_args file with --stage-configs-path")
    elif not legacy and "stages" not in document:
        problems.append("the stage config has neither stage_args nor stages")
    return problems


def check_document(document: Any, engine: EngineVersion, environment: dict | None = None) -> list[str]:
    """Static problems of a stage-config document for ``engine``'s version; [] when clean."""
    if not isinstance(document, dict):
        return [f"the stage config is a {type(document).__name__}, not a mapping"]
    if "stage_args" in document:
        return _check_legacy(document, engine, environment or {})
    if "stages" in document:
        return _check_deploy(document, engine, environment or {})
    return ["the stage config has neither stage_args nor stages"]


def _check_dotted(path: Any, where: str, engine: EngineVersion, problems: list[str]) -> None:
    if path is None:
        return
    if not isinstance(path, str) or path not in engine.importables:
        known = sorted(p.rsplit(".", 1)[-1] for p in engine.importables
                       if isinstance(path, str) and p.rsplit(".", 1)[0] == path.rsplit(".", 1)[0])
        hint = f"; this version's module has: {', '.join(known)}" if known else ""
        problems.append(f"{where}: {path!r} does not exist in vLLM-Omni {engine.version}{hint}")


def _check_legacy(document: dict, engine: EngineVersion, environment: dict) -> list[str]:
    problems: list[str] = []
    stages = document.get("stage_args")
    if not isinstance(stages, list) or not stages:
        return ["stage_args must be a non-empty list of stages"]
    prefill = decode = None
    for position, stage in enumerate(stages):
        if not isinstance(stage, dict):
            problems.append(f"stage_args[{position}] is not a mapping")
            continue
        problems += _check_legacy_stage(document, position, stage, engine)
        if stage.get("is_prefill_only"):
            prefill = (position, stage) if prefill is None else "many"
        if stage.get("is_decode_only"):
            decode = (position, stage) if decode is None else "many"
    if prefill == "many" or decode == "many":
        problems.append("more than one prefill or decode stage: the engine supports one PD pair per pipeline")
    elif prefill or decode:
        problems += _check_pd_pair(prefill, decode, engine, environment)
    return problems


def _check_legacy_stage(document: dict, position: int, stage: dict, engine: EngineVersion) -> list[str]:
    """One stage_args entry: its id, the keys the loader reads, its processors, inputs, connectors, devices."""
    where = f"stage_args[{position}]"
    problems = []
    if stage.get("stage_id") != position:
        problems.append(f"{where}: stage_id is {stage.get('stage_id')!r}; stage ids must be 0, 1, 2, ... "
                        "in list order")
    # extract_legacy_stage_metadata reads these as attributes: a missing one stops start-up
    # ("Missing key final_output_type" on the recipe's prefill stage, checked on 0.26.0).
    for key in LEGACY_REQUIRED_KEYS:
        if key not in stage:
            problems.append(f"{where}: missing key {key} (the engine stops with 'Missing key {key}'; "
                            f"{LEGACY_REQUIRED_KEYS[key]})")
    problems += _check_legacy_engine_args(where, stage, engine)
    _check_dotted(stage.get("custom_process_input_func"), f"{where}.custom_process_input_func", engine,
                  problems)
    if "sync_process_input_func" in stage:
        problems.append(f"{where}: sync_process_input_func is not read by the stage_args loader, so this stage "
                        "gets no input processor; use custom_process_input_func")
        _check_dotted(stage["sync_process_input_func"], f"{where}.sync_process_input_func", engine, problems)
    sources = stage.get("engine_input_source", [])
    if not isinstance(sources, list) or any(not isinstance(s, int) or s < 0 or s >= position for s in sources):
        problems.append(f"{where}: engine_input_source {sources!r} must list earlier stage ids")
    if position > 0 and not sources:
        problems.append(f"{where}: engine_input_source is empty; every stage after the first reads an earlier one")
    connectors = ((document.get("runtime") or {}).get("connectors") or {})
    for source, name in (stage.get("input_connectors") or {}).items():
        if name not in connectors:
            problems.append(f"{where}: input_connectors.{source} names {name!r}, which runtime.connectors does "
                            "not define (the engine only logs a warning and runs without it)")
    runtime = stage.get("runtime") or {}
    devices = runtime.get("devices")
    if not isinstance(devices, (str, int)) or isinstance(devices, bool):
        problems.append(f"{where}: runtime.devices must be a string like \"0\" or \"0,1\"")
    return problems


def _check_legacy_engine_args(where: str, stage: dict, engine: EngineVersion) -> list[str]:
    """A legacy stage's engine_args: the full definition, and the dotted paths it names importable."""
    problems = []
    engine_args = stage.get("engine_args")
    if not isinstance(engine_args, dict):
        problems.append(f"{where}: missing engine_args")
        engine_args = {}
    for key in ("model_stage", "model_arch", "worker_type", "scheduler_cls", "engine_output_type",
                "hf_config_name"):
        if key not in engine_args:
            problems.append(f"{where}: engine_args.{key} is missing (legacy stages carry the full definition)")
    _check_dotted(engine_args.get("scheduler_cls"), f"{where}.engine_args.scheduler_cls", engine, problems)
    _check_dotted(engine_args.get("custom_process_next_stage_input_func"),
                  f"{where}.engine_args.custom_process_next_stage_input_func", engine, problems)
    return problems


def _check_pd_pair(prefill, decode, engine: EngineVersion, environment: dict) -> list[str]:
    """The engine's _validate_pd_separation_config, plus the wiring it does not check."""
    if not engine.layouts or "pd" not in engine.layouts:
        return [f"vLLM-Omni {engine.version} cannot run a prefill/decode split: {engine.pd_refused_because}"]
    if prefill is None or decode is None:
        return ["a prefill stage (is_prefill_only) needs a decode stage (is_decode_only) and vice versa"]
    (p_id, p_stage), (d_id, d_stage) = prefill, decode
    problems = []
    if p_id not in (d_stage.get("engine_input_source") or []):
        problems.append(f"decode stage {d_id} must read the prefill stage {p_id} (engine_input_source: [{p_id}])")
    p_args, d_args = p_stage.get("engine_args") or {}, d_stage.get("engine_args") or {}
    p_kv, d_kv = p_args.get("kv_transfer_config"), d_args.get("kv_transfer_config")
    if not isinstance(p_kv, dict) or not isinstance(d_kv, dict):
        return [*problems, "both PD stages need engine_args.kv_transfer_config"]
    if p_kv.get("kv_role") not in ("kv_producer", "kv_both"):
        problems.append(f"prefill kv_role is {p_kv.get('kv_role')!r}; it must be kv_producer")
    if d_kv.get("kv_role") not in ("kv_consumer", "kv_both"):
        problems.append(f"decode kv_role is {d_kv.get('kv_role')!r}; it must be kv_consumer")
    transport = transport_of(p_kv)
    if not p_kv.get("kv_connector") or p_kv.get("kv_connector") != d_kv.get("kv_connector") \
            or p_kv.get("kv_connector_module_path") != d_kv.get("kv_connector_module_path"):
        problems.append("prefill and decode must name the same, non-empty kv_connector (and module path)")
    elif engine.kv_connector(transport) and p_kv.get("kv_connector") == STOCK_CONNECTORS[transport] \
            and not p_kv.get("kv_connector_module_path"):
        problems.append(_stock_connector_problem(engine, transport))
    p_tp, d_tp = p_args.get("tensor_parallel_size", 1), d_args.get("tensor_parallel_size", 1)
    if p_tp != d_tp:
        problems.append(f"prefill tensor_parallel_size {p_tp} != decode {d_tp}: vLLM-Omni's PD validation requires "
                        "equal sizes")
    if p_kv.get("engine_id") and p_kv.get("engine_id") == d_kv.get("engine_id"):
        problems.append("prefill and decode share an engine_id; each needs its own")
    kv_ip = p_kv.get("kv_ip", "127.0.0.1")
    try:
        ipaddress.IPv4Address(kv_ip)
    except ValueError:
        problems.append(f"prefill kv_ip {kv_ip!r} is not an IPv4 address")
    if transport == "nixl":
        return problems + _check_nixl_pair(p_kv, d_kv)
    extra = p_kv.get("kv_connector_extra_config") or {}
    if extra.get("mooncake_protocol") not in ("tcp", "rdma"):
        problems.append("kv_connector_extra_config.mooncake_protocol must be tcp or rdma (vLLM defaults to rdma "
                        "and silently falls back to TCP when no RDMA device is found)")
    env_port = environment.get("VLLM_MOONCAKE_BOOTSTRAP_PORT")
    if env_port is not None and str(extra.get("mooncake_bootstrap_port")) != str(env_port):
        problems.append(f"kv_connector_extra_config.mooncake_bootstrap_port {extra.get('mooncake_bootstrap_port')} "
                        f"!= VLLM_MOONCAKE_BOOTSTRAP_PORT {env_port}: the engine's bootstrap address uses the "
                        "environment value, its PD validation the config value")
    return problems


def _stock_connector_problem(engine: EngineVersion, transport: str) -> str:
    ours, module = kv_connector_name(engine, transport)
    stock = STOCK_CONNECTORS[transport]
    why = ("never returns remote_request_id, so vLLM-Omni's orchestrator kills the engine at the first PD request "
           "('Missing prefill kv_transfer_params.remote_request_id')" if transport == "mooncake" else
           "reads its handshake port from VLLM_NIXL_SIDE_CHANNEL_PORT, which prefill and decode inherit from one API "
           "server: both engines of a single-process pipeline would bind the same port")
    return (f"kv_connector {stock} (vLLM's own) on vLLM {engine.vllm} {why}; use kv_connector: {ours} with "
            f"kv_connector_module_path: {module} (installed into the engine venv by the engine role)")


def _check_nixl_pair(p_kv: dict, d_kv: dict) -> list[str]:
    """NIXL: each engine's handshake listener at its own kv_ip:side_channel_port (ServeNixlConnector)."""
    problems = []
    ports = []
    for label, kv in (("prefill", p_kv), ("decode", d_kv)):
        port = (kv.get("kv_connector_extra_config") or {}).get("side_channel_port")
        if isinstance(port, bool) or not isinstance(port, int) or not 1024 <= port <= 65535:
            problems.append(f"{label} kv_connector_extra_config.side_channel_port {port!r} must be a port (1024-65535): "
                            "the engine's NIXL handshake listener")
        ports.append((kv.get("kv_ip", "127.0.0.1"), port))
    if not problems and ports[0] == ports[1]:
        problems.append(f"prefill and decode both listen for NIXL handshakes at {ports[0][0]}:{ports[0][1]}; "
                        "each engine needs its own side_channel_port")
    return problems


def _check_deploy(document: dict, engine: EngineVersion, environment: dict) -> list[str]:
    problems = []
    stages = document.get("stages")
    if not isinstance(stages, list) or not stages:
        return ["stages must be a non-empty list"]
    pipeline = document.get("pipeline")
    pd_roles = _pd_pipeline_roles(engine, pipeline)
    if pipeline is not None and pd_roles is None:
        problems.append(f"pipeline: {pipeline!r} is not a Qwen3-Omni pipeline the collection runs on vLLM-Omni "
                        f"{engine.version} ({', '.join(sorted(engine.pd_pipelines.values())) or 'none'}); remove it to "
                        "run the engine's own pipeline")
    known_ids = set(range(len(pd_roles))) if pd_roles else \
        {stage["stage_id"] for stage in engine.data["bundled_deploy"]["stages"]}
    pd_stages: dict[str, tuple[int, dict]] = {}
    for position, stage in enumerate(stages):
        where = f"stages[{position}]"
        if not isinstance(stage, dict) or "stage_id" not in stage:
            problems.append(f"{where}: every stage needs a stage_id")
            continue
        if stage["stage_id"] not in known_ids:
            problems.append(f"{where}: stage_id {stage['stage_id']!r} is not a stage of the "
                            f"{pipeline or 'Qwen3-Omni'} pipeline ({sorted(known_ids)}); the engine ignores it")
        role = pd_roles[stage["stage_id"]] if pd_roles and stage["stage_id"] in known_ids else None
        problems += _check_deploy_stage(where, stage, role, document, engine)
        if role in ("prefill", "decode"):
            pd_stages[role] = (stage["stage_id"], _as_legacy_pd_stage(stage, [] if role == "prefill" else [0]))
    if pd_roles:
        problems += _check_pd_pipeline(document, pd_roles, pd_stages, engine, environment)
    return problems


def _check_deploy_stage(where: str, stage: dict, role: str | None, document: dict, engine: EngineVersion) -> list[str]:
    """One stages: entry: no topology keys, PD keys only where the pipeline has that role, connectors defined."""
    problems = []
    pipelines = ", ".join(sorted(engine.pd_pipelines.values()))
    for key in ("is_prefill_only", "is_decode_only"):
        if key in stage:
            problems.append(f"{where}: {key} cannot be expressed in the stages: schema (the engine refuses it: "
                            f"\"no structured config owner\"); a PD pipeline's roles come from its `pipeline:`"
                            + (f" ({pipelines})" if pipelines else f": {engine.pd_refused_because}"))
    if "kv_transfer_config" in stage and role not in ("prefill", "decode"):
        problems.append(f"{where}: kv_transfer_config belongs to the prefill and decode stages of a PD pipeline"
                        + (f" (`pipeline:` {pipelines})" if pipelines
                           else f"; prefill/decode needs a stage_args version: {engine.pd_refused_because}"))
    for key in ("model_stage", "worker_type", "scheduler_cls", "engine_output_type", "engine_input_source",
                "custom_process_input_func", "final_output", "final_output_type"):
        if key in stage:
            problems.append(f"{where}: {key} is topology, fixed by the engine's pipeline definition; remove it")
    connectors = document.get("connectors") or {}
    for source, name in (stage.get("input_connectors") or {}).items():
        if name not in connectors:
            problems.append(f"{where}: input_connectors.{source} names {name!r}, which connectors: does not define")
    return problems


def _check_pd_pipeline(document: dict, roles: tuple[str, ...], pd_stages: dict[str, tuple[int, dict]],
                       engine: EngineVersion, environment: dict) -> list[str]:
    """A registered PD pipeline's document as a whole: every edge wired, no chunked hand-offs, the PD pair."""
    problems = []
    stages = [stage for stage in document["stages"] if isinstance(stage, dict)]
    wired = {(edge.get("from"), edge.get("to")) for edge in document.get("edges") or [] if isinstance(edge, dict)}
    wired |= {(int(source.removeprefix("from_stage_")), stage.get("stage_id")) for stage in stages
              for source in (stage.get("input_connectors") or {}) if source.removeprefix("from_stage_").isdigit()}
    unwired = [f"{i - 1} -> {i}" for i in range(1, len(roles)) if (i - 1, i) not in wired]
    if unwired:
        problems.append(f"edges: {', '.join(unwired)} missing: the stages: schema connects only the stages its "
                        "document wires (edges or input_connectors), whatever the pipeline says; list "
                        "{from: N, to: N+1} for each")
    if document.get("async_chunk", True) is not False:
        problems.append("async_chunk must be false for a PD pipeline: the engine refuses native KV transfer with "
                        "chunked hand-offs (\"requires async_chunk=False\")")
    if set(pd_stages) != {"prefill", "decode"}:
        problems.append(f"pipeline {document.get('pipeline')} needs its prefill (stage 0) and decode (stage 1) stages "
                        "listed, each with its kv_transfer_config")
        return problems
    return problems + _check_pd_pair(pd_stages["prefill"], pd_stages["decode"], engine, environment)


def _pd_pipeline_roles(engine: EngineVersion, pipeline: Any) -> tuple[str, ...] | None:
    """The stage roles of the registered PD pipeline ``pipeline`` names on ``engine``, or None."""
    for audio, roles in ((True, LAYOUT_ROLES["pd"]), (False, TEXT_ROLES["pd"])):
        if pipeline is not None and pipeline == engine.pd_pipeline(audio):
            return roles
    return None


def _as_legacy_pd_stage(stage: dict, sources: list[int]) -> dict:
    """A stages-schema PD stage in the shape the PD pair check reads (the engine's own PD code reads the same
    fields through the plugin's typed-stage attributes)."""
    return {"engine_input_source": sources,
            "engine_args": {"kv_transfer_config": stage.get("kv_transfer_config"),
                            "tensor_parallel_size": stage.get("tensor_parallel_size", 1)}}
