# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""A plan as a few readable lines: what you set, what the collection computed, per host."""

from __future__ import annotations

import re

from ..host._engine_data import model_weights
from ._checkers import show
from ._stage_config import stage_engine_args
from ._stages import MODEL_STAGE

GIB, MIB = 2 ** 30, 2 ** 20


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


def _deployment_lines(plan: dict, fleet: bool = False) -> list[str]:
    """Host platforms, distributed pipelines, the router and the Mooncake master; for a ``fleet``, the first
    GROUP_ABOVE distributed pipelines and hosts named as a range."""
    lines = []
    by_platform: dict[tuple[str, str], list[str]] = {}
    for host, platform in plan.get("host_platforms", {}).items():
        by_platform.setdefault((platform, plan["host_platform_sources"][host]), []).append(host)
    for (platform, source), hosts in sorted(by_platform.items()):
        target = plan["platforms"][platform]
        lines.append(f"platform {platform} ({source}; venvs from {target['interpreter']}, Python {target['python']}, "
                     f"glibc >= {target['glibc']}): " + (_names(hosts) if fleet else ", ".join(hosts)))
    distributed = list(plan.get("distributed_pipelines", {}).items())
    shown = distributed[:GROUP_ABOVE] if fleet else distributed
    for name, pipeline in shown:
        lines.append(f"distributed pipeline {name}: head {pipeline['head']['host']} {pipeline['head']['url']}, "
                     f"{len(pipeline['engines'])} engines on {', '.join(pipeline['hosts'])}")
        lines += [f"  {line}" for line in pipeline["explain"]]
    if len(shown) < len(distributed):
        lines.append(f"... {len(distributed) - len(shown)} more distributed pipelines (plan.json has every one)")
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


def _shape(pipeline: dict) -> str:
    """A single-process pipeline's sizing: each GPU group with its stages, their TP and the share of each GPU they
    claim (gpu_memory_utilization; what is left of a stage's share after its weights is its KV cache)."""
    memory = {stage_id: args.get("gpu_memory_utilization")
              for stage_id, args in stage_engine_args(pipeline["stage_config"]).items()}
    groups: dict[tuple[int, ...], list[dict]] = {}
    for stage in pipeline["stages"]:
        groups.setdefault(tuple(stage["physical_gpus"]), []).append(stage)
    cells = []
    for gpus, stages in groups.items():
        tp = max(stage["tensor_parallel_size"] for stage in stages)
        shares = [f"{stage['role']} {memory[stage['id']]:g}" for stage in stages if memory.get(stage["id"]) is not None]
        cells.append(f"{' + '.join(stage['role'] for stage in stages)} on {len(gpus)} GPU{'s' * (len(gpus) > 1)}"
                     + (f" (TP {tp})" if tp > 1 else "") + (f", memory share {', '.join(shares)}" if shares else ""))
    return "; ".join(cells)


def _sizing_lines(plan: dict) -> list[str]:
    """What each pipeline is made of: its P:D, its stages on GPUs with TP and memory shares, counted by shape."""
    settings = plan["settings"]
    ratio = (f"P:D {settings['vllm_omni_prefill_replicas']['value']}:{settings['vllm_omni_decode_replicas']['value']}"
             if plan["layout"] == "pd" else "no P:D split (aggregated)")
    shapes: dict[str, int] = {}
    for host_plan in plan["hosts"].values():
        for pipeline in host_plan["pipelines"]:
            if pipeline.get("process", "single") == "single":
                shape = _shape(pipeline)
                shapes[shape] = shapes.get(shape, 0) + 1
    lines = [f"sizing: {count} pipeline{'s' * (count > 1)} of {shape}; {ratio}" for shape, count in shapes.items()]
    if plan["distributed_pipelines"]:
        lines.append(f"sizing: {len(plan['distributed_pipelines'])} distributed pipeline(s), {ratio}, TP "
                     f"{plan['tensor_parallel_size']} per engine (below: each engine's host and GPUs)")
    return lines


def _stage_memory(stage: dict, weights: dict[str, int], share: float | None, memory_mib: int | None) -> str:
    """One stage's weights per GPU, against its share of the GPU where the GPU's memory is known."""
    per_gpu = weights[MODEL_STAGE[stage["role"]]] / stage["tensor_parallel_size"]
    text = f"{stage['role']} {per_gpu / GIB:.1f} GiB"
    if share is None:
        return text + " (its share: the engine's default)"
    if memory_mib is None:
        return text + f" in a {share:g} share of the GPU"
    room = share * memory_mib * MIB - per_gpu
    return text + (f" in {share:g} x {memory_mib / 1024:.1f} GiB: {room / GIB:.1f} GiB left for KV cache" if room > 0 else
                   f" DOES NOT FIT its {share:g} share of {memory_mib / 1024:.1f} GiB: raise vllm_omni_tensor_parallel_size, "
                   "or use GPUs with more memory")


def _weight_lines(plan: dict) -> list[str]:
    """Each pipeline process's stages: weights per GPU (data/models.yml) against their shares of the host's GPUs;
    processes that say the same counted once."""
    weights = model_weights(plan["model"])
    if weights is None:
        return [f"sizing: weights per GPU not known for {plan['model']} (data/models.yml lists the models sized)"]
    said: dict[str, int] = {}
    for host_plan in plan["hosts"].values():
        memory = host_plan.get("gpu_memory_mib")
        for pipeline in host_plan["pipelines"]:
            shares = {sid: args.get("gpu_memory_utilization")
                      for sid, args in stage_engine_args(pipeline["stage_config"]).items()}
            own = [s for s in pipeline["stages"] if pipeline.get("process", "single") == "single"
                   or s["id"] == pipeline["stage_id"]]
            line = "; ".join(_stage_memory(stage, weights, shares.get(stage["id"]), memory) for stage in own)
            said[line] = said.get(line, 0) + 1
    unknown = any(h.get("gpu_memory_mib") is None for h in plan["hosts"].values())
    return [f"sizing: weights per GPU ({count} process{'es' * (count > 1)}): {line}" for line, count in said.items()] + \
        (["sizing: GPU memory is read by discovery: deploy says what is left for the KV cache"] if unknown and said else [])


