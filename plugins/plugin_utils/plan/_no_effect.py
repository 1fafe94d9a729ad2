# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""Settings the inventory set that have no effect in it: one rule for every group of settings.

Each group says which of its settings go unread, and why, for the deployment the inventory describes (a layout
without KV transfer, the other connector's ports, monitoring, the Mooncake master, the front door or the firewall
off, a model source that stages nothing); a setting the inventory set (not a default) on that list gets the same
warning, "NAME is set but has no effect: WHY", in the plan's warnings, which render and deploy both print.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from ._deployment import Deployment


def warnings(context: Deployment, groups: Any, ips: dict[str, str | None], hostvars: dict) -> list[str]:
    """Settings the inventory set that this deployment never reads, or that can never take effect."""
    set_here = {name for name, source in context.sources.items() if source == "inventory"}
    return (_model_source_warnings(context.settings, set_here, groups, hostvars)
            + _if_set(set_here, _kv_unused(context) + _feature_unused(context))
            + _client_cidr_warnings(context.settings, groups, ips))


def _if_set(set_here: set, unused: list[tuple[str, str]]) -> list[str]:
    """A warning for each (setting, why) the inventory set: the first why of a setting two groups name."""
    first = {}
    for name, why in unused:
        first.setdefault(name, why)
    return [f"{name} is set but has no effect: {why}" for name, why in first.items() if name in set_here]


def _model_source_warnings(settings: dict, set_here: set, groups: Any, hostvars: dict) -> list[str]:
    source = settings["vllm_omni_model_source"]
    unused = []
    if source == "none":
        unused.append(("vllm_omni_model_revision", "vllm_omni_model_source is none (nothing is staged); set "
                       "vllm_omni_model_source: hub to serve that revision"))
    if source != "directory":
        unused.append(("vllm_omni_model_directory", f"vllm_omni_model_source is {source}; set vllm_omni_model_source: "
                       "directory to stage from it"))
    if source != "none" and settings["vllm_omni_model_staging"] is False:
        unused.append(("vllm_omni_model_staging", f"vllm_omni_model_source is {source}, which stages the model on "
                       "every engine host and serves it offline; set vllm_omni_model_source: none to have the "
                       "engines download it themselves"))
    warnings = _if_set(set_here, unused)
    if source != "hub" and any("vllm_omni_hf_token" in hostvars.get(h, {}) for h in groups.engine_hosts):
        warnings.append(f"vllm_omni_hf_token is set but has no effect: vllm_omni_model_source is {source}, and the "
                        "token is used only to fetch a hub source on the controller (it never reaches a host)")
    return warnings


def _kv_unused(context: Deployment) -> list[tuple[str, str]]:
    """The KV transfer's settings: none read outside pd, and only its own connector's in pd."""
    if context.layout != "pd":
        return [(name, f"vllm_omni_layout is {context.layout}: there is no prefill-to-decode KV transfer")
                for name in (*MOONCAKE_SETTINGS, *NIXL_SETTINGS, "vllm_omni_kv_connector",
                             "vllm_omni_prefill_replicas", "vllm_omni_decode_replicas",
                             "vllm_omni_kv_load_failure_policy")]
    connector = context.settings["vllm_omni_kv_connector"]
    nixl = (" (NIXL's own lease frees unclaimed KV after 30 s, renewed "
            "while decode pulls; UCX picks TCP or RDMA itself)")
    return [(name, f"vllm_omni_kv_connector is {connector}" + ("" if connector == "mooncake" else nixl))
            for name in (NIXL_SETTINGS if connector == "mooncake" else MOONCAKE_SETTINGS)]


