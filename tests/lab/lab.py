"""The local lab: real systemd hosts in systemd-nspawn machines on a private bridge, reachable over SSH.

    lab.py up [--hosts N] [--releases lab-2=trixie,...] [--enforce-devices]
                              build (or reuse) the rootfs of each release, boot lab-1..lab-N, write
                              inventories/lab/hosts.yml
    lab.py down               stop every machine, remove mounts, veths, the bridge and run state
    lab.py status             one line per machine
    lab.py check-clean        exit 1 (and say what) if anything of the lab is left on this machine
    lab.py exec HOST -- CMD   run CMD inside a machine (nsenter; no SSH needed)
    lab.py net HOST -- CMD    run a command of this machine in the machine's network namespace only
    lab.py instances          molecule's instance config for the running machines (JSON)
    lab.py poweroff HOST      power one machine off, keeping its disk (fault tests; `up` boots it)

Each machine boots systemd as PID 1 in its own network namespace (veth ``vb-lab-N`` on bridge
``vomni-br0``, 10.77.0.0/24, the controller is 10.77.0.1) and its own cgroup (``vomni-lab-N``, or
``vomni-<lane>-lab-N``, beside lab.py's in each hierarchy systemd uses), with sshd, python3, sudo, an
unprivileged ``deploy`` user (password-less sudo) and a generated SSH key. Its root is an overlay
on one shared Debian rootfs per release, built once with debootstrap and cached in
``$VLLM_OMNI_CACHE/lab/rootfs-<hash>`` (bookworm) or ``rootfs-<release>-<hash>`` keyed by the
release's package list (``rootfs-packages.txt``, ``rootfs-packages-<release>.txt``) and this recipe's
version. Machines are Debian 12 (bookworm) unless ``--releases`` (or ``$LAB_RELEASES``) names others,
e.g. ``lab-3=trixie`` for a Debian 13 machine in the same lab; a bookworm-only lab builds and boots
exactly as before. The machines have no route to package indexes, like air-gapped GPU hosts: Python
packages reach them through the controller-side wheelhouse, Debian packages are baked into the rootfs.

``--enforce-devices`` (``$LAB_ENFORCE_DEVICES=1``) boots the machines so that their systemd can
enforce ``DevicePolicy=``/``DeviceAllow=``: on a cgroup-v2 device controller (eBPF) with the ``bpf()``
system call, which systemd-nspawn filters out by default (without it systemd inside logs "Proceeding
WITHOUT applying ACL" and every device stays open). The machines then run on the unified cgroup
hierarchy even where this host runs a hybrid one. tests/lab/test_sandbox_devices.py uses it.

``$LAB_LANE`` (letters and digits) names a second lab beside the first: ``make lab-test`` runs two lanes of
test modules side by side, the second through tests/lab/lane.py, which gives it a network namespace of its own.
Its machines keep the names, addresses and bridge above (tests and inventories stay as they are); its run state
(``run-<lane>``), known hosts and inventory (``run-<lane>/hosts.yml``) are its own.

A GPU stand-in (``nvidia-smi`` replaying real H200 outputs) is placed only when asked
(``--gpu-profile``), by the lab, never by a role. Needs root; installs systemd-container,
debootstrap, iproute2 and rsync with apt when missing. ``up`` is idempotent: running machines are kept.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("VLLM_OMNI_CACHE", Path.home() / ".cache" / "vllm-omni-serve"))
LAB = CACHE / "lab"
# A lane is a second lab beside the first (tests/lab/lane.py): the same machine names, addresses and bridge,
# in a network namespace of its own, with its own run state, known hosts and inventory. Rootfs, SSH key and
# wheel sets are shared. Empty: the lab as it always was.
LANE = os.environ.get("LAB_LANE", "")
SUFFIX = f"-{LANE}" if LANE else ""
RUN = LAB / f"run{SUFFIX}"
SSH_DIR = LAB / "ssh"
KEY = SSH_DIR / "id_ed25519"
KNOWN_HOSTS = SSH_DIR / f"known_hosts{SUFFIX}"
BRIDGE = "vomni-br0"
SUBNET = "10.77.0"
CONTROLLER_IP = f"{SUBNET}.1"
# A lane's inventory lives with its run state, out of the checkout (builds, conformance and lint read the checkout).
INVENTORY = RUN / "hosts.yml" if LANE else REPO / "inventories" / "lab" / "hosts.yml"
PACKAGES_FILE = Path(__file__).with_name("rootfs-packages.txt")
DEFAULT_RELEASE = "bookworm"
# Debian releases a machine can run, each with its package list (names differ between releases).
RELEASES = {
    "bookworm": PACKAGES_FILE,  # Debian 12: systemd 252, Python 3.11
    "trixie": Path(__file__).with_name("rootfs-packages-trixie.txt"),  # Debian 13: systemd 257, Python 3.13
    "bullseye": Path(__file__).with_name("rootfs-packages-bullseye.txt"),  # Debian 11: systemd 247 (sandbox test only)
}
GPU_STANDIN = Path(__file__).with_name("fake_nvidia_smi.py")
GPU_PROFILES = REPO / "tests" / "fixtures" / "gpu"
RECIPE_VERSION = "1"  # bump when the rootfs recipe below changes in a way the package list does not show
MIRROR = os.environ.get("LAB_DEBIAN_MIRROR", "http://deb.debian.org/debian")
# The lab's controller is this machine: rsync serves the deploy's first copy of each artifact.
HOST_TOOLS = {"systemd-nspawn": "systemd-container", "debootstrap": "debootstrap", "ip": "iproute2", "rsync": "rsync"}


def log(message: str) -> None:
    print(f"lab: {message}", flush=True)


def run(argv: list[str], check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=check, **kwargs)


def quiet(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=False)


# --- prerequisites and rootfs -------------------------------------------------------------------


def ensure_host_tools() -> None:
    if os.geteuid() != 0:
        sys.exit("lab: needs root (systemd-nspawn, mounts, a bridge)")
    missing = sorted({pkg for tool, pkg in HOST_TOOLS.items() if not shutil.which(tool)})
    if missing:
        log(f"installing {' '.join(missing)} with apt")
        wait_for_dpkg = ["-o", "DPkg::Lock::Timeout=600"]  # make test runs ansible-test beside the lab
        run(["apt-get", *wait_for_dpkg, "update", "-qq"])
        run(["apt-get", *wait_for_dpkg, "install", "-y", "-qq", *missing],
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})


def packages(release: str = DEFAULT_RELEASE) -> list[str]:
    names = []
    for line in RELEASES[release].read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.append(line)
    return sorted(set(names))


def rootfs_path(release: str = DEFAULT_RELEASE) -> Path:
    digest = hashlib.sha256("\n".join([RECIPE_VERSION, release, *packages(release)]).encode()).hexdigest()[:12]
    # bookworm's name is the one it always had: an existing cache stays valid.
    return LAB / (f"rootfs-{digest}" if release == DEFAULT_RELEASE else f"rootfs-{release}-{digest}")


def same_release(path: Path, release: str) -> bool:
    """Whether a cached rootfs directory (rootfs-<hash> or rootfs-<release>-<hash>) is of this release."""
    middle = path.name.removeprefix("rootfs-").rsplit("-", 1)
    return (middle[0] if len(middle) == 2 else DEFAULT_RELEASE) == release


def ensure_rootfs(release: str = DEFAULT_RELEASE) -> Path:
    rootfs = rootfs_path(release)
    if (rootfs / ".complete").is_file():
        return rootfs
    LAB.mkdir(parents=True, exist_ok=True)
    # One builder per rootfs: `make test` builds the later modules' releases (tests/lab/warm.py) while the lab
    # boots its first machines; an `up` that needs a release being built waits for it, then finds it complete.
    with open(LAB / f"{rootfs.name}.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        return rootfs if (rootfs / ".complete").is_file() else build_rootfs(release, rootfs)


def build_rootfs(release: str, rootfs: Path) -> Path:
    staging = LAB / f"{rootfs.name}.building"
    shutil.rmtree(staging, ignore_errors=True)
    log(f"building the {release} rootfs with debootstrap ({len(packages(release))} packages); cached in {rootfs}")
    start = time.monotonic()
    run(["debootstrap", "--variant=minbase", f"--include={','.join(packages(release))}", release, str(staging),
         MIRROR], stdout=subprocess.DEVNULL)
    # Shared, host-independent configuration. Per-host files go to each machine's overlay.
    (staging / "etc" / "machine-id").write_text("")  # each machine gets its own in its overlay
    for path in (staging / "etc" / "ssh").glob("ssh_host_*"):
        path.unlink()  # per-machine host keys are generated at `up`
    wants = staging / "etc" / "systemd" / "system" / "multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    link = wants / "systemd-networkd.service"
    if not link.exists():
        link.symlink_to("/lib/systemd/system/systemd-networkd.service")
    run(["chroot", str(staging), "useradd", "--create-home", "--shell", "/bin/bash", "deploy"])
    (staging / "etc" / "sudoers.d" / "deploy").write_text("deploy ALL=(ALL) NOPASSWD: ALL\n")
    (staging / "etc" / "sudoers.d" / "deploy").chmod(0o440)
    run(["chroot", str(staging), "apt-get", "clean"])
    (staging / ".complete").write_text(json.dumps({"packages": packages(release),
                                                   "seconds": round(time.monotonic() - start, 1)}))
    staging.rename(rootfs)
    log(f"{release} rootfs built in {time.monotonic() - start:.0f} s")
    for stale in LAB.glob("rootfs-*"):  # older builds of this release only: other releases' caches stay
        if stale != rootfs and stale.is_dir() and same_release(stale, release) and not any(RUN.glob("*/lower")):
            shutil.rmtree(stale, ignore_errors=True)
    return rootfs


def ensure_key() -> None:
    SSH_DIR.mkdir(parents=True, exist_ok=True)
    with open(SSH_DIR / "id_ed25519.lock", "w") as held:  # two lanes' first `up` make one key
        fcntl.flock(held, fcntl.LOCK_EX)
        if not KEY.is_file():
            run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "vllm-omni-lab", "-f", str(KEY)])


def lane_netns(lane: str) -> str:
    """The named network namespace (``ip netns``) a lane's machines live in (tests/lab/lane.py makes it)."""
    return f"vomni-lane-{lane}"


