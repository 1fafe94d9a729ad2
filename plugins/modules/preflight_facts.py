#!/usr/bin/python
# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: preflight_facts
short_description: Read what a deployment needs to know about a host before changing it
version_added: 0.1.0
description:
  - Reads, without changing anything, the host state the preflight checks judge; the judging
    itself happens on the controller (P(vllm_omni.serve.preflight_report#filter) filter) so it can be
    unit-tested and shown in one table.
  - Listening TCP sockets, read from C(/proc/net/tcp*) (no C(ss) needed), with the process and, for this
    collection's own services, the systemd unit that owns them; free disk below given paths, PID 1's locked-memory limit, clock
    synchronisation, RDMA devices, the version of the Python the venvs are built with (and whether it can make
    a venv), the C library, the service manager, and whether the distribution packages the host needs are
    installed or installable from its own package sources.
options:
  paths:
    description: Paths whose filesystems' free space to report (the nearest existing parent is used).
    type: list
    elements: path
    default: []
  rdma:
    description: Also list RDMA devices (C(ibv_devices)).
    type: bool
    default: false
  python:
    description:
      - The interpreter every venv of the host is made from (the plan's C(platforms[<the host's platform>].interpreter),
        e.g. C(/usr/bin/python3), or C(/usr/bin/python3.12) on RHEL 9).
    type: path
    default: /usr/bin/python3
  own_units:
    description:
      - The deployment's unit names (the plan's C(own_units); C(name@.service) stands for every instance). A
        listening socket of a process in one of them is reported with that unit, so preflight does not count the
        deployment's own services as port conflicts.
    type: list
    elements: str
    default: []
  packages:
    description:
      - Distribution packages the host needs (the plan's C(os_packages)); each is reported installed, installable
        (the host's package sources offer it - apt's local lists, or dnf), or unavailable.
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - vllm_omni.serve.attributes.read_only
author:
  - vllm_omni.serve contributors (@vllm-omni-serve)
"""

EXAMPLES = r"""
- name: Preflight | read the host
  vllm_omni.serve.preflight_facts:
    paths: [/opt/vllm-omni, /var/lib/vllm-omni/hf]
"""

RETURN = r"""
listening:
  description: Listening TCP sockets, each C(address), C(port), C(process), C(pid), C(unit) (own unit or null).
  type: list
  elements: dict
  returned: always
disk:
  description: Path to C({checked, free_bytes}).
  type: dict
  returned: always
memlock_hard:
  description: PID 1's hard RLIMIT_MEMLOCK in bytes, or C(unlimited).
  type: str
  returned: always
clock_synchronized:
  description: C(true), C(false) (the kernel's maximum clock error, as C(timedatectl) reports it), or null
    when the kernel cannot be asked.
  type: bool
  returned: always
rdma_devices:
  description: RDMA device names from C(ibv_devices) (only with I(rdma)); null when the tool is missing.
  type: list
  elements: str
  returned: always
python_version:
  description:
    - The version of I(python) (the interpreter every venv is made from) as major.minor,
      or null when it does not run.
  type: str
  returned: always
python_venv:
  description: Whether I(python) can make a venv with pip in it (its C(venv) and C(ensurepip) modules import).
  type: bool
  returned: always
glibc:
  description: The GNU C library's version (C(2.36)), or null on another C library.
  type: str
  returned: always
machine:
  description: The host's architecture as Python's C(platform.machine()) names it (C(x86_64), C(aarch64)).
  type: str
  returned: always
nft:
  description: Path of the C(nft) binary (the firewall role's tool), or null when it is not installed.
  type: str
  returned: always
packages:
  description: Each of I(packages) -> C(installed), C(installable), C(unavailable), or C(unknown) (no dpkg or rpm).
  type: dict
  returned: always
"""

import ctypes
import ctypes.util
import os
import platform
import shutil

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.vllm_omni.serve.plugins.module_utils._host import owner_unit, parse_proc_net_tcp
from ansible_collections.vllm_omni.serve.plugins.module_utils._packages import package_states

LOCALE = {"LANGUAGE": "C", "LC_ALL": "C"}


def nearest_existing(path: str) -> str:
    while path and not os.path.exists(path):
        path = os.path.dirname(path) or "/"
    return path or "/"


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return ""


def listening_sockets(own_units: list[str]) -> list[dict]:
    """Listening TCP sockets from /proc (no ss needed), with the owning process and our unit, if any."""
    sockets = parse_proc_net_tcp(_read("/proc/net/tcp")) + parse_proc_net_tcp(_read("/proc/net/tcp6"), ipv6=True)
    wanted = {socket["inode"]: socket for socket in sockets}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            descriptors = os.listdir(f"/proc/{entry}/fd")
        except OSError:
            continue
        for descriptor in descriptors:
            try:
                target = os.readlink(f"/proc/{entry}/fd/{descriptor}")
            except OSError:
                continue
            if target.startswith("socket:[") and int(target[8:-1]) in wanted:
                socket = wanted[int(target[8:-1])]
                socket.setdefault("pid", int(entry))
    for socket in sockets:
        pid = socket.setdefault("pid", None)
        socket["process"] = _read(f"/proc/{pid}/comm").strip() or None if pid else None
        socket["unit"] = owner_unit(_read(f"/proc/{pid}/cgroup"), own_units) if pid else None
        del socket["inode"]
    return sockets


class _Timex(ctypes.Structure):
    """The head of the kernel's struct timex (adjtimex(2)); the tail is room for the fields not read."""
    _fields_ = [("modes", ctypes.c_uint), ("offset", ctypes.c_long), ("freq", ctypes.c_long),
                ("maxerror", ctypes.c_long), ("esterror", ctypes.c_long), ("status", ctypes.c_int),
                ("rest", ctypes.c_byte * 256)]


def kernel_clock_synchronized() -> bool | None:
    """What timedatectl's NTPSynchronized reports, read from the kernel directly: systemd's ntp_synced() calls
    adjtimex(2) (modes 0: read only) and calls the clock synchronised while its maximum error is under 16 s,
    whichever daemon (timesyncd, chrony, ntpd) disciplines it. No D-Bus: timedated is activated on demand and,
    where it cannot start (containers), timedatectl waits 25 s. None when the call is not available."""
    if os.path.exists("/run/systemd/timesync/synchronized"):  # systemd-timesyncd says so
        return True
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        timex = _Timex()
        if libc.adjtimex(ctypes.byref(timex)) < 0:
            return None
    except (OSError, AttributeError):
        return None
    return timex.maxerror < 16_000_000  # microseconds


def memlock_hard() -> str:
    try:
        with open("/proc/1/limits", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("Max locked memory"):
                    return line.split()[4]
    except OSError:
        pass
    return "unknown"


def main():
    module = AnsibleModule(argument_spec={"paths": {"type": "list", "elements": "path", "default": []},
                                          "rdma": {"type": "bool", "default": False},
                                          "own_units": {"type": "list", "elements": "str", "default": []},
                                          "python": {"type": "path", "default": "/usr/bin/python3"},
                                          "packages": {"type": "list", "elements": "str", "default": []}},
                           supports_check_mode=True)
    listening = listening_sockets(module.params["own_units"])
    disk = {}
    for path in module.params["paths"]:
        checked = nearest_existing(path)
        disk[path] = {"checked": checked, "free_bytes": shutil.disk_usage(checked).free}
    clock = kernel_clock_synchronized()
    rdma = None
    if module.params["rdma"]:
        ibv = module.get_bin_path("ibv_devices")
        if ibv:
            rc, out, _unused = module.run_command([ibv], environ_update=LOCALE)
            rdma = [line.split()[0] for line in out.splitlines()[2:] if line.strip()] if rc == 0 else []
    # The venvs are made from the platform's interpreter (python_venv_python), not from whatever runs this module.
    python, can_venv = None, False
    if os.path.exists(module.params["python"]):
        probe = "import sys; print('%d.%d' % sys.version_info[:2]); import ensurepip, venv; print('venv')"
        rc, out, _unused = module.run_command([module.params["python"], "-c", probe])
        lines = out.split()
        python = lines[0] if lines else None
        can_venv = rc == 0 and lines[-1:] == ["venv"]
    libc, libc_version = platform.libc_ver()
    module.exit_json(changed=False, listening=listening, disk=disk, memlock_hard=memlock_hard(),
                     clock_synchronized=clock, rdma_devices=rdma, python_version=python, python_venv=can_venv,
                     glibc=libc_version if libc == "glibc" and libc_version else None, machine=platform.machine(),
                     systemd=os.path.isdir("/run/systemd/system"),
                     nft=module.get_bin_path("nft", opt_dirs=["/usr/sbin", "/sbin"]),
                     packages=package_states(module, module.params["packages"]))


if __name__ == "__main__":
    main()
