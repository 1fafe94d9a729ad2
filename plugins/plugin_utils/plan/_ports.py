# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""The port ranges each host listens on: their checks, and how the plan lists them.

A host's ranges come from its pipeline count (API, bootstrap and Mooncake RPC ports grow with it)
and from the services it runs (router, Mooncake master, Prometheus). They are checked together,
per host, before anything is planned; the plan then lists them once, and the firewall, the
reserved-ports sysctl and preflight all read that list.

One formula: ``pipeline_ports`` and ``process_ports`` assign each engine process its ports, and the
checks read the ranges and slices from what they assign to the host's first and last process.
"""

from __future__ import annotations

from typing import Any

from ._problems import ALL_HOSTS, Problems, host_where
from ._setting_groups import PortSettings

# Each prefill/decode GPU worker runs one Mooncake transfer engine with two listeners
# (handshake + TCP data); doubled for restarts that briefly overlap.
MOONCAKE_PORTS_PER_KV_WORKER = 4
EPHEMERAL_PORTS = (32768, 60999)  # Linux default net.ipv4.ip_local_port_range

# (what the ports are, the setting that moves them, (first, last))
Range = tuple[str, str, tuple[int, int]]


# --- allocation ---------------------------------------------------------------------------------


def pipeline_ports(settings: PortSettings, index: int) -> dict[str, Any]:
    """Process ``index``'s ports on its host (a single-process pipeline's index is the pipeline's): one from
    the API base and, for PD, the KV transfer's: Mooncake's bootstrap port and slice of its RPC range, or
    NIXL's two side-channel ports (prefill's, decode's) and slice of the UCX range."""
    ports: dict[str, Any] = {"api": settings.api_port_base + index}
    if settings.layout != "pd":
        return ports
    if settings.kv_connector == "nixl":
        first_side = settings.nixl_side_channel_port_base + 2 * index
        ports["nixl_side_channel"] = {"prefill": first_side, "decode": first_side + 1}
        ports["ucx_tcp"] = _slice(settings.nixl_ucx_port_range, settings.nixl_ucx_ports_per_pipeline, index)
        return ports
    ports["bootstrap"] = settings.bootstrap_port_base + index
    ports["mooncake_rpc"] = _slice(settings.mooncake_rpc_port_range, settings.mooncake_rpc_ports_per_pipeline, index)
    return ports


def _slice(port_range: tuple[int, int], size: int, index: int) -> list[int]:
    first = port_range[0] + index * size
    return [first, first + size - 1]


def process_ports(settings: PortSettings, index: int, role: str, head: bool) -> dict[str, Any]:
    """A distributed process's ports: the pipeline's KV ports for its one engine (a bootstrap port for
    prefill engines only, its role's side channel), its slice of the stage ZMQ range, and on the head
    the master port."""
    ports = pipeline_ports(settings, index)
    if role != "prefill":
        ports.pop("bootstrap", None)
    if "nixl_side_channel" in ports:
        ports["nixl_side_channel"] = {role: ports["nixl_side_channel"][role]}
    ports["zmq"] = _slice(settings.stage_zmq_port_range, settings.stage_zmq_ports_per_process, index)
    if head:
        ports["master"] = settings.stage_master_port_base + index
    return ports


# --- checks -------------------------------------------------------------------------------------


