# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""The planner: inventory settings in, one deployment plan out. Pure and deterministic.

``build_plan(inventory)`` validates every setting (raising ``PlanError`` with every problem
found, each naming the host, the variable and the fix) and returns a JSON-serialisable plan:
per host, the pipelines with their GPU sets, stage layout, ports, KV-transfer settings,
environment, engine argv and stage-config document, plus the deployment's worker URLs.

The plan is the one source of truth for ports, paths and versions: roles, templates and the
render playbook read it and never recompute what it says.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import re
from dataclasses import dataclass
from typing import Any

from . import _engine_data, _firewall, _hardening, _placement, _services, _stage_config
from ._settings import (
    BY_NAME,
    COMPUTED_FACTS,
    DEPLOYMENT,
    HOST,
    REMOVED_SETTINGS,
    SETTINGS,
    SettingError,
    show,
)
from ._stages import (
    ENGINE_ARGS,
    GPU_MEMORY_BUDGET,
    MODEL_STAGE,
    OWNED_ENGINE_ARGS,
    OWNED_SAMPLING_PARAMS,
    ROLE_ALIASES,
    SAMPLING_PARAMS,
    SHARED_GPU_MEMORY,
    layout_roles,
)

PLAN_SCHEMA = 1
SYSTEMD_UNIT_DIR = "/etc/systemd/system"
# The engine user's home: its caches (vLLM, Triton, torch) and working directory.
ENGINE_HOME = "/var/lib/vllm-omni"
# Per-pipeline systemd drop-in (EnvironmentFile + exact ExecStart) under <unit>.d/.
PIPELINE_DROPIN = "10-pipeline.conf"
ENGINE_GROUP = "vllm_omni"
ROUTER_GROUP = "vllm_omni_router"
MASTER_GROUP = "vllm_omni_mooncake_master"
MONITORING_GROUP = "vllm_omni_monitoring"
HOSTNAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
# Each prefill/decode GPU worker runs one Mooncake transfer engine with two listeners
# (handshake + TCP data); doubled for restarts that briefly overlap.
MOONCAKE_PORTS_PER_KV_WORKER = 4
EPHEMERAL_PORTS = (32768, 60999)  # Linux default net.ipv4.ip_local_port_range


@dataclass(frozen=True)
class Problem:
    where: str
    variable: str
    problem: str
    fix: str = ""

    def line(self) -> str:
        text = f"{self.where}: {self.variable} {self.problem}"
        if self.fix:
            text += f" -> {self.fix}"
        return text


class PlanError(Exception):
    """The inventory cannot be planned. ``problems`` lists every reason; nothing was changed."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        count = len(problems)
        head = f"vllm_omni.serve: the inventory has {count} problem{'s' if count != 1 else ''}; nothing was changed."
        super().__init__("\n".join([head] + [f"  - {p.line()}" for p in problems]))


class _Problems:
    def __init__(self) -> None:
        self.items: list[Problem] = []

    def add(self, where: str, variable: str, problem: str, fix: str = "") -> None:
        self.items.append(Problem(where, variable, problem, fix))

    def setting(self, where: str, name: str, error: SettingError) -> None:
        self.add(where, name, error.problem, error.fix)

    def raise_if_any(self) -> None:
        if self.items:
            raise PlanError(_merge_hosts(self.items))


def _merge_hosts(problems: list[Problem]) -> list[Problem]:
    """One line for a problem that several hosts share (e.g. a misspelled -e variable)."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    order: list[tuple[str, str, str] | Problem] = []
    for problem in problems:
        if not problem.where.startswith("host "):
            order.append(problem)
            continue
        key = (problem.variable, problem.problem, problem.fix)
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(problem.where[len("host "):])
    merged = []
    for item in order:
        if isinstance(item, Problem):
            merged.append(item)
            continue
        hosts = groups[item]
        where = f"host {hosts[0]}" if len(hosts) == 1 else (
            f"hosts {', '.join(hosts[:3])}" + (f" and {len(hosts) - 3} more" if len(hosts) > 3 else ""))
        merged.append(Problem(where, *item))
    return merged


def _host_where(host: str) -> str:
    return f"host {host}"


ALL_HOSTS = "all hosts (group_vars)"


# --- inventory-level checks ---------------------------------------------------------------------


def _check_names(host: str, variables: dict, problems: _Problems) -> None:
    """Unknown, misspelled and removed settings."""
    known = list(BY_NAME)
    for name in variables:
        if name in BY_NAME or name in COMPUTED_FACTS:
            continue
        if name in REMOVED_SETTINGS:
            problems.add(_host_where(host), name, f"was removed: {REMOVED_SETTINGS[name]}")
            continue
        if name.startswith("vllm_omni_"):
            guess = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
            fix = f"did you mean {guess[0]}?" if guess else "see docs/variables.md for the settings"
            problems.add(_host_where(host), name, "is not a setting of vllm_omni.serve", fix)
            continue
        guess = difflib.get_close_matches(name, known, n=1, cutoff=0.85)
        if guess:
            problems.add(_host_where(host), name, "looks like a misspelled setting", f"did you mean {guess[0]}?")


def _deployment_settings(engine_hosts: list[str], hostvars: dict, problems: _Problems) -> tuple[dict, dict]:
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for setting in SETTINGS:
        if setting.scope != DEPLOYMENT:
            continue
        seen = {host: hostvars[host][setting.name] for host in engine_hosts if setting.name in hostvars[host]}
        if not seen:
            values[setting.name] = setting.default
            sources[setting.name] = "default"
            continue
        if len(seen) != len(engine_hosts):
            missing = [h for h in engine_hosts if h not in seen]
            problems.add(ALL_HOSTS, setting.name,
                         f"is set on some hosts but not on {', '.join(missing[:3])}"
                         f"{' ...' if len(missing) > 3 else ''}; it is one value for the whole deployment",
                         f"set it once in group_vars/{ENGINE_GROUP}.yml")
            continue
        first = next(iter(seen.values()))
        same = all(type(v) is type(first) and v == first for v in seen.values())
        distinct = {} if same else {show(v): h for h, v in seen.items()}
        if len(distinct) > 1:
            examples = ", ".join(f"{h}: {v}" for v, h in list(distinct.items())[:3])
            problems.add(ALL_HOSTS, setting.name,
                         f"differs between hosts ({examples}); it is one value for the whole deployment",
                         f"set it once in group_vars/{ENGINE_GROUP}.yml and remove the host_vars copies")
            continue
        raw = next(iter(seen.values()))
        try:
            values[setting.name] = setting.validate(raw)
            sources[setting.name] = "inventory"
        except SettingError as error:
            problems.setting(ALL_HOSTS, setting.name, error)
    return values, sources


