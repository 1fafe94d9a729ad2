"""Start a command the way the engine unit's systemd sandbox would, on a machine without systemd.

    python3 tests/device/sandbox.py --unit RENDER/HOST/systemd/vllm-omni@.service [--check-readonly DIR]... -- ARGV...

Run as root on the device machine (record/gpu-evidence.md, run 6) by pd_serving.py for a scenario
marked ``:sandbox``. It reads the ``[Service]`` section of the collection's rendered engine unit
(rendered from the plan's ``hardening.engine``) and emulates what a root process can set up for
itself with plain kernel calls, then drops to the unit's user and executes ARGV:

* ``User=``/``Group=``: initgroups (the user's own groups, as systemd does), setgid, setuid;
* ``LimitMEMLOCK=``, ``LimitNOFILE=``: setrlimit;
* ``CapabilityBoundingSet=`` (empty) and ``AmbientCapabilities=`` (empty): every capability dropped
  from the bounding set before the switch; after setuid the permitted, effective and ambient sets
  are empty (checked from /proc/self/status and written to the report);
* ``NoNewPrivileges=yes``: prctl(PR_SET_NO_NEW_PRIVS);
* ``ProtectSystem=strict`` with ``ReadWritePaths=``: in a private mount namespace every mount except
  /proc, /sys, /dev (and what is under them) is remounted read-only, the ReadWritePaths bound
  writable first; so the venv, the staged packages and the machine's torch are read-only;
* ``PrivateTmp=yes``: a fresh tmpfs on /tmp and /var/tmp;
* ``ProtectHome=yes``: /root, /home and /run/user covered by an empty tmpfs of mode 000;
* ``ProtectKernelTunables=yes``: /sys and /proc/sys read-only;
* ``UMask=0027``.

Everything else in the list (seccomp-based ``SystemCallFilter``/``RestrictAddressFamilies``/
``RestrictNamespaces``/``RestrictRealtime``/``LockPersonality``/``SystemCallArchitectures``/
``RestrictSUIDSGID``/``MemoryDenyWriteExecute``, ``ProtectProc``, ``ProtectClock``,
``ProtectHostname``, ``ProtectKernelModules``/``Logs``, ``ProtectControlGroups``) is listed in the
report as not emulated, with the reason. Standard library only (ctypes for mount and prctl).
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import grp
import json
import os
import pwd
import re
import resource
import sys
from pathlib import Path

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 24, 38
FLAG_OF = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
           "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME}
KERNEL_FS = ("/proc", "/sys", "/dev")

# Directives of the unit's [Service] section this script carries out, and those that are no sandbox
# (systemd's process management); everything else must be in NOT_EMULATED, and an unknown one is
# reported as such (tests/unit/harness/test_device_pd_serving.py holds the rendered unit to this).
EMULATED = frozenset({
    "User", "Group", "WorkingDirectory", "LimitMEMLOCK", "LimitNOFILE", "CapabilityBoundingSet",
    "AmbientCapabilities", "NoNewPrivileges", "ProtectSystem", "ReadWritePaths", "PrivateTmp", "ProtectHome",
    "ProtectKernelTunables", "UMask",
})  # fmt: skip
NOT_SANDBOX = frozenset({"Type", "Restart", "RestartSec", "TimeoutStartSec", "TimeoutStopSec", "SyslogIdentifier",
                         "ExecStart", "EnvironmentFile"})
NOT_EMULATED = {
    "SystemCallFilter": "not set for the engine unit either (relaxed)",
    "RestrictAddressFamilies": "a seccomp filter; no libseccomp here",
    "RestrictNamespaces": "a seccomp filter; no libseccomp here",
    "RestrictRealtime": "a seccomp filter; no libseccomp here",
    "RestrictSUIDSGID": "a seccomp filter; no libseccomp here (NoNewPrivileges makes set-id bits inert anyway)",
    "LockPersonality": "a seccomp filter; no libseccomp here",
    "SystemCallArchitectures": "a seccomp filter; no libseccomp here",
    "MemoryDenyWriteExecute": "not set for the engine unit either (relaxed)",
    "ProtectProc": "needs a fresh procfs mount in a PID namespace",
    "ProtectClock": "a seccomp filter plus a device policy",
    "ProtectHostname": "needs a UTS namespace (harmless to add; left out to stay close to the first runs)",
    "ProtectKernelModules": "a seccomp filter plus hiding /usr/lib/modules; no capability to load modules anyway",
    "ProtectKernelLogs": "a seccomp filter plus hiding /dev/kmsg",
    "ProtectControlGroups": "the VM's /sys/fs/cgroup is under /sys, read-only here as part of ProtectKernelTunables",
    "DevicePolicy": "a cgroup device filter (BPF program); no systemd, and the VM's cgroup is not ours to change",
    "DeviceAllow": "a cgroup device filter (BPF program); no systemd, and the VM's cgroup is not ours to change",
    "PrivateDevices": "no (relaxed: the engine opens /dev/nvidia*); nothing to emulate",
    "RemoveIPC": "not set for the engine unit either (relaxed)",
}

CLONE_NEWNS = 0x00020000
libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
libc.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p)
libc.prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    def enc(value: str | None) -> bytes | None:
        return value.encode() if value is not None else None

    if libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {source} {target} {fstype} flags={flags:#x}: {os.strerror(errno)}")


def prctl(option: int, arg: int) -> None:
    if libc.prctl(option, arg, 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"prctl({option}, {arg}): {os.strerror(errno)}")


def mounts() -> list[tuple[str, int]]:
    """(mount point, per-mount flags to keep) from /proc/self/mountinfo, outermost first."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])  # \040 is a space
        flags = 0
        for option in fields[5].split(","):
            flags |= FLAG_OF.get(option, 0)
        found.append((point, flags))
    return found


