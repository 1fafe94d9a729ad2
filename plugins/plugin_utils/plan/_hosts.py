# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""The hosts of a deployment: which group each is in, and what each engine host can run.

Groups first: the engine hosts, and the router, Mooncake master and monitoring hosts, defaulted
to an engine (or router) host where the inventory leaves the group empty. Then per host: its
address and its GPUs (``_host_values``), how many pipelines fit on them, and
whether the ports those pipelines and the host's services need fit together. Last, the plan's
section for each engine host, around the pipelines ``_pipelines`` built for it.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from dataclasses import dataclass

from . import _ports
from ._checkers import show
from ._deployment import Deployment
from ._host_values import HostGpus, host_gpus, host_value
from ._problems import Problems, host_where
from ._setting_groups import PortSettings

ENGINE_GROUP = "vllm_omni"
ROUTER_GROUP = "vllm_omni_router"
MASTER_GROUP = "vllm_omni_mooncake_master"
MONITORING_GROUP = "vllm_omni_monitoring"
HOSTNAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
# What a render directory holds beside the hosts' own folders (plan.json, the shared firewall peer set and
# Prometheus' files): a host of one of these names would collide with it (tests/unit: test_render).
RENDER_SHARED_NAMES = frozenset({"plan.json", "firewall", "prometheus"})


# --- groups -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HostGroups:
    """The hosts of each group, deduplicated; services default to a host of another group when theirs is empty."""

    engine_hosts: list[str]  # sorted
    router_hosts: list[str]
    master_hosts: list[str]
    monitoring_hosts: list[str]
    all_hosts: list[str]  # sorted
    router_defaulted: bool
    master_defaulted: bool = False
    monitoring_defaulted: bool = False

    @property
    def service_only(self) -> list[str]:
        """Hosts that run a service but no pipeline."""
        return sorted(set(self.all_hosts) - set(self.engine_hosts))


def inventory_groups(inventory: dict, problems: Problems) -> HostGroups:
    """The groups as the inventory lists them (the router defaulted); raises ``PlanError`` without engine hosts
    or with a host name that cannot name directories and units."""
    engine_hosts = list(dict.fromkeys(inventory.get("engine_hosts") or []))
    router_hosts = list(dict.fromkeys(inventory.get("router_hosts") or []))
    if not engine_hosts:
        problems.add("inventory", f"group {ENGINE_GROUP}", "has no hosts",
                     f"put your GPU hosts in group {ENGINE_GROUP} (see inventories/example/hosts.yml) "
                     "and pass the inventory with -i")
        problems.raise_if_any()
    router_defaulted = not router_hosts
    if router_defaulted:
        router_hosts = [sorted(engine_hosts)[0]]
    master_hosts = list(dict.fromkeys(inventory.get("master_hosts") or []))
    monitoring_hosts = list(dict.fromkeys(inventory.get("monitoring_hosts") or []))
    all_hosts = sorted(set(engine_hosts) | set(router_hosts) | set(master_hosts) | set(monitoring_hosts))
    for host in all_hosts:
        if not isinstance(host, str) or not HOSTNAME_PATTERN.fullmatch(host):
            problems.add(host_where(show(host)), "inventory_hostname",
                         "is not a plain host name (it names directories, units and engine ids)",
                         "use letters, digits, '.', '_' and '-' only, starting with a letter or digit")
        elif host in RENDER_SHARED_NAMES:
            problems.add(host_where(host), "inventory_hostname",
                         f"is {host!r}, a name the render directory uses for its own files "
                         f"({', '.join(sorted(RENDER_SHARED_NAMES))})",
                         "rename the host in the inventory (ansible_host keeps its address)")
    problems.raise_if_any()
    return HostGroups(sorted(engine_hosts), router_hosts, master_hosts, monitoring_hosts, all_hosts, router_defaulted)