def _check_version_layout(settings: dict, problems: _Problems):
    version = settings["vllm_omni_version"]
    table = _engine_data.support_table()
    if version not in table:
        problems.add(ALL_HOSTS, "vllm_omni_version",
                     f"is {show(version)}, which this collection has not been checked against",
                     f"use one of: {', '.join(_engine_data.supported_versions())}")
        return None
    engine = table[version]
    layout = settings["vllm_omni_layout"]
    if layout not in engine.layouts:
        with_layout = _engine_data.versions_with_layout(layout)
        problems.add(ALL_HOSTS, "vllm_omni_layout",
                     f"is {layout}, which vLLM-Omni {version} cannot run: {engine.pd_refused_because}",
                     f"set vllm_omni_version to {' or '.join(with_layout)} for {layout}, "
                     f"or vllm_omni_layout: {engine.layouts[0]}")
        return None
    if not settings["vllm_omni_audio_output"] and engine.schema != "stage_args":
        problems.add(ALL_HOSTS, "vllm_omni_audio_output",
                     f"is false, but vLLM-Omni {version}'s stages: schema cannot drop the talker and code2wav stages "
                     "(its Qwen3-Omni pipeline is fixed in Python)",
                     f"set vllm_omni_version to {' or '.join(_engine_data.versions_with_schema('stage_args'))} "
                     "for text-only pipelines, or vllm_omni_audio_output: true")
        return None
    return engine


def _stage_overrides(settings: dict, layout: str, problems: _Problems) -> dict:
    """{role: {"engine_args": {...}, "sampling": {...}}}, validated against the layout."""
    roles = layout_roles(layout, settings["vllm_omni_audio_output"])
    aliases = ROLE_ALIASES.get(layout, {})
    result: dict[str, dict] = {role: {"engine_args": {}, "sampling": {}} for role in roles}
    kinds = (
        ("vllm_omni_stage_engine_args", "engine_args", ENGINE_ARGS, OWNED_ENGINE_ARGS),
        ("vllm_omni_stage_sampling_params", "sampling", SAMPLING_PARAMS, OWNED_SAMPLING_PARAMS),
    )
    tp_requests: dict[str, Any] = {}
    for setting_name, kind, allowed, owned in kinds:
        by_stage = settings[setting_name]
        # Aliases first so role-specific values win.
        ordered = sorted(by_stage.items(), key=lambda item: (item[0] not in aliases, str(item[0])))
        for stage, values in ordered:
            targets = aliases.get(stage, (stage,))
            if stage not in roles and stage not in aliases:
                valid = ", ".join(list(roles) + list(aliases))
                text = "" if settings["vllm_omni_audio_output"] else " text-only (vllm_omni_audio_output: false)"
                problems.add(ALL_HOSTS, f"{setting_name}.{stage}",
                             f"names no stage of the{text} {layout} layout", f"use one of: {valid}")
                continue
            if not isinstance(values, dict):
                problems.add(ALL_HOSTS, f"{setting_name}.{stage}", f"must be a mapping, got {show(values)}",
                             f"write e.g. {setting_name}: {{{stage}: {{...}}}}")
                continue
            for key, value in sorted(values.items(), key=lambda item: str(item[0])):
                label = f"{setting_name}.{stage}.{key}"
                if key == "tensor_parallel_size" and kind == "engine_args":
                    for target in targets:
                        tp_requests[target] = value
                    continue
                if key in owned:
                    problems.add(ALL_HOSTS, label, "is computed by the collection and cannot be overridden",
                                 f"set it through {owned[key]}")
                    continue
                if key not in allowed:
                    guess = difflib.get_close_matches(str(key), list(allowed), n=1, cutoff=0.6)
                    fix = f"did you mean {guess[0]}?" if guess else f"overridable: {', '.join(sorted(allowed))}"
                    problems.add(ALL_HOSTS, label, "is not an overridable setting", fix)
                    continue
                try:
                    checked = allowed[key](value, label)
                except SettingError as error:
                    problems.setting(ALL_HOSTS, label, error)
                    continue
                for target in targets:
                    result[target][kind][key] = checked
    if tp_requests:
        tp = settings["vllm_omni_tensor_parallel_size"]
        sizes = {role: tp_requests.get(role, tp) for role in ("prefill", "decode") if role in roles}
        if layout == "pd" and len(set(map(show, sizes.values()))) > 1:
            problems.add(ALL_HOSTS, "vllm_omni_stage_engine_args",
                         f"sets tensor_parallel_size per stage (prefill {show(sizes['prefill'])}, decode "
                         f"{show(sizes['decode'])}); MooncakeConnector needs prefill and decode equal, and the engine "
                         "refuses the pair otherwise",
                         "remove tensor_parallel_size from the stage overrides and set vllm_omni_tensor_parallel_size")
        else:
            problems.add(ALL_HOSTS, "vllm_omni_stage_engine_args",
                         "sets tensor_parallel_size, which the planner derives",
                         "set vllm_omni_tensor_parallel_size instead")
    return result


def _shared_gpu_split(settings: dict, layout: str, overrides: dict) -> tuple[dict, list[str]]:
    """With vllm_omni_share_gpus, each role's gpu_memory_utilization share unless the user set one.

    Returns the overrides with the split added and the roles the planner chose a share for.
    """
    if not settings["vllm_omni_share_gpus"]:
        return overrides, []
    split = SHARED_GPU_MEMORY[(layout, settings["vllm_omni_audio_output"])]
    chosen = []
    for role, share in split.items():
        engine_args = overrides[role]["engine_args"]
        if "gpu_memory_utilization" not in engine_args:
            engine_args["gpu_memory_utilization"] = share
            chosen.append(role)
    return overrides, chosen


