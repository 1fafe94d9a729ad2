"""Deploy timings on the local lab (needs root): first deploy, no-op re-run, 1 host vs 3 hosts, router overhead
(the front door and vllm-router against one engine directly); or, with --scale, first deploy and no-op at
several lab sizes (N machines: N-1 engine hosts of 8 GPUs, the router on the last).

    python benchmarks/lab_deploy.py [--rounds 2]
    python benchmarks/lab_deploy.py --scale 3,16 [--noop-runs 2]

Every deploy starts from freshly booted lab machines (`lab.py down` + `up`) with the controller's
wheelhouse warm, so the numbers measure the playbooks, not PyPI. 1-host and 3-host deploys
alternate within one run (this machine is noisy: compare the ratio). Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "lab"))
import lab  # the lab's own cgroup names: one source for them

CACHE = Path(os.environ.get("VLLM_OMNI_CACHE", Path.home() / ".cache" / "vllm-omni-serve"))
LAB = [sys.executable, str(REPO / "tests" / "lab" / "lab.py")]
KEY_FILE = CACHE / "lab" / "demo-api-key"
SECRETS = CACHE / "lab" / "demo-secrets.yml"
LAYOUTS = {
    # two engine hosts presenting 8 GPUs each, router on the third (the demo)
    3: REPO / "tests" / "lab" / "demo" / "hosts.yml",
    # one host: the same per-host work, router beside the engines
    1: REPO / "benchmarks" / "lab-1host.yml",
}


def lab_fresh(hosts: int) -> None:
    subprocess.run([*LAB, "down"], check=True, capture_output=True)
    subprocess.run([*LAB, "up", "--hosts", str(hosts), "--gpu-profile", "h200x8-nvswitch"], check=True,
                   capture_output=True)


def scale_layout(hosts: int) -> Path:
    """N lab machines: lab-1 .. lab-(N-1) engine hosts (the demo's per-host work each), the router on lab-N.
    The demo's group variables go in the file (the demo's own sit beside its hosts.yml)."""
    path = CACHE / "lab" / f"scale-{hosts}.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    demo_vars = (REPO / "tests" / "lab" / "demo" / "group_vars" / "vllm_omni.yml").read_text().splitlines()
    variables = "".join(f"    {line}\n" for line in demo_vars if line.strip() and not line.startswith("#"))
    engines = "".join(f"    lab-{index}:\n" for index in range(1, hosts))
    path.write_text(f"# benchmarks/lab_deploy.py --scale: {hosts} machines, the demo's variables\n"
                    f"vllm_omni:\n  hosts:\n{engines}  vars:\n{variables}"
                    f"vllm_omni_router:\n  hosts:\n    lab-{hosts}:\n")
    return path


def recap_counts(recap: str) -> dict[str, int]:
    """The PLAY RECAP's totals over every host: ok, changed, failed, ..."""
    totals: dict[str, int] = {}
    for word in recap.split():
        key, _sep, value = word.partition("=")
        if value.isdigit():
            totals[key] = totals.get(key, 0) + int(value)
    return totals


def machines_cpu_s() -> float:
    """CPU seconds the running lab machines have used since they booted (each runs in its own cgroup; the
    unified hierarchy's cpu.stat counts every process in it, the machine's systemd and units included)."""
    total = 0
    for pattern in lab.machine_cgroups("lab-*"):
        for cgroup in pattern.parent.glob(pattern.name):
            stat = cgroup / "cpu.stat"
            if stat.is_file():
                total += int(stat.read_text().split("usage_usec ", 1)[1].split()[0])
    return total / 1e6


