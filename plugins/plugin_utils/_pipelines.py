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
from typing import Any

from . import _engine_data, _footprint, _placement, _stage_config
from ._engine_data import EngineVersion

# Unit names and paths belong to _footprint; kept importable here for older callers.
SYSTEMD_UNIT_DIR = _footprint.SYSTEMD_UNIT_DIR
PIPELINE_DROPIN = _footprint.PIPELINE_DROPIN

# What ``environment`` computes per pipeline: vllm_omni_extra_env may not set these.
OWNED_ENV = frozenset({
    "CUDA_DEVICE_ORDER", "CUDA_VISIBLE_DEVICES", "VLLM_HOST_IP", "VLLM_MOONCAKE_BOOTSTRAP_PORT",
    "MC_MIN_RPC_PORT", "MC_MAX_RPC_PORT", "MC_TCP_ENABLE_CONNECTION_POOL", "HF_HOME", "HF_HUB_OFFLINE",
    "VLLM_NO_USAGE_STATS", "DO_NOT_TRACK", "HF_TOKEN",
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
    def gpus_per_pipeline(self) -> int:
        # Shared: every stage on the one TP group. Otherwise
        # pd: prefill TP + decode TP (+ one GPU shared by talker and code2wav);
        # aggregated: thinker TP (+ one GPU shared by talker and code2wav: the engine's own layout).
        if self.share:
            return self.tp
        return (2 * self.tp if self.layout == "pd" else self.tp) + (1 if self.audio else 0)

    @cached_property
    def gpu_formula(self) -> str:
        """``gpus_per_pipeline`` in words, for the problems that quote it."""
        if self.share:
            return f"every stage shares one TP {self.tp} GPU group"
        talker = " + 1 for talker/code2wav" if self.audio else ""
        if self.layout == "pd":
            return f"prefill TP {self.tp} + decode TP {self.tp}{talker}"
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


def environment(settings: dict, ip: str, gpus: list[int], ports: dict) -> dict[str, str]:
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
    if settings["vllm_omni_model_staging"]:
        env["HF_HUB_OFFLINE"] = "1"
    if settings["vllm_omni_layout"] == "pd":
        env["VLLM_MOONCAKE_BOOTSTRAP_PORT"] = str(ports["bootstrap"])
        env["MC_MIN_RPC_PORT"] = str(ports["mooncake_rpc"][0])
        env["MC_MAX_RPC_PORT"] = str(ports["mooncake_rpc"][1])
        if settings["vllm_omni_mooncake_protocol"] == "tcp":
            # Without the pool, TCP transfers under load exhaust ephemeral ports (TIME_WAIT).
            env["MC_TCP_ENABLE_CONNECTION_POOL"] = "1"
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
    ]


def backend(settings: dict, engine: EngineVersion) -> dict:
    """What runs the pipelines: the packages of its venv, the venv, and the KV connector the engine role installs."""
    root = settings["vllm_omni_install_root"]
    if settings["vllm_omni_engine_backend"] == "simulator":
        version = _engine_data.companions()["xpyd_sim"]
        return {"name": "simulator", "packages": [f"xpyd-sim=={version}"], "venv": f"{root}/venvs/xpyd-sim-{version}",
                "stand_in": True, "kv_connector": None}
    packages = [f"vllm=={engine.vllm}", f"vllm-omni=={engine.version}"]
    kv_connector = None
    if settings["vllm_omni_layout"] == "pd":
        packages.append(mooncake_package(engine.wheel_cuda_major))
        if engine.kv_connector:
            # The engine role copies roles/engine/files/<file> into the venv's site-packages.
            kv_connector = {**engine.kv_connector, "file": f"{engine.kv_connector['module']}.py"}
    return {"name": "engine", "packages": packages, "venv": f"{root}/venvs/vllm-omni-{engine.version}",
            "stand_in": False, "kv_connector": kv_connector}


def mooncake_package(cuda_major: int | None) -> str:
    """The one Mooncake transfer-engine variant for wheels built against ``cuda_major`` (None: no GPU)."""
    variants = _engine_data.companions()["mooncake"]
    variant = variants["none" if cuda_major is None else f"cuda{cuda_major}"]
    return f"{variant['package']}=={variant['version']}"


def _pipeline_ports(settings: dict, index: int) -> dict[str, Any]:
    """Pipeline ``index``'s ports: one each from the API and bootstrap bases, and its slice of the Mooncake range."""
    ports: dict[str, Any] = {"api": settings["vllm_omni_api_port_base"] + index}
    if settings["vllm_omni_layout"] == "pd":
        ports["bootstrap"] = settings["vllm_omni_bootstrap_port_base"] + index
        slice_size = settings["vllm_omni_mooncake_rpc_ports_per_pipeline"]
        first = settings["vllm_omni_mooncake_rpc_port_range"][0] + index * slice_size
        ports["mooncake_rpc"] = [first, first + slice_size - 1]
    return ports


def _pipeline_paths(settings: dict, name: str, venv: str) -> dict[str, str]:
    config_dir = f"{settings['vllm_omni_config_root']}/{name}"
    return {
        "config_dir": config_dir,
        "stage_config": f"{config_dir}/stage_config.yaml",
        "env_file": f"{config_dir}/engine.env",
        # The files a rolling upgrade replaces, kept here until the new ones serve (roles/upgrade).
        "previous_dir": f"{config_dir}/.previous",
        "unit_dropin": _footprint.dropin_path(_footprint.pipeline_unit(name)),
        "venv": venv,
    }


class PipelineBuilder:
    """Builds every pipeline of one plan, and keeps the stage-config documents pipelines can share."""

    def __init__(self, deployment: Deployment):
        assert deployment.engine is not None  # a refused version or layout stops planning before pipelines
        self.deployment = deployment
        self.backend = backend(deployment.settings, deployment.engine)
        self._documents: dict[str, dict] = {}

    def host_pipelines(self, host: str, ip: str, gpus: list[int], count: int, facts: dict | None) -> list[dict]:
        """``count`` pipelines on ``host``, placed on ``gpus`` (topology ``facts`` where discovery ran)."""
        deployment = self.deployment
        placements = _placement.place(gpus, count, deployment.tp, deployment.layout, facts, deployment.audio,
                                      deployment.share)
        return [self.pipeline(host, ip, index, placements[index]) for index in range(count)]

    def pipeline(self, host: str, ip: str, index: int, placement: dict) -> dict:
        deployment = self.deployment
        settings = deployment.settings
        name = f"{settings['vllm_omni_pipeline_prefix']}{index}"
        pipeline_gpus = placement["gpus"]
        ports = _pipeline_ports(settings, index)
        paths = _pipeline_paths(settings, name, self.backend["venv"])
        stages = stage_layout(deployment, host, name)
        for stage in stages:
            stage["physical_gpus"] = [pipeline_gpus[int(d)] for d in stage["devices"].split(",")]
        pipeline = {
            "name": name,
            "host": host,
            "index": index,
            "unit": _footprint.pipeline_unit(name),
            "gpus": pipeline_gpus,
            "stages": stages,
            "ports": ports,
            "kv_ip": ip,
            "url": f"http://{ip}:{ports['api']}",
            "paths": paths,
            "environment": environment(settings, ip, pipeline_gpus, ports),
            "argv": argv(deployment, self.backend, ip, ports, paths),
            "placement": {"score": placement["score"], "explain": placement["explain"]},
        }
        if deployment.layout == "pd":
            pipeline["mooncake"] = {"protocol": settings["vllm_omni_mooncake_protocol"],
                                    "rdma_devices": list(settings["vllm_omni_mooncake_rdma_devices"])}
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