def _base_memory(engine, role: str, stage_id: int) -> float:
    """The engine's own gpu_memory_utilization for a role (its bundled stage definitions)."""
    if engine.schema == "stage_args":
        for stage in engine.data["legacy_stages"]:
            if stage["engine_args"]["model_stage"] == MODEL_STAGE[role]:
                return float(stage["engine_args"].get("gpu_memory_utilization", 0.9))
    for stage in engine.data["bundled_deploy"]["stages"]:
        if stage["stage_id"] == stage_id:
            return float(stage.get("gpu_memory_utilization", 0.9))
    return 0.9


def _check_gpu_memory(settings: dict, layout: str, engine, overrides: dict, problems: _Problems) -> None:
    """Stages placed on one GPU claim their gpu_memory_utilization shares of it at start-up: at most the budget."""
    tp = settings["vllm_omni_tensor_parallel_size"]
    per_device: dict[str, list[tuple[str, float]]] = {}
    for stage in _stage_layout(layout, tp, "host", "pipeline", settings["vllm_omni_audio_output"],
                               settings["vllm_omni_share_gpus"]):
        share = overrides[stage["role"]]["engine_args"].get("gpu_memory_utilization",
                                                             _base_memory(engine, stage["role"], stage["id"]))
        for device in stage["devices"].split(","):
            per_device.setdefault(device, []).append((stage["role"], share))
    for device, claims in sorted(per_device.items()):
        total = round(sum(share for _, share in claims), 4)
        if len(claims) > 1 and total > GPU_MEMORY_BUDGET:
            listed = " + ".join(f"{role} {share:g}" for role, share in claims)
            problems.add(ALL_HOSTS, "vllm_omni_stage_engine_args",
                         f"puts stages on one GPU (pipeline GPU {device}) whose gpu_memory_utilization adds up to "
                         f"{total:g} ({listed}); each stage's engine claims its share of the whole GPU at start-up, so "
                         "the last one to start would find too little free memory",
                         f"lower those stages' gpu_memory_utilization so they add up to at most {GPU_MEMORY_BUDGET:g}")


def _check_extra_env(settings: dict, problems: _Problems) -> None:
    owned = sorted(set(settings["vllm_omni_extra_env"]) & OWNED_ENV)
    if owned:
        problems.add(ALL_HOSTS, "vllm_omni_extra_env",
                     f"sets {', '.join(owned)}, which the planner computes per pipeline",
                     "remove them; see docs/variables.md (computed values) for the setting that controls each")


OWNED_ENV = frozenset({
    "CUDA_DEVICE_ORDER", "CUDA_VISIBLE_DEVICES", "VLLM_HOST_IP", "VLLM_MOONCAKE_BOOTSTRAP_PORT",
    "MC_MIN_RPC_PORT", "MC_MAX_RPC_PORT", "MC_TCP_ENABLE_CONNECTION_POOL", "HF_HOME", "HF_HUB_OFFLINE",
    "VLLM_NO_USAGE_STATS", "DO_NOT_TRACK", "HF_TOKEN",
})


# --- hosts --------------------------------------------------------------------------------------


def _host_value(host: str, variables: dict, name: str, problems: _Problems):
    setting = BY_NAME[name]
    if name not in variables:
        return setting.default, "default"
    try:
        return setting.validate(variables[name]), "inventory"
    except SettingError as error:
        problems.setting(_host_where(host), name, error)
        return None, "invalid"


def _host_ip(host: str, variables: dict, problems: _Problems) -> str | None:
    if "vllm_omni_ip" in variables:
        ip, _ = _host_value(host, variables, "vllm_omni_ip", problems)
        return ip
    candidate = variables.get("ansible_host", host)
    try:
        address = ipaddress.ip_address(str(candidate))
    except ValueError:
        problems.add(_host_where(host), "vllm_omni_ip",
                     f"is not set and ansible_host {show(candidate)} is a name, not an address; peers need an IP",
                     "set vllm_omni_ip to the IPv4 address the other hosts reach this host on")
        return None
    try:
        return BY_NAME["vllm_omni_ip"].validate(str(address))
    except SettingError as error:
        problems.add(_host_where(host), "vllm_omni_ip",
                     f"is not set, and ansible_host {show(candidate)} cannot serve: {error.problem}",
                     "set vllm_omni_ip to this host's IPv4 address on the network the other hosts share")
        return None


def _host_gpus(host: str, variables: dict, facts: dict | None, settings: dict, engine, problems: _Problems):
    """(GPUs to use, where they came from, {skipped GPU: why}) — from vllm_omni_gpus and/or discovery."""
    where = _host_where(host)
    if facts is not None and (not isinstance(facts, dict) or not isinstance(facts.get("gpus"), list)):
        problems.add(where, "vllm_omni_gpu_facts", "is not the output of vllm_omni.serve.nvidia_gpu_facts",
                     "re-run GPU discovery, or remove the variable and set vllm_omni_gpus")
        return None, None, {}
    if "vllm_omni_gpus" not in variables and facts is None:
        problems.add(where, "vllm_omni_gpus", "is not set and no GPU discovery ran for this host",
                     "set vllm_omni_gpus to the physical GPU indices, e.g. [0, 1, 2, 3, 4, 5, 6, 7], or run "
                     "deploy.yml, which discovers them")
        return None, None, {}
    declared = None
    if "vllm_omni_gpus" in variables:
        declared, _ = _host_value(host, variables, "vllm_omni_gpus", problems)
        if declared is None:
            return None, None, {}
    if facts is None:
        return declared, "vllm_omni_gpus", {}
    if engine is not None and settings["vllm_omni_engine_backend"] == "engine" \
            and isinstance(facts.get("cuda_major"), int) and facts["cuda_major"] < engine.wheel_cuda_major:
        problems.add(where, "NVIDIA driver",
                     f"supports CUDA {facts.get('cuda_version')}, but vLLM-Omni {engine.version}'s wheels need CUDA "
                     f"{engine.wheel_cuda_major}",
                     f"upgrade the driver to one whose nvidia-smi shows CUDA Version {engine.wheel_cuda_major}.x or newer")
    by_index = {gpu["index"]: gpu for gpu in facts["gpus"]}
    busy = {index: "; ".join(gpu.get("busy_reasons") or ["busy"]) for index, gpu in by_index.items() if gpu.get("busy")}
    allow_busy = settings["vllm_omni_allow_busy_gpus"]
    if declared is not None:
        missing = [g for g in declared if g not in by_index]
        if missing:
            problems.add(where, "vllm_omni_gpus",
                         f"lists GPU{'s' if len(missing) > 1 else ''} {show(missing)} that nvidia-smi does not show "
                         f"(it lists {show(sorted(by_index))})", "list only GPUs the host has")
            return None, None, {}
        taken = [g for g in declared if g in busy]
        if taken and not allow_busy:
            details = "; ".join(f"GPU {g}: {busy[g]}" for g in taken)
            problems.add(where, "vllm_omni_gpus", f"lists busy GPUs ({details})",
                         "stop what runs there, remove them from vllm_omni_gpus, or set vllm_omni_allow_busy_gpus: true")
            return None, None, {}
        return declared, "vllm_omni_gpus (checked against discovery)", {}
    usable = sorted(g for g in by_index if allow_busy or g not in busy)
    skipped = {} if allow_busy else {g: busy[g] for g in sorted(busy)}
    if not usable:
        problems.add(where, "GPUs", f"discovery found {len(by_index)} GPU(s) and all are busy ({show(skipped)})",
                     "free them, or set vllm_omni_allow_busy_gpus: true")
        return None, None, {}
    return usable, "discovered", skipped


