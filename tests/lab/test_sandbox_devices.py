"""The real engine's sandbox opens GPU and RDMA character devices, on each systemd the lab can boot (needs root).

Machines: lab-1 Debian 12 (systemd 252), lab-2 Debian 13 (257) and, while Debian's mirror still serves
it, lab-3 Debian 11 (247: older than systemd 252's ProtectClock= fix, like upstream 249), all booted
with ``--enforce-devices`` so that their systemd applies DevicePolicy=/DeviceAllow= (an eBPF program
on the unit's cgroup-v2 cgroup; without it nspawn's seccomp filter leaves systemd no bpf()).

Each check starts a transient unit (``systemd-run``) carrying the engine unit's exact sandbox, read
from the planner's plan for backend ``engine``, as the unprivileged user ``nobody``, which opens
stand-ins for the GPU and RDMA nodes: real character device nodes (mknod) with the drivers' numbers
(/dev/nvidia0 is 195:0). No driver is loaded, so an open the device cgroup lets through fails with
ENXIO or ENODEV, and one it refuses fails with EPERM. systemd resolves ``char-<name>`` entries from
/proc/devices when the unit starts; the lab's kernel has no NVIDIA or RDMA driver, so the test shows
systemd (PID 1 of the machine) a /proc/devices that lists them, bind-mounted over the kernel's:
what a GPU host with the modules loaded at boot shows (names as the drivers register them).

Proven on each machine: the device cgroup is enforced at all (DevicePolicy=strict refuses /dev/null);
the engine's sandbox lets every stand-in through, under both names NVIDIA drivers give major 195;
the same sandbox without its DeviceAllow= entries refuses them all (the test can fail); and the
sandbox before the device list (PrivateDevices=no with ProtectClock=yes, no policy) refuses
/dev/nvidia0 on systemd 247 and lets it through on 252 and 257.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request

import pytest
from lab import rootfs_path
from test_lab import LAB, lab

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan import _hardening
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root (CI runs as root)")

MACHINES = {"lab-1": ("bookworm", 252), "lab-2": ("trixie", 257), "lab-3": ("bullseye", 247)}
MIRROR = os.environ.get("LAB_DEBIAN_MIRROR", "http://deb.debian.org/debian")
ALLOWED, DENIED = {"ENXIO", "ENODEV"}, "EPERM"  # no driver behind the node / the device cgroup said no
FAKE_DEVICES = "/run/vomni-test-proc-devices"
# (path, major, minor); None: a free major (or misc minor) picked on the machine, as the kernel would.
NODES = [("/dev/nvidia0", 195, 0), ("/dev/nvidiactl", 195, 255), ("/dev/nvidia-modeset", 195, 254),
         ("/dev/nvidia-uvm", None, 0), ("/dev/nvidia-caps/nvidia-cap1", None, 1),
         ("/dev/infiniband/uverbs0", 231, 192), ("/dev/infiniband/rdma_cm", 10, None)]
PROBE = """
import errno, json, os, sys
result = {"uid": os.getuid()}
for path in sys.argv[1:]:
    try:
        os.close(os.open(path, os.O_RDWR))
        result[path] = "OK"
    except OSError as error:
        result[path] = errno.errorcode.get(error.errno, str(error.errno))
print(json.dumps(result))
"""


def bullseye_available() -> bool:
    """Its rootfs built already (tests/lab/warm.py builds it: a lab lane without a route out finds it there), or
    Debian's mirror still serving bullseye to build it from."""
    return (rootfs_path("bullseye") / ".complete").is_file() or bullseye_served()


def bullseye_served() -> bool:
    try:
        with urllib.request.urlopen(urllib.request.Request(f"{MIRROR}/dists/bullseye/Release", method="HEAD"),  # noqa: S310
                                    timeout=10) as response:
            return response.status == 200
    except OSError:
        return False


@pytest.fixture(scope="module")
def machines():
    hosts = ["lab-1", "lab-2", "lab-3"] if bullseye_available() else ["lab-1", "lab-2"]
    releases = ",".join(f"{host}={MACHINES[host][0]}" for host in hosts[1:])
    lab("up", "--hosts", str(len(hosts)), "--releases", releases, "--enforce-devices")
    yield hosts
    lab("down")