def check_lane() -> None:
    """A lane's machines have the first lab's addresses and bridge name: only a network namespace of their own
    keeps the two apart. Refuse a lane outside the namespace tests/lab/lane.py made for it (it names it in
    LAB_LANE_NETNS from inside)."""
    if LANE and not LANE.isalnum():
        sys.exit(f"lab: LAB_LANE={LANE!r}: letters and digits only")
    if LANE and os.readlink("/proc/self/ns/net") != os.environ.get("LAB_LANE_NETNS"):
        sys.exit(f"lab: LAB_LANE={LANE} needs a network namespace of its own: run it through tests/lab/lane.py")


# --- machines -----------------------------------------------------------------------------------


def host_name(index: int) -> str:
    return f"lab-{index}"


def host_ip(index: int) -> str:
    return f"{SUBNET}.{10 + index}"


def machine_dir(name: str) -> Path:
    return RUN / name


def nspawn_pid(name: str) -> int | None:
    pid_file = machine_dir(name) / "nspawn.pid"
    if not pid_file.is_file():
        return None
    pid = int(pid_file.read_text())
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except FileNotFoundError:
        return None
    return pid if b"systemd-nspawn" in cmdline[0] and name.encode() in cmdline else None


def init_pid(name: str) -> int | None:
    pid = nspawn_pid(name)
    if pid is None:
        return None
    children = quiet(["pgrep", "-P", str(pid)]).stdout.split()
    return int(children[0]) if children else None


