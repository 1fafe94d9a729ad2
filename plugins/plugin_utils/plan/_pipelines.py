# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""One pipeline of the plan: its stage layout, ports, paths, environment, engine argv and stage config.

Every pipeline of a deployment has the same shape (layout, tensor-parallel size, audio stages,
shared GPUs), held by ``Deployment``; what differs between pipelines is the host, the index and
the GPUs placement gave it. ``PipelineBuilder`` turns those into the plan's pipeline entries. The
engine backend (real vLLM-Omni or the simulator stand-in) is decided here too, because the venv
and argv of every pipeline follow from it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..host import _engine_data, _locks, _names
from ..host._engine_data import EngineVersion
from . import _distributed, _placement, _ports, _stage_config, _stage_config_checks
from ._deployment import Deployment
from ._engine_argv import argv, environment, head_argv, head_exec_stop, headless_argv
from ._setting_groups import KvTransferSettings

# What ``environment`` (plan/_engine_argv.py) computes per pipeline, each with the setting that controls it (None:
# fixed by the collection): vllm_omni_extra_env may not set these, and its refusal names that setting.
OWNED_ENV = {
    "CUDA_DEVICE_ORDER": None, "CUDA_VISIBLE_DEVICES": "vllm_omni_gpus", "VLLM_HOST_IP": "vllm_omni_ip",
    "VLLM_MOONCAKE_BOOTSTRAP_PORT": "vllm_omni_bootstrap_port_base",
    "MC_MIN_RPC_PORT": "vllm_omni_mooncake_rpc_port_range", "MC_MAX_RPC_PORT": "vllm_omni_mooncake_rpc_port_range",
    "MC_TCP_ENABLE_CONNECTION_POOL": "vllm_omni_mooncake_protocol",
    "VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT": "vllm_omni_mooncake_abort_timeout",
    "VLLM_NIXL_SIDE_CHANNEL_HOST": "vllm_omni_ip", "VLLM_NIXL_SIDE_CHANNEL_PORT": "vllm_omni_nixl_side_channel_port_base",
    "UCX_TCP_PORT_RANGE": "vllm_omni_nixl_ucx_port_range",
    "HF_HOME": "vllm_omni_hf_home", "HF_HUB_OFFLINE": "vllm_omni_model_staging",
    "VLLM_NO_USAGE_STATS": None, "DO_NOT_TRACK": None, "HF_TOKEN": "vllm_omni_hf_token",
    "VLLM_PORT": "vllm_omni_stage_zmq_port_range", "VLLM_OMNI_MODEL_SNAPSHOT": "vllm_omni_model_revision",
    "VLLM_CACHE_ROOT": None, "TORCHINDUCTOR_CACHE_DIR": None, "TRITON_CACHE_DIR": None,
}

# Upstream vLLM flags our argv uses; the omni flags are checked against the version's data.
UPSTREAM_FLAGS = frozenset({"--host", "--port", "--served-model-name"})
# The collection's engine plugin: a directory of the engine role's files that is an installed distribution.
ENGINE_PLUGIN_DISTRIBUTION = "vllm-omni-serve-engine"
ENGINE_PLUGIN_FILES = "engine_plugin"