def sh(host: str, command: str) -> str:
    result = subprocess.run([*LAB, "exec", host, "--", "sh", "-c", command], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, f"{host}: {command}\n{result.stdout}{result.stderr}"
    return result.stdout


def engine_sandbox() -> list[tuple[str, str]]:
    """The engine unit's [Service] sandbox lines, from the plan of a real-engine deployment."""
    plan = build_plan({"engine_hosts": ["lab-1"], "router_hosts": [],
                       "hostvars": {"lab-1": {"ansible_host": "10.77.0.11", "vllm_omni_gpus": [0, 1, 2],
                                              "vllm_omni_engine_backend": "engine"}}})
    return [(e["directive"], e["value"]) for e in plan["hardening"]["engine"] if e["value"] is not None]


def sandbox_before_the_device_list() -> list[tuple[str, str]]:
    """The engine's sandbox as it was before ENGINE_DEVICES: PrivateDevices=no, ProtectClock=yes, no policy."""
    entries = _hardening.directives(["/var/lib/vllm-omni"],
                                    {**_hardening.SHARED_USER_RELAXED, **_hardening.ENGINE_RELAXED})
    return [(e["directive"], e["value"]) for e in entries if e["value"] is not None]


def opens(host: str, properties: list[tuple[str, str]], paths: list[str]) -> dict:
    """Open each path for read+write in a transient unit with these properties, as user nobody."""
    argv = ["systemd-run", "--wait", "--pipe", "--quiet", "--collect", "-p", "User=nobody",
            *(f"--property={directive}={value}" for directive, value in properties), "python3", "-c", PROBE, *paths]
    result = subprocess.run([*LAB, "exec", host, "--", *argv], capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"{host}: systemd-run failed\n{result.stdout}{result.stderr}"
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found.pop("uid") == 65534, "the probe did not run as the unprivileged user"
    return found


def proc_devices_with(real: str, extra: list[tuple[int, str]]) -> str:
    """The kernel's /proc/devices with ``extra`` character majors added, in its own format."""
    chars, _sep, blocks = real.partition("\n\nBlock devices:")
    lines = chars.splitlines() + [f"{major:3d} {name}" for major, name in extra]
    return "\n".join(lines) + "\n\nBlock devices:" + blocks


@pytest.fixture
def stand_ins(machines, request):
    """Device nodes like a GPU + RDMA host's, and the /proc/devices text its loaded drivers would give.
    Yields (paths, show) where show(naming) puts that /proc/devices in front of the machine's systemd."""
    host = request.param
    if host not in machines:
        pytest.skip(f"{host} ({MACHINES[host][0]}) is not up: Debian's mirror no longer serves bullseye")
    real = sh(host, "cat /proc/devices")
    used = {int(line.split()[0]) for line in real.splitlines() if line[:1] == " " or line[:1].isdigit()}
    uvm, caps = [major for major in range(511, 384, -1) if major not in used][:2]
    misc = {int(line.split()[0]) for line in sh(host, "cat /proc/misc").splitlines()}
    rdma_cm_minor = next((minor for minor in range(250, 64, -1) if minor not in misc), None)
    assert rdma_cm_minor is not None, "no free misc minor for the rdma_cm stand-in"
    assert 195 not in used and 231 not in used, "this kernel has an NVIDIA or RDMA driver: the stand-ins would be real"
    numbers = {"/dev/nvidia-uvm": (uvm, 0), "/dev/nvidia-caps/nvidia-cap1": (caps, 1),
               "/dev/infiniband/rdma_cm": (10, rdma_cm_minor)}
    nodes = [(path, *numbers.get(path, (major, minor))) for path, major, minor in NODES]
    sh(host, "mkdir -p /dev/nvidia-caps /dev/infiniband && "
             + " && ".join(f"mknod -m 0666 {path} c {major} {minor}" for path, major, minor in nodes)
             + f" && touch {FAKE_DEVICES} && mount --bind {FAKE_DEVICES} /proc/devices")
    namings = {  # how each NVIDIA driver generation lists major 195
        "current": [(195, "nvidia"), (195, "nvidia-modeset"), (195, "nvidiactl")],
        "older": [(195, "nvidia-frontend")],
    }

    def show(naming: str) -> None:
        extra = [*namings[naming], (231, "infiniband_verbs"), (uvm, "nvidia-uvm"), (caps, "nvidia-caps")]
        subprocess.run([*LAB, "exec", host, "--", "sh", "-c", f"cat > {FAKE_DEVICES}"],
                       input=proc_devices_with(real, extra), text=True, check=True)

    yield host, [path for path, _major, _minor in nodes], show
    sh(host, f"umount /proc/devices; rm -f {FAKE_DEVICES} "
             + " ".join(path for path, _major, _minor in nodes) + "; rmdir /dev/nvidia-caps /dev/infiniband")


@pytest.mark.parametrize("stand_ins", list(MACHINES), indirect=True)
def test_the_engine_sandbox_opens_gpu_and_rdma_devices_and_nothing_it_does_not_list(stand_ins):
    host, paths, show = stand_ins
    release, version = MACHINES[host]
    assert f"systemd {version} " in sh(host, "systemctl --version")
    # The device cgroup is enforced in this machine at all.
    assert opens(host, [("DevicePolicy", "strict")], ["/dev/null"]) == {"/dev/null": DENIED}

    sandbox = engine_sandbox()
    assert ("DevicePolicy", "closed") in sandbox and ("PrivateDevices", "no") in sandbox
    assert ("ProtectClock", "yes") in sandbox
    for naming in ("current", "older"):
        show(naming)
        got = opens(host, sandbox, ["/dev/null", *paths])
        assert got.pop("/dev/null") == "OK"
        assert all(error in ALLOWED for error in got.values()), f"{release}, {naming} NVIDIA naming: {got}"

    # Without its DeviceAllow= entries the same sandbox refuses every one: the allow-list is what opens them.
    without = [(d, v) for d, v in sandbox if d != "DeviceAllow"]
    got = opens(host, without, ["/dev/null", *paths])
    assert got.pop("/dev/null") == "OK"
    assert set(got.values()) == {DENIED}, f"{release}: {got}"

    # The sandbox before the device list: ProtectClock= implies DeviceAllow=char-rtc r. systemd 247 adds
    # it anyway, which under DevicePolicy=auto closes every other device; 252 and later add it only
    # where a policy or allow-list is already set.
    got = opens(host, sandbox_before_the_device_list(), ["/dev/nvidia0"])
    assert got == {"/dev/nvidia0": DENIED if version < 252 else "ENXIO"}, f"{release}: {got}"
