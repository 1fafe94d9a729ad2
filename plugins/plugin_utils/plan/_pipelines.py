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
from functools import cached_property

from ..host import _engine_data, _locks, _names
from ..host._engine_data import EngineVersion
from . import _distributed, _placement, _ports, _stage_config

# What ``environment`` computes per pipeline: vllm_omni_extra_env may not set these.
OWNED_ENV = frozenset({
    "CUDA_DEVICE_ORDER", "CUDA_VISIBLE_DEVICES", "VLLM_HOST_IP", "VLLM_MOONCAKE_BOOTSTRAP_PORT",
    "MC_MIN_RPC_PORT", "MC_MAX_RPC_PORT", "MC_TCP_ENABLE_CONNECTION_POOL", "VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT",
    "VLLM_NIXL_SIDE_CHANNEL_HOST", "VLLM_NIXL_SIDE_CHANNEL_PORT", "UCX_TCP_PORT_RANGE",
    "HF_HOME", "HF_HUB_OFFLINE",
    "VLLM_NO_USAGE_STATS", "DO_NOT_TRACK", "HF_TOKEN", "VLLM_PORT", "VLLM_OMNI_MODEL_SNAPSHOT",
})

# Upstream vLLM flags our argv uses; the omni flags are checked against the version's data.
UPSTREAM_FLAGS = frozenset({"--host", "--port", "--served-model-name"})


@dataclass(frozen=True)
class Deployment:
    """The validated deployment settings and what the planner derived from them: what every host and pipeline shares.

    The derived values are cached properties: pipelines read them thousands of times per plan.
    """

    settings: dict
    sources: dict  # setting name -> "default" or "inventory"
    engine: EngineVersion | None  # None when the version or layout was refused (a problem says why)
    overrides: dict  # {role: {"engine_args": {...}, "sampling": {...}}}, validated
    planner_shares: list[str]  # roles whose gpu_memory_utilization the planner chose (vllm_omni_share_gpus)

    @cached_property
    def layout(self) -> str:
        return self.settings["vllm_omni_layout"]

    @cached_property
    def tp(self) -> int:
        return self.settings["vllm_omni_tensor_parallel_size"]

    @cached_property
    def audio(self) -> bool:
        return self.settings["vllm_omni_audio_output"]

    @cached_property
    def share(self) -> bool:
        return self.settings["vllm_omni_share_gpus"]

    @cached_property
    def served(self) -> str:
        return self.settings["vllm_omni_served_model_name"] or self.settings["vllm_omni_model"]

    @cached_property
    def replicas(self) -> dict[str, int]:
        """Engines per thinker stage of a pd pipeline (xPyD); {} for aggregated."""
        if self.layout != "pd":
            return {}
        return {"prefill": self.settings["vllm_omni_prefill_replicas"], "decode": self.settings["vllm_omni_decode_replicas"]}

    @cached_property
    def distributable(self) -> bool:
        """Whether a pipeline's stages may run as processes of their own (head + headless): text-out pd only.

        vLLM-Omni 0.26 hands decode's output to the talker through host shared memory, so audio
        pipelines keep every stage in one process; shared GPUs need one process per GPU.
        """
        return self.layout == "pd" and not self.audio and not self.share

    @cached_property
    def replicated(self) -> bool:
        """More than one engine for a thinker stage: every pipeline is distributed, also on one host."""
        return any(count > 1 for count in self.replicas.values())

    @cached_property
    def spanning(self) -> bool:
        """Spare GPUs of several hosts may make a pipeline (vllm_omni_span_hosts, and a layout that can split)."""
        return self.distributable and self.settings["vllm_omni_span_hosts"]

    @cached_property
    def gpus_per_pipeline(self) -> int:
        # Shared: every stage on the one TP group. Otherwise
        # pd: each prefill and decode engine a TP group (+ one GPU shared by talker and code2wav);
        # aggregated: thinker TP (+ one GPU shared by talker and code2wav: the engine's own layout).
        if self.share:
            return self.tp
        thinkers = sum(self.replicas.values()) if self.layout == "pd" else 1
        return thinkers * self.tp + (1 if self.audio else 0)

    @cached_property
    def fewer_gpus(self) -> str:
        """The settings that really make a pipeline need fewer GPUs, for a fix (never one already at its floor)."""
        ways = []
        if self.tp > 1:
            ways.append("lower vllm_omni_tensor_parallel_size")
        if self.replicated:
            ways.append("lower vllm_omni_prefill_replicas / vllm_omni_decode_replicas")
        if self.audio and not self.share:
            ways.append("set vllm_omni_audio_output: false (text out, one GPU less)")
        if not self.share and not self.replicated:
            ways.append("set vllm_omni_share_gpus: true (every stage on one GPU group)")
        return ", ".join(ways) if ways else "use a host with more GPUs"

    @cached_property
    def replicas_culprit(self) -> str | None:
        """The replica settings, named as the variable when they are what makes a pipeline too big."""
        if not self.replicated:
            return None
        asked = [name for name, count in (("vllm_omni_prefill_replicas", self.replicas["prefill"]),
                                          ("vllm_omni_decode_replicas", self.replicas["decode"])) if count > 1]
        return " / ".join(asked)

    @cached_property
    def gpu_formula(self) -> str:
        """``gpus_per_pipeline`` in words, for the problems that quote it."""
        if self.share:
            return f"every stage shares one TP {self.tp} GPU group"
        talker = " + 1 for talker/code2wav" if self.audio else ""
        if self.layout == "pd":
            prefill, decode = self.replicas["prefill"], self.replicas["decode"]
            engines = (f"prefill TP {self.tp} + decode TP {self.tp}" if prefill == decode == 1 else
                       f"{prefill} prefill + {decode} decode engines of TP {self.tp}")
            return engines + talker
        return f"thinker TP {self.tp}{talker}"


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