def stage_layout(deployment: Deployment, host: str, pipeline: str) -> list[dict]:
    """Stages with logical devices (indices into the pipeline's CUDA_VISIBLE_DEVICES)."""
    tp, share = deployment.tp, deployment.share

    def devices(first: int, count: int) -> str:
        return ",".join(str(i) for i in range(first, first + count))

    if deployment.layout == "pd":
        decode_first = 0 if share else tp
        talker_gpu = "0" if share else str(2 * tp)  # talker and code2wav share the GPU after both thinker sets
        stages = [
            {"id": 0, "role": "prefill", "devices": devices(0, tp), "tensor_parallel_size": tp, "reads_from": [],
             "kv_role": "kv_producer", "engine_id": f"{host}-{pipeline}-prefill"},
            {"id": 1, "role": "decode", "devices": devices(decode_first, tp), "tensor_parallel_size": tp,
             "reads_from": [0], "kv_role": "kv_consumer", "engine_id": f"{host}-{pipeline}-decode"},
        ]
    else:
        talker_gpu = "0" if share else str(tp)
        stages = [{"id": 0, "role": "thinker", "devices": devices(0, tp), "tensor_parallel_size": tp, "reads_from": []}]
    if deployment.audio:
        last = len(stages) - 1
        stages += [
            {"id": last + 1, "role": "talker", "devices": talker_gpu, "tensor_parallel_size": 1, "reads_from": [last]},
            {"id": last + 2, "role": "code2wav", "devices": talker_gpu, "tensor_parallel_size": 1,
             "reads_from": [last + 1]},
        ]
    return stages


def kv_transfer_section(kv: KvTransferSettings) -> dict:
    """The deployment's KV transfer, one field each (what the host files read; each PD pipeline also carries its own
    part under its connector's key, kv_transfer_plan)."""
    return {"connector": kv.kv_connector, "mooncake_protocol": kv.mooncake_protocol}


def kv_transfer_plan(kv: KvTransferSettings) -> tuple[str, dict]:
    """A PD pipeline's KV-transfer settings, under the plan key of its connector (``mooncake`` or ``nixl``):
    the transport, and what happens when a hand-off fails or is never claimed."""
    if kv.kv_connector == "nixl":
        # UCX picks the transport itself (RDMA where the host has verbs devices, TCP otherwise); a prefill
        # engine frees KV nobody claimed after NIXL's own lease (30 s, renewed while decode pulls).
        return "nixl", {"kv_load_failure_policy": kv.kv_load_failure_policy}
    return "mooncake", {"protocol": kv.mooncake_protocol, "rdma_devices": list(kv.mooncake_rdma_devices),
                        "kv_load_failure_policy": kv.kv_load_failure_policy, "abort_timeout": kv.mooncake_abort_timeout}


def backend(settings: dict, engine: EngineVersion) -> dict:
    """What runs the pipelines: the packages of its venv (and their lock), the venv, and the KV connector the
    engine role installs."""
    root = settings["vllm_omni_install_root"]
    if settings["vllm_omni_engine_backend"] == "simulator":
        version = _engine_data.companions()["xpyd_sim"]
        return {"name": "simulator", "packages": _locks.simulator_packages(),
                "lock": _locks.simulator_lock(), "venv": _names.venv_dir(root, f"xpyd-sim-{version}"),
                "stand_in": True, "kv_connector": None, "engine_plugin": None, "start": start_bounds(settings),
                "compile_cache": None}
    transport = settings["vllm_omni_kv_connector"] if settings["vllm_omni_layout"] == "pd" else None
    kv_connector = engine.kv_connector(transport) if transport else None
    if kv_connector:
        # The engine role checks that the transport's library loads (mooncake, nixl); the class is in the plugin.
        kv_connector["transport"] = transport
    plugin = None
    if engine.engine_plugin:
        # The engine role copies roles/engine/files/<files>/ into the venv's site-packages (an installed
        # distribution with its RECORD), verifies it there, and the config check requires these fixes in force.
        plugin = {"distribution": ENGINE_PLUGIN_DISTRIBUTION, "files": ENGINE_PLUGIN_FILES, **engine.engine_plugin}
    return {"name": "engine", "packages": _locks.engine_packages(engine, transport),
            "lock": _locks.engine_lock(engine, transport),
            "venv": _names.venv_dir(root, f"vllm-omni-{engine.version}"), "stand_in": False,
            "kv_connector": kv_connector, "engine_plugin": plugin, "start": start_bounds(settings),
            "compile_cache": _names.compile_cache_dir(engine.version)}


def start_bounds(settings: dict) -> dict:
    """How long the health wait gives a (re)started pipeline: in all, and without progress in its journal."""
    return {"timeout": settings["vllm_omni_init_timeout"], "stall_timeout": settings["vllm_omni_start_stall_timeout"]}


