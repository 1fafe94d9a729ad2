"""Fill the lab's cold caches before the lab modules that need them: `make test` runs this beside molecule.

    warm.py [--releases bookworm,trixie,bullseye]

The lab chain (molecule, then tests/lab) is `make test`'s critical path, and on a clean clone it used to
stop for downloads and unpacking the first time something was needed: the Debian 12 rootfs after lint
(about 70 s), the Debian 13 one (about 100 s), the Debian 11 one (about 90 s), each platform's wheel sets,
the real engine's (4 GB). `make test` starts this before lint instead, and it fills them beside lint and
molecule, with the code the lab itself uses:

* each rootfs with lab.py's ensure_rootfs (an `up` that needs one still being built waits for it);
* the bench role's plotting venv (matplotlib; the second lab lane has no route to the index);
* each wheel set the lab's deploys fill, taken from the plans of inventories shaped like the lab modules'
  (Debian 12 and 13 hosts; the simulator, the router, the Mooncake master; the real engine 0.26.0), by the
  artifacts role's own script with the role's arguments (a deploy that reaches a set being filled waits for
  it, then finds it complete).

Rootfs and wheel sets go side by side (both wait on the network). A step that fails is reported and the
others go on: the lab then fills that cache itself, as before. Exit status 1 if any step failed.

``--releases`` fills only what lab machines of those Debian releases need (their rootfs, the wheel sets of their
platform, the bench venv): a lab lane without a route out starts a module as soon as what that module boots is
ready (tests/lab/lanes.py), instead of after every release and the real engine's set.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / ".collection"))
sys.path.insert(0, str(Path(__file__).parent))

import lab  # the lab's own rootfs builder

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.host import _names
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan

WHEELHOUSE = REPO / "roles" / "artifacts" / "files" / "wheelhouse.py"
LOCKS = REPO / "data" / "locks"
BENCH_REQUIREMENTS = REPO / "roles" / "bench" / "files" / "requirements.txt"
# Releases the lab boots, in lab.py's order: molecule and most modules (12, first: molecule's machines need it within
# a minute or two), test_lab and test_multihost (13), test_sandbox_devices (11 and 13).
RELEASES = tuple(lab.RELEASES)
# The host platform (data/platforms.yml) of a lab machine of each release.
PLATFORMS = {"bookworm": "debian12", "trixie": "debian13", "bullseye": "debian11"}
# The lab modules' deployments, by host platform and backend (tests/lab/test_*.py).
SHAPES = (
    ("debian12", {"vllm_omni_engine_backend": "simulator", "vllm_omni_mooncake_master_enabled": True}),
    ("debian13", {"vllm_omni_engine_backend": "simulator", "vllm_omni_mooncake_master_enabled": True}),
    ("debian13", {"vllm_omni_engine_backend": "engine", "vllm_omni_version": "0.26.0"}),
)


def say(message: str) -> None:
    print(f"warm: {message}", flush=True)


def wheel_sets(platforms: set[str]) -> list[dict]:
    """The wheel sets of the lab's deployments on these platforms, each once, from the planner (ids, platforms,
    locks, directories)."""
    found: dict[str, dict] = {}
    for platform, values in SHAPES:
        if platform not in platforms:
            continue
        host = {"ansible_host": "10.77.0.11", "vllm_omni_gpus": [0, 1, 2], "vllm_omni_host_platform": platform,
                "vllm_omni_served_model_name": "qwen3-omni", "vllm_omni_api_key": "warm-up-key-0123456789abcdef",
                **values}
        plan = build_plan({"engine_hosts": ["lab-1"], "router_hosts": ["lab-1"], "hostvars": {"lab-1": host}})
        for item in plan["artifacts"]["items"]:
            if item["kind"] == "wheels":
                found.setdefault(item["id"], {**item, "target": plan["platforms"][item["platform"]]})
    return list(found.values())


def fill(item: dict) -> None:
    """One set, as the artifacts role's controller task fills it (roles/artifacts/tasks/controller.yml)."""
    target = item["target"]
    out = _names.cache_root() / item["controller_dir"]
    subprocess.run([sys.executable, str(WHEELHOUSE), str(out), target["python"], target["machine"], target["abi"],
                    ",".join(target["pip_platforms"]), str(LOCKS / item["lock"]["file"]),
                    str(LOCKS / item["uv_lock"]["file"])], check=True, stdout=subprocess.DEVNULL)


def bench_venv() -> None:
    """The bench role's plotting venv on the controller, where and as the role makes it (roles/bench/tasks/main.yml:
    ``bench-<sha256 of the requirements as Ansible's file lookup reads them, 12>`` in the cache, a venv of the
    controller's Python): the second lab lane's bench test runs where there is no route to the index."""
    text = BENCH_REQUIREMENTS.read_text().rstrip()  # the file lookup strips trailing whitespace
    venv = _names.cache_root() / f"bench-{hashlib.sha256(text.encode()).hexdigest()[:12]}"
    venv.parent.mkdir(parents=True, exist_ok=True)
    # Under a lock: make test's copy of warm.py and a lab lane's may reach it at once. (A dot file: lane.py links
    # every bench-* directory into a lane's cache.)
    with open(venv.parent / f".{venv.name}.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if not (venv / "bin" / "python").exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        # Each time (pinned requirements already there: no index needed): a venv an interrupted install left is
        # completed.
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "-r", str(BENCH_REQUIREMENTS)], check=True,
                       stdout=subprocess.DEVNULL)


def timed(name: str, step, failures: list[str]) -> None:
    start = time.monotonic()
    try:
        step()
    except (subprocess.CalledProcessError, OSError, SystemExit) as error:
        failures.append(name)
        say(f"{name}: failed after {time.monotonic() - start:.0f} s ({error}); the lab fills it itself")
        return
    say(f"{name}: ready after {time.monotonic() - start:.0f} s")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="warm.py", description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--releases", default=",".join(RELEASES),
                        help=f"fill only what machines of these releases need (comma-separated; {', '.join(RELEASES)})")
    args = parser.parse_args(argv)
    releases = [release for release in args.releases.split(",") if release]
    if unknown := sorted(set(releases) - set(RELEASES)):
        parser.error(f"--releases: {', '.join(unknown)} is not a release the lab boots ({', '.join(RELEASES)})")
    if os.geteuid() != 0:
        say("needs root (the lab's rootfs): nothing done")
        return 1
    failures: list[str] = []
    sets = wheel_sets({PLATFORMS[release] for release in releases})
    # The engine's set (4 GB) last: the simulator's and router's are needed sooner.
    sets.sort(key=lambda item: item["lock"]["name"].startswith("vllm-omni-"))  # lock files are <platform>/<name>.txt

    def rootfs() -> None:
        lab.ensure_host_tools()
        for release in releases:
            timed(f"rootfs {release}", lambda release=release: lab.ensure_rootfs(release), failures)

    builder = threading.Thread(target=rootfs)
    builder.start()
    for item in sets:
        timed(f"wheel set {item['id']}", lambda item=item: fill(item), failures)
    timed("bench plotting venv", bench_venv, failures)
    builder.join()
    say(f"{len(releases)} rootfs, {len(sets)} wheel sets and the bench venv; failed: {', '.join(failures) or 'none'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
