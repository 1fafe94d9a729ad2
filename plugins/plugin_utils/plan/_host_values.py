# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""One engine host's own values: a setting as that host has it, its address (``vllm_omni_ip``, or
``ansible_host`` when that is an address), and its GPUs (declared, discovered, or declared and checked
against discovery, less the GPUs discovery found busy)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from ._checkers import SettingError, show
from ._deployment import Deployment
from ._problems import Problems, host_where
from ._settings import BY_NAME


def host_value(host: str, variables: dict, name: str, problems: Problems):
    """(value, where it came from) of a per-host setting; (None, "invalid") after adding its problem."""
    setting = BY_NAME[name]
    if name not in variables:
        return setting.default, "default"
    try:
        return setting.validate(variables[name]), "inventory"
    except SettingError as error:
        problems.setting(host_where(host), name, error)
        return None, "invalid"


def host_ip(host: str, variables: dict, problems: Problems) -> str | None:
    if "vllm_omni_ip" in variables:
        ip, _unused = host_value(host, variables, "vllm_omni_ip", problems)
        return ip
    candidate = variables.get("ansible_host", host)
    try:
        address = ipaddress.ip_address(str(candidate))
    except ValueError:
        problems.add(host_where(host), "vllm_omni_ip",
                     f"is not set and ansible_host {show(candidate)} is a name, not an address; peers need an IP",
                     "set vllm_omni_ip to the IPv4 address the other hosts reach this host on")
        return None
    try:
        return BY_NAME["vllm_omni_ip"].validate(str(address))
    except SettingError as error:
        problems.add(host_where(host), "vllm_omni_ip",
                     f"is not set, and ansible_host {show(candidate)} cannot serve: {error.problem}",
                     "set vllm_omni_ip to this host's IPv4 address on the network the other hosts share")
        return None


@dataclass(frozen=True)
class HostGpus:
    """The GPUs an engine host offers its pipelines."""

    gpus: list[int]  # the GPUs pipelines may use
    source: str  # where they came from: vllm_omni_gpus, discovery, or both
    skipped: dict[int, str]  # GPUs discovery found busy and left out -> why


def _int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def gpu_facts_shape_ok(facts) -> bool:
    """The shape nvidia_gpu_facts returns, as far as the planner reads it (no KeyError/TypeError later)."""
    if not isinstance(facts, dict) or not isinstance(facts.get("gpus"), list):
        return False
    for gpu in facts["gpus"]:
        if not isinstance(gpu, dict) or not _int(gpu.get("index")) or gpu["index"] < 0:
            return False
        reasons = gpu.get("busy_reasons") or []
        if not isinstance(gpu.get("busy", False), bool) or not isinstance(reasons, list) \
                or not all(isinstance(reason, str) for reason in reasons):
            return False
        if gpu.get("numa_node") is not None and not _int(gpu["numa_node"]):
            return False
    links, islands = facts.get("links") or {}, facts.get("nvlink_islands") or []
    if not isinstance(links, dict) or not all(isinstance(row, dict) and all(isinstance(k, str) for k in row.values())
                                              for row in links.values()):
        return False
    if not isinstance(islands, list) or not all(isinstance(i, list) and all(_int(g) for g in i) for i in islands):
        return False
    indices = [*links, *(b for row in links.values() for b in row)]  # GPU indices, as ints or digit strings
    if not all(_int(i) or (isinstance(i, str) and i.isdigit()) for i in indices):
        return False
    return facts.get("cuda_major") is None or _int(facts["cuda_major"])


def host_gpus(host: str, variables: dict, facts: dict | None, deployment: Deployment,
              problems: Problems) -> HostGpus | None:
    """The GPUs to use, from vllm_omni_gpus and/or discovery; None after adding the problem."""
    settings, engine = deployment.settings, deployment.engine
    where = host_where(host)
    if facts is not None and not gpu_facts_shape_ok(facts):
        problems.add(where, "vllm_omni_gpu_facts", "is not the output of vllm_omni.serve.nvidia_gpu_facts (it is "
                     "computed by discovery; an inventory must not set it)",
                     "remove the variable from the inventory; deploy.yml discovers GPUs itself, or set vllm_omni_gpus")
        return None
    if "vllm_omni_gpus" not in variables and facts is None:
        problems.add(where, "vllm_omni_gpus", "is not set and no GPU discovery ran for this host",
                     "set vllm_omni_gpus to the physical GPU indices, e.g. [0, 1, 2, 3, 4, 5, 6, 7], or run "
                     "deploy.yml, which discovers them")
        return None
    declared = None
    if "vllm_omni_gpus" in variables:
        declared, _unused = host_value(host, variables, "vllm_omni_gpus", problems)
        if declared is None:
            return None
    if facts is None:
        return HostGpus(declared, "vllm_omni_gpus", {})
    if engine is not None and settings["vllm_omni_engine_backend"] == "engine" \
            and isinstance(facts.get("cuda_major"), int) and facts["cuda_major"] < engine.wheel_cuda_major:
        problems.add(where, "NVIDIA driver",
                     f"supports CUDA {facts.get('cuda_version') or facts['cuda_major']}, but vLLM-Omni {engine.version}'s "
                     f"wheels need CUDA {engine.wheel_cuda_major}",
                     f"upgrade the driver to one whose nvidia-smi shows CUDA Version {engine.wheel_cuda_major}.x or newer")
    return _against_discovery(where, declared, facts, settings["vllm_omni_allow_busy_gpus"], problems)


def _against_discovery(where: str, declared: list[int] | None, facts: dict, allow_busy: bool,
                       problems: Problems) -> HostGpus | None:
    """The declared GPUs checked against what discovery found, or the free ones it found."""
    by_index = {gpu["index"]: gpu for gpu in facts["gpus"]}
    busy = {index: "; ".join(gpu.get("busy_reasons") or ["busy"]) for index, gpu in by_index.items() if gpu.get("busy")}
    if declared is not None:
        missing = [g for g in declared if g not in by_index]
        if missing:
            problems.add(where, "vllm_omni_gpus",
                         f"lists GPU{'s' if len(missing) > 1 else ''} {show(missing)} that nvidia-smi does not show "
                         f"(it lists {show(sorted(by_index))})", "list only GPUs the host has")
            return None
        taken = [g for g in declared if g in busy]
        if taken and not allow_busy:
            details = "; ".join(f"GPU {g}: {busy[g]}" for g in taken)
            problems.add(where, "vllm_omni_gpus", f"lists busy GPUs ({details})",
                         "stop what runs there, remove them from vllm_omni_gpus, or set vllm_omni_allow_busy_gpus: true")
            return None
        return HostGpus(declared, "vllm_omni_gpus (checked against discovery)", {})
    usable = sorted(g for g in by_index if allow_busy or g not in busy)
    skipped = {} if allow_busy else {g: busy[g] for g in sorted(busy)}
    if not by_index:
        problems.add(where, "GPUs", "discovery found no GPU on this host (nvidia-smi lists none)",
                     "check the driver (nvidia-smi -L), or take the host out of group vllm_omni")
        return None
    if not usable:
        problems.add(where, "GPUs", f"discovery found {len(by_index)} GPU(s) and all are busy ({show(skipped)})",
                     "free them, or set vllm_omni_allow_busy_gpus: true")
        return None
    return HostGpus(usable, "discovered", skipped)