def mooncake_package(cuda_major: int | None) -> str:
    """The one Mooncake transfer-engine variant for wheels built against ``cuda_major`` (None: no GPU)."""
    variants = _engine_data.companions()["mooncake"]
    variant = variants["none" if cuda_major is None else f"cuda{cuda_major}"]
    return f"{variant['package']}=={variant['version']}"


@dataclass(frozen=True)
class _Placed:
    """One engine of a distributed pipeline with its process name, index and ports on its host."""

    engine: _distributed.Engine
    process: str
    index: int
    ports: dict
    ip: str


@dataclass(frozen=True)
class _DistributedContext:
    """What every process of one distributed pipeline shares."""

    name: str
    key: str
    master: tuple[str, int]  # the head's OmniMasterServer (address, port)
    first: dict[str, _Placed]  # engine 0 of each role
    explain: list[str]
    stand_ins: list[tuple[str, str]]  # (role, URL) of the non-head engines: the simulator head's router calls them


class PipelineBuilder:
    """Builds every pipeline of one plan, and keeps the stage-config documents pipelines can share."""

    def __init__(self, deployment: Deployment):
        if deployment.engine is None:  # a refused version or layout stops planning before pipelines
            raise ValueError("pipelines planned for a deployment without a supported engine")
        self.deployment = deployment
        self.backend = backend(deployment.settings, deployment.engine)
        self._documents: dict[str, dict] = {}

    def host_pipelines(self, host: str, ip: str, gpus: list[int], count: int, facts: dict | None) -> list[dict]:
        """``count`` whole pipelines on ``host``, placed on ``gpus`` (topology ``facts`` where discovery ran).

        One process each; with more than one prefill or decode engine (xPyD), each pipeline's engines are
        processes of their own on this host (a head and headless stages).
        """
        deployment = self.deployment
        prefix = deployment.settings["vllm_omni_pipeline_prefix"]
        if deployment.replicated:
            entries: list[dict] = []
            pipelines = _distributed.engines_on_host(host, gpus, count, deployment.tp, deployment.replicas, facts)
            for index, engines in enumerate(pipelines):
                processes = self.distributed_pipeline(f"{prefix}{index}", engines, {host: ip}, {host: len(entries)},
                                                      spanning=False)
                entries += processes[host]
            return entries
        placements = _placement.place(gpus, count, deployment.tp, deployment.layout, facts, deployment.audio,
                                      deployment.share)
        return [self.pipeline(host, ip, index, placements[index]) for index in range(count)]

    def distributed_pipeline(self, name: str, engines: list[_distributed.Engine], ips: dict[str, str],
                             first_index: dict[str, int], spanning: bool) -> dict[str, list[dict]]:
        """Process entries of one distributed pipeline, per host; ``first_index``: each host's next process index.

        Each engine's process has its own stage config: its own stage carries its address, engine id and
        (prefill) bootstrap port; the other stage names engine 0 of that role, the one the head's
        orchestrator addresses by default (the collection's KV connector hands each prefill's own
        bootstrap address and engine id back with its KV, so decode pulls from the engine that ran the
        prefill).
        """
        port_settings, kv_connector = self.deployment.port_settings, self.deployment.kv_settings.kv_connector
        indices = dict(first_index)
        placed = []
        for engine in engines:
            index = indices.get(engine.host, 0)
            indices[engine.host] = index + 1
            process = name if engine.is_head else f"{name}-{engine.role}{engine.replica}"
            placed.append(_Placed(engine, process, index, _ports.process_ports(port_settings, index, engine.role, engine.is_head),
                                  ips[engine.host]))
        first = {role: next(item for item in placed if item.engine.role == role) for role in _distributed.ROLES}
        context = _DistributedContext(name=name, key=name if spanning else f"{engines[0].host}/{name}",
                                      master=(placed[0].ip, placed[0].ports["master"]), first=first,
                                      explain=_distributed.explain(engines, spanning, kv_connector),
                                      stand_ins=[(item.engine.role, f"http://{item.ip}:{item.ports['api']}")
                                                 for item in placed if not item.engine.is_head])
        by_host: dict[str, list[dict]] = {}
        for item in placed:
            by_host.setdefault(item.engine.host, []).append(self._process_entry(item, context))
        return by_host

    def _distributed_stages(self, item: _Placed, first: dict[str, _Placed]) -> list[dict]:
        """The stages of a distributed process's config: its own, and engine 0 of the other role."""
        deployment = self.deployment
        prefill = item if item.engine.role == "prefill" else first["prefill"]
        stages = []
        for stage_id, role in enumerate(_distributed.ROLES):
            source = item if role == item.engine.role else first[role]
            stage = {
                "id": stage_id, "role": role, "devices": ",".join(str(i) for i in range(deployment.tp)),
                "tensor_parallel_size": deployment.tp, "reads_from": [0] if role == "decode" else [],
                "kv_role": "kv_producer" if role == "prefill" else "kv_consumer",
                "engine_id": f"{source.engine.host}-{source.process}-{role}", "kv_ip": source.ip,
                "replicas": deployment.replicas[role],
                "physical_gpus": list(item.engine.gpus) if source is item else [],
            }
            if "bootstrap" in prefill.ports:
                stage["bootstrap"] = prefill.ports["bootstrap"]
            else:  # NIXL: each engine's own handshake port (decode reaches prefill's through the KV it hands back)
                stage["side_channel_port"] = source.ports["nixl_side_channel"][role]
            stages.append(stage)
        return stages

    def _process_entry(self, item: _Placed, context: _DistributedContext) -> dict:
        deployment, settings = self.deployment, self.deployment.settings
        engine, ports, ip = item.engine, item.ports, item.ip
        paths = _names.pipeline_paths(settings["vllm_omni_config_root"], item.process, self.backend["venv"])
        prefill = item if engine.role == "prefill" else context.first["prefill"]
        stage_id = _distributed.ROLES.index(engine.role)
        entry = {
            "name": item.process,
            "pipeline": context.name,
            # Unique in the deployment (plan["distributed_pipelines"]): a pipeline on one host is named per
            # host (omni0 on every host), a spanning one once.
            "pipeline_key": context.key,
            "process": "head" if engine.is_head else "headless",
            "stage_id": stage_id,
            "replica": engine.replica,
            "host": engine.host,
            "index": item.index,
            "unit": _names.pipeline_unit(item.process),
            "gpus": list(engine.gpus),
            "stages": self._distributed_stages(item, context.first),
            "ports": ports,
            "kv_ip": ip,
            # Mooncake: the bootstrap server of the prefill engine the config names (NIXL has none).
            "pd_bootstrap": f"{prefill.ip}:{prefill.ports['bootstrap']}" if "bootstrap" in prefill.ports else None,
            # Only the head serves the API. A headless engine has no HTTP server: it is healthy when its
            # unit runs and the head's /health answers; its simulator stand-in answers /health itself.
            "url": _names.http_url(ip, ports['api']) if engine.is_head else None,
            "health_url": (_names.http_url(ip, ports['api'], _names.HEALTH_PATH)
                           if engine.is_head or self.backend["stand_in"] else None),
            "metrics_url": (_names.http_url(ip, ports['api'], _names.METRICS_PATH)
                            if engine.is_head or self.backend["stand_in"] else None),
            "paths": paths,
            "environment": environment(deployment, ip, list(engine.gpus), ports),
            "argv": (head_argv(deployment, self.backend, ip, ports, paths, context.stand_ins) if engine.is_head else
                     headless_argv(deployment, self.backend, ip, ports, paths, stage_id, engine.role, context.master)),
            "master": {"address": context.master[0], "port": context.master[1]},
            "placement": {"score": None, "explain": context.explain},
        }
        if engine.is_head:  # its unit's stop: bounded by its HTTP server's work, not the engine's 30 s join
            entry["exec_stop"] = head_exec_stop(ports["api"])
        kv_key, kv_plan = kv_transfer_plan(deployment.kv_settings)
        entry[kv_key] = kv_plan
        entry["api_key_env"] = self._api_key_env(entry)
        entry["stage_config"] = self._stage_config_document(entry)
        return entry

    def _api_key_env(self, entry: dict) -> str | None:
        """The variable the API key goes in (engine.env's secrets block), or None where nothing checks a key.

        A headless engine serves no API. vllm-router in PD mode (the simulator's head) does not pass a
        client's key on, so a distributed pipeline's stand-ins check none: the front door does.
        """
        if self.backend["stand_in"]:
            return "XPYD_SIM_REQUIRE_API_KEY" if entry.get("process", "single") == "single" else None
        return "VLLM_API_KEY" if entry.get("process", "single") in ("single", "head") else None

    def pipeline(self, host: str, ip: str, index: int, placement: dict) -> dict:
        deployment = self.deployment
        settings = deployment.settings
        name = f"{settings['vllm_omni_pipeline_prefix']}{index}"
        pipeline_gpus = placement["gpus"]
        ports = _ports.pipeline_ports(deployment.port_settings, index)
        paths = _names.pipeline_paths(settings["vllm_omni_config_root"], name, self.backend["venv"])
        stages = stage_layout(deployment, host, name)
        for stage in stages:
            stage["physical_gpus"] = [pipeline_gpus[int(d)] for d in stage["devices"].split(",")]
        pipeline = {
            "name": name,
            "pipeline": name,
            "pipeline_key": f"{host}/{name}",  # unique in the deployment (names repeat on every host)
            "process": "single",  # every stage in this one process (distributed pipelines: head, headless)
            "host": host,
            "index": index,
            "unit": _names.pipeline_unit(name),
            "gpus": pipeline_gpus,
            "stages": stages,
            "ports": ports,
            "kv_ip": ip,
            "url": _names.http_url(ip, ports['api']),
            "health_url": _names.http_url(ip, ports['api'], _names.HEALTH_PATH),
            "metrics_url": _names.http_url(ip, ports['api'], _names.METRICS_PATH),
            "paths": paths,
            "environment": environment(deployment, ip, pipeline_gpus, ports),
            "argv": argv(deployment, self.backend, ip, ports, paths),
            "placement": {"score": placement["score"], "explain": placement["explain"]},
        }
        if deployment.layout == "pd":
            kv_key, kv_plan = kv_transfer_plan(deployment.kv_settings)
            pipeline[kv_key] = kv_plan
        pipeline["api_key_env"] = self._api_key_env(pipeline)
        pipeline["stage_config"] = self._stage_config_document(pipeline)
        return pipeline

    def _stage_config_document(self, pipeline: dict) -> dict:
        """The pipeline's stage-config document, checked against the engine as it is built."""
        deployment, engine = self.deployment, self.deployment.engine
        # Aggregated documents hold no address, port or id: pipelines with the same stage devices share
        # one document, built and checked once (PD documents carry kv_ip, ports and engine ids).
        key = None if deployment.layout == "pd" else json.dumps(
            [[s["devices"], s["tensor_parallel_size"]] for s in pipeline["stages"]])
        document = self._documents.get(key) if key else None
        if document is None:
            document = _stage_config.build_document(engine, {**pipeline, "layout": deployment.layout},
                                                    deployment.overrides)
            own = (_stage_config_checks.check_launch(document, engine, engine.config_flag)
                   + _stage_config_checks.check_document(document, engine, pipeline["environment"]))
            if own:  # pragma: no cover - a planner bug, never a user error
                raise RuntimeError(f"rendered stage config for {pipeline['host']}/{pipeline['name']} "
                                   f"fails its own check: {own}")
            if key:
                self._documents[key] = document
        return document
