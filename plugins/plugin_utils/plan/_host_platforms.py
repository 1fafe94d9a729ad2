# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""Each host's platform, and the locks its venvs install from.

A host that builds a venv (an engine host, a router host, a Mooncake master host) gets a platform
of ``data/platforms.yml``: the one ``vllm_omni_host_platform`` names, or (``auto``) the one whose
OS discovery read (``vllm_omni_os_facts``, set by playbooks/facts.yml), or, before discovery has
looked (render, the plan's first pass), the default, said so. Hosts whose OS matches no platform,
whose machine no lock is made for, or whose platform has no lock for a venv they need are refused
here, before any host changes; preflight then checks that each host really has its platform's
Python, glibc and machine.
"""

from __future__ import annotations

from ..host import _locks, _platforms
from ._problems import Problems


def _needed_locks(host: str, roles: dict[str, set[str]], lock_names: dict[str, str]) -> dict[str, str]:
    """What each venv of this host is for -> its lock name."""
    return {role: lock_names[role] for role, hosts in roles.items() if host in hosts}


def _supported() -> str:
    return ", ".join(f"{p} ({_platforms.target(p)['name']})" for p in _platforms.platform_ids())


def _platform_of(where: str, wanted: str, facts: dict | None, problems: Problems) -> tuple[str, str] | None:
    """(platform id, how it was chosen), or None after adding the problem."""
    machine = (facts or {}).get("machine")
    unsupported = _platforms.unsupported_machines()
    if machine in unsupported:
        problems.add(where, "vllm_omni_host_platform", f"the host is {_platforms.describe_os(facts)}: {unsupported[machine]}",
                     "deploy onto x86_64 hosts")
        return None
    matched = _platforms.match(facts)
    if wanted != _platforms.AUTO:
        if matched and matched != wanted:
            problems.add(where, "vllm_omni_host_platform",
                         f"is {wanted}, but discovery read {_platforms.describe_os(facts)}, which is platform {matched}",
                         f"remove vllm_omni_host_platform from the host (auto finds {matched}), or set it to {matched}")
            return None
        return wanted, "vllm_omni_host_platform"
    if facts is None:
        return _platforms.DEFAULT, "assumed until discovery"
    if matched is None:
        problems.add(where, "vllm_omni_host_platform",
                     f"is auto, and the host runs {_platforms.describe_os(facts)}, which is no supported host "
                     f"platform (supported: {_supported()})",
                     "deploy onto a supported OS; for a close derivative with the same Python and glibc, set "
                     "vllm_omni_host_platform to the platform it derives from (preflight checks both)")
        return None
    return matched, "discovered"


OS_FACT_FIELDS = ("distribution", "major", "version", "machine")


def os_facts_shape_ok(facts) -> bool:
    """What vllm_omni.serve.host_facts returns: a mapping of these four fields, each a string (or null where Ansible
    could not read it). Anything else was set by hand, where only discovery may set it."""
    return isinstance(facts, dict) and set(facts) == set(OS_FACT_FIELDS) \
        and all(value is None or isinstance(value, str) for value in facts.values())


def host_platforms(venv_hosts: dict[str, list[str]], lock_names: dict[str, str], hostvars: dict,
                   settings_of: dict[str, str], problems: Problems) -> dict[str, dict]:
    """host -> {"platform", "source"} for every host that builds a venv.

    ``venv_hosts``: venv role (backend, router, mooncake_master) -> the hosts that build it;
    ``lock_names``: venv role -> its lock's name; ``settings_of``: host -> its vllm_omni_host_platform.
    """
    chosen: dict[str, dict] = {}
    members = {role: set(hosts) for role, hosts in venv_hosts.items()}  # membership per host: linear, not n^2
    hosts = sorted(set().union(*members.values()))
    for host in hosts:
        where = f"host {host}"
        facts = hostvars.get(host, {}).get("vllm_omni_os_facts")
        if facts is not None and not os_facts_shape_ok(facts):
            problems.add(where, "vllm_omni_os_facts", "is not the output of vllm_omni.serve.host_facts (it is computed "
                         "by discovery; an inventory must not set it)",
                         "remove the variable from the inventory; deploy.yml discovers the OS itself, or name the "
                         "host's platform with vllm_omni_host_platform")
            continue
        picked = _platform_of(where, settings_of.get(host, _platforms.AUTO), facts, problems)
        if picked is None:
            continue
        platform, source = picked
        missing = _locks.unavailable(platform)
        for role, name in _needed_locks(host, members, lock_names).items():
            if name in missing:
                problems.add(where, "vllm_omni_host_platform",
                             f"the {role.replace('_', ' ')} venv ({name}) has no lock for {platform}: {missing[name]}",
                             "use another layout or version for this deployment (the support matrix and "
                             "docs/platforms.md say which run where), or put this service on a host of another "
                             "platform")
        chosen[host] = {"platform": platform, "source": source}
    return chosen


def platforms_section(chosen: dict[str, dict], lock_names: dict[str, str], uv_lock: str) -> dict:
    """The plan's ``platforms`` (each platform in use: its target) and ``locks`` (platform -> lock name -> entry)."""
    used = sorted({entry["platform"] for entry in chosen.values()})
    names = sorted(set(lock_names.values()) | {uv_lock})
    return {
        "platforms": {platform: _platforms.target(platform) for platform in used},
        "locks": {platform: {name: _locks.lock_entry(name, platform) for name in names
                             if name not in _locks.unavailable(platform)} for platform in used},
    }
