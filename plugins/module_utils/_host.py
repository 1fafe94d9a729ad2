# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""Parse host state (listening sockets, cgroups) for the preflight and GPU facts modules."""

from __future__ import annotations

import re

# This collection's own units: pipelines, the router, the Mooncake master.
OWN_UNIT = re.compile(r"/((?:vllm-omni@[A-Za-z0-9_.-]+|vllm-omni-router|mooncake-master)\.service)")
PROCESS = re.compile(r'\("([^"]*)",pid=(\d+)')


def owner_unit(cgroup_text: str) -> str | None:
    """The vllm_omni.serve unit a process runs in, from its /proc/<pid>/cgroup, or None."""
    match = OWN_UNIT.search(cgroup_text)
    return match.group(1) if match else None


def parse_ss_listening(text: str) -> list[dict]:
    """``ss -H -l -t -n -p`` lines -> [{address, port, process, pid}]."""
    sockets = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 5 or fields[0] != "LISTEN":
            continue
        address, _, port = fields[3].rpartition(":")
        if not port.isdigit():
            continue
        address = address.strip("[]").split("%")[0]
        process = PROCESS.search(line)
        sockets.append({"address": address, "port": int(port),
                        "process": process.group(1) if process else None,
                        "pid": int(process.group(2)) if process else None})
    return sockets