def engine_ranges(count: int, settings: PortSettings, distributed: bool = False) -> list[Range]:
    """The port ranges ``count`` engine processes of a host may take (``distributed``: also the stage
    master ports and the stage ZMQ range of head and headless processes): from the ports the first and
    the last process are assigned, and the whole Mooncake RPC and stage ZMQ ranges the slices come from."""
    first, last = pipeline_ports(settings, 0), pipeline_ports(settings, count - 1)
    name = PortSettings.setting
    ranges = [("API ports", name("api_port_base"), (first["api"], last["api"]))]
    if settings.layout == "pd" and "nixl_side_channel" in first:
        ranges.append(("NIXL side-channel ports", name("nixl_side_channel_port_base"),
                       (first["nixl_side_channel"]["prefill"], last["nixl_side_channel"]["decode"])))
        ranges.append(("UCX TCP ports", name("nixl_ucx_port_range"), tuple(settings.nixl_ucx_port_range)))
    elif settings.layout == "pd":
        ranges.append(("bootstrap ports", name("bootstrap_port_base"), (first["bootstrap"], last["bootstrap"])))
        ranges.append(("Mooncake RPC ports", name("mooncake_rpc_port_range"), tuple(settings.mooncake_rpc_port_range)))
    if distributed:
        first_head = process_ports(settings, 0, "decode", head=True)
        last_head = process_ports(settings, count - 1, "decode", head=True)
        ranges.append(("stage master ports", name("stage_master_port_base"), (first_head["master"], last_head["master"])))
        ranges.append(("stage ZMQ ports", name("stage_zmq_port_range"), tuple(settings.stage_zmq_port_range)))
    return ranges


def service_ranges(settings: PortSettings, router: bool, master: bool, monitoring: bool = False,
                   engine: bool = False) -> list[Range]:
    wanted = []  # (label, field)
    if engine:
        wanted += [("self-heal agent's metrics port", "self_heal_port"), ("GPU exporter's metrics port", "gpu_metrics_port")]
    if monitoring:
        wanted.append(("Prometheus port", "prometheus_port"))
    if router:
        wanted += [("router port", "router_port"), ("router metrics port", "router_metrics_port")]
        if settings.frontdoor_enabled:
            wanted.append(("router backend port (loopback)", "router_backend_port"))
    if master:
        wanted += [("mooncake_master RPC port", "mooncake_master_rpc_port"),
                   ("mooncake_master HTTP port", "mooncake_master_metrics_port")]
    return [(label, PortSettings.setting(field), (getattr(settings, field),) * 2) for label, field in wanted]


def _ranges_overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def _show_range(ports: tuple[int, int] | list[int]) -> str:
    return str(ports[0]) if ports[0] == ports[1] else f"{ports[0]}-{ports[1]}"


def check_ports(host: str, ranges: list[Range], problems: Problems, count: int = 0) -> bool:
    """Every port range on one host inside 1024-65535 and apart from every other."""
    ok = True
    for label, name, (low, high) in ranges:
        if high > 65535:
            problems.add(host_where(host), name,
                         f"gives {count} pipelines {label} {low}-{high}, past 65535",
                         f"lower {name} to at most {65535 - count + 1}")
            ok = False
    for i, (label_a, name_a, range_a) in enumerate(ranges):
        for label_b, name_b, range_b in ranges[i + 1:]:
            if _ranges_overlap(range_a, range_b):
                # The pipeline count matters only when a range grows with it.
                on_host = f" ({count} pipelines on this host)" if count and (
                    range_a[0] != range_a[1] or range_b[0] != range_b[1]) else ""
                problems.add(host_where(host), f"{name_a} / {name_b}",
                             f"collide: {label_a} {_show_range(range_a)} and {label_b} "
                             f"{_show_range(range_b)} overlap{on_host}",
                             f"move {name_b} so the ranges do not overlap")
                ok = False
    return ok


# The KV transfer's data-port slices, per connector: (plan key, range setting, slice-size setting, what
# needs the ports).
KV_SLICES = {
    "mooncake": ("mooncake_rpc", "vllm_omni_mooncake_rpc_port_range", "vllm_omni_mooncake_rpc_ports_per_pipeline",
                 "2 listeners per prefill/decode GPU worker, doubled for restarts"),
    "nixl": ("ucx_tcp", "vllm_omni_nixl_ucx_port_range", "vllm_omni_nixl_ucx_ports_per_pipeline",
             "a UCX agent per prefill/decode GPU worker with a listener per network interface, doubled for restarts"),
}