def kv_transfer_plan(settings: dict) -> tuple[str, dict]:
    """A PD pipeline's KV-transfer settings, under the plan key of its connector (``mooncake`` or ``nixl``):
    the transport, and what happens when a hand-off fails or is never claimed."""
    if settings["vllm_omni_kv_connector"] == "nixl":
        # UCX picks the transport itself (RDMA where the host has verbs devices, TCP otherwise); a prefill
        # engine frees KV nobody claimed after NIXL's own lease (30 s, renewed while decode pulls).
        return "nixl", {"kv_load_failure_policy": settings["vllm_omni_kv_load_failure_policy"]}
    return "mooncake", {"protocol": settings["vllm_omni_mooncake_protocol"],
                        "rdma_devices": list(settings["vllm_omni_mooncake_rdma_devices"]),
                        "kv_load_failure_policy": settings["vllm_omni_kv_load_failure_policy"],
                        "abort_timeout": settings["vllm_omni_mooncake_abort_timeout"]}


def environment(settings: dict, ip: str, gpus: list[int], ports: dict) -> dict[str, str]:
    """The process's environment. ``ports`` with ``zmq`` (distributed processes): VLLM_PORT pins the
    ports vLLM and vLLM-Omni draw for themselves (the master's routes, the coordinator) to its slice."""
    env = {
        # Stage `devices` are indices into this list; PCI order makes them match nvidia-smi.
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in gpus),
        # Multi-homed hosts otherwise advertise the default route's address (vLLM #42023).
        "VLLM_HOST_IP": ip,
        "HF_HOME": settings["vllm_omni_hf_home"],
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    if settings["vllm_omni_model_staging"] or settings["vllm_omni_model_source"] != "none":
        env["HF_HUB_OFFLINE"] = "1"
    if settings["vllm_omni_model_source"] != "none":
        # The staged snapshot (refs/main points at it): a new revision changes this file and restarts the engine.
        env["VLLM_OMNI_MODEL_SNAPSHOT"] = settings["vllm_omni_model_revision"]
    if "nixl_side_channel" in ports:
        # Where this host's NIXL engines listen for handshakes and what they tell decode; each engine's own
        # port is in its stage config (ServeNixlConnector), since one environment serves both stages.
        env["VLLM_NIXL_SIDE_CHANNEL_HOST"] = ip
        env["UCX_TCP_PORT_RANGE"] = f"{ports['ucx_tcp'][0]}-{ports['ucx_tcp'][1]}"
    elif settings["vllm_omni_layout"] == "pd":
        if "bootstrap" in ports:  # a prefill engine's bootstrap server (decode engines run none)
            env["VLLM_MOONCAKE_BOOTSTRAP_PORT"] = str(ports["bootstrap"])
        env["MC_MIN_RPC_PORT"] = str(ports["mooncake_rpc"][0])
        env["MC_MAX_RPC_PORT"] = str(ports["mooncake_rpc"][1])
        # How long prefill keeps KV nobody pulled (decode: +60 s on its pull); vLLM's 480 s default holds a dead
        # decode's share of prefill's KV cache for 8 minutes (vllm_omni_mooncake_abort_timeout).
        env["VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT"] = str(settings["vllm_omni_mooncake_abort_timeout"])
        if settings["vllm_omni_mooncake_protocol"] == "tcp":
            # Without the pool, TCP transfers under load exhaust ephemeral ports (TIME_WAIT).
            env["MC_TCP_ENABLE_CONNECTION_POOL"] = "1"
    if "zmq" in ports:
        env["VLLM_PORT"] = str(ports["zmq"][0])
    env.update(settings["vllm_omni_extra_env"])
    return dict(sorted(env.items()))