def is_mounted(path: Path) -> bool:
    return quiet(["mountpoint", "-q", str(path)]).returncode == 0


def ensure_bridge() -> None:
    if quiet(["ip", "link", "show", BRIDGE]).returncode != 0:
        run(["ip", "link", "add", BRIDGE, "type", "bridge"])
        run(["ip", "addr", "add", f"{CONTROLLER_IP}/24", "dev", BRIDGE])
    run(["ip", "link", "set", BRIDGE, "up"])


def prepare_overlay(name: str, index: int, rootfs: Path, gpu_profile: str | None) -> Path:
    base = machine_dir(name)
    upper, work, merged = base / "upper", base / "work", base / "merged"
    fresh = not upper.is_dir()
    for path in (upper, work, merged):
        path.mkdir(parents=True, exist_ok=True)
    if not is_mounted(merged):
        run(["mount", "-t", "overlay", "overlay", "-o", f"lowerdir={rootfs},upperdir={upper},workdir={work}",
             str(merged)])
    (base / "lower").write_text(str(rootfs))
    if fresh:
        (merged / "etc" / "hostname").write_text(name + "\n")
        (merged / "etc" / "hosts").write_text(f"127.0.0.1 localhost\n127.0.1.1 {name}\n")
        (merged / "etc" / "machine-id").write_text(secrets.token_hex(16) + "\n")
        network = merged / "etc" / "systemd" / "network"
        network.mkdir(parents=True, exist_ok=True)
        # 10- sorts before the image's 80-container-host0.network, which would take DHCP/link-local.
        (network / "10-host0.network").write_text(
            f"[Match]\nName=host0\n\n[Network]\nAddress={host_ip(index)}/24\nLinkLocalAddressing=no\n")
        run(["ssh-keygen", "-q", "-A", "-f", str(merged)])
        public = KEY.with_suffix(".pub").read_text()
        for user, home in (("root", merged / "root"), ("deploy", merged / "home" / "deploy")):
            ssh = home / ".ssh"
            ssh.mkdir(mode=0o700, parents=True, exist_ok=True)
            (ssh / "authorized_keys").write_text(public)
            (ssh / "authorized_keys").chmod(0o600)
            if user == "deploy":
                run(["chroot", str(merged), "chown", "-R", "deploy:deploy", "/home/deploy/.ssh"])
    if gpu_profile:
        place_gpu_standin(merged, gpu_profile)
    return merged


