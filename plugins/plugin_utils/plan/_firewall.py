# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""Firewall plan and nftables ruleset: the plan's ports, open only to who needs them.

One table of our own (``inet vllm_omni``) with one input chain. It names only the ports the plan
listens on; every other port, and every other table on the host, is left alone. Per port range:

- loopback always passes;
- the inventory's hosts (engines, router, Mooncake master, monitoring) pass: that is who talks to an
  engine's API, bootstrap and Mooncake ports;
- the router's API port also passes ``vllm_omni_router_client_cidrs``; Prometheus and the router's
  metrics port also pass ``vllm_omni_monitoring_client_cidrs``;
- anything else to those ports is dropped.

An ``accept`` here does not override a ``drop`` in another table (nftables runs every base chain of
the hook), so this coexists with firewalld, ufw or a site ruleset; it only ever narrows.

Two files, so that the render stays linear in the number of hosts: the inventory's addresses are one
set, ``inventory_peers_v4``, written ONCE per deployment to the peers file (:func:`peers_text`);
each host's ruleset (:func:`ruleset_text`) includes it and holds only that host's rules. ``nft -f``
of the host file deletes and recreates the table, the peer set (through the include) and the chain
in one transaction, so the table is never seen without its set. The peers file is itself a complete
ruleset (``table inet vllm_omni { set ... }``): ``nft -c -f`` checks it alone, and a site whose
``nftables.conf`` includes ``/etc/nftables.d/*.nft`` still loads.
"""

from __future__ import annotations

import ipaddress

from ..host._names import FIREWALL_UNIT, PEERS_FILE, RULESET_FILE

TABLE = "vllm_omni"

# (service, purpose) -> which client setting also reaches it; the rest are for inventory peers only.
CLIENT_PORTS = {
    ("router", "api"): "vllm_omni_router_client_cidrs",
    ("router", "metrics"): "vllm_omni_monitoring_client_cidrs",
    ("prometheus", "web"): "vllm_omni_monitoring_client_cidrs",
    ("self-heal", "metrics"): "vllm_omni_monitoring_client_cidrs",
    ("gpu-metrics", "metrics"): "vllm_omni_monitoring_client_cidrs",
}


def _ports(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}-{last}"


def firewall_plan(settings: dict, listen_ports: dict[str, list[dict]], ips: dict[str, str | None],
                  pipeline_hosts: dict[str, list[str]] | None = None) -> dict:
    """The firewall section of the plan: per host, each planned port range and who may reach it.

    A range that belongs to a distributed pipeline (its stage master, ZMQ, bootstrap and Mooncake
    ports; ``pipeline``) opens to that pipeline's hosts only (``pipeline_hosts``: key -> hosts), not to
    every inventory peer: the head's API port stays open to the peers (the router).
    """
    pipeline_hosts = pipeline_hosts or {}
    base = {"enabled": settings["vllm_omni_firewall_enabled"], "table": TABLE, "unit": FIREWALL_UNIT,
            "ruleset_file": RULESET_FILE, "peers_file": PEERS_FILE}
    if not base["enabled"]:
        return {**base, "peers": [], "per_host": {}}
    # The one place an address is parsed (once per plan): the planner validated them, this only orders them.
    peers = sorted({ip for ip in ips.values() if ip is not None}, key=ipaddress.ip_address)
    per_host = {}
    for host, ranges in sorted(listen_ports.items()):
        rules, pipelines = [], {}
        for r in ranges:
            if r.get("loopback"):  # bound to 127.0.0.1: no other host can reach it, no rule needed
                continue
            setting = CLIENT_PORTS.get((r["service"], r["purpose"]))
            clients = list(settings[setting]) if setting else []
            rule = {"service": r["service"], "purpose": r["purpose"], "ports": _ports(r["first"], r["last"]),
                    "clients": clients, "clients_from": setting}
            if "pipeline" in r:
                key = r["pipeline"]
                pipelines[key] = sorted({ips[h] for h in pipeline_hosts.get(key, [host]) if ips.get(h)},
                                        key=ipaddress.ip_address)
                rule["pipeline"] = key
            rules.append(rule)
        per_host[host] = {"rules": rules, **({"pipeline_peers": dict(sorted(pipelines.items()))} if pipelines else {})}
    return {**base, "peers": peers, "per_host": per_host}
