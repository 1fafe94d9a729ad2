"""A role's part of the plan: the sections its argument_specs declare, each as far as one host needs it.

Ansible validates a role's declared arguments at every role start on every host, deep-copying them: the whole
plan there costs 9 CPU-s a role start at 1,024 hosts x 8 GPUs (benchmarks/role_arg_validation.py), paid per
role and per host. A role's part holds only the sections the role declares, and of the sections kept per host
only the host's own entries: its size no longer grows with the fleet (the monitoring host, which scrapes every
pipeline, and the controller, which serves every host, keep every host).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

# Sections keyed by host, every read of them by a role names the host it runs for.
PER_HOST = ("footprint", "os_packages", "reserved_ports", "listen_ports", "host_platform_sources", "host_platforms")
# Records whose per_host part is keyed by host the same way; the rest of the record is the deployment's. Not the
# artifacts section: its controller tasks run delegated from the play's first host and serve every host.
PER_HOST_PART = ("firewall", "selinux", "self_heal", "gpu_metrics")


def declared_sections(argument_specs: Mapping) -> tuple[str, ...]:
    """The plan sections a role declares: the options of vllm_omni_plan over its entry points (their union)."""
    sections: set[str] = set()
    for entry in (argument_specs or {}).values():
        plan_option = ((entry or {}).get("options") or {}).get("vllm_omni_plan") or {}
        sections |= set(plan_option.get("options") or {})
    return tuple(sorted(sections))


def _peers(plan: Mapping, host: str) -> set[str]:
    """The hosts whose engines share a pipeline with ``host``'s (a pipeline spanning hosts)."""
    peers = {host}
    for pipeline in (plan.get("distributed_pipelines") or {}).values():
        hosts = {engine["host"] for engine in pipeline["engines"]}
        if host in hosts:
            peers |= hosts
    return peers


def _whole_fleet(plan: Mapping, host: str | None) -> bool:
    """Every host's entries: for the controller (no host, or one the plan does not deploy to) and for the
    monitoring hosts (their scrape targets are every pipeline)."""
    return (host is None or host not in plan.get("footprint", {})
            or host in (plan.get("monitoring") or {}).get("per_host", {}))


def _scoped(plan: Mapping, section: str, host: str):
    value = plan[section]
    if section == "hosts":
        return {name: value[name] for name in sorted(_peers(plan, host)) if name in value}
    if section in PER_HOST:
        return {host: value[host]} if host in value else {}
    if section in PER_HOST_PART and "per_host" in value:
        return {**{key: item for key, item in value.items() if key != "per_host"},
                "per_host": {host: value["per_host"][host]} if host in value["per_host"] else {}}
    return value


def role_plan(plan: Mapping, sections: Iterable[str] | None, host: str | None) -> dict:
    """``plan``'s declared ``sections`` (all of them when None: a role that declares none) for ``host``."""
    if sections is None:
        return dict(plan)
    wanted = [section for section in sections if section in plan]
    if _whole_fleet(plan, host):
        return {section: plan[section] for section in wanted}
    return {section: _scoped(plan, section, host) for section in wanted}