def place_gpu_standin(merged: Path, profile: str) -> None:
    source = GPU_PROFILES / profile
    if not source.is_dir():
        sys.exit(f"lab: no GPU profile {profile!r}; have: {', '.join(sorted(p.name for p in GPU_PROFILES.iterdir()))}")
    target = merged / "usr" / "local" / "share" / "fake-nvidia-smi"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target)
    binary = merged / "usr" / "local" / "bin" / "nvidia-smi"
    shutil.copyfile(GPU_STANDIN, binary)
    binary.chmod(0o755)


def boot_settings(release: str, enforce_devices: bool) -> dict:
    """What a machine was booted with (run/<name>/boot.json): `up` restarts a machine booted otherwise.
    A bookworm machine without --enforce-devices records nothing: that lab runs as it always did."""
    settings = {}
    if release != DEFAULT_RELEASE:
        settings["release"] = release
    if enforce_devices:
        settings["enforce_devices"] = True
    return settings


def booted_with(name: str) -> dict:
    path = machine_dir(name) / "boot.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def cgroup_hierarchies() -> list[tuple[Path, str]]:
    """Where this machine mounts the cgroup hierarchies that systemd (and so nspawn) uses, each with its name in
    /proc/self/cgroup: the unified one (v2: "") and, on a hybrid host, the named v1 one ("name=systemd")."""
    found = []
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        if fields[2] == "cgroup2":
            found.append((Path(fields[1]), ""))
        elif fields[2] == "cgroup" and "name=systemd" in fields[3].split(","):
            found.append((Path(fields[1]), "name=systemd"))
    return found


def machine_cgroups(name: str) -> list[Path]:
    """The machine's own cgroup in each hierarchy: a child of the one lab.py runs in (``vomni<lane>-<name>``)."""
    own = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _number, controllers, path = line.split(":", 2)
        own[controllers] = path
    return [mount / own[controllers].lstrip("/") / f"vomni{SUFFIX}-{name}"
            for mount, controllers in cgroup_hierarchies() if controllers in own]


def enter_cgroups(cgroups: list[Path]):
    """A preexec function: the child (nspawn, before its exec) moves itself into ``cgroups``."""
    def enter() -> None:
        for cgroup in cgroups:
            (cgroup / "cgroup.procs").write_text(str(os.getpid()))
    return enter


