# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""Read the planner's input out of Ansible's ``hostvars`` and ``groups``.

Only the variables the planner reads are templated, by exact name: its documented settings, the
GPU facts discovery sets, and ``ansible_host``. Other names that look like settings (unknown
``vllm_omni_*`` names, near misses) reach the planner as names only, for the misspelling check,
and are never templated: a Jinja expression or a vaulted value there is not evaluated (the
standard ``vllm_omni_api_key: "{{ vault_vllm_omni_api_key }}"`` indirection works, and planning
or rendering never needs the vault password). Secrets are never templated either: only whether
they are set. Values are converted to plain Python types so the planner never sees Ansible's
wrapper types.
"""

from __future__ import annotations

from typing import Any

from ._planner import ENGINE_GROUP, MASTER_GROUP, MONITORING_GROUP, ROUTER_GROUP, PlanError, Problem
from ._settings import COMPUTED_FACTS, SECRET, SETTINGS

# Secrets are never templated here (no vault password needed to plan or render): only their presence.
SECRET_NAMES = frozenset(s.name for s in SETTINGS if s.scope == SECRET)
PRESENT = "<set; secret>"
NOT_READ = "<not read: not a setting>"
# Templated and passed on: every documented non-secret setting, discovery's facts, the address default.
READ = frozenset(s.name for s in SETTINGS if s.scope != SECRET) | {"vllm_omni_gpu_facts", "vllm_omni_os_facts",
                                                                   "ansible_host"}
# Facts the plan play sets on localhost (where everything reads them): never a misspelled setting.
PLAY_FACTS = frozenset({"vllm_omni_limit"})


def _looks_like_a_setting(name: str) -> bool:
    """Worth the misspelling check (by name only): anything near the collection's prefix."""
    lowered = name.lower()
    return "vllm" in lowered or "omni" in lowered or lowered.startswith("vlm")


def plain(value: Any) -> Any:
    """Ansible's tagged/lazy containers -> plain dict/list/str/int/float/bool/None."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, dict) or hasattr(value, "items"):
        return {plain(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value


def inventory_from_hostvars(hostvars: Any, groups: Any) -> dict:
    engine_hosts = [str(h) for h in (groups.get(ENGINE_GROUP) or [])]
    router_hosts = [str(h) for h in (groups.get(ROUTER_GROUP) or [])]
    master_hosts = [str(h) for h in (groups.get(MASTER_GROUP) or [])]
    monitoring_hosts = [str(h) for h in (groups.get(MONITORING_GROUP) or [])]
    variables: dict[str, dict] = {}
    problems = []
    for host in dict.fromkeys(engine_hosts + router_hosts + master_hosts + monitoring_hosts):
        host_vars = hostvars[host]
        selected = {}
        for name in list(host_vars.keys()):
            name = str(name)
            if name in SECRET_NAMES:
                selected[name] = PRESENT
                continue
            if name not in READ:
                if _looks_like_a_setting(name) and name not in COMPUTED_FACTS and name not in PLAY_FACTS:
                    selected[name] = NOT_READ
                continue
            try:
                selected[str(name)] = plain(host_vars[name])
            except Exception as error:  # templating errors of any kind: report, never a traceback
                problems.append(Problem(f"host {host}", str(name), f"could not be evaluated: {error}",
                                        "fix the Jinja expression or the variable it refers to"))
        variables[host] = selected
    if problems:
        raise PlanError(problems)
    return {"engine_hosts": engine_hosts, "router_hosts": router_hosts, "master_hosts": master_hosts,
            "monitoring_hosts": monitoring_hosts, "hostvars": variables}
