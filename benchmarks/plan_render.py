#!/usr/bin/env python3
"""Planner benchmark: plan + render 1,024 hosts x 8 GPUs on one core.

    python benchmarks/plan_render.py [--hosts N] [--repeat R]

Prints the best of R runs for planning alone and for planning plus rendering every file of the
render directory in memory (plan.json, and per pipeline stage_config.yaml, engine.env, argv).
Target (docs/benchmarks.md): plan + render of 1,024 x 8 in <= 1 s. Runs pinned to one CPU where
the OS allows it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / ".collection"))

from ansible_collections.vllm_omni.serve.plugins.plugin_utils._planner import build_plan
from ansible_collections.vllm_omni.serve.plugins.plugin_utils._render import render_tree


def inventory(hosts: int, layout: str, version: str) -> dict:
    group_vars = {"vllm_omni_version": version, "vllm_omni_layout": layout}
    names = [f"gpu-{i:04d}" for i in range(hosts)]
    hostvars = {name: {**group_vars, "ansible_host": f"10.{i // 65536}.{i // 256 % 256}.{i % 256 + 1}"
                       if i % 256 != 255 else f"10.200.{i // 256 % 256}.1", "vllm_omni_gpus": list(range(8))}
                for i, name in enumerate(names)}
    return {"engine_hosts": names, "router_hosts": [], "hostvars": hostvars}


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    print(f"python {sys.version.split()[0]}, {args.hosts} hosts x 8 GPUs, best of {args.repeat}")
    for layout, version in (("pd", "0.26.0"), ("aggregated", "0.30.0")):
        inv = inventory(args.hosts, layout, version)
        plan = build_plan(inv)
        pipelines = sum(len(h["pipelines"]) for h in plan["hosts"].values())
        tree = render_tree(plan)
        size = sum(len(t) for t in tree.values())
        plan_s = best(lambda inv=inv: build_plan(inv), args.repeat)
        total_s = best(lambda inv=inv: render_tree(build_plan(inv)), args.repeat)
        print(f"{layout:>10} {version}: {pipelines} pipelines, {len(tree)} files, {size / 1e6:.1f} MB; "
              f"plan {plan_s:.3f} s, plan + render {total_s:.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