def _gpus_per_pipeline(layout: str, tp: int, audio: bool = True, share: bool = False) -> int:
    # Shared: every stage on the one TP group. Otherwise
    # pd: prefill TP + decode TP (+ one GPU shared by talker and code2wav);
    # aggregated: thinker TP (+ one GPU shared by talker and code2wav: the engine's own layout).
    if share:
        return tp
    return (2 * tp if layout == "pd" else tp) + (1 if audio else 0)


def _gpu_formula(layout: str, tp: int, audio: bool = True, share: bool = False) -> str:
    if share:
        return f"every stage shares one TP {tp} GPU group"
    talker = " + 1 for talker/code2wav" if audio else ""
    if layout == "pd":
        return f"prefill TP {tp} + decode TP {tp}{talker}"
    return f"thinker TP {tp}{talker}"


def _ranges_overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def _engine_ranges(count: int, settings: dict, layout: str) -> list[tuple[str, str, tuple[int, int]]]:
    api = settings["vllm_omni_api_port_base"]
    ranges = [("API ports", "vllm_omni_api_port_base", (api, api + count - 1))]
    if layout == "pd":
        boot = settings["vllm_omni_bootstrap_port_base"]
        low, high = settings["vllm_omni_mooncake_rpc_port_range"]
        ranges.append(("bootstrap ports", "vllm_omni_bootstrap_port_base", (boot, boot + count - 1)))
        ranges.append(("Mooncake RPC ports", "vllm_omni_mooncake_rpc_port_range", (low, high)))
    return ranges


def _service_ranges(settings: dict, router: bool, master: bool,
                    monitoring: bool = False) -> list[tuple[str, str, tuple[int, int]]]:
    ranges = []
    if monitoring:
        port = settings["vllm_omni_prometheus_port"]
        ranges.append(("Prometheus port", "vllm_omni_prometheus_port", (port, port)))
    if router:
        for label, name in (("router port", "vllm_omni_router_port"),
                            ("router metrics port", "vllm_omni_router_metrics_port")):
            ranges.append((label, name, (settings[name], settings[name])))
    if master:
        for label, name in (("mooncake_master RPC port", "vllm_omni_mooncake_master_rpc_port"),
                            ("mooncake_master HTTP port", "vllm_omni_mooncake_master_metrics_port")):
            ranges.append((label, name, (settings[name], settings[name])))
    return ranges


def _show_range(ports: tuple[int, int] | list[int]) -> str:
    return str(ports[0]) if ports[0] == ports[1] else f"{ports[0]}-{ports[1]}"


def _check_ports(host: str, ranges: list, problems: _Problems, count: int = 0) -> bool:
    """Every port range on one host inside 1024-65535 and apart from every other."""
    ok = True
    for label, name, (low, high) in ranges:
        if high > 65535:
            problems.add(_host_where(host), name,
                         f"gives {count} pipelines {label} {low}-{high}, past 65535",
                         f"lower {name} to at most {65535 - count + 1}")
            ok = False
    for i, (label_a, name_a, range_a) in enumerate(ranges):
        for label_b, name_b, range_b in ranges[i + 1:]:
            if _ranges_overlap(range_a, range_b):
                # The pipeline count matters only when a range grows with it.
                on_host = f" ({count} pipelines on this host)" if count and (
                    range_a[0] != range_a[1] or range_b[0] != range_b[1]) else ""
                problems.add(_host_where(host), f"{name_a} / {name_b}",
                             f"collide: {label_a} {_show_range(range_a)} and {label_b} "
                             f"{_show_range(range_b)} overlap{on_host}",
                             f"move {name_b} so the ranges do not overlap")
                ok = False
    return ok


def _check_mooncake_slices(host: str, count: int, settings: dict, problems: _Problems) -> bool:
    low, high = settings["vllm_omni_mooncake_rpc_port_range"]
    size = settings["vllm_omni_mooncake_rpc_ports_per_pipeline"]
    needed = MOONCAKE_PORTS_PER_KV_WORKER * 2 * settings["vllm_omni_tensor_parallel_size"]
    ok = True
    if size < needed:
        problems.add(ALL_HOSTS, "vllm_omni_mooncake_rpc_ports_per_pipeline",
                     f"is {size}; a pipeline at TP {settings['vllm_omni_tensor_parallel_size']} needs {needed} "
                     "(2 listeners per prefill/decode GPU worker, doubled for restarts)",
                     f"set it to at least {needed}")
        ok = False
    if count * size > high - low + 1:
        problems.add(_host_where(host), "vllm_omni_mooncake_rpc_port_range",
                     f"[{low}, {high}] holds {(high - low + 1) // size} slices of {size} ports, but this host runs "
                     f"{count} pipelines",
                     f"widen it to at least {count * size} ports, e.g. [{low}, {low + count * size - 1}]")
        ok = False
    return ok


# --- pipelines ----------------------------------------------------------------------------------