def argv(deployment: Deployment, backend: dict, ip: str, ports: dict, paths: dict) -> list[str]:
    settings, engine, served = deployment.settings, deployment.engine, deployment.served
    if settings["vllm_omni_engine_backend"] == "simulator":
        return [f"{backend['venv']}/bin/xpyd-sim", "serve", "--mode", "dual", "--host", ip,
                "--port", str(ports["api"]), "--model", served]
    timeout = str(settings["vllm_omni_init_timeout"])
    return [
        f"{backend['venv']}/bin/vllm", "serve", settings["vllm_omni_model"], "--omni",
        "--host", ip, "--port", str(ports["api"]),
        "--served-model-name", served,
        engine.config_flag, paths["stage_config"],
        "--init-timeout", timeout, "--stage-init-timeout", timeout,
        # /metrics: vLLM-Omni's is empty without it (data/metrics.yml lists what it then exports).
        "--log-stats",
    ]


def head_argv(deployment: Deployment, backend: dict, ip: str, ports: dict, paths: dict,
              remote_engines: list[tuple[str, str]]) -> list[str]:
    """The head of a distributed pipeline: API server, orchestrator, OmniMasterServer and stage 0 (prefill 0).

    Simulator: vllm-router in PD mode stands in for the head (it sends each request to a prefill then a
    decode stand-in, round-robin over the replicas), with prefill 0's stand-in started beside it on
    loopback at the master port. ``remote_engines``: (role, stand-in URL) of the other engines.
    """
    settings = deployment.settings
    if settings["vllm_omni_engine_backend"] == "simulator":
        local = f"http://127.0.0.1:{ports['master']}"
        first = (f"{backend['venv']}/bin/xpyd-sim serve --mode prefill --host 127.0.0.1 --port {ports['master']} "
                 f"--model {deployment.served}")
        router = [f"{backend['venv']}/bin/vllm-router", "--host", ip, "--port", str(ports["api"]),
                  "--vllm-pd-disaggregation", "--policy", "round_robin", "--prefill", local]
        for role, url in remote_engines:
            router += [f"--{role}", url]
        router += ["--prometheus-host", "127.0.0.1", "--prometheus-port", str(ports["zmq"][0]),
                   "--health-check-interval-secs", "5", "--worker-startup-timeout-secs", "600",
                   "--worker-startup-check-interval", "2"]
        # sh: both processes in the unit's cgroup; stopping the unit stops both, the router is the main one.
        return ["/bin/sh", "-c", f'{first} & exec "$@"', "sh", *router]
    return [*argv(deployment, backend, ip, ports, paths), "--stage-id", "0",
            "--omni-master-address", ip, "--omni-master-port", str(ports["master"]),
            "--omni-lb-policy", settings["vllm_omni_replica_lb_policy"]]