def with_services(groups: HostGroups, settings: dict, problems: Problems) -> HostGroups:
    """The groups with the Mooncake master and monitoring hosts defaulted where the setting enables them."""
    master_hosts, all_hosts = groups.master_hosts, groups.all_hosts
    master_defaulted = settings["vllm_omni_mooncake_master_enabled"] and not master_hosts
    if master_defaulted:
        master_hosts = [groups.engine_hosts[0]]
        all_hosts = sorted(set(all_hosts) | set(master_hosts))
    elif master_hosts and not settings["vllm_omni_mooncake_master_enabled"]:
        problems.add(f"group {MASTER_GROUP}", "vllm_omni_mooncake_master_enabled",
                     f"is false, but group {MASTER_GROUP} lists {', '.join(master_hosts)}",
                     "set vllm_omni_mooncake_master_enabled: true, or empty the group")
    monitoring_hosts = groups.monitoring_hosts
    monitoring_defaulted = settings["vllm_omni_monitoring_enabled"] and not monitoring_hosts
    if monitoring_defaulted:
        monitoring_hosts = [sorted(groups.router_hosts)[0]]
    elif monitoring_hosts and not settings["vllm_omni_monitoring_enabled"]:
        problems.add(f"group {MONITORING_GROUP}", "vllm_omni_monitoring_enabled",
                     f"is false, but group {MONITORING_GROUP} lists {', '.join(monitoring_hosts)}",
                     "set vllm_omni_monitoring_enabled: true, or empty the group")
    return dataclasses.replace(groups, master_hosts=master_hosts, monitoring_hosts=monitoring_hosts,
                               all_hosts=all_hosts, master_defaulted=master_defaulted,
                               monitoring_defaulted=monitoring_defaulted)


# --- one host's values --------------------------------------------------------------------------


# --- engine hosts -------------------------------------------------------------------------------


@dataclass(frozen=True)
class HostPlan:
    """What one engine host runs, and where each value came from (the plan's per-host settings)."""

    gpus: list[int]
    gpu_source: str
    skipped: dict[int, str]  # busy GPUs discovery left out -> why
    count: int  # pipelines on the host
    wanted: int | str  # vllm_omni_pipelines_per_host: a number or "auto"
    count_source: str
    ip_source: str
    facts: dict | None  # GPU discovery's facts; None where vllm_omni_gpus alone says which GPUs
    span_group: str = "all"  # vllm_omni_span_group: who this host pools spare GPUs with

    @property
    def offers_spare(self) -> bool:
        """GPUs left over after whole pipelines may serve spanning pipelines (vllm_omni_pipelines_per_host auto)."""
        return self.wanted == "auto"


def engine_host_plans(deployment: Deployment, groups: HostGroups, hostvars: dict, discovery_pending: bool,
                      problems: Problems) -> dict[str, HostPlan]:
    """host -> its plan, for every engine host without problems (and with GPUs known, when discovery is pending)."""
    host_plans = {}
    for host in groups.engine_hosts:
        variables = hostvars.get(host, {})
        facts = variables.get("vllm_omni_gpu_facts") or None
        if discovery_pending and facts is None and "vllm_omni_gpus" not in variables:
            continue  # planned in the second pass, with what discovery finds
        host_plan = _engine_host(host, variables, facts, deployment, groups, problems)
        if host_plan is not None:
            host_plans[host] = host_plan
    return host_plans


def _engine_host(host: str, variables: dict, facts: dict | None, deployment: Deployment, groups: HostGroups,
                 problems: Problems) -> HostPlan | None:
    found = host_gpus(host, variables, facts, deployment, problems)
    wanted, wanted_source = host_value(host, variables, "vllm_omni_pipelines_per_host", problems)
    if found is None or wanted is None:
        return None
    count = _pipeline_count(host, found, wanted, deployment, problems)
    if count is None or not _ports_fit(host, _most_processes(found.gpus, count, wanted, deployment), deployment,
                                       groups, problems):
        return None
    group, _unused = host_value(host, variables, "vllm_omni_span_group", problems)
    return HostPlan(gpus=found.gpus, gpu_source=found.source, skipped=found.skipped, count=count, wanted=wanted,
                    count_source=wanted_source, ip_source="inventory" if "vllm_omni_ip" in variables else "ansible_host",
                    facts=facts, span_group=group or "all")


