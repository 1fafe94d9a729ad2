"""What the plan costs inside Ansible as the fleet grows: the plan task, and a task per host that reads it.

    python benchmarks/plan_in_ansible.py [--sizes 16,256,1024] [--hosts 8] [--out FILE]

make bench times the planner alone (build_plan, 0.7 s for 1,024 hosts x 8 GPUs). A deploy also pays Ansible's
handling of the plan: deployment_plan's result becomes a fact on localhost, and every play reads it through
playbooks/vars/plan.yml (`hostvars['localhost']['vllm_omni_plan']`). For each inventory size (hosts x 8 GPUs,
pd, 0.26.0, connection local: no host is reached) this runs benchmarks/plan_in_ansible/per_host.yml: playbooks/plan.yml
(the plan task once, the planned-service groups on every host), then on --hosts of the hosts (forks = --hosts, so
they run side by side) a task that reads nothing of the plan, one that reads one list of it as the roles do
(vars/plan.yml), one that reads the host's look (converge.yml's argument) and a play pattern that reads localhost's
facts; then the same list and pattern with the plan also a fact on localhost, as the playbooks kept it until
2026-12-04. It prints each task's wall time (tests/callbacks/task_timer.py) and the run's CPU time, as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / ".collection"))
sys.path.insert(0, str(REPO / "benchmarks"))

from plan_render import inventory  # the planner benchmark's fleet: hosts x 8 GPUs, one subnet per 255 hosts

PLAYBOOK = REPO / "benchmarks" / "plan_in_ansible" / "per_host.yml"
TIMED = re.compile(r"^\s+([0-9.]+) s  (.+)$")


def inventory_file(hosts: int, directory: Path) -> Path:
    """The planner benchmark's fleet as an Ansible inventory (group vllm_omni), reached by connection local."""
    fleet = inventory(hosts, "pd", "0.26.0")
    shared = {"vllm_omni_version": "0.26.0", "vllm_omni_layout": "pd", "ansible_connection": "local",
              "ansible_python_interpreter": sys.executable}
    hostvars = {name: {key: value for key, value in values.items() if key not in shared}
                for name, values in fleet["hostvars"].items()}
    path = directory / f"fleet-{hosts}.yml"
    path.write_text(yaml.safe_dump({"vllm_omni": {"hosts": hostvars, "vars": shared}}))
    return path


def run(hosts: int, bench_hosts: int, directory: Path) -> dict:
    source = inventory_file(hosts, directory)
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_FORKS": str(bench_hosts),
           "ANSIBLE_CALLBACK_PLUGINS": str(REPO / "tests" / "callbacks"), "ANSIBLE_CALLBACKS_ENABLED": "task_timer"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = subprocess.run(["ansible-playbook", str(PLAYBOOK), "-i", str(source),
                             "-e", f"bench_hosts=vllm_omni[0:{bench_hosts - 1}]", "-e", "plan_check_secrets=false"],
                            cwd=REPO, env=env, capture_output=True, text=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        sys.exit(f"plan_in_ansible: {hosts} hosts: ansible-playbook failed:\n{result.stdout[-3000:]}{result.stderr[-2000:]}")
    tasks = {match.group(2).removeprefix("Bench | "): float(match.group(1))
             for match in map(TIMED.match, result.stdout.splitlines()) if match}
    return {"hosts": hosts, "per_host_task_hosts": bench_hosts, "task_wall_s": tasks,
            "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="16,256,1024", help="inventory sizes (hosts x 8 GPUs)")
    parser.add_argument("--hosts", type=int, default=8, help="hosts the per-host tasks run on (and forks)")
    parser.add_argument("--out", type=Path, help="also write the results here (JSON, with the time of the run)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        results = [run(int(size), args.hosts, Path(directory)) for size in args.sizes.split(",")]
    if args.out:
        args.out.write_text(json.dumps({"when": time.strftime("%Y-%m-%d %H:%M"), "results": results}, indent=1) + "\n")
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