def headless_argv(deployment: Deployment, backend: dict, ip: str, ports: dict, paths: dict, stage_id: int,
                  role: str, master: tuple[str, int]) -> list[str]:
    """A headless stage of a distributed pipeline: registers with the head's master at ``master``.

    Simulator: an xpyd-sim prefill or decode stand-in on the process's API port, which the head's
    stand-in router calls.
    """
    settings = deployment.settings
    if settings["vllm_omni_engine_backend"] == "simulator":
        return [f"{backend['venv']}/bin/xpyd-sim", "serve", "--mode", role, "--host", ip,
                "--port", str(ports["api"]), "--model", deployment.served]
    return [
        f"{backend['venv']}/bin/vllm", "serve", settings["vllm_omni_model"], "--omni", "--headless",
        deployment.engine.config_flag, paths["stage_config"],
        "--stage-init-timeout", str(settings["vllm_omni_init_timeout"]),
        "--stage-id", str(stage_id), "--omni-master-address", master[0], "--omni-master-port", str(master[1]),
        "--omni-replica-address", ip, "--log-stats",
    ]


def backend(settings: dict, engine: EngineVersion) -> dict:
    """What runs the pipelines: the packages of its venv (and their lock), the venv, and the KV connector the
    engine role installs."""
    root = settings["vllm_omni_install_root"]
    if settings["vllm_omni_engine_backend"] == "simulator":
        version = _engine_data.companions()["xpyd_sim"]
        return {"name": "simulator", "packages": _locks.simulator_packages(),
                "lock": _locks.simulator_lock(), "venv": _names.venv_dir(root, f"xpyd-sim-{version}"),
                "stand_in": True, "kv_connector": None}
    transport = settings["vllm_omni_kv_connector"] if settings["vllm_omni_layout"] == "pd" else None
    kv_connector = engine.kv_connector(transport) if transport else None
    if kv_connector:
        # The engine role copies roles/engine/files/<file> into the venv's site-packages, and checks that the
        # transport's library loads (mooncake, nixl).
        kv_connector["file"] = f"{kv_connector['module']}.py"
        kv_connector["transport"] = transport
    return {"name": "engine", "packages": _locks.engine_packages(engine, transport),
            "lock": _locks.engine_lock(engine, transport),
            "venv": _names.venv_dir(root, f"vllm-omni-{engine.version}"), "stand_in": False, "kv_connector": kv_connector}


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
        settings = self.deployment.settings
        indices = dict(first_index)
        placed = []
        for engine in engines:
            index = indices.get(engine.host, 0)
            indices[engine.host] = index + 1
            process = name if engine.is_head else f"{name}-{engine.role}{engine.replica}"
            placed.append(_Placed(engine, process, index, _ports.process_ports(settings, index, engine.role, engine.is_head),
                                  ips[engine.host]))
        first = {role: next(item for item in placed if item.engine.role == role) for role in _distributed.ROLES}
        context = _DistributedContext(name=name, key=name if spanning else f"{engines[0].host}/{name}",
                                      master=(placed[0].ip, placed[0].ports["master"]), first=first,
                                      explain=_distributed.explain(engines, spanning),
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
            "url": f"http://{ip}:{ports['api']}" if engine.is_head else None,
            "health_url": f"http://{ip}:{ports['api']}" if engine.is_head or self.backend["stand_in"] else None,
            "paths": paths,
            "environment": environment(settings, ip, list(engine.gpus), ports),
            "argv": (head_argv(deployment, self.backend, ip, ports, paths, context.stand_ins) if engine.is_head else
                     headless_argv(deployment, self.backend, ip, ports, paths, stage_id, engine.role, context.master)),
            "master": {"address": context.master[0], "port": context.master[1]},
            "placement": {"score": None, "explain": context.explain},
        }
        kv_key, kv_plan = kv_transfer_plan(settings)
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
        ports = _ports.pipeline_ports(settings, index)
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
            "url": f"http://{ip}:{ports['api']}",
            "health_url": f"http://{ip}:{ports['api']}",
            "paths": paths,
            "environment": environment(settings, ip, pipeline_gpus, ports),
            "argv": argv(deployment, self.backend, ip, ports, paths),
            "placement": {"score": placement["score"], "explain": placement["explain"]},
        }
        if deployment.layout == "pd":
            kv_key, kv_plan = kv_transfer_plan(settings)
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
            own = (_stage_config.check_launch(document, engine, engine.config_flag)
                   + _stage_config.check_document(document, engine, pipeline["environment"]))
            if own:  # pragma: no cover - a planner bug, never a user error
                raise RuntimeError(f"rendered stage config for {pipeline['host']}/{pipeline['name']} "
                                   f"fails its own check: {own}")
            if key:
                self._documents[key] = document
        return document
