# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""Parse nvidia-smi output into GPU facts. Pure functions: the module runs nvidia-smi, these read it.

Shared by the ``nvidia_gpu_facts`` module (on the host) and the planner (controller), which both
need the same view of a host's GPUs: which exist, which are busy, how they are linked.
"""

from __future__ import annotations

import re

# nvidia-smi --query-gpu fields, in the order the module asks for them.
QUERY_FIELDS = ("index", "uuid", "name", "pci.bus_id", "memory.total", "memory.used", "driver_version",
                "compute_cap", "persistence_mode", "mig.mode.current")
APP_FIELDS = ("pid", "gpu_uuid", "process_name", "used_memory")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
CUDA_IN_BANNER = re.compile(r"CUDA Version:\s*([0-9]+)\.([0-9]+)")
DRIVER_IN_BANNER = re.compile(r"Driver Version:\s*([0-9.]+)")
# Link kinds from `nvidia-smi topo -m`, best first; NV# is a bonded set of # NVLinks.
PCIE_RANK = {"PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5}


class GpuParseError(ValueError):
    """nvidia-smi printed something these parsers do not understand."""


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.split(",")]


def _number(text: str, what: str) -> int:
    match = re.match(r"\s*([0-9]+)", text)
    if not match:
        raise GpuParseError(f"{what}: expected a number, got {text!r}")
    return int(match.group(1))


def parse_query_gpu(text: str) -> list[dict]:
    """Rows of ``--query-gpu=<QUERY_FIELDS> --format=csv,noheader,nounits``."""
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = _cells(line)
        if len(cells) != len(QUERY_FIELDS):
            raise GpuParseError(f"query-gpu row has {len(cells)} fields, expected {len(QUERY_FIELDS)}: {line!r}")
        row = dict(zip(QUERY_FIELDS, cells))  # noqa: B905 - length checked above; hosts may run Python < 3.10
        gpus.append({
            "index": _number(row["index"], "index"),
            "uuid": row["uuid"],
            "name": row["name"],
            "pci_bus_id": row["pci.bus_id"],
            "memory_total_mib": _number(row["memory.total"], "memory.total"),
            "memory_used_mib": _number(row["memory.used"], "memory.used") if row["memory.used"][:1].isdigit() else 0,
            "driver_version": row["driver_version"],
            "compute_cap": row["compute_cap"],
            "persistence_mode": row["persistence_mode"],
            "mig_mode": row["mig.mode.current"],
        })
    return sorted(gpus, key=lambda gpu: gpu["index"])


def parse_compute_apps(text: str) -> list[dict]:
    """Rows of ``--query-compute-apps=<APP_FIELDS> --format=csv,noheader,nounits``."""
    apps = []
    for line in text.splitlines():
        if not line.strip() or line.strip().startswith("No running"):
            continue
        cells = _cells(line)
        if len(cells) != len(APP_FIELDS):
            raise GpuParseError(f"compute-apps row has {len(cells)} fields, expected {len(APP_FIELDS)}: {line!r}")
        row = dict(zip(APP_FIELDS, cells))  # noqa: B905 - length checked above; hosts may run Python < 3.10
        apps.append({"pid": _number(row["pid"], "pid"), "gpu_uuid": row["gpu_uuid"], "process_name": row["process_name"],
                     "used_memory_mib": _number(row["used_memory"], "used_memory") if row["used_memory"][:1].isdigit() else 0})
    return apps


def parse_banner(text: str) -> dict:
    """Driver and CUDA version from plain ``nvidia-smi``'s banner."""
    cuda = CUDA_IN_BANNER.search(text)
    driver = DRIVER_IN_BANNER.search(text)
    if not cuda or not driver:
        raise GpuParseError("nvidia-smi's banner shows no Driver Version / CUDA Version")
    return {"driver_version": driver.group(1), "cuda_version": f"{cuda.group(1)}.{cuda.group(2)}",
            "cuda_major": int(cuda.group(1))}


