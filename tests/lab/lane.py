"""Run a command as a lab lane: a second lab beside the first (`make lab-test` runs two side by side).

    lane.py NAME -- COMMAND [ARG...]

The lab's modules deploy and wait on their machines much of the time (a deploy keeps about one of CI's two
cores busy), so two labs at once finish sooner than one after the other. A lane's machines keep the first
lab's names, addresses and bridge (the tests and inventories spell 10.77.0.x and lab-N), which only a network
namespace of its own keeps apart. The command runs:
* in a network namespace of its own (``ip netns``: ``vomni-lane-NAME``, kept between calls, loopback up): the
  lane's bridge, veths and machines live there;
* with ``LAB_LANE=NAME``: lab.py keeps its run state, known hosts and inventory (``run-NAME/hosts.yml``) apart;
* with a controller cache of its own (``$VLLM_OMNI_CACHE/lanes/NAME``) for what a deploy writes there (TLS
  material, the artifacts' manifests and rsync daemon, discovery, reports), whose large read-mostly parts
  (the wheel sets, models, engines, the lab's rootfs and SSH key, the tool venv) are links to the shared one;
* with what the modules measure recorded where the first lab records it (its ``reports/``);
* with SSH control sockets of its own: Ansible names a control socket by address, the same in both lanes.

The namespace has no route out: the lane's wheel sets and rootfs must be in the cache first (tests/lab/warm.py
fills them; tests/lab/lanes.py runs it before each of the lane's modules). Needs root. The exit status is the command's.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from lab import lane_netns  # the lab's own name for it

CACHE = Path(os.environ.get("VLLM_OMNI_CACHE") or Path.home() / ".cache" / "vllm-omni-serve")
# Shared with the first lab: filled once (under their own locks), read by both. Everything else a deploy or
# test writes to the cache stays in the lane's.
SHARED = ("wheelhouse", "models", "engines", "lab")


def lane_cache(name: str) -> Path:
    """The lane's controller cache, its shared parts linked to the first lab's (made on first use)."""
    cache = CACHE / "lanes" / name
    cache.mkdir(parents=True, exist_ok=True)
    # The tool venv and the bench role's plotting venv (warm.py makes it) are named by their requirements' hash.
    shared = [CACHE / part for part in SHARED] + sorted(CACHE.glob("tools-*")) + sorted(CACHE.glob("bench-*"))
    for source in shared:
        source.mkdir(parents=True, exist_ok=True)
        link = cache / source.name
        if not link.is_symlink():
            link.symlink_to(source)
    return cache


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--" or not argv[0].isalnum():
        sys.exit("usage: lane.py NAME -- COMMAND [ARG...]   (NAME: letters and digits)")
    if os.geteuid() != 0:
        sys.exit("lane: needs root (a network namespace, the lab)")
    name, command = argv[0], argv[2:]
    env = {**os.environ, "LAB_LANE": name, "VLLM_OMNI_CACHE": str(lane_cache(name)),
           # What the modules measured (docs/benchmarks.md quotes it): one file for both lanes, the first lab's.
           "LAB_MEASURED_DIR": str(CACHE / "reports"),
           # Short: a socket path has 107 bytes at most, and ssh adds 17 to the 40 of Ansible's %C.
           "ANSIBLE_SSH_CONTROL_PATH_DIR": str(Path.home() / ".ansible" / f"cp-{name}")}
    netns = lane_netns(name)  # named: every call of one lane reaches the same machines (lab.py's `down` ends it)
    if not Path("/run/netns", netns).exists():
        subprocess.run(["ip", "netns", "add", netns], check=True)
    # Inside, the namespace is named for lab.py, which refuses a lane anywhere else.
    inside = 'ip link set lo up && LAB_LANE_NETNS=$(readlink /proc/self/ns/net) && export LAB_LANE_NETNS && exec "$@"'
    # nsenter, not `ip netns exec`: that also gives the command a mount namespace of its own (the lab's overlay
    # mounts would not outlive it) and a /sys without the cgroup hierarchy systemd-nspawn needs.
    argv = ["nsenter", f"--net=/run/netns/{netns}", "--", "sh", "-c", inside, "lane", *command]
    return subprocess.run(argv, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
