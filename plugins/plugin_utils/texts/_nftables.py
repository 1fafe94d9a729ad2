# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""The nftables texts of the plan's firewall section (plan/_firewall.py): the peers file once, each host's ruleset.

Serialisation only: every port, address and client network is the plan's.
"""

from __future__ import annotations

import functools
import ipaddress

from ..plan._firewall import TABLE


@functools.lru_cache(maxsize=64)
def _split(networks: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(IPv4, IPv6) networks; cached: every router/Prometheus host has the same client lists."""
    versions = {n: ipaddress.ip_network(n).version for n in networks}
    return [n for n in networks if versions[n] == 4], [n for n in networks if versions[n] == 6]


PEER_SET = "inventory_peers_v4"
# Their names in the render directory: <host>/firewall.nft per host, firewall/peers.nft once.
RENDER_RULESET_FILE = "firewall.nft"
RENDER_PEERS_FILE = "firewall/peers.nft"


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
    pipeline_sets, set_lines = _set_lines(firewall["per_host"].get(host, {}), rules)
    lines += set_lines
    lines += [
        "  chain input {",
        # Before the usual filter priority, so our drop happens whatever order other tables use.
        "    type filter hook input priority filter - 5; policy accept;",
        '    iifname "lo" accept',
        "    ct state established,related accept",
    ]
    for rule in rules:
        lines += _rule_lines(rule, pipeline_sets)
    lines += ["  }", "}", ""]
    return "\n".join(lines)


def _set_lines(mine: dict, rules: list[dict]) -> tuple[dict[str, str], list[str]]:
    """The host's named sets: each distributed pipeline's hosts, each client setting's networks by family;
    with the set name of each pipeline."""
    lines = []
    named = {}
    for rule in rules:
        if rule["clients_from"] and rule["clients"]:
            named[rule["clients_from"]] = rule["clients"]
    pipeline_peers = mine.get("pipeline_peers", {})
    pipeline_sets = {key: f"pipeline_peers_{n}" for n, key in enumerate(pipeline_peers)}
    for key, set_name in pipeline_sets.items():
        addresses = pipeline_peers[key]
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
    return pipeline_sets, lines


def _rule_lines(rule: dict, pipeline_sets: dict[str, str]) -> list[str]:
    """One planned range: accepted from who may reach it, then dropped for everyone else."""
    label = f"{rule['service']} {rule['purpose']}"
    if "pipeline" in rule:
        return [f"    # {label} (distributed pipeline {rule['pipeline']}: its hosts only)",
                f"    tcp dport {rule['ports']} ip saddr @{pipeline_sets[rule['pipeline']]} accept",
                f'    tcp dport {rule["ports"]} counter drop comment "vllm-omni: {label}, not a host of '
                f'the pipeline"']
    lines = [f"    # {label}", f"    tcp dport {rule['ports']} ip saddr @{PEER_SET} accept"]
    if rule["clients_from"] and rule["clients"]:
        short = rule["clients_from"].removeprefix("vllm_omni_")
        v4, v6 = _split(tuple(rule["clients"]))
        if v4:
            lines.append(f"    tcp dport {rule['ports']} ip saddr @{short}_v4 accept")
        if v6:
            lines.append(f"    tcp dport {rule['ports']} ip6 saddr @{short}_v6 accept")
    lines.append(f'    tcp dport {rule["ports"]} counter drop comment "vllm-omni: {label}, not a peer or client"')
    return lines
