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
"""

from __future__ import annotations

import argparse
import os
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


def best(fn, repeat: int) -> tuple[float, float]:
    """The least wall time and the least CPU time (this process) of ``repeat`` runs of ``fn``."""
    walls, cpus = [], []
    for _round in range(repeat):
        start, cpu = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
    return min(walls), min(cpus)


def pd_at(hosts: int, repeat: int, reference: tuple[float, float], bound: float, label: str) -> tuple[float, list[str]]:
    """Plan + render ``hosts`` hosts (pd, 0.26.0): print the time and its ratio to ``reference`` (wall, CPU)."""
    inv = inventory(hosts, "pd", "0.26.0")
    tree = render_tree(build_plan(inv))
    files, size = len(tree), sum(len(t) for t in tree.values())
    firewall = sum(len(t) for path, t in tree.items() if path.endswith(".nft"))
    del tree
    total_s, cpu_s = best(lambda: render_tree(build_plan(inv)), repeat)
    ratio = total_s / reference[0]
    print(f"{'pd':>10} 0.26.0 {label}: {hosts} hosts, {files} files, {size / 1e6:.1f} MB "
          f"(firewall {firewall / 1e6:.2f} MB); plan + render {total_s:.3f} s (cpu {cpu_s:.3f} s, best of {repeat}) "
          f"= {ratio:.2f}x (cpu {cpu_s / reference[1]:.2f}x; linear: <= {bound:.2f}x)")
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
    totals = {}
    for layout, version in (("pd", "0.26.0"), ("aggregated", "0.30.0")):
        inv = inventory(args.hosts, layout, version)
        plan = build_plan(inv)
        pipelines = sum(len(h["pipelines"]) for h in plan["hosts"].values())
        tree = render_tree(plan)
        files, size = len(tree), sum(len(t) for t in tree.values())
        firewall = sum(len(t) for path, t in tree.items() if path.endswith(".nft"))
        del plan, tree  # not kept alive while timing: the garbage collector would walk them on every pass
        plan_s, plan_cpu = best(lambda inv=inv: build_plan(inv), args.repeat)
        total_s, total_cpu = best(lambda inv=inv: render_tree(build_plan(inv)), args.repeat)
        totals[layout] = (total_s, total_cpu)
        print(f"{layout:>10} {version}: {pipelines} pipelines, {files} files, {size / 1e6:.1f} MB "
              f"(firewall {firewall / 1e6:.2f} MB); plan {plan_s:.3f} s (cpu {plan_cpu:.3f} s), "
              f"plan + render {total_s:.3f} s (cpu {total_cpu:.3f} s)")
        del inv
    missed = []
    if args.hosts == 1024 and totals["pd"][0] > 1.0:
        missed.append(f"plan + render of 1,024 x 8 (pd) took {totals['pd'][0]:.3f} s (target <= 1 s)")
    if args.scale > 1:
        missed += pd_at(args.hosts * args.scale, args.repeat, totals["pd"], 1.125 * args.scale, f"x{args.scale}")[1]
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