def under(path: str, roots: tuple[str, ...] | list[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def last_cap() -> int:
    try:
        return int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    except OSError:
        return 40


def status_fields() -> dict:
    wanted = ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs")
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _sep, value = line.partition(":")
        if key in wanted:
            out[key] = " ".join(value.split())
    return out


def directives(unit: Path) -> dict[str, list[str]]:
    """The [Service] section's Key=Value lines; a key may repeat."""
    found: dict[str, list[str]] = {}
    section = ""
    for line in unit.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
            continue
        if section == "[Service]" and "=" in line:
            key, _sep, value = line.partition("=")
            found.setdefault(key.strip(), []).append(value.strip())
    return found


def rlimit(value: str) -> int:
    return resource.RLIM_INFINITY if value == "infinity" else int(value)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--unit", required=True, type=Path, help="the rendered vllm-omni@.service")
    parser.add_argument("--check-readonly", action="append", default=[],
                        help="a path that must be read-only inside (the venv); checked and reported")
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if os.geteuid() != 0 or not argv:
        parser.error("run as root, with the command after --")
    wanted = directives(args.unit)
    user = pwd.getpwnam(wanted["User"][-1])
    group = grp.getgrnam(wanted.get("Group", [user.pw_name])[-1])
    done: dict[str, str] = {}

    for key, which in (("LimitMEMLOCK", resource.RLIMIT_MEMLOCK), ("LimitNOFILE", resource.RLIMIT_NOFILE)):
        if key in wanted:
            value = rlimit(wanted[key][-1])
            try:
                resource.setrlimit(which, (value, value))
                done[key] = wanted[key][-1]
            except (ValueError, OSError) as error:  # a container may forbid raising it even to root
                NOT_EMULATED[key] = f"setrlimit refused ({error}); ran with {resource.getrlimit(which)}"
    if libc.unshare(CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS)")
    mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing below leaks to the machine's namespace
    if wanted.get("PrivateTmp") == ["yes"]:
        for tmp in ("/tmp", "/var/tmp"):
            if os.path.isdir(tmp):
                mount("tmpfs", tmp, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
        done["PrivateTmp"] = "yes: fresh tmpfs on /tmp and /var/tmp"
    if wanted.get("ProtectHome") == ["yes"]:
        hidden = [path for path in ("/home", "/root", "/run/user") if os.path.isdir(path)]
        for path in hidden:
            mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=000")
        done["ProtectHome"] = f"yes: {' '.join(hidden)} hidden (empty tmpfs, mode 000)"
    writable = [p.lstrip("-") for value in wanted.get("ReadWritePaths", []) for p in (value or "").split()]
    writable = [p for p in writable if os.path.isdir(p)]
    for path in writable:
        mount(path, path, None, MS_BIND | MS_REC)  # its own mount, so the read-only pass below can skip it
    failed: list[str] = []

    def read_only(point: str, flags: int) -> bool:
        try:
            mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags)
            return True
        except OSError as error:  # reported, not fatal: the run says what it could not make read-only
            failed.append(f"{point}: {error.strerror}")
            return False

    if wanted.get("ProtectSystem") == ["strict"]:
        keep = ["/tmp", "/var/tmp", *writable, *KERNEL_FS]
        count = sum(read_only(point, flags) for point, flags in mounts() if not under(point, keep))
        done["ProtectSystem"] = f"strict: {count} mounts read-only; writable: {' '.join(writable) or '-'}"
        done["ReadWritePaths"] = " ".join(writable)
    if wanted.get("ProtectKernelTunables") == ["yes"]:
        count = 0
        for path in ("/proc/sys", "/sys"):
            try:
                mount(path, path, None, MS_BIND | MS_REC)
            except OSError as error:
                failed.append(f"{path}: bind: {error.strerror}")
                continue
            count += sum(read_only(point, flags) for point, flags in mounts() if under(point, [path]))
        done["ProtectKernelTunables"] = f"yes: /proc/sys and /sys read-only ({count} mounts)"
    if failed:
        done["mounts_not_made_read_only"] = "; ".join(failed)
    if wanted.get("CapabilityBoundingSet") == [""]:
        for cap in range(last_cap() + 1):
            prctl(PR_CAPBSET_DROP, cap)
        done["CapabilityBoundingSet"] = "empty: every capability dropped from the bounding set"
    os.initgroups(user.pw_name, group.gr_gid)
    os.setgid(group.gr_gid)
    os.setuid(user.pw_uid)  # permitted, effective and ambient sets cleared by the switch from uid 0
    done["User"] = f"{user.pw_name} (uid {user.pw_uid}), Group {group.gr_name} (gid {group.gr_gid}), groups {os.getgroups()}"
    if wanted.get("AmbientCapabilities") == [""]:
        done["AmbientCapabilities"] = "empty (cleared by setuid)"
    if wanted.get("NoNewPrivileges") == ["yes"]:
        prctl(PR_SET_NO_NEW_PRIVS, 1)
        done["NoNewPrivileges"] = "yes: prctl(PR_SET_NO_NEW_PRIVS)"
    umask = (wanted.get("UMask") or [None])[0]
    if umask:
        os.umask(int(umask, 8))
        done["UMask"] = umask
    if "WorkingDirectory" in wanted:
        os.chdir(wanted["WorkingDirectory"][-1])
    os.environ["HOME"] = os.environ.get("HOME") or user.pw_dir
    os.environ["USER"] = os.environ["LOGNAME"] = user.pw_name

    readonly = {}
    for path in args.check_readonly:  # the mount's own flag: a permission error would prove nothing
        readonly[path] = "read-only mount" if os.statvfs(path).f_flag & os.ST_RDONLY else "WRITABLE"
    report = {"emulated": done, "not_emulated": {k: v for k, v in NOT_EMULATED.items() if k in wanted},
              "status": status_fields(), "readonly_checks": readonly}
    print(f"[sandbox] {json.dumps(report)}", flush=True)
    if any(v == "WRITABLE" for v in readonly.values()):
        print("[sandbox] a path that must be read-only is writable: refusing to start", flush=True)
        return 3
    os.execvpe(argv[0], argv, os.environ)  # noqa: S606 - the unit's ExecStart argv, as systemd runs it
    return 127


if __name__ == "__main__":
    sys.exit(main())
