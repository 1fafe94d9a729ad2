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
"""

from __future__ import annotations

import ipaddress

TABLE = "vllm_omni"
UNIT = "vllm-omni-firewall.service"

# (service, purpose) -> which client setting also reaches it; the rest are for inventory peers only.
CLIENT_PORTS = {
    ("router", "api"): "vllm_omni_router_client_cidrs",
    ("router", "metrics"): "vllm_omni_monitoring_client_cidrs",
    ("prometheus", "web"): "vllm_omni_monitoring_client_cidrs",
}


def _split(networks: list[str]) -> tuple[list[str], list[str]]:
    v4 = [n for n in networks if ipaddress.ip_network(n).version == 4]
    v6 = [n for n in networks if ipaddress.ip_network(n).version == 6]
    return v4, v6


def _ports(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}-{last}"


# Not under the config root: that directory belongs to the engine user's group (0750).
RULESET_FILE = "/etc/nftables.d/vllm-omni.nft"


def firewall_plan(settings: dict, listen_ports: dict[str, list[dict]], ips: dict[str, str | None]) -> dict:
    """The firewall section of the plan: per host, each planned port range and who may reach it."""
    base = {"enabled": settings["vllm_omni_firewall_enabled"], "table": TABLE, "unit": UNIT,
            "ruleset_file": RULESET_FILE}
    if not base["enabled"]:
        return {**base, "peers": [], "per_host": {}}
    peers = sorted({ip for ip in ips.values() if ip is not None}, key=ipaddress.ip_address)
    per_host = {}
    for host, ranges in sorted(listen_ports.items()):
        rules = []
        for r in ranges:
            setting = CLIENT_PORTS.get((r["service"], r["purpose"]))
            clients = list(settings[setting]) if setting else []
            rules.append({"service": r["service"], "purpose": r["purpose"], "ports": _ports(r["first"], r["last"]),
                          "clients": clients, "clients_from": setting})
        per_host[host] = {"rules": rules}
    return {**base, "peers": peers, "per_host": per_host}


def _set(values: list[str]) -> str:
    return "{ " + ", ".join(values) + " }"


def ruleset_text(plan: dict, host: str) -> str:
    """The nftables file for ``host``: replaces our table atomically (``nft -f``), nothing else."""
    firewall = plan["firewall"]
    rules = firewall["per_host"].get(host, {}).get("rules", [])
    lines = [
        f"# {firewall['ruleset_file']}: rendered by vllm_omni.serve from the plan; edits are overwritten.",
        f"# Loaded by {firewall['unit']} (nft -f). Only the ports below are filtered; other ports and",
        "# other tables are not touched.",
        f"table inet {TABLE}",
        f"delete table inet {TABLE}",
        "",
        f"table inet {TABLE} {{",
    ]
    peers_v4, _ = _split(firewall["peers"])  # peers are IPv4 (the planner refuses IPv6 addresses)
    lines.append("  set inventory_peers_v4 {")
    lines.append("    type ipv4_addr; flags interval;")
    if peers_v4:
        lines.append(f"    elements = {_set(peers_v4)}")
    lines.append("  }")
    named = {}
    for rule in rules:
        if rule["clients_from"] and rule["clients"]:
            named[rule["clients_from"]] = rule["clients"]
    for setting, networks in sorted(named.items()):
        v4, v6 = _split(networks)
        short = setting.removeprefix("vllm_omni_")
        for family, values in (("v4", v4), ("v6", v6)):
            if values:
                lines += [f"  set {short}_{family} {{",
                          f"    type {'ipv4_addr' if family == 'v4' else 'ipv6_addr'}; flags interval;",
                          f"    elements = {_set(values)}", "  }"]
    lines += [
        "",
        "  chain input {",
        # Before the usual filter priority, so our drop happens whatever order other tables use.
        "    type filter hook input priority filter - 5; policy accept;",
        '    iifname "lo" accept',
        "    ct state established,related accept",
    ]
    for rule in rules:
        label = f"{rule['service']} {rule['purpose']}"
        lines.append(f"    # {label}")
        lines.append(f"    tcp dport {rule['ports']} ip saddr @inventory_peers_v4 accept")
        if rule["clients_from"] and rule["clients"]:
            short = rule["clients_from"].removeprefix("vllm_omni_")
            v4, v6 = _split(rule["clients"])
            if v4:
                lines.append(f"    tcp dport {rule['ports']} ip saddr @{short}_v4 accept")
            if v6:
                lines.append(f"    tcp dport {rule['ports']} ip6 saddr @{short}_v6 accept")
        lines.append(f'    tcp dport {rule["ports"]} counter drop comment "vllm-omni: {label}, not a peer or client"')
    lines += ["  }", "}", ""]
    return "\n".join(lines)
