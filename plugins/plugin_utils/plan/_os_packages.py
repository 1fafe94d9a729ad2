# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""The distribution packages each host gets (the plan's ``os_packages``).

data/platforms.yml names, per platform, the packages each part of the collection installs (rsync for the artifact
fan-out, nftables for the firewall, nginx for the front door, Prometheus, Mooncake's libraries). A host gets the
parts it runs, in its platform's names: the roles install exactly these (only where missing), preflight checks
each is installed or installable from the host's own package sources before anything changes (an air-gapped site
learns it then, not halfway through a deploy), and docs/platforms.md lists them.
"""

from __future__ import annotations

from ..host import _platforms
from . import _host_platforms, _host_values
from ._problems import Problems


def host_parts(plan: dict, settings: dict) -> dict[str, list[str]]:
    """host -> the parts of the collection on it that install distribution packages (data/platforms.yml's keys)."""
    engine_hosts, routers = list(plan["hosts"]), plan["router"]["hosts"]
    masters, monitors = plan["mooncake_master"]["hosts"], plan["monitoring"]["hosts"]
    planned = sorted({*engine_hosts, *routers, *masters, *monitors})
    # rsync where the artifacts role pulls wheel sets or weights (the hosts that build venvs).
    parts: dict[str, list[str]] = {host: ["artifacts"] if host in plan["artifacts"]["per_host"] else []
                                   for host in planned}
    if settings["vllm_omni_firewall_enabled"]:
        for host in planned:
            parts[host].append("firewall")
    if plan["router"]["frontdoor"]["enabled"]:
        for host in routers:
            parts[host].append("frontdoor")
    for host in monitors:
        parts[host].append("monitoring")
    # Mooncake's libraries: on engine hosts unless their pipelines move KV with NIXL (its wheels carry their own),
    # and on Mooncake master hosts.
    transport = (plan["backend"].get("kv_connector") or {}).get("transport", "mooncake")
    mooncake = set(masters) | (set(engine_hosts) if transport != "nixl" else set())
    rdma = settings["vllm_omni_mooncake_protocol"] == "rdma"
    for host in sorted(mooncake):
        parts[host] += ["mooncake", "mooncake_rdma"] if rdma else ["mooncake"]
    return parts


def os_packages(plan: dict, settings: dict, hostvars: dict, problems: Problems) -> dict[str, dict]:
    """host -> {"platform", "packages": {part: [package, ...]}}. A host that builds no venv (a monitoring-only host)
    gets its platform here the way venv hosts get theirs (named, discovered, or assumed until discovery)."""
    parts = host_parts(plan, settings)
    platforms = dict(plan["host_platforms"])
    # Venv hosts got theirs (or their problem) already; the others only install packages.
    venv_hosts = {*plan["hosts"], *plan["router"]["hosts"], *plan["mooncake_master"]["hosts"]}
    others = [host for host in parts if host not in venv_hosts]
    if others:
        wanted = {host: _host_values.host_value(host, hostvars.get(host, {}), "vllm_omni_host_platform", problems)[0]
                  for host in others}
        chosen = _host_platforms.host_platforms({"packages": others}, {"packages": ""}, hostvars,
                                                {h: w for h, w in wanted.items() if w is not None}, problems)
        platforms.update({host: entry["platform"] for host, entry in chosen.items()})
    return {host: {"platform": platforms[host],
                   "packages": {part: list(_platforms.packages(platforms[host])[part]) for part in parts[host]}}
            for host in sorted(parts) if host in platforms}