def check_kv_slices(host: str, count: int, settings: PortSettings, problems: Problems) -> bool:
    """Each PD pipeline gets its own slice of the KV transfer's data-port range, big enough for its KV workers."""
    key, range_name, size_name, why = KV_SLICES[settings.kv_connector]
    low, high = getattr(settings, range_name.removeprefix(PortSettings.PREFIX))
    size = getattr(settings, size_name.removeprefix(PortSettings.PREFIX))
    needed = MOONCAKE_PORTS_PER_KV_WORKER * 2 * settings.tensor_parallel_size
    ok = True
    if size < needed:
        problems.add(ALL_HOSTS, size_name,
                     f"is {size}; a pipeline at TP {settings.tensor_parallel_size} needs {needed} ({why})",
                     f"set it to at least {needed}")
        ok = False
    if count and pipeline_ports(settings, count - 1)[key][1] > high:  # the last pipeline's slice
        problems.add(host_where(host), range_name,
                     f"[{low}, {high}] holds {(high - low + 1) // size} slices of {size} ports, but this host runs "
                     f"{count} pipelines",
                     f"widen it to at least {count * size} ports, e.g. [{low}, {low + count * size - 1}]")
        ok = False
    return ok


def check_zmq_slices(host: str, count: int, settings: PortSettings, problems: Problems) -> bool:
    """Each distributed process gets its own slice of the stage ZMQ range."""
    low, high = settings.stage_zmq_port_range
    size = settings.stage_zmq_ports_per_process
    if count and process_ports(settings, count - 1, "decode", head=False)["zmq"][1] > high:  # the last slice
        problems.add(host_where(host), "vllm_omni_stage_zmq_port_range",
                     f"[{low}, {high}] holds {(high - low + 1) // size} slices of {size} ports, but this host may run "
                     f"{count} engine processes of distributed pipelines",
                     f"widen it to at least {count * size} ports, e.g. [{low}, {low + count * size - 1}]")
        return False
    return True


# --- the plan's port lists ----------------------------------------------------------------------

# The setting that moves each kind of listening port: an engine process's by purpose, a service's by
# (service, purpose).
ENGINE_PORT_SETTINGS = {
    "api": "vllm_omni_api_port_base", "mooncake_bootstrap": "vllm_omni_bootstrap_port_base",
    "mooncake_rpc": "vllm_omni_mooncake_rpc_port_range", "stage_master": "vllm_omni_stage_master_port_base",
    "stage_zmq": "vllm_omni_stage_zmq_port_range", "nixl_side_channel": "vllm_omni_nixl_side_channel_port_base",
    "ucx_tcp": "vllm_omni_nixl_ucx_port_range",
}
SERVICE_PORT_SETTINGS = {
    ("router", "api"): "vllm_omni_router_port", ("router", "metrics"): "vllm_omni_router_metrics_port",
    ("router", "backend"): "vllm_omni_router_backend_port", ("mooncake_master", "rpc"): "vllm_omni_mooncake_master_rpc_port",
    ("mooncake_master", "http"): "vllm_omni_mooncake_master_metrics_port",
    ("prometheus", "web"): "vllm_omni_prometheus_port", ("artifacts", "rsync"): "vllm_omni_artifact_port",
}


def port_setting(entry: dict) -> str:
    return SERVICE_PORT_SETTINGS.get((entry["service"], entry["purpose"])) or ENGINE_PORT_SETTINGS.get(
        entry["purpose"], entry["purpose"])


def _label(entry: dict) -> str:
    ports = _show_range((entry["first"], entry["last"]))
    return f"{entry['service']} {entry['purpose']} {'ports' if entry['first'] != entry['last'] else 'port'} {ports}"


