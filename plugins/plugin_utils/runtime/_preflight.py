# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""Judge a host against the plan before anything is changed on it. Pure: facts in, report out.

Every check yields ``ok``, ``warn`` or ``fail`` with what was seen and, when not ok, the fix.
"""

from __future__ import annotations

from ..host._platforms import version_tuple

GIB = 1024 ** 3
# Free space a venv needs (the engine venv is about 8-9 GB; the simulator's well under 1 GB).
VENV_GIB = {"engine": 20, "simulator": 1}
# Qwen3-Omni-30B-A3B in bf16 is about 70 GB on disk.
MODEL_GIB = 80
ANY_ADDRESS = {"0.0.0.0", "::", "*", ""}  # noqa: S104 - matching sockets that listen everywhere


def _check(name: str, status: str, detail: str, fix: str = "") -> dict:
    return {"check": name, "status": status, "detail": detail, "fix": fix}


def _services_on(plan: dict, host: str) -> list[dict]:
    """Every port range the plan puts on ``host``, with what it is for (the plan's own list)."""
    return list(plan["listen_ports"].get(host, []))


def _address_of(plan: dict, host: str) -> str | None:
    if host in plan["hosts"]:
        return plan["hosts"][host]["ip"]
    for service in (plan["router"], plan["mooncake_master"], plan["monitoring"]):
        if host in service.get("per_host", {}):
            return service["per_host"][host]["ip"]
    return None


# Ranges a transfer engine picks free ports from, and the setting that moves each.
SLICE_SETTINGS = {"mooncake_rpc": "vllm_omni_mooncake_rpc_port_range", "ucx_tcp": "vllm_omni_nixl_ucx_port_range"}


def _ports(plan: dict, host: str, listening: list[dict]) -> list[dict]:
    ip = _address_of(plan, host)
    foreign = [s for s in listening if not s.get("unit")]
    checks = []
    for planned in _services_on(plan, host):
        label = f"{planned.get('service', '?')} {planned['purpose']}"
        first, last = planned["first"], planned["last"]
        if planned["purpose"] in SLICE_SETTINGS:
            # The transfer engine (Mooncake, UCX) picks free ports inside its range: a few taken ones are fine.
            taken = sorted({s["port"] for s in foreign if first <= s["port"] <= last})
            size = last - first + 1
            if taken:
                status = "fail" if len(taken) * 2 > size else "warn"
                checks.append(_check(f"ports {label}", status,
                                     f"{len(taken)} of {size} ports in {first}-{last} are taken by other processes",
                                     f"free them or move {SLICE_SETTINGS[planned['purpose']]}"))
            continue
        clashes = [s for s in foreign if s["port"] == first and (s["address"] in ANY_ADDRESS or s["address"] == ip)]
        if clashes:
            who = ", ".join(f"{s['process'] or '?'} (pid {s['pid']}) on {s['address'] or '*'}" for s in clashes)
            checks.append(_check(f"port {first} ({label})", "fail", f"already in use by {who}",
                                 "stop that process, or move the port in the inventory (docs/variables.md)"))
    if not checks:
        count = len(_services_on(plan, host))
        checks.append(_check("ports", "ok", f"all {count} planned port ranges are free on {ip}"))
    return checks


def _disk(plan: dict, disk: dict, backend: str) -> list[dict]:
    checks = []
    wants = [(plan["paths"]["install_root"], VENV_GIB[backend], "venvs")]
    if backend == "engine":
        wants.append((plan["paths"]["hf_home"], MODEL_GIB, "model cache (HF_HOME)"))
    for path, gib, what in wants:
        seen = disk.get(path)
        if seen is None:
            checks.append(_check(f"disk {what}", "warn", f"{path} was not measured"))
            continue
        free = seen["free_bytes"] / GIB
        if free < gib:
            checks.append(_check(f"disk {what}", "fail", f"{free:.1f} GiB free under {seen['checked']}, need {gib} GiB",
                                 f"free space on the filesystem of {path}, or move vllm_omni_install_root / "
                                 "vllm_omni_hf_home"))
        else:
            checks.append(_check(f"disk {what}", "ok", f"{free:.1f} GiB free under {seen['checked']} (need {gib})"))
    return checks


def _platform_checks(plan: dict, host: str, facts: dict) -> list[dict]:
    """A host that builds venvs gets them from the locks of its platform (the plan's host_platforms), made from
    that platform's interpreter: the host must have that Python (able to make a venv), at least that glibc,
    and that machine, or the locked wheels would not install or not load."""
    platform_id = plan.get("host_platforms", {}).get(host)
    if platform_id is None:
        return []  # builds no venv (a monitoring-only host)
    target = plan["platforms"][platform_id]
    source = plan["host_platform_sources"][host]
    python, machine, glibc = facts.get("python_version"), facts.get("machine"), facts.get("glibc")
    interpreter = target["interpreter"]
    checks = []
    if python == target["python"] and machine == target["machine"] and facts.get("python_venv", True):
        checks.append(_check("python", "ok", f"{interpreter} {python} on {machine} ({platform_id}, {source})"))
    elif python == target["python"] and machine == target["machine"]:
        checks.append(_check("python", "fail", f"{interpreter} {python} cannot make a venv (no venv/ensurepip)",
                             f"install {target['venv_package']} (the distribution's package for `python -m venv`)"))
    else:
        seen = f"{interpreter} is {python or 'missing'} on {machine}"
        fix = (f"platform {platform_id} ({target['name']}, {source}) builds venvs with {interpreter}, CPython "
               f"{target['python']} on {target['machine']}: ")
        if python is None and interpreter != "/usr/bin/python3":
            fix += f"install the distribution's Python {target['python']} package (it installs {interpreter} beside " \
                   "the system Python, which stays as it is)"
        else:
            fix += "the host is not that platform: remove or correct vllm_omni_host_platform, or use a host of a " \
                   "supported OS (docs/platforms.md)"
        checks.append(_check("python", "fail", seen, fix))
    if glibc is not None and version_tuple(glibc) < version_tuple(target["glibc"]):
        checks.append(_check("glibc", "fail", f"glibc {glibc}; the {platform_id} locks need {target['glibc']} or newer",
                             "the host is older than its platform: correct vllm_omni_host_platform to the host's own "
                             "OS, or upgrade the host (docs/platforms.md)"))
    elif glibc is not None:
        checks.append(_check("glibc", "ok", f"glibc {glibc} (the {platform_id} locks need {target['glibc']})"))
    return checks


def _driver_check(plan: dict, host: str, gpu_facts: dict) -> dict:
    """The locked torch's CUDA runtime needs a driver at least as new as its CUDA major's floor."""
    wheel, gpus = plan["engine"], plan["hosts"][host]["gpus"]
    floor, driver = wheel.get("driver_floor"), gpu_facts.get("driver_version")
    seen = (f"driver {driver}, CUDA {gpu_facts.get('cuda_version')}, {gpu_facts.get('count')} GPU(s); plan uses "
            f"{gpus} ({plan['hosts'][host]['gpu_source']})")
    if plan["backend"]["name"] == "engine" and floor and version_tuple(driver) and version_tuple(driver) < version_tuple(floor):
        return _check("nvidia driver", "fail", f"{seen}; vLLM {wheel['vllm_version']}'s torch wheels use CUDA "
                      f"{wheel['wheel_cuda_major']}, which needs driver {floor} or newer",
                      f"upgrade the NVIDIA driver to {floor} or newer (a CUDA {wheel['wheel_cuda_major']} driver "
                      "branch), or deploy a vllm_omni_version whose wheels use an older CUDA")
    return _check("nvidia driver", "ok", seen + (f" (needs {floor}+)" if floor else ""))


def _gpu_checks(plan: dict, host: str, facts: dict, gpu_facts: dict | None) -> list[dict]:
    """An engine host: its NVIDIA driver (none is fine for the simulator) and its disk."""
    backend, wheel = plan["backend"]["name"], plan["engine"]
    if gpu_facts:
        checks = [_driver_check(plan, host, gpu_facts)]
    elif backend == "engine":
        checks = [_check("nvidia driver", "fail", "nvidia-smi is not installed",
                         f"install the NVIDIA driver (vLLM-Omni {wheel['vllm_omni_version']}'s wheels need one "
                         f"showing CUDA {wheel['wheel_cuda_major']} or newer), or use "
                         "vllm_omni_engine_backend: simulator on CPU-only hosts")]
    else:
        checks = [_check("nvidia driver", "ok", "no nvidia-smi; fine for the simulator backend")]
    return checks + _disk(plan, facts.get("disk", {}), backend)


def _memlock_check(facts: dict) -> dict:
    memlock = str(facts.get("memlock_hard", "unknown"))
    if memlock == "unlimited":
        return _check("memlock", "ok", "PID 1's locked-memory limit is unlimited")
    return _check("memlock", "warn", f"PID 1's hard locked-memory limit is {memlock}",
                  "units set LimitMEMLOCK=infinity; systemd can raise it only outside containers "
                  "(RDMA registration fails without it)")


def _rdma_checks(plan: dict, host: str, facts: dict) -> list[dict]:
    """An engine host whose pipelines' Mooncake transfer runs over RDMA: the devices the plan names are there."""
    over_rdma = [pipeline["mooncake"] for pipeline in plan["hosts"].get(host, {}).get("pipelines", [])
                 if pipeline.get("mooncake", {}).get("protocol") == "rdma"]
    if not over_rdma:
        return []
    wanted = sorted({device for transfer in over_rdma for device in transfer["rdma_devices"]})
    devices = facts.get("rdma_devices")
    if devices is None:
        return [_check("rdma", "warn", "ibv_devices is not installed yet (the mooncake role installs it)",
                       "re-run preflight after the mooncake role to list the devices")]
    if not devices:
        return [_check("rdma", "fail", "protocol rdma but ibv_devices lists no RDMA device",
                       "Mooncake would silently fall back to TCP: fix the NIC driver, or set "
                       "vllm_omni_mooncake_protocol: tcp")]
    if set(wanted) - set(devices):
        return [_check("rdma", "fail", f"devices {sorted(set(wanted) - set(devices))} are missing "
                       f"(ibv_devices lists {devices})", "fix vllm_omni_mooncake_rdma_devices")]
    return [_check("rdma", "ok", f"RDMA devices {devices}")]


def _package_checks(plan: dict, host: str, states: dict) -> list[dict]:
    """The distribution packages the plan gives the host (os_packages): installed, or installable from the host's
    own package sources; one that is neither fails here, before anything changes (an air-gapped host)."""
    entry = plan.get("os_packages", {}).get(host)
    if not entry:
        return []
    # The ones the host was asked about: Mooncake's are not where the operator manages them (mooncake_manage_packages).
    wanted = [name for name in dict.fromkeys(name for names in entry["packages"].values() for name in names)
              if name in states]
    if not wanted:
        return []
    part_of = {name: part for part, names in entry["packages"].items() for name in names}
    by_state: dict[str, list[str]] = {}
    for name in wanted:
        by_state.setdefault(states.get(name, "unknown"), []).append(name)
    missing = by_state.get("unavailable", [])
    if missing:
        listed = ", ".join(f"{name} ({part_of[name]})" for name in missing)
        them = "it" if len(missing) == 1 else "them"
        return [_check("packages", "fail", f"{listed} not installed, and the host's package sources do not offer "
                       f"{them} (an air-gapped host?)",
                       f"install {them} on the host from your site's mirror, or give the host a package source that "
                       f"has {them} (docs/platforms.md lists each part's packages for {entry['platform']}); nothing "
                       "was changed")]
    if by_state.get("unknown"):
        return [_check("packages", "warn", f"{', '.join(by_state['unknown'])}: neither dpkg nor rpm could say whether "
                       "installed or installable", "install them beforehand if the host has no package sources "
                       "(docs/platforms.md)")]
    installable = by_state.get("installable", [])
    return [_check("packages", "ok", f"{len(wanted) - len(installable)} of {len(wanted)} installed"
                   + (f"; {', '.join(installable)} will be installed from the host's package sources"
                      if installable else ""))]


def evaluate(plan: dict, host: str, facts: dict, gpu_facts: dict | None) -> dict:
    """The preflight report of one host."""
    engine_host = host in plan["hosts"]
    checks = []
    checks.append(_check("systemd", "ok" if facts.get("systemd") else "fail",
                         "systemd is PID 1" if facts.get("systemd") else "this host does not run systemd",
                         "" if facts.get("systemd") else "the collection runs every service as a systemd unit"))
    checks += _platform_checks(plan, host, facts)
    if engine_host:
        checks += _gpu_checks(plan, host, facts, gpu_facts)
    checks.append(_memlock_check(facts))
    checks += _ports(plan, host, facts.get("listening", []))
    checks += _rdma_checks(plan, host, facts)
    checks += _package_checks(plan, host, facts.get("packages") or {})
    clock = facts.get("clock_synchronized")
    checks.append(_check("clock", "ok" if clock else "warn",
                         {True: "clock synchronised (NTP)", False: "clock NOT synchronised",
                          None: "clock synchronisation unknown (the kernel refused adjtimex: a container?)"}[clock],
                         "" if clock else "enable systemd-timesyncd or chrony: logs and metrics across hosts need it"))
    status = "fail" if any(c["status"] == "fail" for c in checks) else (
        "warn" if any(c["status"] == "warn" for c in checks) else "ok")
    return {"host": host, "status": status, "checks": checks}


def summary_table(reports: list[dict]) -> list[str]:
    """One line per host, then one line per problem with its fix."""
    lines = []
    for report in reports:
        counts = {s: sum(1 for c in report["checks"] if c["status"] == s) for s in ("ok", "warn", "fail")}
        lines.append(f"{report['host']:<24} {report['status'].upper():<5} ok={counts['ok']} warn={counts['warn']} "
                     f"fail={counts['fail']}")
        for check in report["checks"]:
            if check["status"] != "ok":
                lines.append(f"  {check['status'].upper()} {check['check']}: {check['detail']}"
                             + (f" -> {check['fix']}" if check["fix"] else ""))
    return lines