def _unchecked_lines(plan: dict) -> list[str]:
    """What the plan took on trust because no host was asked (render, or a deploy before discovery): said, so that a
    render that passed is not read as the GPUs having been checked."""
    trusted = [host for host, host_plan in plan["hosts"].items() if host_plan["gpu_source"] == "vllm_omni_gpus"]
    if not trusted:
        return []
    more = len(trusted) - GROUP_ABOVE
    named = ", ".join(trusted[:GROUP_ABOVE]) + (f" and {more} more" if more > 0 else "")
    return [f"not checked without the hosts: vllm_omni_gpus of {named} (that each GPU exists and is free; deploy "
            "checks them against what it discovers: a missing GPU is refused, a busy one unless "
            "vllm_omni_allow_busy_gpus)"]


def _selinux_lines(plan: dict) -> list[str]:
    """What deploy will make so in SELinux's policy, hosts with the same needs on one line (nothing without SELinux)."""
    by_needs: dict[str, list[str]] = {}
    for host, needs in plan.get("selinux", {}).get("per_host", {}).items():
        said = "; ".join(
            f"{component}: " + ", ".join([f"port {p['proto']}/{p['port']} {p['type']}" for p in need["ports"]]
                                         + [f"{b['name']} {'on' if b['value'] else 'off'}" for b in need["booleans"]])
            for component, need in needs.items())
        by_needs.setdefault(said, []).append(host)
    return [f"selinux (where enabled, set by deploy): {_names(hosts)}: {said}" for said, hosts in by_needs.items()]


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
    blocks = {host: _host_lines(host, host_plan) for host, host_plan in plan["hosts"].items()}
    warnings = plan["warnings"]
    if len(blocks) <= GROUP_ABOVE:
        lines += [line for block in blocks.values() for line in block]
    else:  # a fleet: one block a host shape, not one a host (1,000 hosts made 7,000 lines)
        ips = {host: host_plan["ip"] for host, host_plan in plan["hosts"].items()}
        shapes = _by_shape(blocks, ips)
        lines += [line for _hosts, block in shapes[:GROUP_ABOVE] for line in block]
        if len(shapes) > GROUP_ABOVE:
            rest = sum(len(hosts) for hosts, _block in shapes[GROUP_ABOVE:])
            lines.append(f"... {rest} more hosts in {len(shapes) - GROUP_ABOVE} more shapes (plan.json has every host)")
        warnings = _grouped_warnings(warnings, set(blocks))
    lines += _sizing_lines(plan) + _weight_lines(plan)
    lines += _unchecked_lines(plan)
    lines += _deployment_lines(plan, fleet=len(blocks) > GROUP_ABOVE)
    lines += _selinux_lines(plan)
    lines += [f"WARNING: {warning}" for warning in warnings]
    return lines


# Up to this many engine hosts the summary shows each; above, hosts of one shape share a block.
GROUP_ABOVE = 8
HOST, IP = "<host>", "<ip>"


def _names(hosts: list[str]) -> str:
    """Hosts by name, or the first three and the last of a longer list."""
    return ", ".join(hosts) if len(hosts) <= 4 else f"{', '.join(hosts[:3])} ... {hosts[-1]}"


def _by_shape(blocks: dict[str, list[str]], ips: dict[str, str]) -> list[tuple[list[str], list[str]]]:
    """(hosts, lines) for each set of hosts whose lines are the same but for their own name and address, in
    first-seen order: a host alone keeps its own lines; several share lines that say <host> and <ip>."""
    shapes: dict[tuple[str, ...], list[str]] = {}
    for host, block in blocks.items():
        own = re.compile(rf"(?<![\w.-]){re.escape(host)}(?![\w.-])|(?<![\d.]){re.escape(ips[host])}(?![\d])")
        shape = tuple(own.sub(lambda found, host=host: HOST if found.group() == host else IP, line) for line in block)
        shapes.setdefault(shape, []).append(host)
    grouped = []
    for shape, hosts in shapes.items():
        if len(hosts) == 1:
            grouped.append((hosts, blocks[hosts[0]]))
        else:
            head = shape[0].replace(f"host {HOST} {IP}", f"{len(hosts)} hosts ({_names(hosts)}), each", 1)
            grouped.append((hosts, [head, *shape[1:]]))
    return grouped


def _grouped_warnings(warnings: list[str], hosts: set[str]) -> list[str]:
    """Warnings that differ only in the host they start with ("host NAME: ...") said once, with the hosts counted."""
    grouped: dict[str, list[str]] = {}
    for warning in warnings:
        head, _colon, rest = warning.partition(": ")
        host = head.removeprefix("host ")
        if head.startswith("host ") and host in hosts:
            grouped.setdefault(rest, []).append(host)
        else:
            grouped.setdefault(warning, [])
    return [f"{'host' if len(found) == 1 else f'{len(found)} hosts'} {_names(found)}: {text}" if found else text
            for text, found in grouped.items()]