def check_listen_ports(listen_ports_by_host: dict[str, list[dict]], problems: Problems) -> bool:
    """Every port the plan listens on, per host, apart from every other: the one check over exactly the list the
    firewall, the reserved ports and preflight read (a port added to the plan is in it by construction)."""
    ok = True
    for host, ranges in listen_ports_by_host.items():
        ordered = sorted(ranges, key=lambda r: (r["first"], r["last"]))
        widest = None
        for entry in ordered:
            if widest is not None and entry["first"] <= widest["last"]:
                first, second = sorted((port_setting(widest), port_setting(entry)))
                names = first if first == second else f"{first} / {second}"
                mover = port_setting(entry) if port_setting(entry) != "vllm_omni_api_port_base" else port_setting(widest)
                problems.add(host_where(host), names,
                             f"collide: {_label(widest)} and {_label(entry)} overlap",
                             f"move {mover} so the ports do not overlap")
                ok = False
                break
            if widest is None or entry["last"] > widest["last"]:
                widest = entry
    return ok


def listen_ports(pipelines: list[dict], layout: str, stand_in: bool = False) -> list[dict]:
    """Every port range a host's engine processes listen on (firewall, reserved ports, preflight).

    A distributed process's ranges carry ``pipeline``: the firewall opens them to that pipeline's hosts
    only. API ports are listened on by single-process pipelines and heads (a headless engine has none;
    its simulator stand-in does, for the head's stand-in router).
    """
    ranges = []
    for pipeline in pipelines:
        ports, name = pipeline["ports"], pipeline["name"]
        process = pipeline.get("process", "single")
        own = {} if process == "single" else {"pipeline": pipeline["pipeline_key"]}
        if process != "headless" or stand_in:
            ranges.append({"service": name, "purpose": "api", "first": ports["api"], "last": ports["api"],
                           **(own if process == "headless" else {})})
        if "bootstrap" in ports:
            ranges.append({"service": name, "purpose": "mooncake_bootstrap",
                           "first": ports["bootstrap"], "last": ports["bootstrap"], **own})
        if "mooncake_rpc" in ports:
            ranges.append({"service": name, "purpose": "mooncake_rpc",
                           "first": ports["mooncake_rpc"][0], "last": ports["mooncake_rpc"][1], **own})
        if "nixl_side_channel" in ports:
            side = sorted(ports["nixl_side_channel"].values())
            ranges.append({"service": name, "purpose": "nixl_side_channel", "first": side[0], "last": side[-1], **own})
        if "ucx_tcp" in ports:
            ranges.append({"service": name, "purpose": "ucx_tcp",
                           "first": ports["ucx_tcp"][0], "last": ports["ucx_tcp"][1], **own})
        if "master" in ports:
            ranges.append({"service": name, "purpose": "stage_master", "first": ports["master"],
                           "last": ports["master"], **own})
        if "zmq" in ports:
            ranges.append({"service": name, "purpose": "stage_zmq", "first": ports["zmq"][0], "last": ports["zmq"][1],
                           **own})
    return ranges


def port_list(ranges: list[dict]) -> str:
    """Port ranges as the kernel prints net.ipv4.ip_local_reserved_ports: sorted, merged, "a-b,c"."""
    merged: list[list[int]] = []
    for first, last in sorted((r["first"], r["last"]) for r in ranges):
        if merged and first <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], last)
        else:
            merged.append([first, last])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in merged)


def ephemeral_warning(listen_ports_by_host: dict[str, list[dict]]) -> str | None:
    """The plan's warning when planned ports lie where the kernel picks outgoing ports; None when none do."""
    ephemeral = sorted({f"{r['first']}" if r["first"] == r["last"] else f"{r['first']}-{r['last']}"
                        for ranges in listen_ports_by_host.values() for r in ranges
                        if r["first"] <= EPHEMERAL_PORTS[1] and r["last"] >= EPHEMERAL_PORTS[0]})
    if not ephemeral:
        return None
    return (f"ports {', '.join(ephemeral)} lie in Linux's default ephemeral range "
            f"{EPHEMERAL_PORTS[0]}-{EPHEMERAL_PORTS[1]}: the mooncake role reserves every planned "
            "port (net.ipv4.ip_local_reserved_ports) so outgoing connections cannot take them")
