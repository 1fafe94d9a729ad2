# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""A plan as a few readable lines: what you set, what the collection computed, per host."""

from __future__ import annotations

from ._checkers import show


def _stage_cell(stages: list[dict]) -> str:
    cells: dict[str, list[str]] = {}
    for stage in stages:
        cells.setdefault(",".join(map(str, stage["physical_gpus"])), []).append(stage["role"])
    return "  ".join(f"{'+'.join(roles)}[{gpus}]" for gpus, roles in cells.items())


def _pipeline_line(pipeline: dict) -> str:
    """One pipeline (or distributed engine): its stages on GPUs, its ports, where it answers."""
    ports, process = pipeline["ports"], pipeline.get("process", "single")
    parts = [] if process == "headless" and not pipeline["health_url"] else [f"api {ports['api']}"]
    if "bootstrap" in ports:
        parts.append(f"bootstrap {ports['bootstrap']}")
    if "mooncake_rpc" in ports:
        parts.append(f"mooncake {ports['mooncake_rpc'][0]}-{ports['mooncake_rpc'][1]}")
    if "nixl_side_channel" in ports:
        side = ", ".join(f"{role} {port}" for role, port in ports["nixl_side_channel"].items())
        parts.append(f"nixl side channel {side}, ucx {ports['ucx_tcp'][0]}-{ports['ucx_tcp'][1]}")
    if "master" in ports:
        parts.append(f"stage master {ports['master']}")
    where = pipeline["url"] or f"headless, registers with {pipeline['master']['address']}:{pipeline['master']['port']}"
    what = (_stage_cell(pipeline["stages"]) if process == "single" else
            f"{pipeline['pipeline']} {process} {pipeline['stages'][pipeline['stage_id']]['role']} "
            f"{pipeline['replica']}[{','.join(map(str, pipeline['gpus']))}]")
    return f"  {pipeline['name']}: {what}; {', '.join(parts)}; {where}"


def _host_lines(host: str, host_plan: dict) -> list[str]:
    """One host: its GPUs and what uses them, then a line a pipeline."""
    pipelines = host_plan["pipelines"]
    single = sum(1 for p in pipelines if p.get("process", "single") == "single")
    engines = len(pipelines) - single
    return [f"host {host} {host_plan['ip']}: GPUs {show(host_plan['gpus'])} -> "
            + (f"{single} pipeline(s) x {host_plan['gpus_per_pipeline']} GPUs" if single or not engines else "")
            + (f"{', ' if single else ''}{engines} engine(s) of distributed pipelines" if engines else "")
            + (f", unused {show(host_plan['unused_gpus'])}" if host_plan["unused_gpus"] else ""),
            *(_pipeline_line(pipeline) for pipeline in pipelines)]


def _deployment_lines(plan: dict) -> list[str]:
    """Host platforms, distributed pipelines, the router and the Mooncake master."""
    lines = []
    by_platform: dict[tuple[str, str], list[str]] = {}
    for host, platform in plan.get("host_platforms", {}).items():
        by_platform.setdefault((platform, plan["host_platform_sources"][host]), []).append(host)
    for (platform, source), hosts in sorted(by_platform.items()):
        target = plan["platforms"][platform]
        lines.append(f"platform {platform} ({source}; venvs from {target['interpreter']}, Python {target['python']}, "
                     f"glibc >= {target['glibc']}): {', '.join(hosts)}")
    for name, pipeline in plan.get("distributed_pipelines", {}).items():
        lines.append(f"distributed pipeline {name}: head {pipeline['head']['host']} {pipeline['head']['url']}, "
                     f"{len(pipeline['engines'])} engines on {', '.join(pipeline['hosts'])}")
        lines += [f"  {line}" for line in pipeline["explain"]]
    router = plan["router"]
    urls = ", ".join(entry["url"] for entry in router["per_host"].values())
    lines.append(f"router {urls}"
                 f"{' (first engine host; set group vllm_omni_router to choose)' if router['defaulted'] else ''}: "
                 f"{len(plan['worker_urls'])} worker(s), policy {router['policy']}, "
                 f"API key {'required' if router['api_key_required'] else 'NOT required'}")
    master = plan["mooncake_master"]
    if master["enabled"]:
        lines.append("mooncake_master " + ", ".join(entry["rpc_address"] for entry in master["per_host"].values()))
    return lines


def summary_lines(plan: dict) -> list[str]:
    engine, backend = plan["engine"], plan["backend"]
    lines = [
        f"vLLM-Omni {engine['vllm_omni_version']} (vllm {engine['vllm_version']}), {plan['layout']} layout, "
        f"{engine['stage_config_schema']} schema loaded with {engine['config_flag']}",
        f"model {plan['model']} served as {plan['served_model_name']}; "
        f"backend {backend['name']}{' (SIMULATOR stand-in, not the engine)' if backend['stand_in'] else ''}",
        "settings you set: " + (", ".join(f"{name}={show(s['value'])}" for name, s in plan["settings"].items()
                                          if s["source"] == "inventory") or "none"),
        "defaults used: " + ", ".join(f"{name}={show(s['value'])}" for name, s in plan["settings"].items()
                                      if s["source"] == "default"),
        "computed by the collection: GPU sets, stage devices, ports, engine ids, kv_ip, environment, argv, "
        "stage configs",
    ]
    for host, host_plan in plan["hosts"].items():
        lines += _host_lines(host, host_plan)
    lines += _deployment_lines(plan)
    lines += [f"WARNING: {warning}" for warning in plan["warnings"]]
    return lines
