# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""systemd sandboxing for every unit the collection installs, and what the real engine needs relaxed.

Every service already runs as its own non-root user. On top, the units get the sandbox below;
``systemd-analyze security`` scores are recorded in docs/security.md. The router, Mooncake master and
the simulator stand-in run under the full set in the lab. The real engine (GPU) gets a relaxed set:
upstream vLLM issue #12474 reports the engine failing to start ("Engine process failed to start")
under a naively hardened unit. Each relaxation below names what of the engine needs it; the relaxed
set is derived from how the engine uses devices, JIT and netlink and has not been run on a GPU here.
Instead of PrivateDevices= it gets an explicit device allow-list (ENGINE_DEVICES), which the lab
checks against real character devices on systemd 247, 252 and 257 (tests/lab/test_sandbox_devices.py).
"""

from __future__ import annotations

from ..host._names import STATE_DIR

# (directive, value). Order is the unit file's order.
BASE = (
    ("NoNewPrivileges", "yes"),
    ("ProtectSystem", "strict"),
    ("ProtectHome", "yes"),
    ("PrivateTmp", "yes"),
    ("PrivateDevices", "yes"),
    ("ProtectKernelTunables", "yes"),
    ("ProtectKernelModules", "yes"),
    ("ProtectKernelLogs", "yes"),
    ("ProtectControlGroups", "yes"),
    ("ProtectClock", "yes"),
    ("ProtectHostname", "yes"),
    ("ProtectProc", "invisible"),
    ("RestrictAddressFamilies", "AF_UNIX AF_INET AF_INET6"),
    ("RestrictNamespaces", "yes"),
    ("RestrictRealtime", "yes"),
    ("RestrictSUIDSGID", "yes"),
    ("LockPersonality", "yes"),
    ("MemoryDenyWriteExecute", "yes"),
    ("RemoveIPC", "yes"),
    ("SystemCallArchitectures", "native"),
    ("SystemCallFilter", "@system-service"),
    ("SystemCallFilter", "~@privileged"),
    ("CapabilityBoundingSet", ""),
    ("AmbientCapabilities", ""),
    ("UMask", "0027"),
)

# What the real vLLM-Omni engine on GPUs needs instead. directive -> (value or None to drop, why).
ENGINE_RELAXED = {
    "PrivateDevices": ("no", "the engine opens /dev/nvidia*, /dev/nvidia-uvm and, for RDMA, /dev/infiniband/*"),
    "MemoryDenyWriteExecute": (None, "Triton, torch.compile and CUDA's PTX JIT map writable+executable memory"),
    "RestrictAddressFamilies": ("AF_UNIX AF_INET AF_INET6 AF_NETLINK",
                                "NCCL and rdma-core enumerate interfaces and RDMA devices over netlink"),
    "SystemCallFilter": (None, "the CUDA driver and NCCL use ioctls and calls outside @system-service; "
                               "no filter has been verified on a GPU host"),
}

# What the real engine adds: its device access, stated. ProtectClock=yes (BASE) implies
# DeviceAllow=char-rtc r. systemd before 252 (upstream 249, which Ubuntu 22.04 ships; 247 in the lab)
# adds that entry unconditionally, and under the default DevicePolicy=auto any DeviceAllow= entry turns
# the unit's device cgroup into an allow-list: char-rtc and the pseudo devices, /dev/nvidia* refused
# with EPERM. systemd 252 (commit 63857bf, PR #25075) adds it only where a policy or an allow-list is
# already set. So the unit states the policy and every device it opens: the same allow-list on every
# systemd a platform ships. (directive, value, why), in the unit file's order after BASE; a directive
# may appear more than once. char-<name> entries are /proc/devices group names (fnmatch globs allowed),
# resolved when the unit STARTS: a driver module loaded later (nvidia-uvm on first CUDA use) is not in
# the list, so GPU hosts load the modules at boot, before the engine starts (docs/security.md).
ENGINE_DEVICES = (
    ("DevicePolicy", "closed",
     "only the devices below, plus /dev/null, zero, full, random, urandom, tty, ptmx and pts; stated because "
     "ProtectClock= implies DeviceAllow=char-rtc r, which under DevicePolicy=auto closed all other devices "
     "before systemd 252"),
    ("DeviceAllow", "char-nvidia rw",
     "major 195: the GPUs /dev/nvidia0.., /dev/nvidiactl and /dev/nvidia-modeset; current drivers name it nvidia "
     "(and nvidiactl, nvidia-modeset) in /proc/devices"),
    ("DeviceAllow", "char-nvidia-frontend rw", "the same major 195 under the name older drivers give it"),
    ("DeviceAllow", "char-nvidia-uvm rw", "/dev/nvidia-uvm and /dev/nvidia-uvm-tools: CUDA's unified memory"),
    ("DeviceAllow", "char-nvidia-caps rw", "/dev/nvidia-caps/nvidia-cap*: MIG and other driver capabilities"),
    ("DeviceAllow", "char-infiniband_verbs rw",
     "/dev/infiniband/uverbs*: RDMA verbs (Mooncake's RDMA transport, NCCL over InfiniBand/RoCE)"),
    ("DeviceAllow", "/dev/infiniband/rdma_cm rw",
     "the RDMA connection manager (librdmacm); a host without RDMA logs that the node is missing, harmlessly"),
)

# The kernel modules behind those device groups, loaded before the engine starts (its unit's modprobe@
# dependencies): the groups are looked up in /proc/devices when the unit starts.
ENGINE_DRIVER_MODULES = ("nvidia", "nvidia-uvm", "nvidia-modeset", "ib_uverbs", "rdma_ucm")

# The GPU health exporter runs nvidia-smi and reads the kernel log; it writes nothing. Root, bounded to the one
# capability it uses. Derived from what nvidia-smi opens; not run under systemd on a GPU host here.
GPU_METRICS_RELAXED = {
    "PrivateDevices": ("no", "nvidia-smi opens /dev/nvidiactl and /dev/nvidia*; the Xid errors are read from /dev/kmsg"),
    "ProtectKernelLogs": (None, "the driver's Xid errors are in the kernel log (/dev/kmsg)"),
    "CapabilityBoundingSet": ("CAP_SYSLOG", "reading /dev/kmsg where kernel.dmesg_restrict is 1 (Ubuntu's default)"),
    "SystemCallFilter": (None, "nvidia-smi's NVML calls into the driver; no filter has been verified on a GPU host"),
}
GPU_METRICS_DEVICES = (
    *(entry for entry in ENGINE_DEVICES if entry[0] == "DevicePolicy" or entry[1].startswith("char-nvidia")),
    ("DeviceAllow", "/dev/kmsg r", "the kernel log, for the driver's Xid errors"),
)

# Every pipeline of a host runs as the one engine user: RemoveIPC on one pipeline's stop would remove
# the shared memory of all the others (it removes every IPC object of the user), so no engine unit has it.
SHARED_USER_RELAXED = {
    "RemoveIPC": (None, "all pipelines run as one user; removing that user's IPC objects when one pipeline "
                        "stops would break the others"),
}

# The firewall loader runs nft as root: it keeps CAP_NET_ADMIN and netlink, nothing else.
FIREWALL_RELAXED = {
    "CapabilityBoundingSet": ("CAP_NET_ADMIN", "nft changes the kernel's ruleset over netlink"),
    "RestrictAddressFamilies": ("AF_UNIX AF_NETLINK", "nft talks to the kernel over netlink only"),
}


def directives(writable: list[str], relaxed: dict | None = None, added: tuple = ()) -> list[dict]:
    """Ordered ``{"directive", "value", "why"}`` entries for one unit; ``writable`` -> ReadWritePaths.

    A relaxed directive appears once, with its new value, or with value None (left out; the unit
    shows it as a comment with the reason). ``added`` entries ``(directive, value, why)`` follow BASE,
    each as given: a list-valued directive such as DeviceAllow= may appear several times.
    """
    relaxed = relaxed or {}
    overlap = {directive for directive, _value, _why in added} & ({d for d, _v in BASE} | set(relaxed))
    if overlap:
        raise ValueError(f"added directives already in the base set: {sorted(overlap)}")
    entries, seen = [], set()
    for directive, value in BASE:
        if directive not in relaxed:
            entries.append({"directive": directive, "value": value, "why": ""})
        elif directive not in seen:
            seen.add(directive)
            new_value, why = relaxed[directive]
            entries.append({"directive": directive, "value": new_value, "why": why})
    entries += [{"directive": directive, "value": value, "why": why} for directive, value, why in added]
    if writable:
        # "-": a path that does not exist yet (no model staged) must not stop the unit from starting.
        entries.append({"directive": "ReadWritePaths", "value": " ".join(f"-{p}" for p in sorted(set(writable))),
                        "why": "the service's own state and model cache; everything else is read-only"})
    return entries


def unit_hardening(backend: str, engine_home: str, hf_home: str) -> dict:
    """The plan's ``hardening`` section: directives per unit kind."""
    engine_writable = [engine_home, hf_home]
    return {
        "engine": directives(engine_writable,
                             {**SHARED_USER_RELAXED, **(ENGINE_RELAXED if backend == "engine" else {})},
                             ENGINE_DEVICES if backend == "engine" else ()),
        "router": directives([]),
        "mooncake_master": directives([]),
        "firewall": directives([], FIREWALL_RELAXED),
        # Root, to restart the engine units (systemd does the stopping and killing; the agent only asks it over
        # its private socket, which needs no capability); it writes its state file and nothing else.
        "self_heal": directives([STATE_DIR]),
        "gpu_metrics": directives([], GPU_METRICS_RELAXED, GPU_METRICS_DEVICES),
    }
