"""Firewall: one peer set per deployment (firewall/peers.nft), one small ruleset per host that includes it."""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import subprocess

import pytest
from unitlib import inventory

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan import _firewall
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.texts import _nftables
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.texts._render import render_tree

CLIENTS = ["10.77.0.1/32", "fd00:77::/64", "192.168.0.0/16"]


def address(i: int) -> str:
    return f"10.{i // 250 // 250}.{i // 250 % 250}.{i % 250 + 1}"


def fleet(hosts: int, **settings) -> dict:
    """``hosts`` engine hosts of 3 GPUs (one PD pipeline each) and a router host."""
    inv = inventory({f"gpu-{i:04d}": {"ansible_host": address(i), "vllm_omni_gpus": [0, 1, 2]} for i in range(hosts)},
                    settings, router=["edge"])
    inv["hostvars"]["edge"] = {"ansible_host": "10.250.0.5"}
    return inv


def firewall_files(tree: dict[str, str]) -> dict[str, str]:
    return {path: text for path, text in tree.items() if path.endswith(".nft")}


def test_the_peer_set_is_rendered_once_and_every_host_ruleset_includes_it():
    plan = build_plan(fleet(3))
    firewall = plan["firewall"]
    assert firewall["ruleset_file"] == "/etc/nftables.d/vllm-omni.nft"
    assert firewall["peers_file"] == "/etc/nftables.d/vllm-omni-peers.nft"
    tree = render_tree(plan)
    files = firewall_files(tree)
    assert sorted(files) == ["edge/firewall.nft", "firewall/peers.nft", "gpu-0000/firewall.nft",
                             "gpu-0001/firewall.nft", "gpu-0002/firewall.nft"]
    peers = files["firewall/peers.nft"]
    assert "elements = { 10.0.0.1, 10.0.0.2, 10.0.0.3, 10.250.0.5 }" in peers
    assert re.search(r"^table inet vllm_omni \{\n  set inventory_peers_v4 \{\n    type ipv4_addr; flags interval;$",
                     peers, re.M)
    for host in ("edge", "gpu-0000", "gpu-0001", "gpu-0002"):
        text = files[f"{host}/firewall.nft"]
        assert not re.search(r"\b10\.0\.0\.\d", text), f"{host}'s ruleset repeats the peer list"
        assert "set inventory_peers_v4" not in text
        # One transaction: delete the table, recreate it with the peer set (include), then add this host's rules.
        head = text.splitlines()
        start = head.index("table inet vllm_omni")
        assert head[start:start + 3] == ["table inet vllm_omni", "delete table inet vllm_omni",
                                         'include "/etc/nftables.d/vllm-omni-peers.nft"']
        assert text.index('include "') < text.index("table inet vllm_omni {") < text.index("chain input")


def test_each_port_accepts_loopback_established_peers_and_configured_clients_then_drops():
    plan = build_plan(fleet(2, vllm_omni_router_client_cidrs=CLIENTS))
    edge = _nftables.ruleset_text(plan, "edge")
    assert "set router_client_cidrs_v4 {\n    type ipv4_addr; flags interval;\n" \
           "    elements = { 10.77.0.1/32, 192.168.0.0/16 }\n  }" in edge
    assert "set router_client_cidrs_v6 {\n    type ipv6_addr; flags interval;\n    elements = { fd00:77::/64 }\n  }" in edge
    chain = edge[edge.index("chain input"):]
    assert chain.index('iifname "lo" accept') < chain.index("ct state established,related accept") < chain.index("dport")
    assert ("    # router api\n"
            "    tcp dport 8000 ip saddr @inventory_peers_v4 accept\n"
            "    tcp dport 8000 ip saddr @router_client_cidrs_v4 accept\n"
            "    tcp dport 8000 ip6 saddr @router_client_cidrs_v6 accept\n"
            '    tcp dport 8000 counter drop comment "vllm-omni: router api, not a peer or client"\n') in chain
    engine = _nftables.ruleset_text(plan, "gpu-0000")
    assert "router_client_cidrs" not in engine  # the client networks reach the router port only
    rules = plan["firewall"]["per_host"]["gpu-0000"]["rules"]
    assert rules, "an engine host has planned ports"
    for rule in rules:
        ports = rule["ports"]
        accept = f"    tcp dport {ports} ip saddr @inventory_peers_v4 accept\n"
        drop = f"    tcp dport {ports} counter drop comment"
        assert accept in engine and engine.index(accept) < engine.index(drop)


def test_firewall_files_grow_linearly_with_the_hosts():
    sizes = {}
    for hosts in (32, 128):
        files = firewall_files(render_tree(build_plan(fleet(hosts))))
        rulesets = [len(text) for path, text in files.items() if path.endswith("/firewall.nft")
                    and not path.startswith("edge/")]
        assert len(set(rulesets)) == 1, "engine hosts of one shape get rulesets of one size, whatever the fleet"
        sizes[hosts] = (sum(len(text) for text in files.values()), rulesets[0])
    assert sizes[32][1] == sizes[128][1]
    ratio = sizes[128][0] / sizes[32][0]
    assert 3.5 < ratio < 4.5, f"4x the hosts gave {ratio:.1f}x the firewall bytes (quadratic would be ~16x)"


def test_addresses_are_parsed_once_per_plan_not_once_per_host(monkeypatch):
    plan = build_plan(fleet(16, vllm_omni_router_client_cidrs=CLIENTS, vllm_omni_monitoring_client_cidrs=["10.9.0.0/16"]))
    calls = []

    class Counting:
        def ip_address(self, value):
            calls.append(value)
            return ipaddress.ip_address(value)

        def ip_network(self, value):
            calls.append(value)
            return ipaddress.ip_network(value)

    monkeypatch.setattr(_firewall, "ipaddress", Counting())
    _nftables._split.cache_clear()
    render_tree(plan)
    render_tree(plan)
    assert sorted(calls) == sorted(set(calls)) and len(calls) <= len(CLIENTS) + 1, calls


def test_a_disabled_firewall_renders_no_nft_file():
    plan = build_plan(fleet(2, vllm_omni_firewall_enabled=False))
    assert plan["firewall"]["per_host"] == {} and plan["firewall"]["peers"] == []
    assert not firewall_files(render_tree(plan))


@pytest.mark.skipif(shutil.which("nft") is None or os.geteuid() != 0, reason="nft -c needs nft and root")
def test_nft_checks_every_rendered_file(tmp_path):
    plan = build_plan(fleet(3, vllm_omni_router_client_cidrs=CLIENTS))
    files = firewall_files(render_tree(plan))
    peers = tmp_path / "peers.nft"
    peers.write_text(files.pop("firewall/peers.nft"))
    checked = [peers]
    for path, text in files.items():
        target = tmp_path / path.replace("/", "-")
        target.write_text(text.replace(plan["firewall"]["peers_file"], str(peers)))
        checked.append(target)
    for target in checked:
        result = subprocess.run(["nft", "-c", "-f", str(target)], capture_output=True, text=True, check=False)
        assert result.returncode == 0, f"{target.name}: {result.stderr}"
