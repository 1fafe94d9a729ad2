# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""The rsync daemons' configurations of the plan's artifacts section (plan/_artifacts.py):
each serving host's, the controller's."""

from __future__ import annotations


def _module_text(artifact: dict, children: list[str]) -> list[str]:
    return [
        f"[{artifact['id']}]",
        f"    path = {artifact['host_dir']}",
        f"    comment = {artifact['kind']} {artifact['id']}",
        f"    hosts allow = {' '.join(children)}",
        "    hosts deny = *",
        "",
    ]


def rsyncd_text(artifacts: list[dict], children: dict[str, list[str]], port: int, address: str | None,
                log_file: str | None = None, nobody_group: str = "nogroup") -> str:
    """An rsync daemon's configuration: read-only modules, each open to the addresses that pull it only.

    A host's daemon runs as root in a transient unit, chrooted into each module as nobody (and the platform's group
    of nobody: nogroup on Debian and Ubuntu, nobody on RHEL, where rsync refuses a group that does not exist). The
    controller's runs as whoever runs Ansible, unchrooted (a model directory may hold symlinks into
    a Hugging Face cache, sent as files), and logs every transfer's bytes (the controller's egress)."""
    lines = [
        "# Rendered by vllm_omni.serve from the plan; edits are overwritten. Runs only while a deploy",
        "# distributes artifacts; every file is checked against the controller's manifest by the host",
        "# that pulls it.",
        f"port = {port}",
        *([f"address = {address}"] if address else []),
        *([f"log file = {log_file}", "use chroot = no", "transfer logging = yes", "log format = sent %b bytes of %m to %a"]
          if log_file else ["use chroot = yes", "uid = nobody", f"gid = {nobody_group}"]),
        "read only = yes",
        "list = no",
        "max connections = 8",
        "timeout = 600",
        "reverse lookup = no",
        "",
    ]
    for artifact in artifacts:
        if children.get(artifact["id"]):
            lines += _module_text(artifact, children[artifact["id"]])
    return "\n".join(lines)


def host_rsyncd_text(plan: dict, host: str) -> str:
    """The rsyncd.conf of one serving host (its address, the modules its children pull)."""
    section = plan["artifacts"]
    mine = [a for a in section["items"] if a["id"] in section["per_host"][host]["children"]]
    entry = section["per_host"][host]
    group = plan["platforms"][plan["host_platforms"][host]]["unprivileged_group"]
    return rsyncd_text(mine, entry["children"], section["port"], entry["address"], nobody_group=group)


def controller_rsyncd_text(plan: dict, sources: dict[str, str], log_file: str) -> str:
    """The controller's daemon: every artifact from its controller copy, to every host of the deployment
    (the first of each tree, and any host whose parent failed)."""
    section = plan["artifacts"]
    everyone = sorted({entry["address"] for entry in section["per_host"].values()})
    items = [{**item, "host_dir": sources[item["id"]]} for item in section["items"]]
    return rsyncd_text(items, {item["id"]: everyone for item in items}, section["port"], None, log_file)