def _feature_unused(context: Deployment) -> list[tuple[str, str]]:
    """The settings of a feature this deployment does not use (stage processes, monitoring, master, door, firewall)."""
    settings, unused = context.settings, []
    if not (context.replicated or context.spanning):
        unused += [(name, "no pipeline runs its engines as processes of their own (no replicas, no spanning)")
                   for name in ("vllm_omni_stage_master_port_base", "vllm_omni_stage_zmq_port_range",
                                "vllm_omni_stage_zmq_ports_per_process", "vllm_omni_replica_lb_policy")]
    if not settings["vllm_omni_mooncake_master_enabled"]:
        unused += [(name, "vllm_omni_mooncake_master_enabled is false")
                   for name in ("vllm_omni_mooncake_master_rpc_port", "vllm_omni_mooncake_master_metrics_port")]
    if not settings["vllm_omni_frontdoor_enabled"]:
        unused += [("vllm_omni_router_backend_port", "vllm_omni_frontdoor_enabled is false (vllm-router itself "
                    "listens on vllm_omni_router_port)"),
                   ("vllm_omni_alert_certificate_days", "vllm_omni_frontdoor_enabled is false (no certificate to "
                    "watch)")]
    if not settings["vllm_omni_frontdoor_enabled"] or settings["vllm_omni_tls_cert_file"] is not None:
        why = ("vllm_omni_frontdoor_enabled is false" if not settings["vllm_omni_frontdoor_enabled"] else
               "vllm_omni_tls_cert_file is set: the collection makes no certificate (renew your own, then deploy)")
        unused += [(name, why) for name in ("vllm_omni_tls_certificate_days", "vllm_omni_tls_certificate_renew_days")]
    if not settings["vllm_omni_monitoring_enabled"]:
        unused += [(name, "vllm_omni_monitoring_enabled is false (no Prometheus scrapes or evaluates alert rules)")
                   for name in ("vllm_omni_prometheus_port", "vllm_omni_monitoring_client_cidrs",
                                "vllm_omni_alert_ttft_seconds", "vllm_omni_alert_certificate_days")]
    if settings["vllm_omni_start_stall_timeout"] >= settings["vllm_omni_init_timeout"]:
        unused.append(("vllm_omni_start_stall_timeout", f"it is not below vllm_omni_init_timeout "
                       f"({settings['vllm_omni_init_timeout']} s), whose end comes first"))
    if not settings["vllm_omni_firewall_enabled"]:
        unused += [(name, "vllm_omni_firewall_enabled is false, so no rule reads it (every address gets through)")
                   for name in ("vllm_omni_router_client_cidrs", "vllm_omni_monitoring_client_cidrs")]
    return unused


def _client_cidr_warnings(settings: dict, groups: Any, ips: dict[str, str | None]) -> list[str]:
    """Client networks that no client can come from, or that together let every address in."""
    warnings = []
    routers = [h for h in groups.router_hosts if ips.get(h)]
    if settings["vllm_omni_router_client_cidrs"] and routers and all(
            ipaddress.ip_address(ips[h]).is_loopback for h in routers):
        warnings.append("vllm_omni_router_client_cidrs is set but has no effect: every router host's address is "
                        "loopback, so no client network can reach the router")
    for name in ("vllm_omni_router_client_cidrs", "vllm_omni_monitoring_client_cidrs"):
        networks = [ipaddress.ip_network(n) for n in settings[name]]
        for version, everything in ((4, "0.0.0.0/0"), (6, "::/0")):
            mine = [n for n in networks if n.version == version]
            if len(mine) > 1 and [str(n) for n in ipaddress.collapse_addresses(mine)] == [everything]:
                warnings.append(f"{name} lists {', '.join(map(str, mine))}, which together cover every IPv{version} "
                                "address: every address may reach that port")
    return warnings


# The settings only one KV connector reads (vllm_omni_kv_connector).
MOONCAKE_SETTINGS = ("vllm_omni_mooncake_protocol", "vllm_omni_mooncake_rdma_devices", "vllm_omni_bootstrap_port_base",
                     "vllm_omni_mooncake_rpc_port_range", "vllm_omni_mooncake_rpc_ports_per_pipeline",
                     "vllm_omni_mooncake_abort_timeout")
NIXL_SETTINGS = ("vllm_omni_nixl_side_channel_port_base", "vllm_omni_nixl_ucx_port_range",
                 "vllm_omni_nixl_ucx_ports_per_pipeline")
