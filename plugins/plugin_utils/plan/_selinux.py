# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""What SELinux's targeted policy needs to let the collection's confined services run (the plan's ``selinux``).

On a platform whose hosts run SELinux (data/platforms.yml ``selinux: true``: the RHEL 9 family, enforcing by
default), two of the collection's services run in confined domains, because they are the distribution's own
binaries started by systemd:

* nginx (the front door, ``httpd_t``): it listens on the router's API port, which the policy lets it bind only when
  the port is typed ``http_port_t`` (80, 443, 8008, ... are; 8000 is not), and it proxies to vllm-router on a
  loopback port, which needs the boolean ``httpd_can_network_connect``;
* the artifact fan-out's rsync daemon (``rsync_t``, in a transient unit): it listens on the fan-out port, typed
  ``rsync_port_t`` for it (873 is; the plan's port is not), and serves the wheelhouse and model directories
  read-only from /var/cache/vllm-omni, outside rsync's own content, which the boolean ``rsync_export_all_ro`` allows.

Everything else the collection runs (the engines, vllm-router, the Mooncake master, the self-heal agent) is
started from a venv under /opt or by the platform's Python with a script, which the policy runs unconfined
(``unconfined_service_t``), and Prometheus is EPEL's, which ships no policy module: none needs a rule. Ports and
reasons come from the plan, so a changed port is typed where it changes. The roles apply these with the
``selinux_policy`` module; where SELinux is disabled it does nothing.
"""

from __future__ import annotations


def selinux_plan(plan: dict) -> dict:
    """{"per_host": {host: {component: {"ports": [...], "booleans": [...]}}}} for the hosts of SELinux platforms."""
    per_host: dict[str, dict] = {}
    router, artifacts = plan["router"], plan["artifacts"]
    for host, platform in sorted(plan.get("host_platforms", {}).items()):
        if not plan["platforms"][platform].get("selinux"):
            continue
        needs: dict[str, dict] = {}
        if router["frontdoor"]["enabled"] and host in router["hosts"]:
            backend = next(p["first"] for p in router["listen_ports"][host] if p["purpose"] == "backend")
            needs["frontdoor"] = {
                "ports": [{"port": router["port"], "proto": "tcp", "type": "http_port_t",
                           "why": f"nginx (httpd_t) listens on the front door's port {router['port']}"}],
                "booleans": [{"name": "httpd_can_network_connect", "value": True,
                              "why": f"nginx proxies to vllm-router on 127.0.0.1:{backend}"}],
            }
        if artifacts["per_host"].get(host, {}).get("serves"):
            needs["artifacts"] = {
                "ports": [{"port": artifacts["port"], "proto": "tcp", "type": "rsync_port_t",
                           "why": f"the artifact fan-out's rsync daemon (rsync_t) listens on port {artifacts['port']}"}],
                "booleans": [{"name": "rsync_export_all_ro", "value": True,
                              "why": "the rsync daemon serves the wheelhouse and model directories read-only"}],
            }
        if needs:
            per_host[host] = needs
    return {"per_host": per_host}