def _pipeline_count(host: str, found: HostGpus, wanted: int | str, deployment: Deployment,
                    problems: Problems) -> int | None:
    """How many pipelines the host runs: as many as fit for "auto", else ``wanted`` if that many fit."""
    gpus, per_pipeline, formula, layout = found.gpus, deployment.gpus_per_pipeline, deployment.gpu_formula, deployment.layout
    fits = len(gpus) // per_pipeline
    if fits == 0 and wanted == "auto" and deployment.spanning:
        return 0  # every GPU is spare: pipelines spanning hosts may use them (the planner says if none does)
    if fits == 0:
        plural = "s" if len(gpus) != 1 else ""
        if found.source == "discovered":
            busy = "; ".join(f"GPU {g} busy: {why}" for g, why in found.skipped.items())
            problems.add(host_where(host), deployment.replicas_culprit or "GPUs",
                         f"discovery found {len(gpus)} free GPU{plural} {show(gpus)}{f' ({busy})' if busy else ''}, "
                         f"but one {layout} pipeline needs {per_pipeline} ({formula})",
                         f"free the busy GPUs, use a host with more GPUs, or {deployment.fewer_gpus}")
        else:
            problems.add(host_where(host), deployment.replicas_culprit or "vllm_omni_gpus",
                         f"lists {len(gpus)} GPU{plural} {show(gpus)}, but one {layout} pipeline "
                         f"needs {per_pipeline} ({formula})",
                         f"give the host at least {per_pipeline} GPUs, or {deployment.fewer_gpus}")
        return None
    count = fits if wanted == "auto" else wanted
    if count > fits:
        problems.add(host_where(host), "vllm_omni_pipelines_per_host",
                     f"asks for {count} pipelines, which need {count * per_pipeline} GPUs "
                     f"({per_pipeline} each: {formula}); vllm_omni_gpus lists {len(gpus)}",
                     f"set it to at most {fits}, or auto")
        return None
    return count


def _most_processes(gpus: list[int], count: int, wanted: int | str, deployment: Deployment) -> int:
    """Engine processes the host may run: its whole pipelines' and one per spare TP group (spanning)."""
    per_pipeline = sum(deployment.replicas.values()) if deployment.replicated else 1
    spare = len(gpus) - count * deployment.gpus_per_pipeline if deployment.spanning and wanted == "auto" else 0
    return count * per_pipeline + spare // deployment.tp


def _service_ranges(host: str, settings: PortSettings, groups: HostGroups, engine: bool = False) -> list[_ports.Range]:
    return _ports.service_ranges(settings, host in groups.router_hosts, host in groups.master_hosts,
                                 host in groups.monitoring_hosts, engine)


def _ports_fit(host: str, count: int, deployment: Deployment, groups: HostGroups, problems: Problems) -> bool:
    """The ports of ``count`` engine processes and of the host's services, apart from each other."""
    settings, layout = deployment.port_settings, deployment.layout
    distributed = deployment.replicated or deployment.spanning
    ranges = (_ports.engine_ranges(count, settings, distributed and count > 0)
              + _service_ranges(host, settings, groups, engine=True))
    if not _ports.check_ports(host, ranges, problems, count):
        return False
    if distributed and count and not _ports.check_zmq_slices(host, count, settings, problems):
        return False
    return layout != "pd" or _ports.check_kv_slices(host, count, settings, problems)


# --- every host ---------------------------------------------------------------------------------


def check_service_ports(groups: HostGroups, settings: dict, problems: Problems) -> None:
    """The ports of hosts that run services but no pipeline (engine hosts are checked with their pipelines)."""
    port_settings = PortSettings.of(settings)
    for host in groups.service_only:
        _ports.check_ports(host, _service_ranges(host, port_settings, groups), problems)


