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

import functools
import ipaddress

from ..host._footprint import FIREWALL_UNIT

TABLE = "vllm_omni"

# (service, purpose) -> which client setting also reaches it; the rest are for inventory peers only.
CLIENT_PORTS = {
    ("router", "api"): "vllm_omni_router_client_cidrs",
    ("router", "metrics"): "vllm_omni_monitoring_client_cidrs",
    ("prometheus", "web"): "vllm_omni_monitoring_client_cidrs",
}


@functools.lru_cache(maxsize=64)
def _split(networks: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(IPv4, IPv6) networks; cached: every router/Prometheus host has the same client lists."""
    versions = {n: ipaddress.ip_network(n).version for n in networks}
    return [n for n in networks if versions[n] == 4], [n for n in networks if versions[n] == 6]


def _ports(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}-{last}"


# Not under the config root: that directory belongs to the engine user's group (0750).
RULESET_FILE = "/etc/nftables.d/vllm-omni.nft"
# The deployment's peer set, the same on every host; each RULESET_FILE includes it.
PEERS_FILE = "/etc/nftables.d/vllm-omni-peers.nft"
PEER_SET = "inventory_peers_v4"
# Their names in the render directory: <host>/firewall.nft per host, firewall/peers.nft once.
RENDER_RULESET_FILE = "firewall.nft"
RENDER_PEERS_FILE = "firewall/peers.nft"


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


def _set(values: list[str]) -> str:
    return "{ " + ", ".join(values) + " }"


def peers_text(plan: dict) -> str:
    """The peers file (the plan's ``firewall.peers_file``): the set of inventory addresses, once per deployment.

    A complete ruleset on its own (``nft -c -f`` checks it), but not meant to be loaded alone: each
    host's ruleset includes it inside the transaction that replaces the table.
    """
    firewall = plan["firewall"]
    # IPv4 only (the planner refuses IPv6 addresses); an address with a colon is IPv6, no parsing needed.
    peers_v4 = [ip for ip in firewall["peers"] if ":" not in ip]
    lines = [
        f"# {firewall['peers_file']}: rendered by vllm_omni.serve from the plan; edits are overwritten.",
        f"# The inventory's addresses, the same on every host. Included by {firewall['ruleset_file']}, which",
        f"# {firewall['unit']} loads (nft -f): load that file, not this one.",
        f"table inet {TABLE} {{",
        f"  set {PEER_SET} {{",
        "    type ipv4_addr; flags interval;",
    ]
    if peers_v4:
        lines.append(f"    elements = {_set(peers_v4)}")
    lines += ["  }", "}", ""]
    return "\n".join(lines)


def ruleset_text(plan: dict, host: str) -> str:
    """The nftables file for ``host``: replaces our table atomically (``nft -f``), nothing else.

    Its size is that of the host's rules: the peer set comes from the peers file (``include``).
    """
    firewall = plan["firewall"]
    rules = firewall["per_host"].get(host, {}).get("rules", [])
    lines = [
        f"# {firewall['ruleset_file']}: rendered by vllm_omni.serve from the plan; edits are overwritten.",
        f"# Loaded by {firewall['unit']} (nft -f). Only the ports below are filtered; other ports and",
        "# other tables are not touched. One transaction: delete the table, then recreate it with the",
        "# deployment's peer set (the include) and this host's rules.",
        f"table inet {TABLE}",
        f"delete table inet {TABLE}",
        f'include "{firewall["peers_file"]}"',
        "",
        f"table inet {TABLE} {{",
    ]
    named = {}
    for rule in rules:
        if rule["clients_from"] and rule["clients"]:
            named[rule["clients_from"]] = rule["clients"]
    pipeline_peers = firewall["per_host"].get(host, {}).get("pipeline_peers", {})
    pipeline_sets = {key: f"pipeline_peers_{n}" for n, key in enumerate(pipeline_peers)}
    for key, set_name in pipeline_sets.items():
        addresses = firewall["per_host"][host]["pipeline_peers"][key]
        lines += [f"  # the hosts of distributed pipeline {key}",
                  f"  set {set_name} {{", "    type ipv4_addr; flags interval;",
                  *([f"    elements = {_set(addresses)}"] if addresses else []), "  }"]
    for setting, networks in sorted(named.items()):
        v4, v6 = _split(tuple(networks))
        short = setting.removeprefix("vllm_omni_")
        for family, values in (("v4", v4), ("v6", v6)):
            if values:
                lines += [f"  set {short}_{family} {{",
                          f"    type {'ipv4_addr' if family == 'v4' else 'ipv6_addr'}; flags interval;",
                          f"    elements = {_set(values)}", "  }"]
    if named or pipeline_sets:
        lines.append("")
    lines += [
        "  chain input {",
        # Before the usual filter priority, so our drop happens whatever order other tables use.
        "    type filter hook input priority filter - 5; policy accept;",
        '    iifname "lo" accept',
        "    ct state established,related accept",
    ]
    for rule in rules:
        label = f"{rule['service']} {rule['purpose']}"
        if "pipeline" in rule:
            lines.append(f"    # {label} (distributed pipeline {rule['pipeline']}: its hosts only)")
            lines.append(f"    tcp dport {rule['ports']} ip saddr @{pipeline_sets[rule['pipeline']]} accept")
            lines.append(f'    tcp dport {rule["ports"]} counter drop comment "vllm-omni: {label}, not a host of '
                         f'the pipeline"')
            continue
        lines.append(f"    # {label}")
        lines.append(f"    tcp dport {rule['ports']} ip saddr @{PEER_SET} accept")
        if rule["clients_from"] and rule["clients"]:
            short = rule["clients_from"].removeprefix("vllm_omni_")
            v4, v6 = _split(tuple(rule["clients"]))
            if v4:
                lines.append(f"    tcp dport {rule['ports']} ip saddr @{short}_v4 accept")
            if v6:
                lines.append(f"    tcp dport {rule['ports']} ip6 saddr @{short}_v6 accept")
        lines.append(f'    tcp dport {rule["ports"]} counter drop comment "vllm-omni: {label}, not a peer or client"')
    lines += ["  }", "}", ""]
    return "\n".join(lines)