def _stage_layout(layout: str, tp: int, host: str, pipeline: str, audio: bool = True,
                  share: bool = False) -> list[dict]:
    """Stages with logical devices (indices into the pipeline's CUDA_VISIBLE_DEVICES)."""

    def devices(first: int, count: int) -> str:
        return ",".join(str(i) for i in range(first, first + count))

    if layout == "pd":
        decode_first = 0 if share else tp
        talker_gpu = "0" if share else str(2 * tp)  # talker and code2wav share the GPU after both thinker sets
        stages = [
            {"id": 0, "role": "prefill", "devices": devices(0, tp), "tensor_parallel_size": tp, "reads_from": [],
             "kv_role": "kv_producer", "engine_id": f"{host}-{pipeline}-prefill"},
            {"id": 1, "role": "decode", "devices": devices(decode_first, tp), "tensor_parallel_size": tp,
             "reads_from": [0], "kv_role": "kv_consumer", "engine_id": f"{host}-{pipeline}-decode"},
        ]
    else:
        talker_gpu = "0" if share else str(tp)
        stages = [{"id": 0, "role": "thinker", "devices": devices(0, tp), "tensor_parallel_size": tp, "reads_from": []}]
    if audio:
        last = len(stages) - 1
        stages += [
            {"id": last + 1, "role": "talker", "devices": talker_gpu, "tensor_parallel_size": 1, "reads_from": [last]},
            {"id": last + 2, "role": "code2wav", "devices": talker_gpu, "tensor_parallel_size": 1,
             "reads_from": [last + 1]},
        ]
    return stages


def _environment(settings: dict, layout: str, ip: str, gpus: list[int], ports: dict) -> dict[str, str]:
    env = {
        # Stage `devices` are indices into this list; PCI order makes them match nvidia-smi.
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in gpus),
        # Multi-homed hosts otherwise advertise the default route's address (vLLM #42023).
        "VLLM_HOST_IP": ip,
        "HF_HOME": settings["vllm_omni_hf_home"],
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    if settings["vllm_omni_model_staging"]:
        env["HF_HUB_OFFLINE"] = "1"
    if layout == "pd":
        env["VLLM_MOONCAKE_BOOTSTRAP_PORT"] = str(ports["bootstrap"])
        env["MC_MIN_RPC_PORT"] = str(ports["mooncake_rpc"][0])
        env["MC_MAX_RPC_PORT"] = str(ports["mooncake_rpc"][1])
        if settings["vllm_omni_mooncake_protocol"] == "tcp":
            # Without the pool, TCP transfers under load exhaust ephemeral ports (TIME_WAIT).
            env["MC_TCP_ENABLE_CONNECTION_POOL"] = "1"
    env.update(settings["vllm_omni_extra_env"])
    return dict(sorted(env.items()))


def _argv(settings: dict, engine, backend: dict, ip: str, ports: dict, paths: dict, served: str) -> list[str]:
    if settings["vllm_omni_engine_backend"] == "simulator":
        return [f"{backend['venv']}/bin/xpyd-sim", "serve", "--mode", "dual", "--host", ip,
                "--port", str(ports["api"]), "--model", served]
    timeout = str(settings["vllm_omni_init_timeout"])
    return [
        f"{backend['venv']}/bin/vllm", "serve", settings["vllm_omni_model"], "--omni",
        "--host", ip, "--port", str(ports["api"]),
        "--served-model-name", served,
        engine.config_flag, paths["stage_config"],
        "--init-timeout", timeout, "--stage-init-timeout", timeout,
    ]


# Upstream vLLM flags our argv uses; the omni flags are checked against the version's data.
UPSTREAM_FLAGS = frozenset({"--host", "--port", "--served-model-name"})


def _backend(settings: dict, engine) -> dict:
    root = settings["vllm_omni_install_root"]
    if settings["vllm_omni_engine_backend"] == "simulator":
        version = _engine_data.companions()["xpyd_sim"]
        return {"name": "simulator", "packages": [f"xpyd-sim=={version}"], "venv": f"{root}/venvs/xpyd-sim-{version}",
                "stand_in": True, "kv_connector": None}
    packages = [f"vllm=={engine.vllm}", f"vllm-omni=={engine.version}"]
    kv_connector = None
    if settings["vllm_omni_layout"] == "pd":
        packages.append(mooncake_package(engine.wheel_cuda_major))
        if engine.kv_connector:
            # The engine role copies roles/engine/files/<file> into the venv's site-packages.
            kv_connector = {**engine.kv_connector, "file": f"{engine.kv_connector['module']}.py"}
    return {"name": "engine", "packages": packages, "venv": f"{root}/venvs/vllm-omni-{engine.version}",
            "stand_in": False, "kv_connector": kv_connector}


def mooncake_package(cuda_major: int | None) -> str:
    """The one Mooncake transfer-engine variant for wheels built against ``cuda_major`` (None: no GPU)."""
    variants = _engine_data.companions()["mooncake"]
    variant = variants["none" if cuda_major is None else f"cuda{cuda_major}"]
    return f"{variant['package']}=={variant['version']}"


# --- entry point --------------------------------------------------------------------------------


