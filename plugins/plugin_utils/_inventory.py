# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""Read the planner's input out of Ansible's ``hostvars`` and ``groups``.

Only the variables the planner looks at are templated: ``vllm_omni_*`` names, near misses of
them (for the misspelling check) and ``ansible_host``. Values are converted to plain Python
types so the planner never sees Ansible's wrapper types.
"""

from __future__ import annotations

from typing import Any

from ._planner import ENGINE_GROUP, MASTER_GROUP, MONITORING_GROUP, ROUTER_GROUP, PlanError, Problem
from ._settings import SECRET, SETTINGS

# Secrets are never templated here (no vault password needed to plan or render): only their presence.
SECRET_NAMES = frozenset(s.name for s in SETTINGS if s.scope == SECRET)
PRESENT = "<set; secret>"


def _relevant(name: str) -> bool:
    return name == "ansible_host" or "vllm" in name or "omni" in name or name.startswith("vlm")


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
            if not _relevant(str(name)):
                continue
            if name in SECRET_NAMES:
                selected[str(name)] = PRESENT
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
