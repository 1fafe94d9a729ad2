# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""The self-heal section of the plan: what the agent on each engine host watches, how often, and its bounds.

The agent (roles/engine/files/vllm_omni_heal.py) reads its host's slice as self-heal.json. Each engine process of
the host is one watch: a single-process pipeline or a distributed pipeline's head probes its own /health; a
headless stage probes its head's /health (the head's API port is open to every inventory host), because what it
must react to is its head's restart, which happens on another host. Serialisation only.
"""

from __future__ import annotations

from ..host import _names

WINDOW_S = 3600  # vllm_omni_self_heal_max_restarts counts restarts within this window
PROBE_TIMEOUT_S = 5.0  # a /health that does not answer in 5 s counts as failing (vLLM answers it in milliseconds)


def _watch(pipeline: dict, distributed: dict) -> dict:
    if pipeline["process"] == "headless":
        probe = distributed[pipeline["pipeline_key"]]["head"]["url"] + _names.HEALTH_PATH
    else:
        probe = pipeline["health_url"]
    return {"pipeline": pipeline["name"], "unit": pipeline["unit"], "process": pipeline["process"], "probe": probe}


def self_heal_plan(settings: dict, plan: dict, ips: dict[str, str | None]) -> dict:
    """The deployment-wide values and, per engine host with pipelines, its address and watches."""
    port = settings["vllm_omni_self_heal_port"]
    per_host = {}
    for host, host_plan in sorted(plan["hosts"].items()):
        if not host_plan["pipelines"]:
            continue
        # The host platform's own interpreter (the agent needs the standard library only, Python 3.9 or later).
        python = plan["platforms"][plan["host_platforms"][host]]["interpreter"]
        per_host[host] = {"address": ips[host], "metrics_url": f"http://{ips[host]}:{port}{_names.METRICS_PATH}",
                          "python": python,
                          "watch": [_watch(p, plan["distributed_pipelines"]) for p in host_plan["pipelines"]]}
    return {
        "enabled": settings["vllm_omni_self_heal"],
        "unit": _names.SELF_HEAL_UNIT,
        "unit_file": _names.unit_path(_names.SELF_HEAL_UNIT),
        "program": f"{plan['paths']['install_root']}/{_names.SELF_HEAL_PROGRAM}",
        "config": f"{plan['paths']['config_root']}/{_names.SELF_HEAL_CONFIG}",
        "state_file": _names.SELF_HEAL_STATE,
        "pause_file": _names.SELF_HEAL_PAUSE,
        "port": port,
        "interval": settings["vllm_omni_self_heal_interval"],
        "after": settings["vllm_omni_self_heal_after"],
        "max_restarts": settings["vllm_omni_self_heal_max_restarts"],
        "window": WINDOW_S,
        "probe_timeout": PROBE_TIMEOUT_S,
        # A process that has not served since it started is given the engine's own start budget: a cold start
        # with real weights is minutes, and the engine fails its own start after --init-timeout anyway.
        "start_grace": settings["vllm_omni_init_timeout"],
        # A deploy pauses the agent for at most this long (it lifts the pause itself when it ends).
        "pause_s": settings["vllm_omni_init_timeout"] * 2,
        "per_host": per_host,
    }


def host_config(section: dict, host: str) -> dict:
    """self-heal.json of ``host``: what its agent reads."""
    entry = section["per_host"][host]
    keys = ("enabled", "interval", "after", "max_restarts", "window", "probe_timeout", "start_grace", "port",
            "state_file", "pause_file")
    return {**{key: section[key] for key in keys}, "address": entry["address"], "watch": entry["watch"]}


def listen_ports(section: dict) -> dict[str, list[dict]]:
    """The agent's metrics port on every engine host that runs it (open to inventory hosts and the monitoring
    clients)."""
    port = section["port"]
    return {host: [{"service": "self-heal", "purpose": "metrics", "first": port, "last": port}]
            for host in section["per_host"]}