def remove_cgroups(name: str) -> None:
    """The machine's cgroups, deepest first (what its systemd made inside them too); a busy one stays, and
    check-clean names it."""
    for top in machine_cgroups(name):
        if top.is_dir():
            inner = sorted((path for path in top.rglob("*") if path.is_dir()), key=lambda path: -len(path.parts))
            for directory in [*inner, top]:
                with contextlib.suppress(OSError):
                    directory.rmdir()


def boot(name: str, merged: Path, settings: dict) -> None:
    base = machine_dir(name)
    (base / "boot.json").unlink(missing_ok=True)
    if settings:
        (base / "boot.json").write_text(json.dumps(settings))
    console = (base / "console.log").open("ab")
    env = None
    extra = []
    if settings.get("enforce_devices"):
        # systemd enforces DeviceAllow=/DevicePolicy= with an eBPF program on the unit's cgroup-v2 cgroup:
        # it needs the unified hierarchy in the machine (nspawn otherwise follows the host's, hybrid here)
        # and the bpf() system call, which nspawn's default seccomp filter leaves out.
        env = {**os.environ, "SYSTEMD_NSPAWN_UNIFIED_HIERARCHY": "1"}
        extra = ["--system-call-filter=bpf"]
    # A cgroup of its own: with --keep-unit and --register=no (no systemd to make a scope on this machine) nspawn
    # runs the machine in the caller's cgroup, so every lab machine, of both lanes, shared one (/payload). Each
    # machine's systemd then found the others' processes in its units' cgroups: a lab-1 in one lane never forgot
    # the router unit that uninstall had removed while the other lane's lab-1 ran a router.
    cgroups = machine_cgroups(name)
    for cgroup in cgroups:
        cgroup.mkdir(exist_ok=True)
    process = subprocess.Popen(
        ["systemd-nspawn", "--quiet", "--directory", str(merged), "--machine", name, "--boot",
         f"--network-bridge={BRIDGE}", "--register=no", "--keep-unit", "--console=passive",
         # Engines need more open files and locked memory than nspawn's defaults.
         "--rlimit=RLIMIT_NOFILE=1048576", "--rlimit=RLIMIT_MEMLOCK=infinity", *extra],
        stdin=subprocess.DEVNULL, stdout=console, stderr=console, start_new_session=True, env=env,
        preexec_fn=enter_cgroups(cgroups))  # pylint: disable=subprocess-popen-preexec-fn  # lab.py has no threads
    (base / "nspawn.pid").write_text(str(process.pid))
    # Popen returns once the child is past exec's point of no return, but /proc/PID/cmdline reads
    # empty until exec has finished loading systemd-nspawn: on a cold page cache (the first boot after
    # building the rootfs) long enough for nspawn_pid() to take the machine for dead.
    for _round in range(200):
        if nspawn_pid(name) is not None or process.poll() is not None:
            break
        time.sleep(0.05)


def wait_ready(name: str, ip: str, deadline: float) -> None:
    while time.monotonic() < deadline:
        if nspawn_pid(name) is None:
            tail = (machine_dir(name) / "console.log").read_text(errors="replace")[-2000:]
            sys.exit(f"lab: {name} exited while booting; console:\n{tail}")
        try:
            with socket.create_connection((ip, 22), timeout=1):
                break
        except OSError:
            time.sleep(0.3)
    else:
        sys.exit(f"lab: {name} did not open SSH on {ip}:22 in time")
    while time.monotonic() < deadline:
        state = quiet(ssh_argv(ip, "systemctl is-system-running")).stdout.strip()
        if state in ("running", "degraded"):
            if state == "degraded":
                failed = quiet(ssh_argv(ip, "systemctl --failed --no-legend --plain")).stdout.strip()
                log(f"{name} is up but degraded: {failed}")
            return
        time.sleep(0.5)
    sys.exit(f"lab: {name} did not finish booting in time")


def ssh_argv(ip: str, command: str, user: str = "root") -> list[str]:
    return ["ssh", "-i", str(KEY), "-o", f"UserKnownHostsFile={KNOWN_HOSTS}", "-o", "StrictHostKeyChecking=yes",
            "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", f"{user}@{ip}", command]