def check_addresses(ips: dict[str, str | None], all_hosts: list[str], problems: Problems) -> None:
    """Addresses: unique, and reachable by peers."""
    by_ip: dict[str, list[str]] = {}
    for host, ip in ips.items():
        if ip is not None:
            by_ip.setdefault(ip, []).append(host)
    for ip, hosts in sorted(by_ip.items()):
        if len(hosts) > 1:
            problems.add(f"hosts {', '.join(hosts)}", "vllm_omni_ip",
                         f"share the address {ip}; every host needs its own (duplicate host entries?)",
                         "give each host its own vllm_omni_ip / ansible_host, or list the machine once")
    if len(all_hosts) > 1:
        for host, ip in sorted(ips.items()):
            if ip is not None and ipaddress.ip_address(ip).is_loopback:
                problems.add(host_where(host), "vllm_omni_ip",
                             f"is the loopback address {ip}, which the other hosts "
                             f"({', '.join(h for h in all_hosts if h != host)[:60]}) cannot reach",
                             "set vllm_omni_ip to the host's address on the network the hosts share")


# --- the plan's host section --------------------------------------------------------------------


def host_section(host: str, ip: str, host_plan: HostPlan | None, pipelines: list[dict],
                 deployment: Deployment) -> tuple[dict, list[str]]:
    """The plan's entry for one engine host, and the warnings about it; ``host_plan`` None: GPU discovery pending."""
    per_pipeline = deployment.gpus_per_pipeline
    if host_plan is None:  # GPU discovery pending (first pass)
        return {"ip": ip, "gpus": [], "gpu_source": "pending discovery", "gpus_per_pipeline": per_pipeline,
                "unused_gpus": [], "pipelines": [], "listen_ports": [], "settings": {}}, []
    gpus = host_plan.gpus
    used = {g for pipeline in pipelines for g in pipeline["gpus"]}
    unused = [g for g in gpus if g not in used]
    section = {
        "ip": ip,
        "gpus": gpus,
        "gpu_source": host_plan.gpu_source,
        "gpus_per_pipeline": per_pipeline,
        "unused_gpus": unused,
        "pipelines": pipelines,
        "listen_ports": _ports.listen_ports(pipelines, deployment.layout,
                                            stand_in=deployment.settings["vllm_omni_engine_backend"] == "simulator"),
        "settings": {
            "vllm_omni_gpus": {"value": gpus, "source": "inventory"},
            "vllm_omni_pipelines_per_host": {"value": host_plan.wanted, "source": host_plan.count_source},
            "vllm_omni_ip": {"value": ip, "source": host_plan.ip_source},
        },
    }
    warnings = []
    if host_plan.facts:
        section["cuda_version"] = host_plan.facts.get("cuda_version")
        # The smallest of the host's planned GPUs, for the summary's sizing (weights against each stage's share).
        memory = [g.get("memory_total_mib") for g in host_plan.facts.get("gpus", []) if g.get("index") in gpus]
        section["gpu_memory_mib"] = min((m for m in memory if isinstance(m, int)), default=None)
        section["skipped_gpus"] = {str(g): why for g, why in host_plan.skipped.items()}
        for gpu, why in host_plan.skipped.items():
            warnings.append(f"host {host}: GPU {gpu} skipped, busy: {why}")
    if unused:
        warnings.append(f"host {host}: GPUs {show(unused)} are left unused ({len(gpus)} usable, "
                        f"{per_pipeline} per {deployment.layout} pipeline: {deployment.gpu_formula}); "
                        + _unused_gpu_advice(deployment, host_plan, len(gpus) // per_pipeline))
    return section, warnings


def _unused_gpu_advice(deployment: Deployment, host_plan: HostPlan, fit: int) -> str:
    """The settings that would put left-over GPUs to work, or keep them free on purpose."""
    if host_plan.wanted != "auto" and host_plan.wanted < fit:
        return (f"to use them: set vllm_omni_pipelines_per_host to {fit} or auto ({fit} fit; it is "
                f"{host_plan.wanted}); or list only the GPUs to use in vllm_omni_gpus")
    ways = [] if deployment.fewer_gpus == "use a host with more GPUs" else [deployment.fewer_gpus]
    if deployment.distributable and not deployment.spanning:
        ways.append("set vllm_omni_span_hosts: true (left-over GPUs of several hosts make a pipeline)")
    elif deployment.spanning:
        ways.append("give another host of its vllm_omni_span_group the GPUs a spanning pipeline still lacks")
    return "to use them: " + "; ".join(ways) + "; or list only the GPUs to use in vllm_omni_gpus" if ways else \
        "list only the GPUs to use in vllm_omni_gpus to say they are kept free"