def build_plan(inventory: dict, discovery_pending: bool = False) -> dict:
    """Validate the inventory and compute the deployment plan.

    ``inventory``: ``{"engine_hosts": [...], "router_hosts": [...], "master_hosts": [...],
    "hostvars": {host: {var: value}}}``
    where each host's vars hold at least its ``vllm_omni_*`` settings and ``ansible_host``.
    With ``discovery_pending`` (the first pass of deploy.yml, before GPU discovery ran), hosts without
    ``vllm_omni_gpus`` are not an error: they get no pipelines in this pass.
    Raises ``PlanError`` listing every problem found.
    """
    problems = _Problems()
    engine_hosts = list(dict.fromkeys(inventory.get("engine_hosts") or []))
    router_hosts = list(dict.fromkeys(inventory.get("router_hosts") or []))
    hostvars = inventory.get("hostvars") or {}
    if not engine_hosts:
        problems.add("inventory", f"group {ENGINE_GROUP}", "has no hosts",
                     f"put your GPU hosts in group {ENGINE_GROUP} (see inventories/example/hosts.yml) "
                     "and pass the inventory with -i")
        problems.raise_if_any()
    router_defaulted = not router_hosts
    if router_defaulted:
        router_hosts = [sorted(engine_hosts)[0]]
    master_hosts = list(dict.fromkeys(inventory.get("master_hosts") or []))
    monitoring_hosts = list(dict.fromkeys(inventory.get("monitoring_hosts") or []))
    all_hosts = sorted(set(engine_hosts) | set(router_hosts) | set(master_hosts) | set(monitoring_hosts))
    for host in all_hosts:
        if not isinstance(host, str) or not HOSTNAME_PATTERN.fullmatch(host):
            problems.add(_host_where(show(host)), "inventory_hostname",
                         "is not a plain host name (it names directories, units and engine ids)",
                         "use letters, digits, '.', '_' and '-' only, starting with a letter or digit")
    problems.raise_if_any()
    for host in all_hosts:
        _check_names(host, hostvars.get(host, {}), problems)
    engine_hosts = sorted(engine_hosts)
    settings, sources = _deployment_settings(engine_hosts, {h: hostvars.get(h, {}) for h in engine_hosts}, problems)
    problems.raise_if_any()

    engine = _check_version_layout(settings, problems)
    _check_extra_env(settings, problems)
    layout = settings["vllm_omni_layout"]
    audio, share = settings["vllm_omni_audio_output"], settings["vllm_omni_share_gpus"]
    overrides = _stage_overrides(settings, layout, problems)
    overrides, planner_shares = _shared_gpu_split(settings, layout, overrides)
    if engine is not None:
        _check_gpu_memory(settings, layout, engine, overrides, problems)
    if settings["vllm_omni_mooncake_rdma_devices"] and settings["vllm_omni_mooncake_protocol"] != "rdma":
        problems.add(ALL_HOSTS, "vllm_omni_mooncake_rdma_devices",
                     "is set but vllm_omni_mooncake_protocol is tcp, so the devices would be ignored",
                     "set vllm_omni_mooncake_protocol: rdma, or remove the device list")
    tp = settings["vllm_omni_tensor_parallel_size"]
    per_pipeline = _gpus_per_pipeline(layout, tp, audio, share)
    formula = _gpu_formula(layout, tp, audio, share)
    master_defaulted = settings["vllm_omni_mooncake_master_enabled"] and not master_hosts
    if master_defaulted:
        master_hosts = [engine_hosts[0]]
        all_hosts = sorted(set(all_hosts) | set(master_hosts))
    elif master_hosts and not settings["vllm_omni_mooncake_master_enabled"]:
        problems.add(f"group {MASTER_GROUP}", "vllm_omni_mooncake_master_enabled",
                     f"is false, but group {MASTER_GROUP} lists {', '.join(master_hosts)}",
                     "set vllm_omni_mooncake_master_enabled: true, or empty the group")
    monitoring_defaulted = settings["vllm_omni_monitoring_enabled"] and not monitoring_hosts
    if monitoring_defaulted:
        monitoring_hosts = [sorted(router_hosts)[0]]
    elif monitoring_hosts and not settings["vllm_omni_monitoring_enabled"]:
        problems.add(f"group {MONITORING_GROUP}", "vllm_omni_monitoring_enabled",
                     f"is false, but group {MONITORING_GROUP} lists {', '.join(monitoring_hosts)}",
                     "set vllm_omni_monitoring_enabled: true, or empty the group")
    service_only = sorted(set(all_hosts) - set(engine_hosts))

    # Per host: address, GPUs, pipeline count.
    ips: dict[str, str | None] = {}
    host_plans: dict[str, dict] = {}
    for host in all_hosts:
        ips[host] = _host_ip(host, hostvars.get(host, {}), problems)
    for host in engine_hosts:
        variables = hostvars.get(host, {})
        facts = variables.get("vllm_omni_gpu_facts") or None
        if discovery_pending and facts is None and "vllm_omni_gpus" not in variables:
            continue  # planned in the second pass, with what discovery finds
        gpus, gpu_source, skipped = _host_gpus(host, variables, facts, settings, engine, problems)
        wanted, wanted_source = _host_value(host, variables, "vllm_omni_pipelines_per_host", problems)
        if gpus is None or wanted is None:
            continue
        fits = len(gpus) // per_pipeline
        if fits == 0:
            plural = "s" if len(gpus) != 1 else ""
            if gpu_source == "discovered":
                busy = "; ".join(f"GPU {g} busy: {why}" for g, why in skipped.items())
                problems.add(_host_where(host), "GPUs",
                             f"discovery found {len(gpus)} free GPU{plural} {show(gpus)}{f' ({busy})' if busy else ''}, "
                             f"but one {layout} pipeline needs {per_pipeline} ({formula})",
                             "free the busy GPUs, use a host with more GPUs, or lower vllm_omni_tensor_parallel_size")
            else:
                problems.add(_host_where(host), "vllm_omni_gpus",
                             f"lists {len(gpus)} GPU{plural} {show(gpus)}, but one {layout} pipeline "
                             f"needs {per_pipeline} ({formula})",
                             f"give the host at least {per_pipeline} GPUs, or lower vllm_omni_tensor_parallel_size")
            continue
        count = fits if wanted == "auto" else wanted
        if count > fits:
            problems.add(_host_where(host), "vllm_omni_pipelines_per_host",
                         f"asks for {count} pipelines, which need {count * per_pipeline} GPUs "
                         f"({per_pipeline} each: {formula}); vllm_omni_gpus lists {len(gpus)}",
                         f"set it to at most {fits}, or auto")
            continue
        ranges = (_engine_ranges(count, settings, layout)
                  + _service_ranges(settings, host in router_hosts, host in master_hosts, host in monitoring_hosts))
        if not _check_ports(host, ranges, problems, count):
            continue
        if layout == "pd" and not _check_mooncake_slices(host, count, settings, problems):
            continue
        host_plans[host] = {"ip_source": "inventory" if "vllm_omni_ip" in variables else "ansible_host",
                            "gpus": gpus, "count": count, "wanted": wanted, "count_source": wanted_source,
                            "gpu_source": gpu_source, "skipped": skipped, "facts": facts}

    for host in service_only:
        _check_ports(host, _service_ranges(settings, host in router_hosts, host in master_hosts,
                                           host in monitoring_hosts), problems)

    # Addresses: unique, and reachable by peers.
    by_ip: dict[str, list[str]] = {}
    for host, ip in ips.items():
        if ip is not None:
            by_ip.setdefault(ip, []).append(host)
    for ip, hosts in sorted(by_ip.items()):
        if len(hosts) > 1:
            problems.add(f"hosts {', '.join(hosts)}", "vllm_omni_ip",
                         f"share the address {ip}; every host needs its own (duplicate host entries?)",
                         "give each host its own vllm_omni_ip / ansible_host, or list the machine once")
    if len(all_hosts) > 1:
        for host, ip in sorted(ips.items()):
            if ip is not None and ipaddress.ip_address(ip).is_loopback:
                problems.add(_host_where(host), "vllm_omni_ip",
                             f"is the loopback address {ip}, which the other hosts "
                             f"({', '.join(h for h in all_hosts if h != host)[:60]}) cannot reach",
                             "set vllm_omni_ip to the host's address on the network the hosts share")
    problems.raise_if_any()
    assert engine is not None  # _check_version_layout added a problem otherwise

    plan = _assemble(settings, sources, engine, overrides, engine_hosts, host_plans, ips)
    if share:
        plan["warnings"].append(
            "vllm_omni_share_gpus: every stage of a pipeline shares its GPU"
            + (f"; the planner set gpu_memory_utilization of {', '.join(planner_shares)} "
               f"({', '.join(str(overrides[r]['engine_args']['gpu_memory_utilization']) for r in planner_shares)})"
               if planner_shares else "")
            + ". Each share must hold that stage's weights"
            + (": the 30B Qwen3-Omni thinker alone is about 60 GiB in bf16, per copy (prefill and decode each load one)"
               if "30B" in settings["vllm_omni_model"] else ""))
    plan["router"] = _services.router_plan(settings, router_hosts, router_defaulted, ips, plan["worker_urls"])
    plan["mooncake_master"] = _services.master_plan(settings, master_hosts, master_defaulted, ips)
    plan["monitoring"] = _services.monitoring_plan(settings, monitoring_hosts, monitoring_defaulted, ips)
    for service in _service_sections(plan):
        for host, ranges in service.get("listen_ports", {}).items():
            if host in plan["hosts"]:
                plan["hosts"][host]["listen_ports"].extend(ranges)
    plan["reserved_ports"] = {host: _port_list(ranges) for host, ranges in sorted(_all_listen_ports(plan).items())}
    plan["hardening"] = _hardening.unit_hardening(plan["backend"]["name"], plan["paths"]["engine_home"],
                                                  plan["paths"]["hf_home"])
    plan["firewall"] = _firewall.firewall_plan(settings, _all_listen_ports(plan), ips)
    ephemeral = sorted({f"{r['first']}" if r["first"] == r["last"] else f"{r['first']}-{r['last']}"
                        for ranges in _all_listen_ports(plan).values() for r in ranges
                        if r["first"] <= EPHEMERAL_PORTS[1] and r["last"] >= EPHEMERAL_PORTS[0]})
    if ephemeral:
        plan["warnings"].append(f"ports {', '.join(ephemeral)} lie in Linux's default ephemeral range "
                                f"{EPHEMERAL_PORTS[0]}-{EPHEMERAL_PORTS[1]}: the mooncake role reserves every planned "
                                "port (net.ipv4.ip_local_reserved_ports) so outgoing connections cannot take them")
    if layout == "pd" and not engine.pd_request_sampling_reaches_decode:
        thinker = next(s for s in engine.data["legacy_stages"] if s["engine_args"]["model_stage"] == "thinker")
        decode = {**thinker.get("default_sampling_params", {}), **overrides["decode"]["sampling"]}
        plan["warnings"].append(
            f"vLLM-Omni {engine.version} applies a request's sampling fields (max_tokens, temperature, top_p, ...) to "
            "the prefill stage only; the decode stage, which writes the answer, uses its stage defaults "
            f"(now max_tokens {decode.get('max_tokens', '?')}, temperature {decode.get('temperature', '?')}): set "
            "the caps clients should get in vllm_omni_stage_sampling_params.decode (docs/engine-facts.md)")
    if not settings["vllm_omni_api_key_required"]:
        plan["warnings"].append("vllm_omni_api_key_required is false: every pipeline and the router answer "
                                "requests without an API key")
    return plan