def write_known_hosts(hosts: list[tuple[str, str]]) -> None:
    lines = []
    for name, ip in hosts:
        key = (machine_dir(name) / "merged" / "etc" / "ssh" / "ssh_host_ed25519_key.pub").read_text().split()
        lines.append(f"{ip} {key[0]} {key[1]}")
    KNOWN_HOSTS.write_text("\n".join(lines) + "\n")


def write_inventory(hosts: list[tuple[str, str]], releases: dict[str, str] | None = None) -> None:
    """inventories/lab/hosts.yml: the machines, their SSH settings, and the groups deploy.yml uses.
    A machine of another release than bookworm says so in a comment (Ansible's facts tell the roles)."""
    releases = releases or {}
    INVENTORY.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        "# GENERATED by tests/lab/lab.py up (git-ignored). The local lab: systemd-nspawn machines.",
        "all:",
        "  vars:",
        "    ansible_user: deploy",
        "    ansible_become: true",
        f"    ansible_ssh_private_key_file: {KEY}",
        f"    ansible_ssh_common_args: -o UserKnownHostsFile={KNOWN_HOSTS} -o StrictHostKeyChecking=yes",
        "    ansible_python_interpreter: /usr/bin/python3",
        "    # The controller's bridge address: the demo, tests and benchmarks call the router and",
        "    # Prometheus from here, so the firewall lets it in (other non-inventory addresses stay out).",
        f"    vllm_omni_router_client_cidrs: [{CONTROLLER_IP}/32]",
        f"    vllm_omni_monitoring_client_cidrs: [{CONTROLLER_IP}/32]",
        "  hosts:",
    ]
    for name, ip in hosts:
        release = releases.get(name, DEFAULT_RELEASE)
        lines += [f"    {name}:" + (f"  # Debian {release}" if release != DEFAULT_RELEASE else ""),
                  f"      ansible_host: {ip}"]
    lines += ["  children:", "    lab:", "      hosts:"]
    lines += [f"        {name}:" for name, _unused in hosts]
    INVENTORY.write_text("\n".join(lines) + "\n")


def parse_releases(spec: str, count: int) -> dict[str, str]:
    """``lab-2=trixie,lab-3=trixie`` (commas or spaces) -> {machine: release}; unnamed machines are bookworm."""
    releases = {}
    for item in spec.replace(",", " ").split():
        name, _sep, release = item.partition("=")
        if name not in {host_name(i) for i in range(1, count + 1)}:
            sys.exit(f"lab: --releases names {name!r}, not one of lab-1..lab-{count}")
        if release not in RELEASES:
            sys.exit(f"lab: --releases: {release!r} is not one of {', '.join(RELEASES)}")
        releases[name] = release
    return releases


def up(count: int, gpu_profile: str | None, releases: dict[str, str] | None = None,
       enforce_devices: bool = False) -> None:
    check_lane()
    ensure_host_tools()
    ensure_key()
    wanted = [(host_name(i), host_ip(i)) for i in range(1, count + 1)]
    release_of = {name: (releases or {}).get(name, DEFAULT_RELEASE) for name, _ip in wanted}
    rootfs = {release: ensure_rootfs(release) for release in sorted(set(release_of.values()))}
    ensure_bridge()
    for existing in sorted(p.name for p in RUN.glob("lab-*")) if RUN.is_dir() else []:
        if existing not in {name for name, _unused in wanted}:
            stop(existing)
    started = []
    for index, (name, _ip) in enumerate(wanted, start=1):
        settings = boot_settings(release_of[name], enforce_devices)
        if nspawn_pid(name) is not None:
            if booted_with(name) == settings:
                continue
            stop(name)  # another release, or booted without (or with) --enforce-devices: start it fresh
        lower = machine_dir(name) / "lower"
        if lower.is_file() and lower.read_text() != str(rootfs[release_of[name]]):
            stop(name)  # its overlay sits on an older rootfs: start it fresh
        merged = prepare_overlay(name, index, rootfs[release_of[name]], gpu_profile)
        boot(name, merged, settings)
        started.append(name)
    write_known_hosts(wanted)
    deadline = time.monotonic() + 120
    for name, ip in wanted:
        wait_ready(name, ip, deadline)
    write_inventory(wanted, release_of)
    shown = INVENTORY.relative_to(REPO) if INVENTORY.is_relative_to(REPO) else INVENTORY
    log(f"{len(wanted)} machine(s) up (started: {', '.join(started) or 'none, all were running'}); inventory: {shown}")


