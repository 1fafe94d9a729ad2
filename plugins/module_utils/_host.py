# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""Parse host state (listening sockets, cgroups) for the preflight and GPU facts modules."""

from __future__ import annotations

import re

PROCESS = re.compile(r'\("([^"]*)",pid=(\d+)')
UNIT_IN_CGROUP = re.compile(r"/([A-Za-z0-9_.@:-]+\.service)(?:/|$)", re.MULTILINE)


def owner_unit(cgroup_text: str, own_units: list[str]) -> str | None:
    """The deployment's unit a process runs in, from its /proc/<pid>/cgroup, or None.

    ``own_units`` are the plan's unit names (``plan["own_units"]``); a template such as
    ``vllm-omni@.service`` stands for every one of its instances.
    """
    for match in UNIT_IN_CGROUP.finditer(cgroup_text):
        unit = match.group(1)
        prefix, at, _sep = unit.partition("@")
        if unit in own_units or (at and f"{prefix}@.service" in own_units):
            return unit
    return None


def _ipv4(hex_address: str) -> str:
    return ".".join(str(int(hex_address[i:i + 2], 16)) for i in (6, 4, 2, 0))


def _ipv6(hex_address: str) -> str:
    # Four 32-bit words, each in host (little-endian) byte order.
    raw = b"".join(bytes.fromhex(hex_address[i:i + 8])[::-1] for i in range(0, 32, 8))
    words = [f"{int.from_bytes(raw[i:i + 2], 'big'):x}" for i in range(0, 16, 2)]
    text = ":".join(words)
    if raw[:12] == bytes(10) + b"\xff\xff":
        return ".".join(str(b) for b in raw[12:])  # IPv4-mapped
    return "::" if raw == bytes(16) else text


def parse_proc_net_tcp(text: str, ipv6: bool = False) -> list[dict]:
    """Listening sockets of /proc/net/tcp or tcp6 -> [{address, port, inode}] (no ss/iproute2 needed)."""
    sockets = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != "0A":  # 0A = TCP_LISTEN
            continue
        hex_address, _sep, hex_port = fields[1].partition(":")
        address = _ipv6(hex_address) if ipv6 else _ipv4(hex_address)
        if address in ("0.0.0.0", "::"):  # noqa: S104 - describing a socket, not binding one
            address = "0.0.0.0" if not ipv6 else "::"  # noqa: S104
        sockets.append({"address": address, "port": int(hex_port, 16), "inode": int(fields[9])})
    return sockets