def _assemble(settings, sources, engine, overrides, engine_hosts, host_plans, ips) -> dict:
    layout = settings["vllm_omni_layout"]
    tp = settings["vllm_omni_tensor_parallel_size"]
    audio, share = settings["vllm_omni_audio_output"], settings["vllm_omni_share_gpus"]
    per_pipeline = _gpus_per_pipeline(layout, tp, audio, share)
    served = settings["vllm_omni_served_model_name"] or settings["vllm_omni_model"]
    backend = _backend(settings, engine)
    prefix = settings["vllm_omni_pipeline_prefix"]
    warnings: list[str] = []
    hosts: dict[str, dict] = {}
    documents: dict[tuple, dict] = {}
    worker_urls: list[str] = []
    for host in engine_hosts:
        ip = ips[host]
        if host not in host_plans:  # GPU discovery pending (first pass)
            hosts[host] = {"ip": ip, "gpus": [], "gpu_source": "pending discovery", "gpus_per_pipeline": per_pipeline,
                           "unused_gpus": [], "pipelines": [], "listen_ports": [], "settings": {}}
            continue
        gpus, count = host_plans[host]["gpus"], host_plans[host]["count"]
        pipelines = []
        if layout == "pd":
            low = settings["vllm_omni_mooncake_rpc_port_range"][0]
            slice_size = settings["vllm_omni_mooncake_rpc_ports_per_pipeline"]
        placements = _placement.place(gpus, count, tp, layout, host_plans[host]["facts"], audio, share)
        for index in range(count):
            name = f"{prefix}{index}"
            pipeline_gpus = placements[index]["gpus"]
            ports: dict[str, Any] = {"api": settings["vllm_omni_api_port_base"] + index}
            if layout == "pd":
                ports["bootstrap"] = settings["vllm_omni_bootstrap_port_base"] + index
                first = low + index * slice_size
                ports["mooncake_rpc"] = [first, first + slice_size - 1]
            config_dir = f"{settings['vllm_omni_config_root']}/{name}"
            paths = {
                "config_dir": config_dir,
                "stage_config": f"{config_dir}/stage_config.yaml",
                "env_file": f"{config_dir}/engine.env",
                "unit_dropin": f"{SYSTEMD_UNIT_DIR}/vllm-omni@{name}.service.d/{PIPELINE_DROPIN}",
                "venv": backend["venv"],
            }
            stages = _stage_layout(layout, tp, host, name, audio, share)
            for stage in stages:
                stage["physical_gpus"] = [pipeline_gpus[int(d)] for d in stage["devices"].split(",")]
            pipeline = {
                "name": name,
                "host": host,
                "index": index,
                "unit": f"vllm-omni@{name}.service",
                "gpus": pipeline_gpus,
                "stages": stages,
                "ports": ports,
                "kv_ip": ip,
                "url": f"http://{ip}:{ports['api']}",
                "paths": paths,
                "environment": _environment(settings, layout, ip, pipeline_gpus, ports),
                "argv": _argv(settings, engine, backend, ip, ports, paths, served),
                "placement": {"score": placements[index]["score"], "explain": placements[index]["explain"]},
            }
            if layout == "pd":
                pipeline["mooncake"] = {"protocol": settings["vllm_omni_mooncake_protocol"],
                                        "rdma_devices": list(settings["vllm_omni_mooncake_rdma_devices"])}
            # Aggregated documents hold no address, port or id: pipelines with the same stage devices share
            # one document, built and checked once (PD documents carry kv_ip, ports and engine ids).
            key = None if layout == "pd" else json.dumps([[s["devices"], s["tensor_parallel_size"]] for s in stages])
            document = documents.get(key) if key else None
            if document is None:
                document = _stage_config.build_document(engine, {**pipeline, "layout": layout}, overrides)
                own = (_stage_config.check_launch(document, engine, engine.config_flag)
                       + _stage_config.check_document(document, engine, pipeline["environment"]))
                if own:  # pragma: no cover - a planner bug, never a user error
                    raise RuntimeError(f"rendered stage config for {host}/{name} fails its own check: {own}")
                if key:
                    documents[key] = document
            pipeline["stage_config"] = document
            pipelines.append(pipeline)
            worker_urls.append(pipeline["url"])
        used = {g for pipeline in pipelines for g in pipeline["gpus"]}
        unused = [g for g in gpus if g not in used]
        facts = host_plans[host]["facts"]
        hosts[host] = {
            "ip": ip,
            "gpus": gpus,
            "gpu_source": host_plans[host]["gpu_source"],
            "gpus_per_pipeline": per_pipeline,
            "unused_gpus": unused,
            "pipelines": pipelines,
            "listen_ports": _listen_ports(pipelines, layout),
            "settings": {
                "vllm_omni_gpus": {"value": gpus, "source": "inventory"},
                "vllm_omni_pipelines_per_host": {"value": host_plans[host]["wanted"],
                                                 "source": host_plans[host]["count_source"]},
                "vllm_omni_ip": {"value": ip, "source": host_plans[host]["ip_source"]},
            },
        }
        if facts:
            hosts[host]["cuda_version"] = facts.get("cuda_version")
            hosts[host]["skipped_gpus"] = {str(g): why for g, why in host_plans[host]["skipped"].items()}
            for gpu, why in host_plans[host]["skipped"].items():
                warnings.append(f"host {host}: GPU {gpu} skipped, busy: {why}")
        if unused:
            warnings.append(f"host {host}: GPUs {show(unused)} are left unused ({len(gpus)} usable, "
                            f"{per_pipeline} per {layout} pipeline)")
    root = settings["vllm_omni_install_root"]
    return {
        "schema": PLAN_SCHEMA,
        "layout": layout,
        "paths": {
            "install_root": root,
            "unit_dir": SYSTEMD_UNIT_DIR,
            "engine_home": ENGINE_HOME,
            # every pipeline is an instance of this template unit, with its own drop-in
            "engine_unit_template": f"{SYSTEMD_UNIT_DIR}/vllm-omni@.service",
            "config_root": settings["vllm_omni_config_root"],
            "hf_home": settings["vllm_omni_hf_home"],
            "tools_venv": f"{root}/tools",  # uv, installed from the wheelhouse
            "host_wheelhouse": "/var/cache/vllm-omni/wheelhouse",
            "mooncake_sysctl": "/etc/sysctl.d/60-vllm-omni-mooncake.conf",
        },
        "installer": {"uv": _engine_data.companions()["uv"]},
        "engine": {
            "vllm_omni_version": engine.version,
            "vllm_version": engine.vllm,
            "stage_config_schema": engine.schema,
            "config_flag": engine.config_flag,
            "wheel_cuda_major": engine.wheel_cuda_major,
        },
        "backend": backend,
        "model": settings["vllm_omni_model"],
        "served_model_name": served,
        "tensor_parallel_size": tp,
        "settings": {name: {"value": settings[name], "source": sources[name]} for name in sorted(settings)},
        "hosts": hosts,
        "worker_urls": worker_urls,
        "warnings": warnings,
    }