def busy_cpu_s() -> float:
    """CPU seconds this whole machine has been busy since it booted, every core (/proc/stat: all but idle, iowait)."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def cpu_use(run) -> tuple[object, dict]:
    """Run ``run()`` and say where the CPU went meanwhile: the lab machines (what separate hosts would each do on
    their own CPUs), the controller (ansible-playbook and what it waited for: workers, ssh clients) and the whole
    machine. ``floor_s``: the whole machine's CPU time over its cores, the least wall time that work could take
    here however it were scheduled."""
    before = (machines_cpu_s(), busy_cpu_s(), resource.getrusage(resource.RUSAGE_CHILDREN))
    result = run()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    machines, busy = machines_cpu_s() - before[0], busy_cpu_s() - before[1]
    controller = (children.ru_utime + children.ru_stime) - (before[2].ru_utime + before[2].ru_stime)
    return result, {"machines_s": round(machines, 1), "controller_s": round(controller, 1), "all_s": round(busy, 1),
                    "floor_s": round(busy / os.cpu_count(), 1)}


def scale(sizes: list[int], noop_runs: int) -> dict:
    """First deploy and no-op re-runs at each lab size, one run each, the sizes in the order given, with the CPU
    time each took in the lab machines and on the controller (cpu_use)."""
    report: dict = {"cores": os.cpu_count(), "sizes": {}}
    for hosts in sizes:
        layout = scale_layout(hosts)
        lab_fresh(hosts)
        (first, recap), first_cpu = cpu_use(lambda layout=layout: deploy(layout))
        noops = [cpu_use(lambda layout=layout: deploy(layout)) for _run in range(noop_runs)]
        report["sizes"][hosts] = {
            "engine_hosts": hosts - 1, "first_deploy_s": round(first, 1), "first_tasks": recap_counts(recap),
            "first_cpu": first_cpu,
            "noop_s": [round(seconds, 1) for (seconds, _recap), _cpu in noops],
            "noop_changed": [recap_counts(recap).get("changed", 0) for (_seconds, recap), _cpu in noops],
            "noop_cpu": [cpu for _result, cpu in noops]}
    smallest, largest = report["sizes"][min(sizes)], report["sizes"][max(sizes)]
    report["first_deploy_ratio"] = round(largest["first_deploy_s"] / smallest["first_deploy_s"], 2)
    report["noop_ratio"] = round(min(largest["noop_s"]) / min(smallest["noop_s"]), 2)
    # What the largest size's lab machines alone ask of this machine's cores, against the smallest size's wall time:
    # above 1.5 (the bound), no playbook change can meet it here (the machines' work is the hosts' own).
    report["largest_machines_floor_ratio"] = {
        "first_deploy": round(largest["first_cpu"]["machines_s"] / os.cpu_count() / smallest["first_deploy_s"], 2),
        "noop": round(min(cpu["machines_s"] for cpu in largest["noop_cpu"]) / os.cpu_count()
                      / min(smallest["noop_s"]), 2)}
    return report


LOGS = CACHE / "reports" / "lab-deploy"


def deploy(layout: Path) -> tuple[float, str]:
    """One deploy; its whole output is kept in LOGS (a no-op that ran every play says why in its converge lines)."""
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}
    start = time.monotonic()
    result = subprocess.run(["ansible-playbook", "playbooks/deploy.yml", "-i", "inventories/lab/hosts.yml",
                             "-i", str(layout), "-e", f"@{SECRETS}"], cwd=REPO, env=env, capture_output=True,
                            text=True, check=False)
    seconds = time.monotonic() - start
    LOGS.mkdir(parents=True, exist_ok=True)
    (LOGS / f"{layout.stem}-{time.strftime('%Y%m%dT%H%M%S')}.log").write_text(result.stdout + result.stderr)
    if result.returncode != 0:
        sys.exit(f"deploy failed:\n{result.stdout[-3000:]}")
    return seconds, result.stdout.split("PLAY RECAP")[-1]


def loadgen(url: str, requests: int, ca_file: str | None = None) -> dict:
    """loadgen.py, run from lab-3's network namespace: an inventory peer, so the firewall lets it reach an
    engine's port directly as well as the front door (the controller may reach the front door only)."""
    out = subprocess.run([*LAB, "net", "lab-3", "--", sys.executable, str(REPO / "benchmarks" / "loadgen.py"),
                          url, "--requests", str(requests), "--key-file", str(KEY_FILE), "--json",
                          *(["--ca-file", ca_file] if ca_file else [])],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def front_door() -> tuple[str, str]:
    """The demo's router URL (https: the TLS front door) and the CA that signed it, from its plan."""
    router, _model, ca_file = subprocess.run([sys.executable, str(REPO / "tests" / "lab" / "demo_info.py")],
                                             capture_output=True, text=True, check=True).stdout.split()
    return router, ca_file


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--scale", help="lab sizes to deploy, e.g. 3,16 (machines, the router on the last)")
    parser.add_argument("--noop-runs", type=int, default=2)
    args = parser.parse_args()
    if not KEY_FILE.is_file():
        (CACHE / "lab").mkdir(parents=True, exist_ok=True)
        KEY_FILE.write_text(os.urandom(24).hex() + "\n")
    SECRETS.write_text(f"vllm_omni_api_key: {KEY_FILE.read_text().strip()}\n")
    if args.scale:
        print(json.dumps(scale([int(size) for size in args.scale.split(",")], args.noop_runs), indent=1))
        return 0
    report: dict = {"first_deploy_s": {1: [], 3: []}}
    for _round in range(args.rounds):
        for hosts in (1, 3):
            lab_fresh(hosts)
            seconds, _unused = deploy(LAYOUTS[hosts])
            report["first_deploy_s"][hosts].append(round(seconds, 1))
    # The lab now runs the 3-host layout: no-op re-runs and router overhead on it.
    noop = []
    for _round in range(3):
        seconds, recap = deploy(LAYOUTS[3])
        noop.append({"seconds": round(seconds, 1), "changed": sum(int(w.split("=")[1]) for w in recap.split()
                                                                  if w.startswith("changed="))})
    report["noop_rerun"] = noop
    direct, routed = [], []
    router, ca_file = front_door()
    for _round in range(3):  # alternate, so drift hits both paths alike
        direct.append(loadgen("http://10.77.0.11:8091", 150))  # lab-1's first pipeline (the demo's plan)
        routed.append(loadgen(router, 150, ca_file))  # through the front door (TLS, key) and vllm-router
    report["router_overhead"] = {
        "direct_p50_ms": [r["p50_ms"] for r in direct], "router_p50_ms": [r["p50_ms"] for r in routed],
        "direct_p99_ms": [r["p99_ms"] for r in direct], "router_p99_ms": [r["p99_ms"] for r in routed],
        "p50_delta_ms": round(statistics.median(r["p50_ms"] for r in routed)
                              - statistics.median(r["p50_ms"] for r in direct), 3),
        "p99_delta_ms": round(statistics.median(r["p99_ms"] for r in routed)
                              - statistics.median(r["p99_ms"] for r in direct), 3),
        "failed": sum(r["failed"] for r in direct + routed),
    }
    one, three = statistics.median(report["first_deploy_s"][1]), statistics.median(report["first_deploy_s"][3])
    report["ratio_3_hosts_to_1"] = round(three / one, 2)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
