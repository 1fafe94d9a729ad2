#!/usr/bin/python
# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: selinux_policy
short_description: Give a confined service the SELinux port types and booleans the plan says it needs
version_added: 0.1.0
description:
  - On a host where SELinux is enabled (enforcing or permissive), makes each of I(ports) carry its SELinux port
    type (C(semanage port), adding a local record, or modifying one where the policy already types the port
    otherwise) and sets each of I(booleans) persistently (C(setsebool -P)), each only where it is not so already.
  - The plan's C(selinux) section says what each part of the collection needs (nginx on the front door's port and
    proxying to vllm-router on loopback; the rsync daemon of the artifact fan-out on its port, serving the
    wheelhouse read-only), per host of an SELinux platform.
  - Where SELinux is disabled or its tools are absent (C(selinuxenabled) missing or false), nothing is done and
    C(mode) says C(disabled).
  - Where SELinux is enabled and C(semanage) is missing, it fails naming the package that provides it.
options:
  ports:
    description: Ports to type, each C(port) (int), C(proto) (C(tcp) or C(udp)), C(type) (the SELinux port type)
      and C(why) (said in the result).
    type: list
    elements: dict
    default: []
  booleans:
    description: Booleans to set, each C(name), C(value) (bool) and C(why).
    type: list
    elements: dict
    default: []
attributes:
  check_mode:
    support: full
    description: Reads the current state and reports what it would change, changing nothing.
extends_documentation_fragment:
  - vllm_omni.serve.attributes
author:
  - vllm_omni.serve contributors (@vllm-omni-serve)
"""

EXAMPLES = r"""
- name: Front door | SELinux lets nginx listen on the front door's port and proxy to vllm-router
  vllm_omni.serve.selinux_policy:
    ports:
      - {port: 8000, proto: tcp, type: http_port_t, why: "nginx listens on the front door's port"}
    booleans:
      - {name: httpd_can_network_connect, value: true, why: "nginx proxies to vllm-router on 127.0.0.1:18000"}
"""

RETURN = r"""
mode:
  description: C(enforcing), C(permissive) or C(disabled) (SELinux off, or its tools absent).
  type: str
  returned: always
changes:
  description: What was changed (or would be, in check mode), one line each with its reason.
  type: list
  elements: str
  returned: always
"""

import re

from ansible.module_utils.basic import AnsibleModule

PACKAGE = "policycoreutils-python-utils"
_PORT_LINE = re.compile(r"^(\S+)\s+(tcp|udp|sctp|dccp)\s+(.+)$")


def port_types(listing: str) -> dict[tuple[str, int], list[str]]:
    """``semanage port -l -n`` -> {(proto, port): [types whose record is that single port]}, plus ranges under
    ``(proto, -1)`` as "type first-last" (a port inside a range is typed by it unless a record of its own says
    otherwise)."""
    found: dict[tuple[str, int], list[str]] = {}
    for line in listing.splitlines():
        match = _PORT_LINE.match(line.strip())
        if not match:
            continue
        kind, proto, ports = match.groups()
        for part in (p.strip() for p in ports.split(",")):
            if "-" in part:
                first, _sep, last = part.partition("-")
                if first.isdigit() and last.isdigit():
                    found.setdefault((proto, -1), []).append(f"{kind} {first}-{last}")
            elif part.isdigit():
                found.setdefault((proto, int(part)), []).append(kind)
    return found


def port_action(types: dict, port: int, proto: str, wanted: str) -> str | None:
    """None when ``port`` already carries ``wanted`` (its own record, or a range of that type with no record of
    its own); else ``-a`` (no record of the port itself) or ``-m`` (a record types it otherwise)."""
    own = types.get((proto, port), [])
    if wanted in own:
        return None
    if own:
        return "-m"
    for entry in types.get((proto, -1), []):
        kind, span = entry.split(" ", 1)
        first, last = (int(x) for x in span.split("-"))
        if kind == wanted and first <= port <= last:
            return None
    return "-a"


def boolean_value(output: str) -> bool | None:
    """``getsebool NAME`` -> True/False, None when it does not say (an unknown boolean)."""
    match = re.search(r"-->\s*(on|off)\s*$", output.strip())
    return None if not match else match.group(1) == "on"


def selinux_mode(module: AnsibleModule) -> str:
    enabled = module.get_bin_path("selinuxenabled")
    if not enabled or module.run_command([enabled])[0] != 0:
        return "disabled"
    getenforce = module.get_bin_path("getenforce")
    if not getenforce:
        return "enforcing"  # enabled, and nothing says it is permissive: the strict reading
    rc, out, _err = module.run_command([getenforce])
    mode = out.strip().lower() if rc == 0 else ""
    return mode if mode in ("enforcing", "permissive") else "enforcing"


def run(module: AnsibleModule, argv: list[str], what: str) -> str:
    rc, out, err = module.run_command(argv)
    if rc != 0:
        module.fail_json(msg=f"{what}: {' '.join(argv)} failed (exit {rc}): {(err or out).strip()}")
    return out


def apply_ports(module: AnsibleModule, semanage: str, ports: list[dict]) -> list[str]:
    if not ports:
        return []
    types = port_types(run(module, [semanage, "port", "-l", "-n"], "reading the SELinux port types"))
    changes = []
    for entry in ports:
        port, proto, wanted = int(entry["port"]), str(entry.get("proto", "tcp")), str(entry["type"])
        action = port_action(types, port, proto, wanted)
        if action is None:
            continue
        was = ", ".join(types.get((proto, port), [])) or "no type of its own"
        changes.append(f"port {proto}/{port}: {wanted} (was {was}): {entry.get('why', '')}".rstrip(": "))
        if not module.check_mode:
            run(module, [semanage, "port", action, "-t", wanted, "-p", proto, str(port)], f"typing {proto}/{port}")
            types.setdefault((proto, port), []).insert(0, wanted)
    return changes


def apply_booleans(module: AnsibleModule, booleans: list[dict]) -> list[str]:
    if not booleans:
        return []
    getsebool = module.get_bin_path("getsebool", required=True)
    setsebool = module.get_bin_path("setsebool", required=True)
    changes = []
    for entry in booleans:
        name, wanted = str(entry["name"]), bool(entry["value"])
        current = boolean_value(run(module, [getsebool, name], f"reading the boolean {name}"))
        if current is None:
            module.fail_json(msg=f"getsebool {name} did not say on or off: this host's SELinux policy lacks the boolean")
        if current == wanted:
            continue
        changes.append(f"boolean {name}: {'on' if wanted else 'off'}: {entry.get('why', '')}".rstrip(": "))
        if not module.check_mode:
            run(module, [setsebool, "-P", name, "on" if wanted else "off"], f"setting the boolean {name}")
    return changes


def main():
    module = AnsibleModule(
        argument_spec={
            "ports": {"type": "list", "elements": "dict", "default": []},
            "booleans": {"type": "list", "elements": "dict", "default": []},
        },
        supports_check_mode=True,
    )
    mode = selinux_mode(module)
    if mode == "disabled":
        module.exit_json(changed=False, mode=mode, changes=[])
    semanage = module.get_bin_path("semanage")
    if not semanage and module.params["ports"]:
        module.fail_json(msg=f"SELinux is {mode} on this host and semanage is missing: install {PACKAGE} "
                             "(the plan's os_packages name it for this host's front door and artifact daemon)",
                         mode=mode)
    changes = apply_ports(module, semanage, module.params["ports"]) + apply_booleans(module, module.params["booleans"])
    module.exit_json(changed=bool(changes), mode=mode, changes=changes)


if __name__ == "__main__":
    main()