def parse_topology(text: str) -> dict:
    """``nvidia-smi topo -m``: links between GPUs (and NICs), and each GPU's CPU and NUMA affinity."""
    lines = [ANSI.sub("", line).rstrip() for line in text.splitlines()]
    header_at = next((i for i, line in enumerate(lines) if re.match(r"^\s*GPU0\b", line)), None)
    if header_at is None:
        raise GpuParseError("topo -m output has no GPU0 header")
    header = lines[header_at].split()
    devices = [token for token in header if re.fullmatch(r"(GPU|NIC)\d+", token)]
    links: dict[str, dict[str, str]] = {}
    affinity: dict[str, dict] = {}
    for line in lines[header_at + 1:]:
        if not line.strip() or line.strip().startswith(("Legend", "NIC Legend")):
            break
        tokens = line.split()
        name = tokens[0]
        if name not in devices:
            continue
        if len(tokens) < 1 + len(devices):
            raise GpuParseError(f"topo -m row {name} has {len(tokens) - 1} link cells for {len(devices)} devices")
        cells = tokens[1:1 + len(devices)]
        pairs = zip(devices, cells)  # noqa: B905 - cell count checked above; hosts may run Python < 3.10
        links[name] = {other: cell for other, cell in pairs if other != name}
        rest = tokens[1 + len(devices):]
        if name.startswith("GPU"):
            affinity[name] = {
                "cpu_affinity": rest[0] if rest else None,
                "numa_node": int(rest[1]) if len(rest) > 1 and rest[1].isdigit() else None,
            }
    gpus = [d for d in devices if d.startswith("GPU")]
    if set(links) < set(gpus):
        raise GpuParseError(f"topo -m lacks rows for {sorted(set(gpus) - set(links))}")
    return {"devices": devices, "links": links, "affinity": affinity}


def link_rank(kind: str) -> tuple[int, int]:
    """Lower is better: NVLink (more links better) before PCIe kinds, then unknown."""
    match = re.fullmatch(r"NV(\d+)", kind)
    if match:
        return (0, -int(match.group(1)))
    return (1, PCIE_RANK.get(kind, 9))


def nvlink_islands(topology: dict) -> list[list[int]]:
    """Connected groups of GPUs over NVLink (a GPU without NVLink is its own island)."""
    gpus = sorted(int(d[3:]) for d in topology["devices"] if d.startswith("GPU"))
    parent = {g: g for g in gpus}

    def find(g):
        while parent[g] != g:
            parent[g] = parent[parent[g]]
            g = parent[g]
        return g

    for name, row in topology["links"].items():
        if not name.startswith("GPU"):
            continue
        for other, kind in row.items():
            if other.startswith("GPU") and kind.startswith("NV"):
                parent[find(int(name[3:]))] = find(int(other[3:]))
    islands: dict[int, list[int]] = {}
    for g in gpus:
        islands.setdefault(find(g), []).append(g)
    return sorted(islands.values())


def build_facts(query_text: str, apps_text: str, banner_text: str, topo_text: str | None,
                busy_memory_mib: int, owners: dict[int, str] | None = None) -> dict:
    """All facts of one host, from the four nvidia-smi outputs.

    ``owners`` maps a pid to the vllm_omni.serve unit it runs in: those processes are this
    deployment's own pipelines, so they (and their memory) do not make a GPU busy; a re-deploy
    restarts them.
    """
    banner = parse_banner(banner_text)
    gpus = parse_query_gpu(query_text)
    apps = parse_compute_apps(apps_text)
    topology = parse_topology(topo_text) if topo_text else None
    by_uuid = {gpu["uuid"]: gpu for gpu in gpus}
    for gpu in gpus:
        gpu["processes"] = []
    for app in apps:
        app["unit"] = (owners or {}).get(app["pid"])
        if app["gpu_uuid"] in by_uuid:
            by_uuid[app["gpu_uuid"]]["processes"].append(app)
    for gpu in gpus:
        reasons = []
        foreign = [p for p in gpu["processes"] if not p["unit"]]
        if foreign:
            reasons.append(f"{len(foreign)} compute process(es): "
                           + ", ".join(f"{p['process_name']} (pid {p['pid']})" for p in foreign))
        own_memory = sum(p["used_memory_mib"] for p in gpu["processes"] if p["unit"])
        gpu["own_units"] = sorted({p["unit"] for p in gpu["processes"] if p["unit"]})
        if gpu["memory_used_mib"] - own_memory > busy_memory_mib:
            reasons.append(f"{gpu['memory_used_mib'] - own_memory} MiB of memory in use by others "
                           f"(threshold {busy_memory_mib} MiB)")
        gpu["busy"] = bool(reasons)
        gpu["busy_reasons"] = reasons
        if topology:
            info = topology["affinity"].get(f"GPU{gpu['index']}", {})
            gpu["cpu_affinity"] = info.get("cpu_affinity")
            gpu["numa_node"] = info.get("numa_node")
    facts = {
        "driver_version": banner["driver_version"],
        "cuda_version": banner["cuda_version"],
        "cuda_major": banner["cuda_major"],
        "count": len(gpus),
        "gpus": gpus,
        "busy_memory_mib": busy_memory_mib,
    }
    if topology:
        facts["links"] = {name[3:]: {other[3:]: kind for other, kind in row.items() if other.startswith("GPU")}
                          for name, row in topology["links"].items() if name.startswith("GPU")}
        facts["nics"] = [d for d in topology["devices"] if d.startswith("NIC")]
        facts["nvlink_islands"] = nvlink_islands(topology)
    return facts
