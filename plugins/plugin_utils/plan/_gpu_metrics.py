# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""The gpu_metrics section of the plan: the GPU health exporter on each engine host with pipelines.

The exporter (roles/engine/files/vllm_omni_gpu_metrics.py) reads ``nvidia-smi -q -x`` and the kernel log's Xid
lines, and answers Prometheus (job vllm-omni-gpu) on ``port``. It is told the GPUs the plan placed stages on, so
that a GPU which drops out of nvidia-smi's list is reported missing (alert VllmOmniGpuLost) rather than just gone.

Why not NVIDIA's DCGM exporter: it needs DCGM (datacenter-gpu-manager) and a Go binary or container from NVIDIA's
own repositories, neither in any distribution's; nvidia-smi comes with the driver every GPU host already has, and
reads the same NVML counters. Serialisation only.
"""

from __future__ import annotations

from ..host import _names

NVIDIA_SMI = "nvidia-smi"  # the exporter looks in /usr/bin, /usr/local/bin, /usr/sbin (packages, NVIDIA's .run)
KERNEL_LOG = "/dev/kmsg"
TIMEOUT_S = 20.0  # nvidia-smi -q takes about a second on 8 GPUs; a lost GPU can make it hang much longer
CACHE_S = 5.0  # two Prometheus servers scraping one host run nvidia-smi once


def gpu_metrics_plan(settings: dict, plan: dict, ips: dict[str, str | None]) -> dict:
    """Deployment-wide values and, per engine host with pipelines, its address and the GPUs its stages use."""
    port = settings["vllm_omni_gpu_metrics_port"]
    enabled = settings["vllm_omni_gpu_metrics"]
    if enabled is None:  # the default: on with the real engine; the simulator's hosts have no GPUs to read
        enabled = not plan["backend"]["stand_in"]
    per_host = {}
    for host, host_plan in sorted(plan["hosts"].items()) if enabled else ():
        if not host_plan["pipelines"]:
            continue
        gpus = sorted({gpu for pipeline in host_plan["pipelines"] for gpu in pipeline["gpus"]})
        per_host[host] = {"address": ips[host], "metrics_url": f"http://{ips[host]}:{port}{_names.METRICS_PATH}",
                          "python": plan["platforms"][plan["host_platforms"][host]]["interpreter"], "gpus": gpus}
    return {
        "enabled": enabled,
        "unit": _names.GPU_METRICS_UNIT,
        "unit_file": _names.unit_path(_names.GPU_METRICS_UNIT),
        "program": f"{plan['paths']['install_root']}/{_names.GPU_METRICS_PROGRAM}",
        "config": f"{plan['paths']['config_root']}/{_names.GPU_METRICS_CONFIG}",
        "port": port,
        "memory_alert_ratio": settings["vllm_omni_alert_gpu_memory_ratio"],
        "per_host": per_host,
    }


def host_config(section: dict, host: str) -> dict:
    """gpu-metrics.json of ``host``: what its exporter reads."""
    entry = section["per_host"][host]
    return {"address": entry["address"], "port": section["port"], "gpus": entry["gpus"], "nvidia_smi": NVIDIA_SMI,
            "kernel_log": KERNEL_LOG, "timeout_s": TIMEOUT_S, "cache_s": CACHE_S}


def listen_ports(section: dict) -> dict[str, list[dict]]:
    """The exporter's port on every engine host that runs it (open to inventory hosts and the monitoring clients)."""
    port = section["port"]
    return {host: [{"service": "gpu-metrics", "purpose": "metrics", "first": port, "last": port}]
            for host in section["per_host"]}