def poweroff(name: str) -> None:
    """Stop one machine but keep its disk (overlay) and its place in the inventory."""
    if init_pid(name) is None:
        sys.exit(f"lab: {name} is not running")
    halt(name)
    log(f"{name} powered off (its disk is kept; `up` boots it again)")


# A clean poweroff of a machine still booting, on a loaded 2-core CI runner, took longer than 10 s: then nspawn
# was killed alone, the machine's own processes lived on in its cgroup, and `down` found the cgroup and mount busy.
POWEROFF_GRACE_S = 60


def halt(name: str) -> None:
    """Power the machine off (systemd's clean poweroff); past POWEROFF_GRACE_S, kill every process in its cgroups
    (nspawn's process group does not hold the machine's own processes) and wait until they are gone."""
    pid, init = nspawn_pid(name), init_pid(name)
    if init is not None:
        os.kill(init, signal.SIGRTMIN + 4)
    if pid is None:
        return
    deadline = time.monotonic() + POWEROFF_GRACE_S
    while nspawn_pid(name) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    if nspawn_pid(name) is None:
        return
    log(f"{name} did not power off in {POWEROFF_GRACE_S} s: killing its processes")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        members = cgroup_members(name)
        if nspawn_pid(name) is not None:
            members.add(pid)
        if not members:
            return
        for member in members:
            with contextlib.suppress(ProcessLookupError):
                os.kill(member, signal.SIGKILL)
        time.sleep(0.2)
    sys.exit(f"lab: {name}'s processes survived SIGKILL for 30 s: {' '.join(map(str, sorted(members)))}")


def cgroup_members(name: str) -> set[int]:
    """Every process in the machine's cgroups, its nested ones included."""
    members = set()
    for top in machine_cgroups(name):
        for procs in top.rglob("cgroup.procs") if top.is_dir() else []:
            with contextlib.suppress(OSError):
                members.update(int(line) for line in procs.read_text().split())
    return members


def stop(name: str) -> None:
    base = machine_dir(name)
    halt(name)
    merged = base / "merged"
    for _round in range(50):  # the kernel lets go of the overlay a moment after its last process
        if not (merged.exists() and is_mounted(merged)) or quiet(["umount", str(merged)]).returncode == 0:
            break
        time.sleep(0.2)
    else:
        run(["umount", str(merged)])
    shutil.rmtree(base, ignore_errors=True)
    quiet(["ip", "link", "del", f"vb-{name}"])
    remove_cgroups(name)


def down() -> None:
    if os.geteuid() != 0:
        sys.exit("lab: needs root")
    check_lane()  # a lane's `down` outside its namespace would take the first lab's bridge
    for base in sorted(RUN.glob("lab-*")) if RUN.is_dir() else []:
        stop(base.name)
    quiet(["ip", "link", "del", BRIDGE])
    if LANE:
        quiet(["ip", "netns", "del", lane_netns(LANE)])  # its last process (this one) ends it
    shutil.rmtree(RUN, ignore_errors=True)
    INVENTORY.unlink(missing_ok=True)
    leftovers = check_clean()
    if leftovers:
        sys.exit("lab: left behind after down: " + "; ".join(leftovers))
    log("down: no machines, mounts, veths or bridge left")


def check_clean() -> list[str]:
    leftovers = []
    # This lane's only: another lane's machines (run-<lane>/) may be running beside it.
    nspawns = quiet(["pgrep", "-f", f"systemd-nspawn.*--directory {RUN}/lab-"]).stdout.split()
    if nspawns:
        leftovers.append(f"systemd-nspawn processes {' '.join(nspawns)}")
    mounts = [line for line in Path("/proc/mounts").read_text().splitlines() if f" {RUN}/" in line]
    if mounts:
        leftovers.append(f"{len(mounts)} mount(s) under {RUN}")
    links = quiet(["ip", "-o", "link", "show"]).stdout
    veths = [word.split("@")[0] for word in links.split() if word.startswith("vb-lab-")]
    if veths:
        leftovers.append(f"veths {' '.join(veths)}")
    if f" {BRIDGE}:" in links:
        leftovers.append(f"bridge {BRIDGE}")
    if RUN.exists():
        leftovers.append(f"run directory {RUN}")
    cgroups = [str(cgroup) for pattern in machine_cgroups("lab-*") for cgroup in pattern.parent.glob(pattern.name)]
    if cgroups:
        leftovers.append(f"cgroups {' '.join(cgroups)}")
    return leftovers


