# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""The planner: inventory settings in, one deployment plan out. Pure and deterministic.

``build_plan(inventory)`` validates every setting (raising ``PlanError`` with every problem
found, each naming the host, the variable and the fix) and returns a JSON-serialisable plan:
per host, the pipelines with their GPU sets, stage layout, ports, KV-transfer settings,
environment, engine argv and stage-config document, plus the deployment's worker URLs.

The plan is the one source of truth for ports, paths and versions: roles, templates and the
render playbook read it and never recompute what it says.

This module runs the planning steps in order and assembles the plan's top level. The steps live in
``_problems`` (how problems are reported), ``_validate`` (the deployment-wide settings), ``_hosts``
(the groups, and per host its address, GPUs and pipeline count), ``_ports`` (each host's port
ranges) and ``_pipelines`` (one pipeline's stages, environment, argv and stage config).
"""

from __future__ import annotations

import gc
import hashlib
import json

from ..host import _engine_data, _footprint, _locks, _names, _platforms
from . import (
    _answer_check,
    _artifacts,
    _distributed,
    _firewall,
    _gpu_metrics,
    _hardening,
    _host_platforms,
    _host_values,
    _hosts,
    _no_effect,
    _os_packages,
    _pipelines,
    _ports,
    _self_heal,
    _selinux,
    _services,
    _validate,
)
from ._deployment import Deployment
from ._hosts import HostGroups, HostPlan
from ._problems import Problems
from ._stages import layout_roles

PLAN_SCHEMA = 1


class gc_paused:
    """No cyclic garbage collection inside: plans are trees (no cycles), and the collector's passes over
    millions of new containers cost a quarter of plan + render at 1,024 hosts, a third at 4,096.

    On the way out (also on an exception) the collector is enabled again if it was enabled on the way in.
    Before that, what was made inside moves straight to the oldest generation (``gc.freeze()`` then
    ``gc.unfreeze()``: two list splices, no pass over the objects), where only the full collections the process
    makes anyway see it (left young, the first allocation after ``gc.enable()`` would walk all of it, and promote
    it twice more). Skipped when the process had frozen objects of its own (``unfreeze`` would thaw them too)."""

    def __enter__(self):
        self.enabled = gc.isenabled()
        self.frozen = gc.get_freeze_count()
        gc.disable()

    def __exit__(self, *exc):
        if self.enabled:
            if not self.frozen and not gc.get_freeze_count():
                gc.freeze()
                gc.unfreeze()
            gc.enable()


def build_plan(inventory: dict, discovery_pending: bool = False) -> dict:
    """Validate the inventory and compute the deployment plan (see ``_build_plan``)."""
    with gc_paused():
        return _build_plan(inventory, discovery_pending)


def _build_plan(inventory: dict, discovery_pending: bool = False) -> dict:
    """Validate the inventory and compute the deployment plan.

    ``inventory``: ``{"engine_hosts": [...], "router_hosts": [...], "master_hosts": [...],
    "hostvars": {host: {var: value}}}``
    where each host's vars hold at least its ``vllm_omni_*`` settings and ``ansible_host``.
    With ``discovery_pending`` (the first pass of deploy.yml, before GPU discovery ran), hosts without
    ``vllm_omni_gpus`` are not an error: they get no pipelines in this pass.
    Raises ``PlanError`` listing every problem found.
    """
    problems = Problems()
    groups, hostvars, settings, sources = _read_settings(inventory, problems)
    problems.raise_if_any()

    deployment = _validate.deployment(settings, sources, problems)
    groups = _hosts.with_services(groups, settings, problems)
    ips = {host: _host_values.host_ip(host, hostvars.get(host, {}), problems) for host in groups.all_hosts}
    host_plans = _hosts.engine_host_plans(deployment, groups, hostvars, discovery_pending, problems)
    service_warnings = _validate.check_service_host_settings(groups.service_only, hostvars, settings, problems)
    _hosts.check_service_ports(groups, settings, problems)
    _hosts.check_addresses(ips, groups.all_hosts, problems)
    _validate.check_fanout_address(settings, ips, problems)
    _validate.check_key_rotation(settings, groups.all_hosts, hostvars, problems)
    problems.raise_if_any()

    plan = _assemble(deployment, groups.engine_hosts, host_plans, ips)
    _check_every_host_used(plan, host_plans, deployment, problems)
    problems.raise_if_any()
    _add_services(plan, settings, groups, ips)
    _add_platforms(plan, hostvars, problems)
    problems.raise_if_any()
    _add_host_sections(plan, settings, ips, problems)
    plan["os_packages"] = _os_packages.os_packages(plan, settings, hostvars, problems)
    plan["selinux"] = _selinux.selinux_plan(plan)  # what the confined services need on SELinux platforms
    problems.raise_if_any()
    plan["warnings"].extend(service_warnings + _deployment_warnings(plan, deployment)
                            + _no_effect.warnings(deployment, groups, ips, hostvars))
    return plan


def _read_settings(inventory: dict, problems: Problems) -> tuple:
    """(groups, hostvars, settings, sources): the inventory's groups, each host's vars (their names checked) and
    the deployment's settings with where each came from."""
    groups = _hosts.inventory_groups(inventory, problems)
    hostvars = inventory.get("hostvars") or {}
    for host in groups.all_hosts:
        _validate.check_names(host, hostvars.get(host, {}), problems)
    settings, sources = _validate.deployment_settings(
        groups.engine_hosts, {h: hostvars.get(h, {}) for h in groups.engine_hosts}, problems)
    return groups, hostvars, settings, sources


def _add_host_sections(plan: dict, settings: dict, ips: dict[str, str | None], problems: Problems) -> None:
    """The sections computed from the whole plan: artifacts, rolling, every listen port (checked), the reserved
    ports, unit hardening, the firewall and each host's footprint."""
    plan["artifacts"] = _artifacts.artifacts_plan(settings, plan, ips)
    # How deploy and upgrade roll pipelines that serve (roles/upgrade, _rolling.waves).
    plan["rolling"] = {"max_unavailable": settings["vllm_omni_rolling_max_unavailable"]}
    # The one request smoke and verify compare with each host's reference answer (roles/engine, verify_answers).
    plan["answer_check"] = _answer_check.answer_check_plan(settings, plan)
    # The engine hosts' agents (roles/engine): self-heal (what it watches, its bounds) and the GPU health exporter.
    plan["self_heal"] = _self_heal.self_heal_plan(settings, plan, ips)
    plan["gpu_metrics"] = _gpu_metrics.gpu_metrics_plan(settings, plan, ips)
    # Every port range of every host (pipelines and services): preflight, the firewall and the kernel's
    # reserved ports all read this one list.
    plan["listen_ports"] = dict(sorted(_all_listen_ports(plan).items()))
    if not _ports.check_listen_ports(plan["listen_ports"], problems):
        problems.raise_if_any()
    plan["reserved_ports"] = {host: _ports.port_list(ranges) for host, ranges in plan["listen_ports"].items()}
    plan["hardening"] = _hardening.unit_hardening(plan["backend"]["name"], plan["paths"]["engine_home"], plan["paths"]["hf_home"])
    plan["firewall"] = _firewall.firewall_plan(settings, plan["listen_ports"], ips,
                                               {key: p["hosts"] for key, p in plan["distributed_pipelines"].items()})
    plan["footprint"] = _footprint.footprints(plan)


# --- the plan's top level -----------------------------------------------------------------------


def _assemble(deployment: Deployment, engine_hosts: list[str], host_plans: dict[str, HostPlan],
              ips: dict[str, str | None]) -> dict:
    """The plan without its services: the deployment's engine, backend and settings, and every engine host."""
    settings, engine = deployment.settings, deployment.engine
    builder = _pipelines.PipelineBuilder(deployment)
    hosts: dict[str, dict] = {}
    warnings: list[str] = []
    entries = {host: [] if host_plans.get(host) is None else  # None: GPU discovery pending (first pass)
               builder.host_pipelines(host, ips[host], host_plans[host].gpus, host_plans[host].count,
                                      host_plans[host].facts) for host in engine_hosts}
    distributed = _spanning_pipelines(builder, deployment, host_plans, entries, ips)
    for host in engine_hosts:
        hosts[host], host_warnings = _hosts.host_section(host, ips[host], host_plans.get(host), entries[host],
                                                         deployment)
        warnings.extend(host_warnings)
    distributed.update(_whole_distributed(entries, set(distributed), builder.backend["stand_in"]))
    worker_urls = [entry["url"] for host in engine_hosts for entry in entries[host]
                   if entry.get("process", "single") in ("single", "head")]
    return {
        "schema": PLAN_SCHEMA,
        "deployment_id": deployment_id(engine_hosts, ips),
        "layout": deployment.layout,
        "paths": _names.fixed_paths(settings),
        # uv installs every venv on the hosts; each venv's wheels are locked and hash-checked (data/locks/).
        # Each venv's lock is named here; the file for a host is the plan's locks[<its platform>][<name>].
        "installer": {"uv": _engine_data.companions()["uv"], "uv_lock": _locks.uv_lock()},
        "engine": {
            "vllm_omni_version": engine.version,
            "vllm_version": engine.vllm,
            "stage_config_schema": engine.schema,
            "config_flag": engine.config_flag,
            "wheel_cuda_major": engine.wheel_cuda_major,
            # The oldest NVIDIA driver the locked torch's CUDA major runs on (data/platforms.yml); preflight checks it.
            "driver_floor": _platforms.driver_floor(engine.wheel_cuda_major),
        },
        "backend": builder.backend,
        "kv_transfer": _pipelines.kv_transfer_section(deployment.kv_settings),
        "model": settings["vllm_omni_model"],
        "served_model_name": deployment.served,
        "tensor_parallel_size": deployment.tp,
        "settings": {name: {"value": settings[name], "source": deployment.sources[name]} for name in sorted(settings)},
        "hosts": hosts,
        # Pipelines whose engines run as processes of their own: which host runs which stage engine.
        "distributed_pipelines": dict(sorted(distributed.items())),
        "worker_urls": worker_urls,
        "warnings": warnings,
    }


def _check_every_host_used(plan: dict, host_plans: dict[str, HostPlan], deployment: Deployment,
                           problems: Problems) -> None:
    """A host whose GPUs went into no pipeline: too small for a whole one, and its span group had no room."""
    for host, host_plan in host_plans.items():
        if host_plan is None or plan["hosts"][host]["pipelines"]:
            continue
        group = host_plan.span_group
        problems.add(_hosts.host_where(host), deployment.replicas_culprit or "vllm_omni_gpus",
                     f"offers {len(host_plan.gpus)} GPU(s) {host_plan.gpus}, which no pipeline uses: a whole "
                     f"pipeline needs {deployment.gpus_per_pipeline} ({deployment.gpu_formula}), and the spare GPUs "
                     f"of span group {group!r} do not add up to another pipeline",
                     f"give the host more GPUs, add hosts with spare GPUs to span group {group!r} "
                     f"(vllm_omni_span_group), {deployment.fewer_gpus}, or take the host out of group vllm_omni")


def deployment_id(engine_hosts: list[str], ips: dict[str, str | None]) -> str:
    """A name for this deployment that stays the same run after run and differs between inventories: the
    controller keys its reports by it (reports/<deployment_id>/), so two inventories never overwrite each other."""
    digest = hashlib.sha256(json.dumps(sorted((h, ips.get(h)) for h in engine_hosts)).encode()).hexdigest()[:10]
    return f"{sorted(engine_hosts)[0]}-{digest}"


def _spanning_pipelines(builder: _pipelines.PipelineBuilder, deployment: Deployment,
                        host_plans: dict[str, HostPlan], entries: dict[str, list[dict]],
                        ips: dict[str, str | None]) -> dict[str, dict]:
    """Pipelines made of hosts' spare GPUs (per span group), added to ``entries``; their summaries by name."""
    if not deployment.spanning:
        return {}
    spares = []
    for host, host_plan in host_plans.items():
        if host_plan is None or not host_plan.offers_spare:
            continue
        used = {gpu for entry in entries[host] for gpu in entry["gpus"]}
        free = [gpu for gpu in host_plan.gpus if gpu not in used]
        if free:
            spares.append(_distributed.Spare(host, host_plan.span_group, free, host_plan.facts))
    pipelines, _unused = _distributed.span(spares, deployment.tp, deployment.replicas)
    prefix = deployment.settings["vllm_omni_pipeline_prefix"]
    summaries = {}
    for number, engines in enumerate(pipelines):
        name = f"{prefix}-span{number}"
        processes = builder.distributed_pipeline(name, engines, ips, {h: len(entries[h]) for h in entries},
                                                 spanning=len({e.host for e in engines}) > 1)
        for host, host_entries in processes.items():
            entries[host].extend(host_entries)
        summaries[name] = _distributed_summary(name, [e for es in processes.values() for e in es],
                                               builder.backend["stand_in"])
    return summaries


def _whole_distributed(entries: dict[str, list[dict]], spanning: set[str], stand_in: bool) -> dict[str, dict]:
    """Summaries of the distributed pipelines that sit on one host (xPyD within a host), keyed host/name."""
    by_pipeline: dict[str, list[dict]] = {}
    for host_entries in entries.values():
        for entry in host_entries:
            if entry.get("process", "single") != "single" and entry["pipeline_key"] not in spanning:
                by_pipeline.setdefault(entry["pipeline_key"], []).append(entry)
    return {key: _distributed_summary(processes[0]["pipeline"], processes, stand_in)
            for key, processes in by_pipeline.items()}


def _distributed_summary(name: str, processes: list[dict], stand_in: bool) -> dict:
    head = next(p for p in processes if p["process"] == "head")
    # Where a drained pipeline shows its requests in flight (upgrade waits for 0), read from the head's
    # host: the head's API server; for the simulator, each stand-in engine (the head's own on loopback).
    if stand_in:
        metrics = [_names.http_url("127.0.0.1", head['ports']['master'], _names.METRICS_PATH)] + [
            p["metrics_url"] for p in processes if p["process"] == "headless"]
    else:
        metrics = [head["metrics_url"]]
    return {
        "pipeline": name,
        "head": {"host": head["host"], "unit": head["unit"], "url": head["url"],
                 "master": f"{head['master']['address']}:{head['master']['port']}"},
        "hosts": sorted({p["host"] for p in processes}),
        "engines": [{"host": p["host"], "process": p["name"], "unit": p["unit"], "role": p["stages"][p["stage_id"]]["role"],
                     "replica": p["replica"], "stage_id": p["stage_id"], "gpus": p["gpus"],
                     "headless": p["process"] == "headless"} for p in processes],
        "explain": head["placement"]["explain"],
        "in_flight_metrics": metrics,
    }


def _add_services(plan: dict, settings: dict, groups: HostGroups, ips: dict[str, str | None]) -> None:
    """The router, Mooncake master and monitoring sections; their ports join the engine hosts' lists."""
    plan["router"] = _services.router_plan(settings, groups.router_hosts, groups.router_defaulted, ips,
                                           plan["worker_urls"])
    plan["mooncake_master"] = _services.master_plan(settings, groups.master_hosts, groups.master_defaulted, ips)
    plan["monitoring"] = _services.monitoring_plan(settings, groups.monitoring_hosts, groups.monitoring_defaulted, ips)
    for service in _service_sections(plan):
        for host, ranges in service.get("listen_ports", {}).items():
            if host in plan["hosts"]:
                plan["hosts"][host]["listen_ports"].extend(ranges)


def _add_platforms(plan: dict, hostvars: dict, problems: Problems) -> None:
    """Every venv-building host's platform (``host_platforms``), the platforms in use and their locks."""
    venv_hosts = {"backend": sorted(plan["hosts"]), "router": plan["router"]["hosts"],
                  "mooncake_master": plan["mooncake_master"]["hosts"]}
    lock_names = {"backend": plan["backend"]["lock"], "router": plan["router"]["lock"],
                  "mooncake_master": plan["mooncake_master"].get("lock", "")}
    wanted = {host: _host_values.host_value(host, hostvars.get(host, {}), "vllm_omni_host_platform", problems)[0]
              for host in sorted({h for hosts in venv_hosts.values() for h in hosts})}
    chosen = _host_platforms.host_platforms(venv_hosts, lock_names, hostvars,
                                            {h: w for h, w in wanted.items() if w is not None}, problems)
    plan["host_platforms"] = {host: chosen[host]["platform"] for host in sorted(chosen)}
    plan["host_platform_sources"] = {host: chosen[host]["source"] for host in sorted(chosen)}
    plan.update(_host_platforms.platforms_section(chosen, {k: v for k, v in lock_names.items() if v},
                                                  plan["installer"]["uv_lock"]))


def _service_sections(plan: dict) -> list[dict]:
    return [plan["router"], plan["mooncake_master"], plan["monitoring"]]


def _all_listen_ports(plan: dict) -> dict[str, list[dict]]:
    """host -> every port range planned there (pipelines, router, master, artifact daemon, self-heal agent)."""
    found = {host: list(host_plan["listen_ports"]) for host, host_plan in plan["hosts"].items()}
    for service in _service_sections(plan):
        for host, ranges in service.get("listen_ports", {}).items():
            if host not in plan["hosts"]:
                found.setdefault(host, []).extend(ranges)
    for host, ranges in _artifacts.listen_ports(plan).items():
        found.setdefault(host, []).extend(ranges)
    for agent in (_self_heal.listen_ports(plan["self_heal"]), _gpu_metrics.listen_ports(plan["gpu_metrics"])):
        for host, ranges in agent.items():
            found[host].extend(ranges)
    return found


# --- warnings -----------------------------------------------------------------------------------


def _deployment_warnings(plan: dict, deployment: Deployment) -> list[str]:
    """What the plan cannot check but the user should know, after the per-host warnings."""
    warnings = []
    if deployment.share:
        warnings.append(_shared_gpu_warning(deployment))
    ephemeral = _ports.ephemeral_warning(plan["listen_ports"])
    if ephemeral:
        warnings.append(ephemeral)
    if deployment.layout == "pd" and not deployment.engine.decode_gets_request_sampling:
        warnings.append(_decode_sampling_warning(deployment))
    if not deployment.settings["vllm_omni_api_key_required"]:
        warnings.append("vllm_omni_api_key_required is false: every pipeline and the router answer "
                        "requests without an API key")
    warnings.extend(_exposure_warnings(deployment.settings))
    return warnings


def _exposure_warnings(settings: dict) -> list[str]:
    """Settings that open the deployment wider than its inventory: legal, and said out loud."""
    warnings = []
    if not settings["vllm_omni_firewall_enabled"]:
        warnings.append("vllm_omni_firewall_enabled is false: engine API, bootstrap and Mooncake ports accept "
                        "connections from anywhere the network lets through")
    if not settings["vllm_omni_frontdoor_enabled"]:
        warnings.append("vllm_omni_frontdoor_enabled is false: clients reach vllm-router in plain HTTP (the key in "
                        "clear), and its unauthenticated admin endpoints (/add_worker, /remove_worker) share the "
                        "router port: keep vllm_omni_router_client_cidrs to networks you trust")
    for name in ("vllm_omni_router_client_cidrs", "vllm_omni_monitoring_client_cidrs"):
        everyone = [n for n in settings[name] if n in ("0.0.0.0/0", "::/0")]
        if everyone:
            warnings.append(f"{name} lists {', '.join(everyone)}: every address may reach that port")
    return warnings


def _shared_gpu_warning(deployment: Deployment) -> str:
    shares, overrides = deployment.planner_shares, deployment.overrides
    return ("vllm_omni_share_gpus: every stage of a pipeline shares its GPU"
            + (f"; the planner set gpu_memory_utilization of {', '.join(shares)} "
               f"({', '.join(str(overrides[r]['engine_args']['gpu_memory_utilization']) for r in shares)})"
               if shares else "")
            + ". Each share must hold that stage's weights"
            + (": the 30B Qwen3-Omni thinker alone is about 60 GiB in bf16, per copy (prefill and decode each load one)"
               if "30B" in deployment.settings["vllm_omni_model"] else ""))


def _decode_sampling_warning(deployment: Deployment) -> str:
    engine = deployment.engine
    thinker = next(s for s in engine.data["legacy_stages"] if s["engine_args"]["model_stage"] == "thinker")
    decode = {**thinker.get("default_sampling_params", {}), **deployment.overrides["decode"]["sampling"]}
    return (f"vLLM-Omni {engine.version} applies a request's sampling fields (max_tokens, temperature, top_p, ...) to "
            "the prefill stage only; the decode stage, which writes the answer, uses its stage defaults "
            f"(now max_tokens {decode.get('max_tokens', '?')}, temperature {decode.get('temperature', '?')}): set "
            "the caps clients should get in vllm_omni_stage_sampling_params.decode (docs/engine-facts.md)")


def stage_roles(layout: str, audio: bool = True) -> tuple[str, ...]:
    return layout_roles(layout, audio)
