"""Planner benchmark: plan + render 1,024 hosts x 8 GPUs on one core.

    python benchmarks/plan_render.py [--hosts N] [--repeat R] [--scale K] [--large M] [--large-repeat S]

Prints the best of R runs for planning alone and for planning plus rendering every file of the
render directory in memory (render_tree: plan.json, each pipeline's files, each host's firewall
ruleset and the peer set once, ...). Then plans and renders K times the hosts (pd, 0.26.0) and M
hosts (pd, 0.26.0; best of S runs) to check that the cost is linear. Each figure is the wall time,
with the process's CPU time beside it (on a shared machine the wall time includes other processes').
Targets (docs/benchmarks.md), checked here on the wall time (exit status 1 when one is missed):
plan + render of 1,024 x 8 (pd, 0.26.0) in <= 1 s, K x the hosts in <= 1.125 K x that time (4.5x
for 4x), M hosts in <= 1.125 x (M / N) x that time and, for M = 10,000, in <= 10 s.
Runs pinned to one CPU where the OS allows it.

Each timed run is one plan + render in a child forked from this process, which has only planned a few hosts
to load what the planner imports: that is how `ansible-playbook` runs it (the action in a worker forked from
its main process, once). Every size then maps the memory it needs anew, as a real run does; before (stop 41),
the runs of one size followed each other in this process, and the 1,024-host runs got back pages the previous
run had freed, which a 4,096-host run cannot (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / ".collection"))

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.texts._render import render_tree


def inventory(hosts: int, layout: str, version: str) -> dict:
    group_vars = {"vllm_omni_version": version, "vllm_omni_layout": layout}
    names = [f"gpu-{i:04d}" for i in range(hosts)]
    hostvars = {name: {**group_vars, "ansible_host": f"10.{i // 65536}.{i // 256 % 256}.{i % 256 + 1}"
                       if i % 256 != 255 else f"10.200.{i // 256 % 256}.1", "vllm_omni_gpus": list(range(8))}
                for i, name in enumerate(names)}
    return {"engine_hosts": names, "router_hosts": [], "hostvars": hostvars}


def control_work(hosts: int) -> dict[str, str]:
    """Work linear in ``hosts`` by construction, shaped like a render (per host: small dicts made, dumped to indented
    JSON texts kept in one dict, then one text of them all), to show what this machine's memory alone does to a
    ratio between sizes (docs/benchmarks.md): it has no lookup, sort or pass whose cost per host grows."""
    texts = {}
    for host in range(hosts):
        for pipeline in range(2):
            config = {"name": f"gpu-{host:04d}-{pipeline}", "stages": [
                {"id": stage, "devices": [stage, stage + 1],
                 "env": {f"KEY_{index}": str(index * host) for index in range(20)}} for stage in range(3)]}
            for part in range(6):
                texts[f"gpu-{host:04d}/{pipeline}/{part}"] = json.dumps(config, indent=2)
    texts["all"] = json.dumps(texts)
    return texts


def control_ratio(hosts: int, scale: int, repeat: int) -> float:
    """control_work's best time at ``scale`` x ``hosts`` over its best at ``hosts``, each run in a fork."""
    times = {}
    for size in (hosts, hosts * scale):
        times[size] = min(in_fork(lambda size=size: timed(lambda: control_work(size)))["total_s"]
                          for _round in range(repeat))
    return times[hosts * scale] / times[hosts]


def timed(work) -> dict:
    start, cpu = time.perf_counter(), time.process_time()
    work()
    return {"total_s": time.perf_counter() - start, "total_cpu": time.process_time() - cpu}


def one_run(inv: dict) -> dict:
    """Plan and render ``inv`` once in a child forked from this process (in_fork); the wall and CPU seconds of the
    plan and of plan + render, the render's size, the page faults it took."""
    def run() -> dict:
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        start, cpu = time.perf_counter(), time.process_time()
        plan = build_plan(inv)
        plan_s, plan_cpu = time.perf_counter() - start, time.process_time() - cpu
        tree = render_tree(plan)
        total_s, total_cpu = time.perf_counter() - start, time.process_time() - cpu
        return {"pipelines": sum(len(host["pipelines"]) for host in plan["hosts"].values()), "plan_s": plan_s,
                "plan_cpu": plan_cpu, "total_s": total_s, "total_cpu": total_cpu,
                "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults, "files": len(tree),
                "bytes": sum(len(text) for text in tree.values()),
                "firewall": sum(len(text) for path, text in tree.items() if path.endswith(".nft"))}
    return in_fork(run)