def _service_sections(plan: dict) -> list[dict]:
    return [plan["router"], plan["mooncake_master"], plan["monitoring"]]


def _port_list(ranges: list[dict]) -> str:
    """Port ranges as the kernel prints net.ipv4.ip_local_reserved_ports: sorted, merged, "a-b,c"."""
    merged: list[list[int]] = []
    for first, last in sorted((r["first"], r["last"]) for r in ranges):
        if merged and first <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], last)
        else:
            merged.append([first, last])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in merged)


def _all_listen_ports(plan: dict) -> dict[str, list[dict]]:
    """host -> every port range planned there (pipelines, router, master)."""
    found = {host: list(host_plan["listen_ports"]) for host, host_plan in plan["hosts"].items()}
    for service in _service_sections(plan):
        for host, ranges in service.get("listen_ports", {}).items():
            if host not in plan["hosts"]:
                found.setdefault(host, []).extend(ranges)
    return found


def _listen_ports(pipelines: list[dict], layout: str) -> list[dict]:
    """Every port range a host's pipelines listen on (firewall, reserved ports, preflight)."""
    ranges = []
    for pipeline in pipelines:
        ports = pipeline["ports"]
        ranges.append({"service": pipeline["name"], "purpose": "api", "first": ports["api"], "last": ports["api"]})
        if layout == "pd":
            ranges.append({"service": pipeline["name"], "purpose": "mooncake_bootstrap",
                           "first": ports["bootstrap"], "last": ports["bootstrap"]})
            ranges.append({"service": pipeline["name"], "purpose": "mooncake_rpc",
                           "first": ports["mooncake_rpc"][0], "last": ports["mooncake_rpc"][1]})
    return ranges


def stage_roles(layout: str, audio: bool = True) -> tuple[str, ...]:
    return layout_roles(layout, audio)


__all__ = ["HOST", "MODEL_STAGE", "PlanError", "Problem", "build_plan", "stage_roles"]