def instances() -> list[dict]:
    """Molecule's delegated-driver instance config for the running machines."""
    found = []
    for base in sorted(RUN.glob("lab-*")) if RUN.is_dir() else []:
        if nspawn_pid(base.name):
            index = int(base.name.split("-")[1])
            found.append({"instance": base.name, "address": host_ip(index), "user": "deploy", "port": 22,
                          "identity_file": str(KEY), "become_method": "sudo"})
    return found


def status() -> None:
    for base in sorted(RUN.glob("lab-*")) if RUN.is_dir() else []:
        name = base.name
        settings = booted_with(name)
        print(f"{name}: {'running' if nspawn_pid(name) else 'stopped'} ip={host_ip(int(name.split('-')[1]))} "
              f"release={settings.get('release', DEFAULT_RELEASE)}"
              + (" devices=enforced" if settings.get("enforce_devices") else ""))


def exec_in(name: str, command: list[str]) -> int:
    init = init_pid(name)
    if init is None:
        sys.exit(f"lab: {name} is not running")
    return subprocess.run(["nsenter", "--target", str(init), "--all", *command], check=False).returncode


def exec_net(name: str, command: list[str]) -> int:
    """A command of the controller, run in the machine's network namespace only (its address, its
    firewall in front of the others): the controller's own tools, seen from that machine."""
    init = init_pid(name)
    if init is None:
        sys.exit(f"lab: {name} is not running")
    return subprocess.run(["nsenter", "--target", str(init), "--net", *command], check=False).returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    up_parser = sub.add_parser("up")
    up_parser.add_argument("--hosts", type=int, default=int(os.environ.get("LAB_HOSTS", "3")))
    up_parser.add_argument("--gpu-profile", default=os.environ.get("LAB_GPU_PROFILE") or None)
    up_parser.add_argument("--releases", default=os.environ.get("LAB_RELEASES", ""),
                           help="machines of another Debian release than bookworm: lab-2=trixie,lab-3=trixie "
                                f"(releases: {', '.join(RELEASES)})")
    up_parser.add_argument("--enforce-devices", action="store_true",
                           default=os.environ.get("LAB_ENFORCE_DEVICES", "") not in ("", "0"),
                           help="boot so that systemd in the machines enforces DevicePolicy=/DeviceAllow=")
    sub.add_parser("down")
    sub.add_parser("status")
    sub.add_parser("check-clean")
    sub.add_parser("instances", help="molecule instance config of the running machines, as JSON")
    stop_parser = sub.add_parser("poweroff", help="power one machine off (fault tests); `up` boots it again")
    stop_parser.add_argument("host")
    exec_parser = sub.add_parser("exec")
    exec_parser.add_argument("host")
    exec_parser.add_argument("cmd", nargs=argparse.REMAINDER)
    net_parser = sub.add_parser("net", help="run a command of this machine in one lab machine's network namespace")
    net_parser.add_argument("host")
    net_parser.add_argument("cmd", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if args.command == "up":
        if not 1 <= args.hosts <= 20:
            sys.exit("lab: --hosts must be between 1 and 20")
        up(args.hosts, args.gpu_profile, parse_releases(args.releases, args.hosts), args.enforce_devices)
    elif args.command == "down":
        down()
    elif args.command == "status":
        status()
    elif args.command == "check-clean":
        leftovers = check_clean()
        for item in leftovers:
            print(f"lab: left behind: {item}")
        return 1 if leftovers else 0
    elif args.command == "poweroff":
        poweroff(args.host)
    elif args.command == "instances":
        print(json.dumps(instances()))
    elif args.command in ("exec", "net"):
        command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
        return (exec_in if args.command == "exec" else exec_net)(args.host, command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