def in_fork(run) -> dict:
    """``run()`` in a child forked from this process; what it returns (a JSON object) comes back through a pipe."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one run, its figures on the pipe, then gone without running the parent's exit code
        code = 1
        try:
            os.close(reader)
            os.write(writer, json.dumps(run()).encode())
            code = 0
        finally:
            os._exit(code)  # pylint: disable=protected-access  # a forked child must not run the parent's cleanup
    os.close(writer)
    with os.fdopen(reader, "rb") as pipe:
        data = pipe.read()
    _pid, status = os.waitpid(pid, 0)
    if status != 0 or not data:
        sys.exit(f"a timed run failed in its child process (wait status {status})")
    return json.loads(data)


def best(inv: dict, repeat: int) -> dict:
    """``repeat`` runs (one_run): the least of each time, the last run's sizes and page faults."""
    runs = [one_run(inv) for _round in range(repeat)]
    figures = dict(runs[-1])
    for key in ("plan_s", "plan_cpu", "total_s", "total_cpu"):
        figures[key] = min(run[key] for run in runs)
    return figures


def describe(run: dict) -> str:
    return (f"{run['pipelines']} pipelines, {run['files']} files, {run['bytes'] / 1e6:.1f} MB "
            f"(firewall {run['firewall'] / 1e6:.2f} MB), {run['faults']} page faults")


def pd_at(hosts: int, repeat: int, reference: dict, bound: float, label: str) -> tuple[float, list[str]]:
    """Plan + render ``hosts`` hosts (pd, 0.26.0): print the time and its ratio to ``reference`` (wall, CPU)."""
    run = best(inventory(hosts, "pd", "0.26.0"), repeat)
    total_s, cpu_s = run["total_s"], run["total_cpu"]
    ratio = total_s / reference["total_s"]
    print(f"{'pd':>10} 0.26.0 {label}: {hosts} hosts, {describe(run)}; plan + render {total_s:.3f} s "
          f"(cpu {cpu_s:.3f} s, best of {repeat}) = {ratio:.2f}x (cpu {cpu_s / reference['total_cpu']:.2f}x; "
          f"linear: <= {bound:.2f}x)")
    return total_s, [f"{hosts} hosts took {ratio:.2f}x the time (target <= {bound:.2f}x)"] if ratio > bound else []


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--scale", type=int, default=4, help="also time K x the hosts (pd, 0.26.0); 0: skip")
    parser.add_argument("--large", type=int, default=10000, help="also time M hosts (pd, 0.26.0); 0: skip")
    parser.add_argument("--large-repeat", type=int, default=3, help="runs of the M-host case (best of)")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    print(f"python {sys.version.split()[0]}, {args.hosts} hosts x 8 GPUs, best of {args.repeat}")
    render_tree(build_plan(inventory(8, "pd", "0.26.0")))  # what the planner imports and compiles, loaded once
    totals = {}
    for layout, version in (("pd", "0.26.0"), ("aggregated", "0.30.0")):
        run = best(inventory(args.hosts, layout, version), args.repeat)
        totals[layout] = run
        print(f"{layout:>10} {version}: {describe(run)}; plan {run['plan_s']:.3f} s (cpu {run['plan_cpu']:.3f} s), "
              f"plan + render {run['total_s']:.3f} s (cpu {run['total_cpu']:.3f} s)")
    missed = []
    if args.hosts == 1024 and totals["pd"]["total_s"] > 1.0:
        missed.append(f"plan + render of 1,024 x 8 (pd) took {totals['pd']['total_s']:.3f} s (target <= 1 s)")
    if args.scale > 1:
        missed += pd_at(args.hosts * args.scale, args.repeat, totals["pd"], 1.125 * args.scale, f"x{args.scale}")[1]
        # Not a target: what the same ratio is for work that is linear by construction, on this machine, now.
        print(f"{'control':>10}: {args.hosts * args.scale} against {args.hosts} hosts of linear work "
              f"(control_work, best of {args.repeat}) = {control_ratio(args.hosts, args.scale, args.repeat):.2f}x")
    if args.large > 0:
        large_s, large_missed = pd_at(args.large, args.large_repeat, totals["pd"],
                                      1.125 * args.large / args.hosts, f"{args.large / args.hosts:.2f}x")
        missed += large_missed
        if args.large == 10000 and large_s > 10.0:
            missed.append(f"plan + render of 10,000 hosts took {large_s:.3f} s (target <= 10 s)")
    for line in missed:
        print(f"MISSED: {line}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
